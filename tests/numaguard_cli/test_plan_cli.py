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
            "node: {topologyFile: " + TOPOLOGY + ", kubelet: {cpuManagerPolicy: x}}\nsteps: []\n",
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


# -- every level of a scenario is checked for unknown keys (kubectl --validate=strict habits) ---------------

NODE = "node: {topologyFile: " + TOPOLOGY + "}\n"
POD = "{apiVersion: v1, kind: Pod, metadata: {name: a}, spec: {containers: [{name: c, image: x}]}}"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (NODE + "stepz: []\n", 'stepz: unknown field (did you mean "steps"?)'),
        ("node: {topologyFile: " + TOPOLOGY + ", compatability: kubelet}\nsteps: []\n", "node.compatability"),
        (NODE + "steps: [{add: " + POD + ", remove: default/a}]\n", "steps[0]: expected exactly one of"),
        (NODE + "steps: [{add: {apiVersion: v1, kind: Pod, metdata: {name: a}}}]\n", "steps[0].add.metdata"),
        (
            NODE + "steps: [{add: {metadata: {name: a}, spec: {containers: [{name: c, resoures: {}}]}}}]\n",
            'steps[0].add.spec.containers[0].resoures: unknown field (did you mean "resources"?)',
        ),
        (
            NODE + "steps: [{add: {metadata: {name: a}, spec: {initContainers: [{name: i, resources: "
            "{request: {cpu: 1}}}], containers: [{name: c}]}}}]\n",
            "steps[0].add.spec.initContainers[0].resources.request",
        ),
        (NODE + "steps: [{resize: {metadata: {name: a, lables: {}}}}]\n", "steps[0].resize.metadata.lables"),
        (NODE + "steps: []\nexpect: {steps: []}\n", "expect: expected a list"),
    ],
)
def test_an_unknown_key_at_any_level_exits_2_naming_it_by_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, message: str
) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text(body)
    assert main(["plan", str(path)]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""  # nothing half-run


def test_the_pod_field_lists_cover_the_kubernetes_api() -> None:
    """The lists are at least the Kubernetes API's (the client's attribute maps), so no valid manifest is refused."""
    from kubernetes import client

    from numaguard_cli import scenario_schema as schema

    for model, known in [
        (client.V1Pod, schema.POD_FIELDS),
        (client.V1ObjectMeta, schema.OBJECT_META_FIELDS),
        (client.V1PodSpec, schema.POD_SPEC_FIELDS),
        (client.V1Container, schema.CONTAINER_FIELDS),
        (client.V1EphemeralContainer, schema.CONTAINER_FIELDS),
        (client.V1ResourceRequirements, schema.RESOURCE_REQUIREMENTS_FIELDS),
    ]:
        assert set(model.attribute_map.values()) <= known, model.__name__


# -- --check: the plan against the scenario's expect ------------------------------------------------------


def test_check_passes_when_the_plan_matches_expect(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--check", str(SEED_1)]) == 0
    assert "matches expect" in capsys.readouterr().err


def test_check_exits_1_with_one_line_per_difference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = SEED_1.read_text().replace('cpus: "1-3,17-19"', 'cpus: "0-2"')
    assert 'cpus: "0-2"' in text
    path = tmp_path / "seed.yaml"
    path.write_text(text.replace("topologyFile: dual-socket-ht-32.json", f"topologyFile: {TOPOLOGY}"))
    assert main(["plan", "--check", str(path)]) == 1
    captured = capsys.readouterr()
    assert 'steps[0].containers.database.cpus: expected "0-2", got "1-3,17-19"' in captured.err
    assert json.loads(captured.out)["steps"]  # the plan itself is still printed


def test_check_without_expect_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "no-expect.yaml"
    path.write_text(NODE + "steps: []\n")
    assert main(["plan", "--check", str(path)]) == 2
    assert "expect: required by --check" in capsys.readouterr().err


def test_check_compares_nested_objects_by_the_keys_given_and_lists_entry_by_entry() -> None:
    from numaguard_cli.plan_check import differences

    actual = [{"op": "add", "containers": {"a": {"cpus": "1", "cfsQuota": "none"}}}]
    assert list(differences([{"containers": {"a": {"cpus": "1"}}}], actual)) == []
    assert list(differences([{"containers": {"b": {}}}], actual)) == ["steps[0].containers.b: missing (expected {})"]
    assert list(differences([{}, {}], actual)) == ["steps: expected 2 entries, got 1 entries"]


def test_plan_yaml_output_is_the_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    assert main(["plan", str(SEED_1), "-o", "yaml"]) == 0
    steps = yaml.safe_load(capsys.readouterr().out)["steps"]
    assert steps[0]["containers"]["database"]["cpus"] == "1-3,17-19"


# -- the top-level command -------------------------------------------------------------------------------


def test_version_prints_the_installed_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.metadata

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"numaguard {importlib.metadata.version('numaguard')}\n"


def test_help_describes_the_tool_and_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    from numaguard_cli.main import SUBCOMMANDS

    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "Entry point" not in out and "console script" not in out  # not the module's docstring
    assert "Pod-level resource managers" in out and "--version" in out
    for name in SUBCOMMANDS:
        assert name in out
