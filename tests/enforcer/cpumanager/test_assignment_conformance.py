"""The kubelet's own CPU-selection answers, case by case (tests/fixtures/kubelet/, copied from the brief material).

* ``cpu_take.json`` + ``topologies.json``: the kubelet unit-test tables (TestTakeByTopologyNUMAPacked,
  TestTakeByTopologyWithSpreadPhysicalCPUsPreferredOption, TestTakeByTopologyNUMADistributed; 61 cases);
* ``cpu_cases.json`` + two machine files: the benchmark cases, with the answers (or errors) the kubelet's
  Go code returned on a 96-CPU and a 384-CPU machine (75 cases).

Every answer must be the kubelet's, CPU for CPU and message for message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from enforcer.cpumanager.assignment import TakeOptions, take_by_topology
from enforcer.errors import CPUAllocationError
from enforcer.topology import machine
from shared.cpuset import CPUSet

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kubelet"
BRIEF_MATERIAL = Path(__file__).resolve().parents[3] / ".." / "shared"

# fixture copy -> its origin in the brief material
COPIED_FROM = {
    "cpu_take.json": "conformance/cpu_take.json",
    "topologies.json": "conformance/topologies.json",
    "cpu_cases.json": "bench/cpu_cases.json",
    "topology-dual-socket-ht-96.json": "bench/topology-dual-socket-ht-96.json",
    "topology-2s-8numa-384-uncore8.json": "bench/topology-2s-8numa-384-uncore8.json",
}


@dataclass(frozen=True)
class KubeletTakeCase:
    description: str
    topology: machine.CPUTopology
    available: CPUSet
    request: int
    options: TakeOptions
    expected: CPUSet | None
    expected_error: str | None


def _unit_test_cases() -> list[KubeletTakeCase]:
    topologies = {
        name: machine.from_document(doc) for name, doc in json.loads((FIXTURES / "topologies.json").read_text()).items()
    }
    cases = []
    for raw in json.loads((FIXTURES / "cpu_take.json").read_text()):
        opts: dict[str, Any] = raw["options"]
        cases.append(
            KubeletTakeCase(
                description=raw["id"],
                topology=topologies[raw["topology"]],
                available=CPUSet.parse(raw["available"]),
                request=raw["request"],
                options=TakeOptions(
                    algorithm=opts["algorithm"],
                    cpu_group_size=opts.get("cpuGroupSize", 1),
                    spread_across_cores=opts["distributeCPUsAcrossCores"],
                    prefer_align_uncore=opts["preferAlignByUncoreCache"],
                ),
                expected=None if raw.get("expectError") else CPUSet.parse(raw["expect"]),
                expected_error=raw.get("expectErrorMessage") if raw.get("expectError") else None,
            )
        )
    return cases


def _bench_options(raw: dict[str, Any]) -> TakeOptions:
    spread = raw["cpuSortingStrategy"] == "spread"
    if raw["function"] == "takeByTopologyNUMADistributed":
        return TakeOptions(
            algorithm="distributed",
            cpu_group_size=raw["cpuGroupSize"],
            spread_across_cores=spread,
            align_by_socket=raw["alignBySocket"],
        )
    return TakeOptions(spread_across_cores=spread, prefer_align_uncore=raw["preferAlignByUncoreCache"])


def _bench_cases() -> list[KubeletTakeCase]:
    machines: dict[str, machine.CPUTopology] = {}
    cases = []
    for raw in json.loads((FIXTURES / "cpu_cases.json").read_text())["cases"]:
        topology_file = raw["topologyFile"]
        if topology_file not in machines:
            machines[topology_file] = machine.load(FIXTURES / topology_file)
        cases.append(
            KubeletTakeCase(
                description=raw["name"],
                topology=machines[topology_file],
                available=CPUSet.parse(raw["available"]),
                request=raw["request"],
                options=_bench_options(raw["options"]),
                expected=None if raw["expectedError"] else CPUSet.parse(raw["expected"]),
                expected_error=raw["expectedError"],
            )
        )
    return cases


UNIT_TEST_CASES = _unit_test_cases()
BENCH_CASES = _bench_cases()


def _assert_kubelet_answer(case: KubeletTakeCase) -> None:
    if case.expected_error is not None:
        with pytest.raises(CPUAllocationError) as raised:
            take_by_topology(case.topology, case.available, case.request, case.options)
        assert str(raised.value) == case.expected_error
    else:
        assert take_by_topology(case.topology, case.available, case.request, case.options) == case.expected


@pytest.mark.parametrize("case", UNIT_TEST_CASES, ids=lambda c: c.description)
def test_take_by_topology_matches_the_kubelet_unit_test_tables(case: KubeletTakeCase) -> None:
    _assert_kubelet_answer(case)


@pytest.mark.parametrize("case", BENCH_CASES, ids=lambda c: c.description)
def test_take_by_topology_matches_the_kubelet_on_the_benchmark_machines(case: KubeletTakeCase) -> None:
    _assert_kubelet_answer(case)


def test_every_kubelet_case_is_loaded() -> None:
    assert (len(UNIT_TEST_CASES), len(BENCH_CASES)) == (61, 75)


@pytest.mark.parametrize("copy_name", sorted(COPIED_FROM))
def test_fixture_copy_is_identical_to_the_brief_material(copy_name: str) -> None:
    origin = BRIEF_MATERIAL / COPIED_FROM[copy_name]
    if not origin.exists():
        pytest.skip(f"brief material not present at {origin.resolve()}; the fixture copy is used as is")
    assert json.loads((FIXTURES / copy_name).read_text()) == json.loads(origin.read_text())
