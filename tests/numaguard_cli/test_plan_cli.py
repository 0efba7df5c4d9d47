"""``numaguard plan``: JSON per contracts/plan.md, a table for people, exit 2 naming the bad field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from numaguard_cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SEED_1 = ROOT / "numaguard_cli" / "scenarios" / "seed-1-tightly-coupled-database.yaml"
TOPOLOGY = str(SEED_1.parent / "dual-socket-ht-32.json")


def test_plan_prints_the_contract_json_for_a_scenario_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(SEED_1)]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert steps[0]["containers"]["database"]["cpus"] == "1-3,17-19"
    assert set(steps[0]) >= {"op", "pod", "admitted", "reason", "message", "qosClass", "numaAffinity", "podSharedPool"}


def test_plan_table_output_names_each_container(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(SEED_1), "-o", "table"]) == 0
    out = capsys.readouterr().out
    assert "database" in out and "pod_exclusive" in out and "1-3,17-19" in out


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("node: {topology: {cpus: []}}\nsteps: []\n", "topology.cpus"),
        ("node: {topologyFile: missing.json}\nsteps: []\n", "node.topologyFile"),
        (
            "node: {topologyFile: " + TOPOLOGY + ", kubelet: {cpuManagerPolicy: x}}\n"
            "steps: []\n",
            "node",
        ),
        (
            "node: {topologyFile: " + TOPOLOGY + "}\n"
            "steps: [{add: {metadata: {name: a},"
            " spec: {containers: [{name: c, resources: {requests: {cpu: 1x}}}]}}}]\n",
            "steps[0].add",
        ),
        ("node: {topologyFile: x}\nsteps: [{explode: {}}]\n", "node.topologyFile"),
        ("- just\n- a list\n", "scenario"),
    ],
)
def test_an_invalid_scenario_exits_2_and_names_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, field: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    assert main(["plan", str(path)]) == 2
    assert field in capsys.readouterr().err


def test_an_unknown_step_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("node: {topologyFile: " + TOPOLOGY + "}\nsteps: [{explode: {}}]\n")
    assert main(["plan", str(path)]) == 2
    assert "steps[0]" in capsys.readouterr().err
