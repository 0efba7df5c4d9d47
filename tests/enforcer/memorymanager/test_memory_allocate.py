"""Container allocation and release (memory-manager.md A1-A7, R6.1, examples 1-3; PLR M3-M5)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from memory_builders import (
    HP1G,
    PLR_GATES,
    GiB,
    any_numa,
    block,
    counters,
    ctr,
    hint,
    numa_machine,
    pod,
    static_policy,
    table,
    uniform_machine,
)

from enforcer.errors import AdmissionRejected, UnexpectedAdmissionError
from enforcer.features import FeatureGates
from enforcer.memorymanager.policy_static import (
    GROUP_RULE_VIOLATED,
    NO_DEFAULT_AFFINITY,
    NO_DEFAULT_PREFERRED,
    NO_EXTENDED_PREFERRED,
    NO_EXTENSION,
    StaticMemoryPolicy,
)
from enforcer.topology.hints import TopologyHint
from enforcer.topology.machine import CPUTopology


def two_nodes_machine(memory: int = 30 * GiB) -> CPUTopology:
    """The worked examples' machine: two NUMA nodes with ``memory`` allocatable each (1 byte reserved on 0)."""
    return numa_machine({0: {"memory": memory + 1}, 1: {"memory": memory}})


def two_nodes(memory: int = 30 * GiB) -> StaticMemoryPolicy:
    return static_policy(two_nodes_machine(memory), {0: {"memory": 1}})


def test_example_1_block_on_the_hinted_node() -> None:
    policy = two_nodes()
    state = policy.new_state()
    app = ctr("a", 10 * GiB)
    policy.allocate(state, pod("p", app), app, hint(0), counters())
    assert policy.container_blocks(state, "p", "a") == [block([0], 10 * GiB)]
    assert table(state, 0) == (20 * GiB, 10 * GiB)
    assert (state.machine_state[0].number_of_assignments, state.machine_state[0].cells) == (1, [0])


def test_example_2_a_wide_request_fails_in_allocate_not_in_the_merge() -> None:
    policy = two_nodes()
    state = policy.new_state()
    a = ctr("a", 10 * GiB)
    policy.allocate(state, pod("p1", a), a, hint(0), counters())
    b = ctr("b", 40 * GiB)
    # the empty hint map is "don't care", so the Topology Manager hands over a nil affinity
    with pytest.raises(UnexpectedAdmissionError) as raised:
        policy.allocate(state, pod("p2", b), b, any_numa(preferred=True), counters())
    assert raised.value.reason == "UnexpectedAdmissionError"
    assert raised.value.message == f"Allocate failed due to {NO_DEFAULT_AFFINITY}, which is unexpected"


def test_example_2_on_an_empty_node_the_block_spans_both_nodes_in_order() -> None:
    policy = two_nodes()
    state = policy.new_state()
    b = ctr("b", 40 * GiB)
    policy.allocate(state, pod("p", b), b, hint(0, 1), counters())
    assert policy.container_blocks(state, "p", "b") == [block([0, 1], 40 * GiB)]
    assert table(state, 0) == (0, 30 * GiB)
    assert table(state, 1) == (20 * GiB, 10 * GiB)
    assert [state.machine_state[n].cells for n in (0, 1)] == [[0, 1], [0, 1]]
    small = ctr("c", 5 * GiB)
    assert policy.get_topology_hints(state, pod("q", small), small) == {"memory": [hint(0, 1, preferred=False)]}


def test_example_3_app_reuses_init_memory() -> None:
    policy = two_nodes()
    state = policy.new_state()
    init, app = ctr("init", 8 * GiB, kind="init"), ctr("app", 6 * GiB)
    p = pod("p", init, app)
    policy.allocate(state, p, init, hint(0), counters())
    assert table(state, 0) == (22 * GiB, 8 * GiB)
    assert state.reusable == {"p": {0b1: {"memory": 8 * GiB}}}
    policy.allocate(state, p, app, hint(0), counters())
    assert table(state, 0) == (22 * GiB, 8 * GiB)  # A5: charge 6 - 8 floored at 0
    assert state.reusable == {"p": {0b1: {"memory": 2 * GiB}}}
    assert policy.container_blocks(state, "p", "init") == [block([0], 2 * GiB)]  # A7: shrunk
    assert policy.container_blocks(state, "p", "app") == [block([0], 6 * GiB)]


@dataclass(frozen=True)
class SkipCase:
    description: str
    gates: FeatureGates
    burstable: bool = False
    plr: bool = False


SKIPS = [
    SkipCase("A1 non-Guaranteed pods get no blocks", FeatureGates(), burstable=True),
    SkipCase("A1 R3.3 pod-level resources with PodLevelResourceManagers off", FeatureGates(), plr=True),
    SkipCase(
        "A1 R3.3 pod-level resources with PodLevelResources off",
        FeatureGates(pod_level_resources=False, pod_level_resource_managers=True),
        plr=True,
    ),
]


@pytest.mark.parametrize("case", SKIPS, ids=lambda c: c.description)
def test_allocation_is_skipped(case: SkipCase) -> None:
    policy = static_policy(uniform_machine(2, 32 * GiB), gates=case.gates)
    state = policy.new_state()
    app = ctr("a", 2 * GiB, limit_memory=4 * GiB if case.burstable else None)
    c = counters()
    policy.allocate(state, pod("p", app, plr_memory=8 * GiB if case.plr else None), app, hint(0), c)
    assert state == policy.new_state()
    assert c.to_dict() == {"allocations": {}, "errors": {}, "assignments": {}}


def test_allocate_is_idempotent_a1() -> None:
    policy = two_nodes()
    state = policy.new_state()
    app = ctr("a", 4 * GiB)
    p = pod("p", app)
    policy.allocate(state, p, app, hint(1), counters())
    before = state.to_dict()
    c = counters()
    policy.allocate(state, p, app, hint(0), c)
    assert state.to_dict() == before
    assert not c.allocations


def test_nil_affinity_takes_the_best_calculated_hint_a2() -> None:
    # upstream "multiple NUMA nodes" case: 512Mi memory + 1Gi hugepages allocatable per node
    policy = static_policy(uniform_machine(4, 2 * GiB, hugepages_1g=GiB), {n: {"memory": GiB // 2} for n in range(4)})
    state = policy.new_state()
    app = ctr("a", GiB, hugepages={HP1G: GiB})
    policy.allocate(state, pod("p", app), app, any_numa(preferred=True), counters())
    assert policy.container_blocks(state, "p", "a") == [block([0, 1], GiB), block([0, 1], GiB, HP1G)]


def test_nil_preferred_affinity_needs_a_preferred_default_a2() -> None:
    policy = two_nodes()
    state = policy.new_state()
    wide = ctr("w", 50 * GiB)
    policy.allocate(state, pod("p1", wide), wide, hint(0, 1), counters())
    app = ctr("a", 8 * GiB)  # only {0,1} fits, and it is not preferred
    with pytest.raises(UnexpectedAdmissionError, match=NO_DEFAULT_PREFERRED.replace("[", r"\[")):
        policy.allocate(state, pod("p2", app), app, any_numa(preferred=True), counters())
    policy.allocate(state, pod("p3", app), app, any_numa(preferred=False), counters())
    assert policy.container_blocks(state, "p3", "a") == [block([0, 1], 8 * GiB)]


def test_an_insufficient_hint_is_extended_to_a_superset_a3() -> None:
    policy = two_nodes()
    state = policy.new_state()
    app = ctr("a", 40 * GiB)
    policy.allocate(state, pod("p", app), app, hint(1, preferred=False), counters())
    assert policy.container_blocks(state, "p", "a") == [block([0, 1], 40 * GiB)]


def test_an_unextendable_hint_fails_a3() -> None:
    policy = static_policy(uniform_machine(3, 10 * GiB), {0: {"memory": 1}})
    state = policy.new_state()
    wide = ctr("w", 12 * GiB)
    policy.allocate(state, pod("p1", wide), wide, hint(1, 2), counters())
    app = ctr("a", 12 * GiB)  # {0} is too small and no superset of {0} may be used
    with pytest.raises(UnexpectedAdmissionError, match=NO_EXTENSION.replace("[", r"\[")):
        policy.allocate(state, pod("p2", app), app, hint(0, preferred=False), counters())


def test_a_preferred_hint_must_extend_to_a_preferred_hint_a3() -> None:
    policy = static_policy(
        numa_machine({0: {"memory": 2 * GiB}, 1: {"memory": GiB}, 2: {"memory": GiB}}),
        {n: {"memory": GiB // 2} for n in range(3)},
    )
    state = policy.new_state()
    used = ctr("u", GiB // 2)
    policy.allocate(state, pod("p1", used), used, hint(0), counters())
    app = ctr("a", GiB)  # {1} is too small; the only superset that fits is {1,2}, not preferred
    with pytest.raises(UnexpectedAdmissionError, match=NO_EXTENDED_PREFERRED.replace("[", r"\[")):
        policy.allocate(state, pod("p2", app), app, hint(1, preferred=True), counters())


def test_a_multi_node_mask_over_a_single_numa_node_is_refused_a4() -> None:
    policy = two_nodes()
    state = policy.new_state()
    a = ctr("a", 5 * GiB)
    policy.allocate(state, pod("p1", a), a, hint(0), counters())
    b = ctr("b", 5 * GiB)
    c = counters()
    with pytest.raises(UnexpectedAdmissionError) as raised:
        policy.allocate(state, pod("p2", b), b, hint(0, 1), c)
    assert raised.value.message == f"Allocate failed due to {GROUP_RULE_VIOLATED}, which is unexpected"
    assert c.errors == {("memory", "node"): 1}  # PLR M4


def test_a_single_node_mask_inside_a_multi_node_group_is_refused_a4() -> None:
    # H3 as an A4 check: a single-node block on a grouped node leaves a state validateState cannot
    # rebuild (kubernetes/kubernetes#113035); upstream's isAffinityViolatingNUMAAllocations misses it
    policy = two_nodes()
    state = policy.new_state()
    wide = ctr("w", 35 * GiB)
    policy.allocate(state, pod("p1", wide), wide, hint(0, 1), counters())
    before = state.to_dict()
    app = ctr("a", GiB)
    c = counters()
    with pytest.raises(UnexpectedAdmissionError) as raised:
        policy.allocate(state, pod("p2", app), app, hint(1, preferred=False), c)  # node 1 has 25Gi free
    assert raised.value.message == f"Allocate failed due to {GROUP_RULE_VIOLATED}, which is unexpected"
    assert c.errors == {("memory", "node"): 1}
    assert state.to_dict() == before
    # node 0 gave all its memory to the group: A3 extends {0} to the group, which is allowed
    policy.allocate(state, pod("p2", app), app, hint(0, preferred=False), counters())
    assert policy.container_blocks(state, "p2", "a") == [block([0, 1], GiB)]
    assert state.check(two_nodes_machine()) == []
    # once the group is gone a single node is fine again
    policy.remove_container(state, "p1", "w")
    policy.remove_container(state, "p2", "a")
    policy.allocate(state, pod("p3", app), app, hint(1), counters())
    assert policy.container_blocks(state, "p3", "a") == [block([1], GiB)]
    assert state.check(two_nodes_machine()) == []


def test_block_size_is_the_request_and_charges_walk_the_mask_in_order_a5_a6() -> None:
    policy = two_nodes()
    state = policy.new_state()
    app = ctr("a", 10 * GiB)
    policy.allocate(state, pod("p", app), app, hint(0, 1), counters())
    assert table(state, 0) == (20 * GiB, 10 * GiB)
    assert table(state, 1) == (30 * GiB, 0)
    # A6: every node of the mask is counted and grouped even when it gave nothing
    assert [(state.machine_state[n].number_of_assignments, state.machine_state[n].cells) for n in (0, 1)] == [
        (1, [0, 1]),
        (1, [0, 1]),
    ]


def test_sidecars_consume_reuse_but_never_feed_it_a7() -> None:
    policy = two_nodes()
    state = policy.new_state()
    side, init, app = ctr("side", 2 * GiB, kind="sidecar"), ctr("init", 4 * GiB, kind="init"), ctr("app", 3 * GiB)
    p = pod("p", side, init, app)
    policy.allocate(state, p, side, hint(0), counters())
    assert state.reusable == {}
    policy.allocate(state, p, init, hint(0), counters())
    assert state.reusable == {"p": {0b1: {"memory": 4 * GiB}}}
    policy.allocate(state, p, app, hint(0), counters())
    assert table(state, 0)[1] == 6 * GiB  # 2 (sidecar) + 4 (init) + 0 (app reuses)
    assert policy.container_blocks(state, "p", "side") == [block([0], 2 * GiB)]  # never shrunk
    assert policy.container_blocks(state, "p", "init") == [block([0], GiB)]
    assert state.check(two_nodes_machine()) == []


def test_a_later_sidecar_reuses_init_memory_too_a7() -> None:
    policy = two_nodes()
    state = policy.new_state()
    init, side, app = ctr("init", 4 * GiB, kind="init"), ctr("side", 3 * GiB, kind="sidecar"), ctr("app", 3 * GiB)
    p = pod("p", init, side, app)
    for c in p.containers:
        policy.allocate(state, p, c, hint(0), counters())
    assert table(state, 0)[1] == 6 * GiB
    assert policy.container_blocks(state, "p", "init") == [block([0], 0)]
    assert state.check(two_nodes_machine()) == []


def test_reuse_is_per_mask_a7() -> None:
    policy = two_nodes()
    state = policy.new_state()
    init, app = ctr("init", 8 * GiB, kind="init"), ctr("app", 6 * GiB)
    p = pod("p", init, app)
    policy.allocate(state, p, init, hint(0), counters())
    policy.allocate(state, p, app, hint(1), counters())
    assert (table(state, 0)[1], table(state, 1)[1]) == (8 * GiB, 6 * GiB)
    assert policy.container_blocks(state, "p", "init") == [block([0], 8 * GiB)]


def test_node_level_metrics_count_each_resource_type_m3() -> None:
    policy = static_policy(uniform_machine(2, 16 * GiB, hugepages_1g=4 * GiB))
    state = policy.new_state()
    app = ctr("a", 2 * GiB, hugepages={HP1G: GiB})
    c = counters()
    policy.allocate(state, pod("p", app), app, hint(0), c)
    assert c.allocations == {("memory", "node"): 2}
    assert c.assignments == {("memory", "node_exclusive"): 1}


def test_seed_2_sidecar_without_resources_gets_nothing_in_container_scope_plr_r6_1_r6_2_m3_m5() -> None:
    policy = static_policy(uniform_machine(2, 64 * GiB), gates=PLR_GATES)
    state = policy.new_state()
    sidecar, training = ctr("service-mesh-sidecar", kind="sidecar"), ctr("ml-training", 6 * GiB, cpu=3000)
    p = pod("ml-workload", sidecar, training, plr_memory=8 * GiB, plr_cpu=4000)
    c = counters()
    for container in p.containers:
        assert (policy.get_topology_hints(state, p, container) or {}) == (
            {} if container is sidecar else {"memory": [hint(0), hint(1), hint(0, 1, preferred=False)]}
        )
        policy.allocate(state, p, container, None if container is sidecar else hint(0), c)
    assert policy.container_blocks(state, p.uid, "ml-training") == [block([0], 6 * GiB)]
    assert state.container_blocks(p.uid, "service-mesh-sidecar") is None
    assert policy.memory_assignment(state, p, training) == "node_exclusive"
    assert policy.memory_assignment(state, p, sidecar) == "node_shared"
    assert policy.memory_numa_nodes(state, p.uid, "service-mesh-sidecar") is None
    assert c.to_dict() == {
        "allocations": {"memory,node": 1},
        "errors": {},
        "assignments": {"memory,node_exclusive": 1},
    }


def test_release_returns_memory_node_by_node_and_resets_groups_r6_1() -> None:
    policy = two_nodes()
    state = policy.new_state()
    wide, other = ctr("w", 40 * GiB), ctr("o", 5 * GiB)
    policy.allocate(state, pod("p", wide), wide, hint(0, 1), counters())
    policy.allocate(state, pod("q", other), other, hint(0, 1), counters())
    policy.remove_container(state, "p", "w")
    assert [state.machine_state[n].number_of_assignments for n in (0, 1)] == [1, 1]
    assert [state.machine_state[n].cells for n in (0, 1)] == [[0, 1], [0, 1]]
    policy.remove_container(state, "q", "o")
    assert state == policy.new_state()
    policy.remove_container(state, "q", "o")  # idempotent
    assert state == policy.new_state()


def test_a_failed_allocation_changes_nothing() -> None:
    policy = two_nodes()
    state = policy.new_state()
    a = ctr("a", 5 * GiB)
    policy.allocate(state, pod("p1", a), a, hint(0), counters())
    before = state.to_dict()
    b = ctr("b", 5 * GiB)
    with pytest.raises(AdmissionRejected):
        policy.allocate(state, pod("p2", b), b, hint(0, 1), counters())
    assert state.to_dict() == before


def test_a_hint_naming_unknown_numa_nodes_is_refused() -> None:
    policy = two_nodes()
    state = policy.new_state()
    a = ctr("a", GiB)
    with pytest.raises(UnexpectedAdmissionError, match="names NUMA nodes this machine does not have"):
        policy.allocate(state, pod("p", a), a, TopologyHint(0b100, True), counters())


def test_containers_are_bound_to_the_numa_nodes_of_their_blocks_r1_4() -> None:
    policy = static_policy(uniform_machine(2, 16 * GiB, hugepages_1g=4 * GiB))
    state = policy.new_state()
    wide = ctr("w", 20 * GiB, hugepages={HP1G: GiB})
    policy.allocate(state, pod("p", wide), wide, hint(0, 1), counters())
    assert policy.memory_numa_nodes(state, "p", "w") == (0, 1)  # memory and hugepages blocks, no duplicates
    assert policy.memory_numa_nodes(state, "p", "unknown") is None
    tables = policy.numa_memory(state)
    assert tables[1]["memory"].free == 3 * GiB + GiB // 2  # 12Gi allocatable minus the 8.5Gi spill-over
    tables[1]["memory"].free = 0  # a copy: reporting cannot change the accounting
    assert state.machine_state[1].memory_map["memory"].free == 3 * GiB + GiB // 2
