"""Every scenario with an ``expect`` list (bundled seeds and our own) gives the expected steps.

The comparison is ../shared/bin/check-scenarios' rule: an expected step holds only
the keys it checks; nested objects compare the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from enforcer.engine import scenario
from numaguard_cli import plan_check

ROOT = Path(__file__).resolve().parents[3]
SCENARIO_DIRS = [ROOT / "numaguard_cli" / "scenarios", ROOT / "tests" / "scenarios"]
FILES = sorted(p for d in SCENARIO_DIRS for p in d.glob("*.yaml"))


def run_file(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    topology_doc = None
    topo_file = doc["node"].get("topologyFile")
    if topo_file:
        topology_doc = json.loads((path.parent / topo_file).read_text())
    return scenario.run(doc, topology_doc=topology_doc)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_scenario_steps_match_their_expectations(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    result = run_file(path)
    assert len(result["steps"]) == len(doc["steps"])
    problems = list(plan_check.differences(doc["expect"], result["steps"]))
    assert problems == []


def test_bundled_scenarios_are_the_shared_ones_with_local_topology_paths() -> None:
    shared = ROOT.parent / "shared" / "scenarios"
    if not shared.is_dir():
        pytest.skip("../shared/scenarios is not beside the repository")
    for original in shared.glob("*.yaml"):
        bundled = ROOT / "numaguard_cli" / "scenarios" / original.name
        expected = original.read_text().replace("topologyFile: ../topologies/", "topologyFile: ")
        assert bundled.read_text() == expected, original.name


def test_adding_the_same_pod_twice_is_idempotent_and_a_changed_spec_conflicts() -> None:
    path = ROOT / "tests" / "scenarios" / "container-scope-hugepages.yaml"
    doc = yaml.safe_load(path.read_text())
    first = doc["steps"][0]
    changed = yaml.safe_load(yaml.safe_dump(first))
    changed["add"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "3"
    changed["add"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    doc["steps"] = [first, first, changed]
    topology_doc = json.loads((path.parent / doc["node"]["topologyFile"]).read_text())
    steps = scenario.run(doc, topology_doc=topology_doc)["steps"]
    assert steps[0]["admitted"] and steps[1]["admitted"]
    assert steps[1]["containers"] == steps[0]["containers"]
    assert (steps[2]["admitted"], steps[2]["reason"]) == (False, "AllocationConflict")
