"""The ``None`` memory policy: nothing is accounted or pinned (memory-manager.md R1.1)."""

from __future__ import annotations

import pytest
from memory_builders import GiB, counters, ctr, hint, pod

from enforcer.errors import ConfigError
from enforcer.memorymanager.policy_none import NoneMemoryPolicy
from enforcer.memorymanager.state import MemoryState


def test_the_none_policy_gives_no_hints_and_no_blocks_r1_1() -> None:
    policy = NoneMemoryPolicy()
    state = policy.new_state()
    app = ctr("a", GiB)
    p = pod("p", app, plr_memory=2 * GiB)
    c = counters()
    assert policy.get_topology_hints(state, p, app) is None
    assert policy.get_pod_topology_hints(state, p) is None
    policy.allocate(state, p, app, hint(0), c)
    policy.allocate_pod(state, p, hint(0), c)
    policy.remove_container(state, "p", "a")
    assert state == MemoryState("None")
    assert policy.memory_assignment(state, p, app) == "node_shared"
    assert policy.memory_numa_nodes(state, "p", "a") is None
    assert policy.container_blocks(state, "p", "a") == [] and policy.pod_blocks(state, "p") == []
    assert policy.numa_memory(state) == {}
    assert not (c.allocations or c.errors or c.assignments)


def test_the_none_policy_refuses_a_static_state() -> None:
    with pytest.raises(ConfigError, match='configured policy "None" differs from state checkpoint policy "Static"'):
        NoneMemoryPolicy().validate_state(MemoryState("Static"))
    NoneMemoryPolicy().validate_state(MemoryState("None"))
