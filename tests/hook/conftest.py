"""Fixtures of the runtime-hook tests: a real enforcer with its hook socket, and a runc runtime."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from runc_kit import Runtime, runtime  # noqa: E402

from enforcer.service import requests, settings  # noqa: E402
from enforcer.service import runtime as enforcer_runtime  # noqa: E402
from enforcer.service.metrics import EnforcerMetrics  # noqa: E402

# The 2-CPU machine: CPU 0 reserved, CPU 1 the only one to allocate; pod-level managers on.
KUBELET: dict[str, Any] = {
    "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
    "cpuManagerPolicy": "static",
    "reservedSystemCPUs": "0",
    "topologyManagerPolicy": "single-numa-node",
    "topologyManagerScope": "pod",
}


@dataclass
class HookNode:
    """An enforcer on this machine's real cgroup v1 hierarchy, serving the hook on ``socket``."""

    running: enforcer_runtime.RunningNode
    socket: Path
    runtime: Runtime
    metrics: EnforcerMetrics

    def allocate(self, raw: dict[str, Any]) -> None:
        self.running.service.allocate(requests.pod_resources(raw, pod_level_resources=True))

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


def enforcer_settings(tmp: Path, cgroup_root: str, **extra: Any) -> settings.EnforcerSettings:
    overrides: dict[str, Any] = {
        "node_name": "hook-test-node",
        "kubelet": KUBELET,
        "state_dir": str(tmp / "state"),
        "cgroup_version": "v1",
        "cgroup_driver": "cgroupfs",
        "kubelet_cgroup_root": "/" + cgroup_root,
        "container_runtime": "containerd",
        "standalone": True,
        "reconcile_interval": 0,
        "hook_socket": str(tmp / "run" / "hook.sock"),
        "kubelet_config_check": False,
    }
    overrides.update(extra)
    return settings.load(None, env={}, overrides=overrides)


@pytest.fixture
def hook_node(tmp_path: Path) -> Iterator[HookNode]:
    with runtime(tmp_path / "bundles") as rt:
        (tmp_path / "bundles").mkdir(exist_ok=True)
        config = enforcer_settings(tmp_path, rt.cgroup_root)
        metrics = EnforcerMetrics()
        running = enforcer_runtime.start(config, metrics)
        try:
            assert config.hook_socket is not None
            yield HookNode(running, config.hook_socket, rt, metrics)
        finally:
            running.stop()


def guaranteed(name: str, uid: str, cpus: str = "1", memory: str = "64Mi") -> dict[str, Any]:
    resources = {"requests": {"cpu": cpus, "memory": memory}, "limits": {"cpu": cpus, "memory": memory}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": resources}]},
    }


def pod_level(name: str, uid: str, cpus: str = "1", memory: str = "64Mi") -> dict[str, Any]:
    """A pod with pod-level resources only: its container runs in the pod shared pool."""
    resources = {"requests": {"cpu": cpus, "memory": memory}, "limits": {"cpu": cpus, "memory": memory}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"resources": resources, "containers": [{"name": "sidecar", "image": "busybox"}]},
    }
