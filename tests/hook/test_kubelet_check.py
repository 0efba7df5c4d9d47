"""The enforcer refuses to run beside a kubelet whose own managers are on or whose reservations differ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from enforcer.engine import config as engine_config
from enforcer.errors import ConfigError
from enforcer.service import kubelet_check

ENFORCER = engine_config.from_kubelet(
    {
        "cpuManagerPolicy": "static",
        "reservedSystemCPUs": "0",
        "systemReserved": {"cpu": "500m", "memory": "1Gi"},
        "memoryManagerPolicy": "Static",
        "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}}],
        "topologyManagerPolicy": "single-numa-node",
    }
)
# What a kubelet beside the enforcer runs with: its managers off, the same reservations.
GOOD: dict[str, Any] = {
    "apiVersion": "kubelet.config.k8s.io/v1beta1",
    "kind": "KubeletConfiguration",
    "cgroupDriver": "systemd",
    "reservedSystemCPUs": "0",
    "systemReserved": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "1Gi"},
    "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%"},
}


def _write(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_matching_kubelet_passes(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    assert kubelet_check.check(path, ENFORCER, cgroup_driver="systemd") == path


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cpuManagerPolicy": "static"}, "cpuManagerPolicy is 'static'"),
        ({"memoryManagerPolicy": "Static"}, "memoryManagerPolicy is 'Static'"),
        ({"topologyManagerPolicy": "best-effort"}, "topologyManagerPolicy is 'best-effort'"),
        ({"reservedSystemCPUs": "0-1"}, "reservedSystemCPUs is 0-1 but the enforcer's is 0"),
        ({"systemReserved": {"cpu": "1", "memory": "1Gi"}}, "systemReserved is cpu=1000,memory=1073741824"),
        ({"kubeReserved": {"memory": "512Mi"}}, "kubeReserved is memory=536870912 but the enforcer's is unset"),
        ({"evictionHard": {"memory.available": "500Mi"}}, "evictionHard.memory.available is 524288000"),
        ({"cgroupDriver": "cgroupfs"}, "cgroupDriver is 'cgroupfs' but the enforcer's cgroupDriver is 'systemd'"),
    ],
)
def test_each_clash_is_refused_naming_the_field(tmp_path: Path, change: dict[str, Any], field: str) -> None:
    path = _write(tmp_path, {**GOOD, **change})
    with pytest.raises(ConfigError) as raised:
        kubelet_check.check(path, ENFORCER, cgroup_driver="systemd")
    assert field in raised.value.message
    assert str(path) in raised.value.message


def test_the_kubelet_defaults_are_none(tmp_path: Path) -> None:
    """A kubelet file without the manager fields runs the defaults (none / None / none)."""
    path = _write(tmp_path, {"cgroupDriver": "cgroupfs"})
    plain = engine_config.from_kubelet({})
    assert kubelet_check.check(path, plain, cgroup_driver="cgroupfs") == path


def test_missing_default_file_is_skipped_but_a_given_one_must_exist(tmp_path: Path) -> None:
    absent = tmp_path / "absent.yaml"
    assert kubelet_check.check(None, ENFORCER, cgroup_driver="systemd", default=absent) is None
    with pytest.raises(ConfigError, match="cannot read"):
        kubelet_check.check(absent, ENFORCER, cgroup_driver="systemd")
    (tmp_path / "bad.yaml").write_text("cpuManagerPolicy: [")
    with pytest.raises(ConfigError, match="does not parse"):
        kubelet_check.check(tmp_path / "bad.yaml", ENFORCER, cgroup_driver="systemd")


def test_the_enforcer_refuses_to_start_beside_a_clashing_kubelet(tmp_path: Path) -> None:
    from enforcer.service import runtime, settings
    from enforcer.service.metrics import EnforcerMetrics

    path = _write(tmp_path, {**GOOD, "cpuManagerPolicy": "static"})
    config = settings.load(
        None,
        env={},
        overrides={
            "kubelet": {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0"},
            "state_dir": str(tmp_path / "state"),
            "dry_run_cgroups": True,
            "standalone": True,
            "cgroup_driver": "systemd",
            "kubelet_config_file": str(path),
        },
    )
    with pytest.raises(ConfigError, match="cpuManagerPolicy is 'static'"):
        runtime.start(config, EnforcerMetrics())
    assert not (tmp_path / "state").exists()
