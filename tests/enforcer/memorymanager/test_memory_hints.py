"""Hint generation (memory-manager.md R3.1-R3.4, H1-H7, worked examples 1 and 2)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from memory_builders import (
    DEFAULT_GATES,
    HP1G,
    PLR_GATES,
    GiB,
    block,
    counters,
    ctr,
    hint,
    numa_machine,
    pod,
    static_policy,
    uniform_machine,
)

from enforcer.features import FeatureGates
from enforcer.memorymanager import requests
from enforcer.memorymanager.policy_static import StaticMemoryPolicy
from enforcer.memorymanager.state import MemoryState
from enforcer.topology.hints import TopologyHint

SMALL_RESERVED = {0: {"memory": 1}}


def two_nodes(memory: int = 30 * GiB) -> StaticMemoryPolicy:
    """Example machine: two NUMA nodes with ``memory`` allocatable each (1 byte reserved on node 0)."""
    return static_policy(numa_machine({0: {"memory": memory + 1}, 1: {"memory": memory}}), SMALL_RESERVED)


def test_example_1_single_numa_hints_prefer_one_node() -> None:
    policy = two_nodes()
    state = policy.new_state()
    app = ctr("a", 10 * GiB)
    assert policy.get_topology_hints(state, pod("p", app), app) == {
        "memory": [hint(0), hint(1), hint(0, 1, preferred=False)]
    }


def test_example_2_group_lock_in_gives_an_empty_map_h4_h6b() -> None:
    policy = two_nodes()
    state = policy.new_state()
    first = ctr("a", 10 * GiB)
    policy.allocate(state, pod("p1", first), first, hint(0), counters())
    big = ctr("b", 40 * GiB)
    hints = policy.get_topology_hints(state, pod("p2", big), big)
    assert hints == {}  # H6b: "don't care", unlike the CPU manager's {"cpu": []}
    assert hints is not None


def test_non_guaranteed_pods_get_no_hints_r3_1() -> None:
    policy = two_nodes()
    state = policy.new_state()
    burstable = ctr("a", GiB, limit_memory=2 * GiB)
    p = pod("p", burstable)
    assert policy.get_topology_hints(state, p, burstable) is None
    assert policy.get_pod_topology_hints(state, p) is None


def test_only_memory_and_hugepages_requests_count_r3_2() -> None:
    app = ctr("a", GiB, cpu=2000, hugepages={HP1G: 2 * GiB})
    p = pod("p", app)
    assert requests.container_requests(p, app, DEFAULT_GATES) == {"memory": GiB, HP1G: 2 * GiB}


def test_under_pod_level_resources_only_guaranteed_equivalent_containers_ask_r3_2() -> None:
    shared = ctr("shared", GiB, limit_memory=2 * GiB)
    exclusive = ctr("exclusive", GiB, cpu=1500)  # non-integer CPU is fine for memory (PLR R2.3)
    p = pod("p", shared, exclusive, plr_memory=4 * GiB)
    assert requests.container_requests(p, shared, PLR_GATES) == {}
    assert requests.container_requests(p, exclusive, PLR_GATES) == {"memory": GiB}


@pytest.mark.parametrize(
    "gates",
    [
        FeatureGates(pod_level_resource_managers=False),
        FeatureGates(pod_level_resources=False, pod_level_resource_managers=True),
    ],
    ids=["R3.3 PodLevelResourceManagers off", "R3.3 PodLevelResources off"],
)
def test_pod_level_resources_with_a_gate_off_get_no_hints(gates: FeatureGates) -> None:
    policy = static_policy(uniform_machine(2, 32 * GiB), gates=gates)
    state = policy.new_state()
    app = ctr("a", 4 * GiB)
    p = pod("p", app, plr_memory=8 * GiB)
    assert policy.get_topology_hints(state, p, app) is None
    assert policy.get_pod_topology_hints(state, p) is None


def test_pod_total_takes_the_larger_of_init_peak_and_long_running_sum_r3_4() -> None:
    sidecar = ctr("side", 2 * GiB, kind="sidecar")
    init = ctr("init", 8 * GiB, kind="init")
    app = ctr("app", 4 * GiB)
    p = pod("p", sidecar, init, app)
    assert requests.pod_requests(p, DEFAULT_GATES) == {"memory": 10 * GiB}  # max(2 + 8, 4 + 2)
    policy = static_policy(uniform_machine(2, 8 * GiB))
    assert policy.get_pod_topology_hints(policy.new_state(), p) == {"memory": [hint(0, 1)]}


def test_pod_total_lists_only_types_app_containers_request_r3_4() -> None:
    init = ctr("init", 2 * GiB, kind="init", hugepages={HP1G: GiB})
    app = ctr("app", GiB)
    assert requests.pod_requests(pod("p", init, app), DEFAULT_GATES) == {"memory": 2 * GiB}


def test_pod_total_under_pod_level_resources_is_the_positive_pod_requests_r3_4() -> None:
    app = ctr("a", GiB)
    p = pod("p", app, plr_memory=8 * GiB, plr_hugepages={HP1G: 2 * GiB, "hugepages-2Mi": 0})
    assert requests.pod_requests(p, PLR_GATES) == {"memory": 8 * GiB, HP1G: 2 * GiB}


def test_masks_without_enough_capacity_are_skipped_h1() -> None:
    policy = two_nodes()
    app = ctr("a", 40 * GiB)
    assert policy.get_topology_hints(policy.new_state(), pod("p", app), app) == {"memory": [hint(0, 1)]}


def test_preferred_width_comes_from_capacity_not_free_memory_h2_h3() -> None:
    policy = two_nodes()
    state = policy.new_state()
    wide = ctr("wide", 50 * GiB)
    policy.allocate(state, pod("p1", wide), wide, hint(0, 1), counters())  # 10Gi left, spread [0,1]
    app = ctr("a", 8 * GiB)
    # {0} and {1} have the capacity (so one node is "preferred"), but belong to a group (H3)
    assert policy.get_topology_hints(state, pod("p2", app), app) == {"memory": [hint(0, 1, preferred=False)]}


def test_a_used_node_joins_only_its_own_group_h4() -> None:
    policy = static_policy(uniform_machine(3, 10 * GiB), {0: {"memory": 1}})
    state = policy.new_state()
    wide = ctr("wide", 12 * GiB)
    policy.allocate(state, pod("p1", wide), wide, hint(0, 1), counters())
    app = ctr("a", 6 * GiB)
    # {0} and {1} are in a group (H3); {0,2}, {1,2} and {0,1,2} would mix groups (H4)
    assert policy.get_topology_hints(state, pod("p2", app), app) == {"memory": [hint(2), hint(0, 1, preferred=False)]}


def test_masks_without_enough_free_memory_are_skipped_h5() -> None:
    policy = two_nodes()
    state = policy.new_state()
    first = ctr("a", 25 * GiB)
    policy.allocate(state, pod("p1", first), first, hint(0), counters())
    app = ctr("b", 10 * GiB)
    assert policy.get_topology_hints(state, pod("p2", app), app) == {"memory": [hint(1)]}


def test_init_memory_left_behind_counts_as_free_for_the_same_pod_h5() -> None:
    policy = two_nodes(10 * GiB)
    state = policy.new_state()
    init = ctr("init", 8 * GiB, kind="init")
    app = ctr("app", 6 * GiB)
    p = pod("p", init, app)
    policy.allocate(state, p, init, hint(0), counters())  # node 0: 2Gi free, 8Gi reusable
    assert policy.get_topology_hints(state, p, app) == {"memory": [hint(0), hint(1)]}
    other = ctr("app", 6 * GiB)
    assert policy.get_topology_hints(state, pod("q", other), other) == {"memory": [hint(1)]}


def test_every_type_gets_the_same_masks_h6() -> None:
    policy = static_policy(uniform_machine(2, 16 * GiB, hugepages_1g=4 * GiB))
    app = ctr("a", 2 * GiB, hugepages={HP1G: 6 * GiB})  # hugepages need both nodes
    expected = [hint(0, 1)]
    assert policy.get_topology_hints(policy.new_state(), pod("p", app), app) == {"memory": expected, HP1G: expected}


@dataclass(frozen=True)
class RestartCase:
    description: str
    stored_size: int
    expected: dict[str, list[TopologyHint]] | None


RESTARTS = [
    RestartCase("H7 matching blocks regenerate their mask as preferred", 4 * GiB, {"memory": [hint(1)]}),
    RestartCase("H7 a size that differs from the request gives no hints", 2 * GiB, None),
]


@pytest.mark.parametrize("case", RESTARTS, ids=lambda c: c.description)
def test_container_with_blocks_regenerates_hints(case: RestartCase) -> None:
    policy = two_nodes()
    app = ctr("a", 4 * GiB)
    state = MemoryState("Static", policy.new_state().machine_state, {"p": {"a": [block([1], case.stored_size)]}})
    assert policy.get_topology_hints(state, pod("p", app), app) == case.expected


def test_pod_scope_regenerates_from_any_container_with_blocks_h7() -> None:
    policy = two_nodes()
    state = policy.new_state()
    app = ctr("a", 4 * GiB)
    p = pod("p", app)
    policy.allocate(state, p, app, hint(1), counters())
    assert policy.get_pod_topology_hints(state, p) == {"memory": [hint(1)]}


def test_pod_scope_restart_compares_one_container_with_the_pod_total_h7() -> None:
    # upstream regenerates from the first container with blocks against the pod total, so a
    # two-container pod gets no hint on the restart path ("don't care")
    policy = two_nodes()
    state = policy.new_state()
    a, b = ctr("a", 4 * GiB), ctr("b", 2 * GiB)
    p = pod("p", a, b)
    for c in p.containers:
        policy.allocate(state, p, c, hint(1), counters())
    assert policy.get_pod_topology_hints(state, p) is None


def test_hint_families_are_shared_and_do_not_follow_the_state_charged_after_them() -> None:
    # a dry run computes the family, then charges its copy of the state: a later call with the state as it
    # was gets the same family back, and it must still answer for that state (not the charged one)
    from enforcer.memorymanager import placement

    policy = two_nodes()
    state = policy.new_state()
    before = state.copy()
    wanted = {"memory": 10 * GiB}
    family = placement.calculate_hints(state.machine_state, wanted, {})["memory"]
    placement.charge(state.machine_state, (0, 1), "memory", 40 * GiB)  # a group over both nodes, nearly full
    again = placement.calculate_hints(before.machine_state, wanted, {})["memory"]
    assert again is family
    assert list(family) == [hint(0), hint(1), hint(0, 1, preferred=False)]
    assert list(family) == list(placement.hint_family(before.machine_state, wanted, {}) or [])
    charged = placement.calculate_hints(state.machine_state, wanted, {})["memory"]  # the charged state: its own
    assert list(charged) == [hint(0, 1, preferred=False)]  # H4: the used nodes only as their group
