"""Enforcer settings: file < environment < flags, the scenario file's node section, early refusal of bad values."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
import yaml
from service_fixtures import TOPOLOGY

from enforcer.errors import ConfigError
from enforcer.service import settings
from numaguard_cli import enforcer_cmd

SCENARIOS = Path(__file__).resolve().parents[3] / "numaguard_cli" / "scenarios"


def write(path: Path, document: object) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_config_file_takes_a_scenario_files_node_section_unchanged(tmp_path: Path) -> None:
    scenario = yaml.safe_load((SCENARIOS / "seed-1-tightly-coupled-database.yaml").read_text())
    topology_name = scenario["node"]["topologyFile"]
    (tmp_path / topology_name).write_text((SCENARIOS / topology_name).read_text())
    config = write(tmp_path / "enforcer.yaml", {"node": scenario["node"], "stateDir": str(tmp_path)})
    loaded = settings.load(config, env={})
    assert loaded.machine_source == tmp_path / topology_name
    assert loaded.node_name == "node-a"
    assert loaded.node_config.cpu_manager_policy == "static"
    assert loaded.node_config.topology_manager_scope == "pod"
    assert loaded.state_dir == tmp_path


def test_a_relative_topology_file_is_read_next_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "topo.json").write_text(TOPOLOGY.read_text())
    loaded = settings.load(write(tmp_path / "e.yaml", {"node": {"topologyFile": "topo.json"}}), env={})
    assert loaded.machine_source == tmp_path / "topo.json"


def test_environment_beats_the_file_and_flags_beat_both(tmp_path: Path) -> None:
    config = write(tmp_path / "e.yaml", {"listen": "0.0.0.0:1111", "stateDir": "/from/file", "cgroupDriver": "systemd"})
    env = {"NUMAGUARD_ENFORCER_LISTEN": "0.0.0.0:2222", "NUMAGUARD_ENFORCER_STATE_DIR": "/from/env"}
    loaded = settings.load(config, env=env, overrides={"state_dir": "/from/flag", "cgroup_driver": None})
    assert loaded.listen_address() == ("0.0.0.0", 2222)
    assert loaded.state_dir == Path("/from/flag")
    assert loaded.cgroup_driver == "systemd"


def test_the_kubelet_section_can_come_from_the_environment_as_yaml() -> None:
    loaded = settings.load(env={"NUMAGUARD_ENFORCER_KUBELET": "{cpuManagerPolicy: static, reservedSystemCPUs: '0'}"})
    assert loaded.node_config.cpu_manager_policy == "static"


def test_without_a_machine_source_the_hosts_sysfs_is_used() -> None:
    assert settings.load(env={}).machine_source == Path("/sys")


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        ({"kubelet": {"cpuManagerPolicy": "static", "bogusField": 1}}, "bogusField"),
        ({"kubelet": {"reservedSystemCPUs": "zero"}}, "reservedSystemCPUs"),
        ({"listen": "nowhere"}, "HOST:PORT"),
        ({"tls_cert": "/a.crt"}, "go together"),
        ({"cgroup_driver": "openrc"}, "cgroup_driver"),
        ({"sysfs_root": "/sys", "topology_file": "/t.json"}, "one machine source"),
        ({"state_file": "../escape.json"}, "state_file"),
    ],
    ids=["unknown kubelet field", "bad cpuset", "listen", "half a TLS pair", "driver", "two machines", "state path"],
)
def test_settings_that_cannot_work_are_refused_naming_the_field(overrides: dict[str, object], complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        settings.load(env={}, overrides=overrides)


def test_an_unknown_key_in_the_node_section_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="node: unknown fields: steps"):
        settings.load(write(tmp_path / "e.yaml", {"node": {"steps": []}}), env={})


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    enforcer_cmd.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_command_refuses_to_serve_without_mutual_tls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert enforcer_cmd.run(parse("--standalone", "--state-dir", str(tmp_path))) == 2
    assert "mutual TLS" in capsys.readouterr().err


def test_the_command_outside_a_cluster_needs_standalone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for name in list(os.environ):
        if name.startswith(settings.ENV_PREFIX):
            monkeypatch.delenv(name)
    files = ["--tls-cert", "c.crt", "--tls-key", "c.key", "--client-ca", "ca.crt"]
    assert enforcer_cmd.run(parse(*files, "--state-dir", str(tmp_path))) == 2
    assert "--standalone" in capsys.readouterr().err
