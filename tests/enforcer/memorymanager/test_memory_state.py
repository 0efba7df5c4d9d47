"""Machine tables and the state value (memory-manager.md R2.1-R2.5, R7.1)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from memory_builders import HP1G, GiB, MiB, block, counters, ctr, hint, pod, seed_topology, static_policy

from enforcer.errors import ConfigError
from enforcer.memorymanager.policy_static import StaticMemoryPolicy
from enforcer.memorymanager.state import Block, MemoryState

SEED_RESERVED = {0: {"memory": 1124 * MiB}}


def seed_policy() -> StaticMemoryPolicy:
    return static_policy(seed_topology(), SEED_RESERVED)


def test_default_tables_follow_capacity_minus_reservations_r2_1_to_r2_3() -> None:
    state = seed_policy().new_state()
    node0, node1 = state.machine_state[0], state.machine_state[1]
    assert node0.memory_map["memory"].to_dict() == {
        "total": 64 * GiB,
        "systemReserved": 1124 * MiB,
        "allocatable": 64 * GiB - 1124 * MiB - 8 * GiB,  # R2.3: hugepages bytes come out of memory
        "reserved": 0,
        "free": 64 * GiB - 1124 * MiB - 8 * GiB,
    }
    assert node0.memory_map[HP1G].to_dict() == {  # R2.2
        "total": 8 * GiB,
        "systemReserved": 0,
        "allocatable": 8 * GiB,
        "reserved": 0,
        "free": 8 * GiB,
    }
    assert node1.memory_map["memory"].allocatable == 56 * GiB


def test_unused_nodes_are_their_own_group_with_no_assignments_r2_4() -> None:
    state = seed_policy().new_state()
    assert [(n.cells, n.number_of_assignments) for n in state.machine_state.values()] == [([0], 0), ([1], 0)]


def test_memory_and_hugepages_of_one_container_count_twice_on_the_node_r2_5() -> None:
    policy = seed_policy()
    state = policy.new_state()
    app = ctr("app", GiB, hugepages={HP1G: GiB})
    policy.allocate(state, pod("p", app), app, hint(0), counters())
    assert state.machine_state[0].number_of_assignments == 2
    assert state.machine_state[1].number_of_assignments == 0


def test_state_serialises_in_the_kubelet_checkpoint_shape_r7_1() -> None:
    policy = seed_policy()
    state = policy.new_state()
    app = ctr("c", GiB)
    policy.allocate(state, pod("uid-1", app), app, hint(0), counters())
    doc = state.to_dict()
    assert doc["policyName"] == "Static"
    assert doc["machineState"]["0"]["numberOfAssignments"] == 1
    assert doc["machineState"]["0"]["cells"] == [0]
    assert set(doc["machineState"]["0"]["memoryMap"]["memory"]) == {
        "total",
        "systemReserved",
        "allocatable",
        "reserved",
        "free",
    }
    assert doc["entries"] == {"uid-1": {"c": [{"numaAffinity": [0], "type": "memory", "size": GiB}]}}
    assert doc["podEntries"] == {}
    assert json.loads(json.dumps(doc)) == doc


def test_pod_entries_serialise_as_memory_blocks_r7_3() -> None:
    state = MemoryState("Static", pod_entries={"p": [block([1], 16 * GiB)]})
    assert state.to_dict()["podEntries"] == {
        "p": {"memoryBlocks": [{"numaAffinity": [1], "type": "memory", "size": 16 * GiB}]}
    }


def test_round_trip_is_exact_including_reuse_bookkeeping() -> None:
    policy = seed_policy()
    state = policy.new_state()
    init = ctr("init", 2 * GiB, kind="init")
    app = ctr("app", GiB, hugepages={HP1G: GiB})
    p = pod("p", init, app)
    for c in p.containers:
        policy.allocate(state, p, c, hint(1), counters())
    assert state.reusable  # the init container left 1Gi behind on {1}
    assert MemoryState.from_dict(state.to_dict()) == state
    assert MemoryState.from_dict(json.loads(json.dumps(state.to_dict()))).to_dict() == state.to_dict()


def test_copy_is_independent_of_the_original() -> None:
    policy = seed_policy()
    state = policy.new_state()
    copy = state.copy()
    app = ctr("c", GiB)
    policy.allocate(copy, pod("p", app), app, hint(0), counters())
    assert state == policy.new_state()
    assert copy != state


def test_an_empty_block_list_is_an_entry_but_a_missing_one_is_not() -> None:
    state = MemoryState("Static")
    state.set_container_blocks("p", "a", [])
    assert state.container_blocks("p", "a") == []
    assert state.container_blocks("p", "b") is None
    state.delete_container("p", "a")
    assert state.entries == {}


def test_delete_pod_forgets_pod_and_container_entries() -> None:
    state = MemoryState("Static", entries={"p": {"a": []}}, pod_entries={"p": []})
    state.delete_pod("p")
    assert state.entries == {} and state.pod_entries == {}


@dataclass(frozen=True)
class BrokenCase:
    description: str
    breakage: Callable[[MemoryState], None]
    problem: str


def _allocated_state() -> MemoryState:
    policy = seed_policy()
    state = policy.new_state()
    app = ctr("c", 2 * GiB)
    policy.allocate(state, pod("p", app), app, hint(0), counters())
    return state


def _set_free(s: MemoryState) -> None:
    s.machine_state[0].memory_map["memory"].free += 1


def _set_assignments(s: MemoryState) -> None:
    s.machine_state[0].number_of_assignments = 3


def _set_cells(s: MemoryState) -> None:
    s.machine_state[0].cells = [0, 1]


def _grow_block(s: MemoryState) -> None:
    s.entries["p"]["c"] = [Block((0,), "memory", 3 * GiB)]


def _orphan_pod_entry(s: MemoryState) -> None:
    s.pod_entries["q"] = []


def _ghost_node(s: MemoryState) -> None:
    s.entries["p"]["c"] = [Block((0,), "memory", 2 * GiB), Block((7,), "memory", 0)]


BROKEN = [
    BrokenCase("free plus reserved differs from allocatable", _set_free, "free"),
    BrokenCase("numberOfAssignments differs from the blocks", _set_assignments, "numberOfAssignments 3 != 1"),
    BrokenCase("cells differ from the blocks' group", _set_cells, "cells [0, 1] != [0]"),
    BrokenCase("reserved bytes differ from the blocks", _grow_block, "reserved 2147483648 != 3221225472"),
    BrokenCase("a pod entry without containers", _orphan_pod_entry, "pod q has a pod-level entry"),
    BrokenCase("a block on a node that does not exist", _ghost_node, "NUMA node 7 that does not exist"),
]


def test_a_consistent_state_has_no_problems() -> None:
    assert _allocated_state().check(seed_topology()) == []


@pytest.mark.parametrize("case", BROKEN, ids=lambda c: c.description)
def test_check_reports_broken_invariants(case: BrokenCase) -> None:
    state = _allocated_state()
    case.breakage(state)
    problems = state.check(seed_topology())
    assert any(case.problem in p for p in problems), problems


@pytest.mark.parametrize(
    "doc, message",
    [
        ({}, "memoryState.policyName: expected a string"),
        ({"policyName": "Static", "machineState": []}, "memoryState.machineState: expected an object"),
        (
            {"policyName": "Static", "entries": {"p": {"c": [{"numaAffinity": 0, "type": "memory"}]}}},
            "memoryState.entries.p.c[0].numaAffinity: expected a list of NUMA ids",
        ),
        (
            {"policyName": "Static", "podEntries": {"p": {"memoryBlocks": [{"numaAffinity": [0], "size": 1}]}}},
            "memoryState.podEntries.p.memoryBlocks[0].type: expected a resource name",
        ),
        (
            {"policyName": "Static", "machineState": {"0": {"numberOfAssignments": -1}}},
            "memoryState.machineState.0.numberOfAssignments: expected a non-negative integer, got -1",
        ),
    ],
    ids=["no policy name", "machine state not a map", "affinity not a list", "block without type", "negative count"],
)
def test_from_dict_names_the_bad_field(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        MemoryState.from_dict(doc)
    assert str(raised.value) == message
