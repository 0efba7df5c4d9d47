"""Whose state is this (finding 7 of issue 12), with the real enforcer process and the real recovery command.

Before: another node's state file (same hardware, same kubelet configuration)
was accepted silently and re-saved under this node's name; ``recover-state
--mode check`` said "valid" for files the enforcer refuses; a state directory
that could not be used gave a raw OSError traceback; a wiped state file started
empty without a word.  Now: the foreign file is refused (``/readyz`` 503
``StateForeignNode``, writes 503, the message names the recovery command) and
left untouched; ``recover-state --mode check --config`` reaches the enforcer's
verdict; an unusable directory is one line and exit 2; an empty start in a
directory that held state is logged and counted.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from reliability_kit import NUMAGUARD, EnforcerNode, Pki, _child_env, allocation_request, guaranteed_pod

from enforcer.service import state_identity

pytestmark = pytest.mark.timeout(180)


def node_named(directory: Path, pki: Pki, name: str) -> EnforcerNode:
    node = EnforcerNode(directory, pki)
    config = yaml.safe_load(node.config_file.read_text())
    config["node"]["name"] = name
    node.config_file.write_text(yaml.safe_dump(config))
    return node


def check_as_enforcer(node: EnforcerNode) -> subprocess.CompletedProcess[str]:
    argv = [str(NUMAGUARD), "recover-state", "--state-dir", str(node.state_dir), "--mode", "check",
            "--config", str(node.config_file)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_child_env(), check=False)


@pytest.fixture
def node_a_state(tmp_path: Path, pki: Pki) -> EnforcerNode:
    node = node_named(tmp_path / "node-a", pki, "node-a")
    pod = guaranteed_pod("db", 4)
    node.cgroups.add_pod(pod)
    with node.running() as enforcer, node.writer(enforcer) as http:
        assert http.post("/allocations", json=allocation_request(pod)).status_code == 201
    return node


@pytest.mark.parametrize("with_identity_file", [True, False], ids=["whole-directory", "state-file-only"])
def test_another_nodes_state_is_refused_with_the_recovery_path(
    tmp_path: Path, pki: Pki, node_a_state: EnforcerNode, with_identity_file: bool
) -> None:
    node_b = node_named(tmp_path / "node-b", pki, "node-b")
    node_b.state_dir.mkdir(parents=True)
    journal = node_a_state.state_path.with_name(node_a_state.state_path.name + ".journal")
    shutil.copy(node_a_state.state_path, node_b.state_path)
    shutil.copy(journal, node_b.state_dir / journal.name)  # the state is the base file and its journal
    if with_identity_file:
        shutil.copy(node_a_state.state_dir / state_identity.IDENTITY_FILE, node_b.state_dir)
    copied = node_b.state_path.read_bytes()
    assert check_as_enforcer(node_a_state).returncode == 0  # node a's own file is fine for node a

    check = check_as_enforcer(node_b)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "StateForeignNode" in check.stdout and "recover-state" in check.stdout

    with node_b.running() as enforcer, node_b.writer(enforcer) as http:
        ready = http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["reason"] == "StateForeignNode"
        assert "belongs to node 'node-a'" in ready.json()["message"]
        assert "--mode quarantine --force" in ready.json()["message"]
        refused = http.post("/allocations", json={**allocation_request(guaranteed_pod("new", 1)), "nodeName": "node-b"})
        assert refused.status_code == 503
    assert node_b.state_path.read_bytes() == copied  # never re-saved under node b's name

    # the documented recovery: quarantine (the node is drained), then start: empty, ready, and said so
    assert node_b.recover_state("quarantine").returncode != 0  # a valid file needs --force
    argv = [str(NUMAGUARD), "recover-state", "--state-dir", str(node_b.state_dir), "--mode", "quarantine", "--force"]
    assert subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_child_env()).returncode == 0
    with node_b.running() as enforcer, node_b.writer(enforcer) as http:
        assert http.get("/readyz").status_code == 200
    assert state_identity.read(node_b.state_dir) == state_identity.Identity("node-b", state_identity.machine_id(None))


def test_an_empty_start_in_a_directory_that_held_state_is_logged_and_counted(node_a_state: EnforcerNode) -> None:
    for leftover in node_a_state.state_dir.glob(node_a_state.state_path.name + "*"):
        leftover.unlink()  # the state file and its backup, removed by hand; the identity file tells the tale
    with node_a_state.running() as enforcer, node_a_state.writer(enforcer) as http:
        assert http.get("/readyz").status_code == 200
        assert "numaguard_enforcer_state_started_empty_total 1.0" in http.get("/metrics").text
    assert "state file missing in a directory that held numaguard state" in node_a_state.log.read_text()


def test_a_new_node_starts_empty_without_the_warning(node: EnforcerNode) -> None:
    with node.running() as enforcer, node.writer(enforcer) as http:
        assert "numaguard_enforcer_state_started_empty_total 0.0" in http.get("/metrics").text


def unusable_dirs(tmp_path: Path) -> list[tuple[str, Path]]:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    return [
        ("under a file", a_file / "state"),
        ("not writable (sysfs)", Path("/sys/kernel/mm")),
        ("not creatable (sysfs)", Path("/sys/kernel/numaguard-state")),
    ]


@pytest.mark.parametrize("case", range(3), ids=["under-a-file", "not-writable", "not-creatable"])
def test_an_unusable_state_directory_is_one_line_and_exit_2(node: EnforcerNode, tmp_path: Path, case: int) -> None:
    description, state_dir = unusable_dirs(tmp_path)[case]
    if case > 0 and not Path("/sys/kernel").is_dir():
        pytest.skip("no sysfs here")
    process = node.process()
    argv = [*process.argv]
    argv[argv.index("--state-dir") + 1] = str(state_dir)
    finished = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_child_env())
    assert finished.returncode == 2, description
    lines = finished.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"numaguard enforcer: state directory {state_dir}"), lines
    assert "Traceback" not in finished.stderr
