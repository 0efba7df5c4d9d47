"""Hugepages of a size only some NUMA nodes have (memory-manager.md R2.2, H1, H5, A3, A6, R7.2).

The kubelet's machine state has a table for every hugepages size on every NUMA node, sized 0 on a node
with no pages of it: cAdvisor lists each size the kernel offers per node, zero counts included, and
``getDefaultMachineState`` turns each into a table (kubernetes/kubernetes
pkg/kubelet/cm/memorymanager/policy_static.go).  ``calculateHints`` sums Free and Allocatable over
every node of a mask, so a mask may span a node without pages; ``updateMachineState`` then takes
nothing from that node's empty table, and ``validateState`` finds the table the block names.

The machine here: node 0 has 16Gi of memory and 2Gi of 1Gi pages, node 1 16Gi and no 1Gi pages.
"""

from __future__ import annotations

import re

import pytest
from memory_builders import HP1G, GiB, MiB, any_numa, block, counters, ctr, hint, numa_machine, pod, static_policy

from enforcer.errors import ConfigError, UnexpectedAdmissionError
from enforcer.memorymanager import placement
from enforcer.memorymanager.policy_static import NO_DEFAULT_AFFINITY, NO_EXTENDED_PREFERRED, StaticMemoryPolicy
from enforcer.memorymanager.restore import STATE_MISMATCH
from enforcer.memorymanager.state import MemoryState, MemoryTable
from enforcer.topology.hints import TopologyHint
from enforcer.topology.machine import CPUTopology

RESERVED = {0: {"memory": 512 * MiB}}
ZERO = MemoryTable(total=0, system_reserved=0, allocatable=0, reserved=0, free=0)


def topology() -> CPUTopology:
    return numa_machine({0: {"memory": 16 * GiB, HP1G: 2 * GiB}, 1: {"memory": 16 * GiB}})


def policy() -> StaticMemoryPolicy:
    return static_policy(topology(), RESERVED)


def test_a_node_without_pages_of_a_size_has_a_zero_table_for_it_r2_2() -> None:
    state = policy().new_state()
    assert list(state.machine_state[1].memory_map) == ["memory", HP1G]
    assert state.machine_state[1].memory_map[HP1G] == ZERO
    assert state.machine_state[1].memory_map["memory"].allocatable == 16 * GiB  # no hugepages bytes to take out
    assert state.machine_state[0].memory_map[HP1G].allocatable == 2 * GiB


def test_hints_never_name_the_node_alone_but_may_span_it_h1_h5() -> None:
    state = policy().new_state()
    small = placement.calculate_hints(state.machine_state, {"memory": GiB, HP1G: GiB}, {})
    assert {h.mask: h.preferred for h in small["memory"]} == {0b01: True, 0b11: False}
    wide = placement.calculate_hints(state.machine_state, {"memory": 20 * GiB, HP1G: GiB}, {})
    assert {h.mask: h.preferred for h in wide[HP1G]} == {0b11: True}


def test_a_block_spanning_the_node_without_pages_is_consistent_and_restores_a6_r7_2() -> None:
    """The reported case: no Topology Manager hint (CPU Manager ``none``, TM ``none``), memory needs both
    nodes, so the default hint {0,1} carries the hugepages too; they all come from node 0."""
    mm = policy()
    state = mm.new_state()
    app = ctr("app", 20 * GiB, hugepages={HP1G: GiB})
    mm.allocate(state, pod("p", app), app, any_numa(), counters())
    assert state.container_blocks("p", "app") == [block([0, 1], 20 * GiB), block([0, 1], GiB, HP1G)]
    assert state.machine_state[0].memory_map[HP1G].reserved == GiB
    assert state.machine_state[1].memory_map[HP1G] == ZERO
    assert [state.machine_state[n].number_of_assignments for n in (0, 1)] == [2, 2]
    assert state.check(topology()) == []
    stored = MemoryState.from_dict(state.to_dict())
    mm.validate_state(stored)
    assert stored == state


def test_a_hint_of_the_node_without_pages_is_extended_to_one_with_them_a3() -> None:
    mm = policy()
    state = mm.new_state()
    app = ctr("app", GiB, hugepages={HP1G: GiB})
    mm.allocate(state, pod("p", app), app, hint(1, preferred=False), counters())
    assert state.container_blocks("p", "app") == [block([0, 1], GiB), block([0, 1], GiB, HP1G)]
    assert state.check(topology()) == []

    preferred = mm.new_state()
    with pytest.raises(UnexpectedAdmissionError, match=re.escape(NO_EXTENDED_PREFERRED)):
        mm.allocate(preferred, pod("q", app), app, hint(1), counters())  # {0,1} is not preferred: |{0}| is 1


def test_more_pages_than_the_machine_has_get_no_hint_and_no_default_affinity_h6b_a2() -> None:
    mm = policy()
    state = mm.new_state()
    app = ctr("app", GiB, hugepages={HP1G: 3 * GiB})
    assert mm.get_topology_hints(state, pod("p", app), app) == {}
    with pytest.raises(UnexpectedAdmissionError, match=re.escape(NO_DEFAULT_AFFINITY)):
        mm.allocate(state, pod("p", app), app, TopologyHint(None, False), counters())
    assert state == mm.new_state()


def test_a_checkpoint_without_the_zero_tables_gains_them_at_start_r7_2() -> None:
    """Checkpoints written before the zero tables were kept validate, and come back in the kubelet's shape."""
    mm = policy()
    state = mm.new_state()
    app = ctr("app", 2 * GiB, hugepages={HP1G: GiB})
    mm.allocate(state, pod("p", app), app, hint(0), counters())
    old = state.to_dict()
    del old["machineState"]["1"]["memoryMap"][HP1G]
    stored = MemoryState.from_dict(old)
    mm.validate_state(stored)
    assert stored == state


def test_a_checkpoint_missing_a_table_with_pages_is_still_refused_r7_2() -> None:
    mm = policy()
    old = mm.new_state().to_dict()
    del old["machineState"]["0"]["memoryMap"][HP1G]
    with pytest.raises(ConfigError) as raised:
        mm.validate_state(MemoryState.from_dict(old))
    assert str(raised.value) == STATE_MISMATCH


def test_check_reports_a_node_without_a_table_the_others_have() -> None:
    state = policy().new_state()
    del state.machine_state[1].memory_map[HP1G]
    assert state.check(topology()) == [f"node 1 has no {HP1G} table (a node without it has one of size 0)"]


def test_reserving_pages_a_node_does_not_have_is_a_config_error_r1_2() -> None:
    with pytest.raises(ConfigError, match=f"NUMA node 1 reserves 1Gi of {HP1G}, more than the 0 it has"):
        static_policy(topology(), {0: {"memory": 512 * MiB}, 1: {HP1G: GiB}})
