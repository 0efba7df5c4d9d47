"""Restart validation of a stored state (memory-manager.md R7.2, R7.3; PLR R12.2)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from memory_builders import PLR_GATES, GiB, block, counters, ctr, hint, pod, static_policy, uniform_machine

from enforcer.errors import ConfigError
from enforcer.features import FeatureGates
from enforcer.memorymanager.policy_static import EMPTY_MACHINE_STATE, StaticMemoryPolicy
from enforcer.memorymanager.restore import STATE_MISMATCH
from enforcer.memorymanager.state import MemoryState


def busy_state(gates: FeatureGates = PLR_GATES) -> tuple[StaticMemoryPolicy, MemoryState]:
    """A classic pod over two nodes plus a KEP-5526 pod, written by a running node."""
    policy = static_policy(uniform_machine(3, 16 * GiB), gates=gates)
    state = policy.new_state()
    wide = ctr("wide", 20 * GiB)
    policy.allocate(state, pod("classic", wide), wide, hint(0, 1), counters())
    plr = pod("plr", ctr("db", 4 * GiB), ctr("side", kind="sidecar"), plr_memory=8 * GiB)
    policy.allocate_pod(state, plr, hint(2), counters())
    return policy, state


def restarted(state: MemoryState) -> MemoryState:
    return MemoryState.from_dict(state.to_dict())


def test_a_state_written_by_this_node_validates_after_a_restart_r7_2() -> None:
    policy, state = busy_state()
    copy = restarted(state)
    policy.validate_state(copy)
    assert copy == state


def test_an_empty_state_is_filled_with_the_machine_tables_r7_2() -> None:
    policy = static_policy(uniform_machine(2, 16 * GiB))
    state = MemoryState("Static")
    policy.validate_state(state)
    assert state == policy.new_state()


def test_entries_without_machine_tables_are_refused_r7_2() -> None:
    policy = static_policy(uniform_machine(2, 16 * GiB))
    with pytest.raises(ConfigError) as raised:
        policy.validate_state(MemoryState("Static", entries={"p": {"c": [block([0], GiB)]}}))
    assert str(raised.value) == EMPTY_MACHINE_STATE


def test_a_different_spread_over_a_group_is_still_valid_r7_2() -> None:
    policy, state = busy_state()
    node0, node1 = (state.machine_state[n].memory_map["memory"] for n in (0, 1))
    node0.free, node0.reserved = node0.free + GiB, node0.reserved - GiB
    node1.free, node1.reserved = node1.free - GiB, node1.reserved + GiB
    policy.validate_state(state)


def _more_assignments(s: MemoryState) -> None:
    s.machine_state[2].number_of_assignments += 1


def _other_cells(s: MemoryState) -> None:
    s.machine_state[2].cells = [1, 2]


def _smaller_total(s: MemoryState) -> None:
    s.machine_state[0].memory_map["memory"].total -= GiB


def _more_reserved(s: MemoryState) -> None:
    t = s.machine_state[2].memory_map["memory"]
    t.reserved, t.free = t.reserved + GiB, t.free - GiB


def _forgotten_container(s: MemoryState) -> None:
    del s.entries["classic"]


@pytest.mark.parametrize(
    "tamper",
    [_more_assignments, _other_cells, _smaller_total, _more_reserved, _forgotten_container],
    ids=[
        "R7.2 number of assignments",
        "R7.2 cells",
        "R7.2 total size",
        "R7.2 reserved memory of the group",
        "R7.2 entries no longer explain the tables",
    ],
)
def test_a_state_that_does_not_fit_is_refused(tamper: Callable[[MemoryState], None]) -> None:
    policy, state = busy_state()
    tamper(state)
    with pytest.raises(ConfigError) as raised:
        policy.validate_state(state)
    assert str(raised.value) == STATE_MISMATCH


def test_a_changed_reservation_is_refused_r7_2() -> None:
    _, state = busy_state()
    other = static_policy(uniform_machine(3, 16 * GiB), {0: {"memory": GiB}}, PLR_GATES)
    with pytest.raises(ConfigError, match="expected machine state is different"):
        other.validate_state(restarted(state))


def test_pod_entries_are_not_understood_with_the_gate_off_r7_3() -> None:
    _, state = busy_state()
    gate_off = static_policy(uniform_machine(3, 16 * GiB), gates=FeatureGates())
    with pytest.raises(ConfigError) as raised:
        gate_off.validate_state(restarted(state))
    assert str(raised.value) == STATE_MISMATCH


def test_state_of_another_policy_is_refused() -> None:
    policy = static_policy(uniform_machine(2, 16 * GiB))
    with pytest.raises(ConfigError) as raised:
        policy.validate_state(MemoryState("None"))
    assert str(raised.value) == '[memorymanager] configured policy "Static" differs from state checkpoint policy "None"'
