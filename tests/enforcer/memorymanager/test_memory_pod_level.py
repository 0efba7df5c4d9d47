"""KEP-5526 pod-level memory (pod-level-resource-managers.md R2.3, R2.5, R3.2, R3.3, §4, §5, R8, M1, M2)."""

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
    pod,
    seed_topology,
    static_policy,
    table,
    uniform_machine,
)

from enforcer.errors import EmptyPodSharedPoolError, UnexpectedAdmissionError
from enforcer.features import FeatureGates
from enforcer.memorymanager.policy_static import GROUP_RULE_VIOLATED, StaticMemoryPolicy
from enforcer.memorymanager.state import MemoryState
from shared.resources import PodResources, Resources


def seed_policy() -> StaticMemoryPolicy:
    return static_policy(seed_topology(), {0: {"memory": 1124 * 2**20}}, PLR_GATES)


def seed_1_pod() -> PodResources:
    return pod(
        "tightly-coupled-database",
        ctr("metrics-exporter", kind="sidecar"),
        ctr("backup-agent", kind="sidecar"),
        ctr("database", 12 * GiB, cpu=6000),
        plr_memory=16 * GiB,
    )


def admit(policy: StaticMemoryPolicy, state: MemoryState, p: PodResources, numa: int = 0) -> dict[str, dict[str, int]]:
    c = counters()
    policy.allocate_pod(state, p, hint(numa), c)
    return c.to_dict()


def test_example_a_seed_1_partitions_the_pod_budget_r3_1_steps_3_to_6_m1() -> None:
    policy = seed_policy()
    state = policy.new_state()
    p = seed_1_pod()
    assert policy.get_pod_topology_hints(state, p) == {"memory": [hint(0), hint(1), hint(0, 1, preferred=False)]}
    metrics = admit(policy, state, p)
    assert policy.pod_blocks(state, p.uid) == [block([0], 16 * GiB)]
    assert policy.container_blocks(state, p.uid, "database") == [block([0], 12 * GiB)]
    for sidecar in ("metrics-exporter", "backup-agent"):
        assert policy.container_blocks(state, p.uid, sidecar) == [block([0], 4 * GiB)]
    # step 6: the machine is charged once, for the budget
    assert table(state, 0)[1] == 16 * GiB
    assert state.machine_state[0].number_of_assignments == 1
    assert metrics == {
        "allocations": {"memory,pod": 3},
        "errors": {},
        "assignments": {"memory,pod_exclusive": 1, "memory,pod_shared": 2},
    }
    assignments = [policy.memory_assignment(state, p, c) for c in p.containers]
    assert assignments == ["pod_shared", "pod_shared", "pod_exclusive"]
    assert {policy.memory_numa_nodes(state, p.uid, c.name) for c in p.containers} == {(0,)}
    assert state.check(seed_topology()) == []


def test_example_d_init_containers_and_sidecars_share_the_budget_steps_3_to_5_m1() -> None:
    policy = static_policy(uniform_machine(2, 32 * GiB), gates=PLR_GATES)
    state = policy.new_state()
    p = pod(
        "d",
        ctr("S1", 2 * GiB, kind="sidecar"),
        ctr("I1", 4 * GiB, kind="init"),
        ctr("I2", kind="init"),
        ctr("S2", kind="sidecar"),
        ctr("A", 3 * GiB),
        ctr("B"),
        plr_memory=8 * GiB,
    )
    metrics = admit(policy, state, p, numa=1)
    sizes = {c.name: [b.size // GiB for b in policy.container_blocks(state, "d", c.name)] for c in p.containers}
    # step 3: I2 runs with the budget minus S1; steps 4-5: B and S2 share 8 - 2 - 3
    assert sizes == {"S1": [2], "I1": [4], "I2": [6], "S2": [3], "A": [3], "B": [3]}
    assert metrics == {
        "allocations": {"memory,pod": 6},
        "errors": {},
        "assignments": {"memory,pod_exclusive": 3, "memory,pod_shared": 3},
    }


def test_a_non_integer_cpu_container_still_gets_exclusive_memory_r2_3() -> None:
    policy = static_policy(uniform_machine(2, 32 * GiB), gates=PLR_GATES)
    state = policy.new_state()
    p = pod("p", ctr("half", 2 * GiB, cpu=1500), ctr("rest"), plr_memory=4 * GiB, plr_cpu=4000)
    admit(policy, state, p)
    assert policy.container_blocks(state, "p", "half") == [block([0], 2 * GiB)]
    assert policy.memory_assignment(state, p, p.container("half")) == "pod_exclusive"
    assert policy.container_blocks(state, "p", "rest") == [block([0], 2 * GiB)]


def test_the_budget_includes_hugepages_of_the_pod_r2_5() -> None:
    policy = static_policy(uniform_machine(2, 32 * GiB, hugepages_1g=4 * GiB), gates=PLR_GATES)
    state = policy.new_state()
    p = pod(
        "p",
        ctr("app", 4 * GiB, hugepages={HP1G: GiB}),
        ctr("side", kind="sidecar"),
        plr_memory=8 * GiB,
        plr_hugepages={HP1G: 2 * GiB},
    )
    admit(policy, state, p)
    assert policy.pod_blocks(state, "p") == [block([0], 8 * GiB), block([0], 2 * GiB, HP1G)]
    assert policy.container_blocks(state, "p", "side") == [block([0], 4 * GiB), block([0], GiB, HP1G)]
    assert table(state, 0, HP1G) == (2 * GiB, 2 * GiB)
    assert state.machine_state[0].number_of_assignments == 2


@dataclass(frozen=True)
class PoolCase:
    description: str
    pod: PodResources
    message: str


POOL_CASES = [
    PoolCase(
        "V1 a regular init container larger than the budget left by earlier sidecars",
        pod("p", ctr("s", 4 * GiB, kind="sidecar"), ctr("i", 6 * GiB, kind="init"), ctr("a"), plr_memory=8 * GiB),
        f"pod rejected, largest exclusive init container requests {6 * GiB} of memory, but only {4 * GiB} available",
    ),
    PoolCase(
        "V2 a shared regular init container after sidecars took the whole budget",
        pod("p", ctr("s", 8 * GiB, kind="sidecar"), ctr("i", kind="init"), ctr("a", 1), plr_memory=8 * GiB),
        "pod rejected, pod has shared init containers but no memory available for them",
    ),
    PoolCase(
        "V3 V4 V5 example C: exclusive containers use the whole budget while one is shared",
        pod("p", ctr("c1", 3 * GiB), ctr("c2", 5 * GiB), ctr("c3"), plr_memory=8 * GiB),
        "pod rejected, sum of exclusive container memory requests equals pod budget, "
        "leaving no memory for shared containers",
    ),
    PoolCase(
        "V3 V5 a shared sidecar with exclusive sidecars and apps using the budget",
        pod("p", ctr("s1", 2 * GiB, kind="sidecar"), ctr("s2", kind="sidecar"), ctr("a", 6 * GiB), plr_memory=8 * GiB),
        "pod rejected, sum of exclusive container memory requests equals pod budget, "
        "leaving no memory for shared containers",
    ),
    PoolCase(
        "V7 memory alone: a fractional-CPU container is exclusive for memory only",
        pod("p", ctr("half", 8 * GiB, cpu=1500), ctr("side", kind="sidecar"), plr_memory=8 * GiB, plr_cpu=4000),
        "pod rejected, sum of exclusive container memory requests equals pod budget, "
        "leaving no memory for shared containers",
    ),
    PoolCase(
        "V7 hugepages are checked as their own pool",
        pod(
            "p",
            ctr("a", 2 * GiB, hugepages={HP1G: 2 * GiB}),
            ctr("side", kind="sidecar"),
            plr_memory=8 * GiB,
            plr_hugepages={HP1G: 2 * GiB},
        ),
        "pod rejected, sum of exclusive container hugepages-1Gi requests equals pod budget, "
        "leaving no memory for shared containers",
    ),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: c.description)
def test_an_empty_pod_shared_pool_makes_hints_unsatisfiable_r3_2(case: PoolCase) -> None:
    policy = static_policy(uniform_machine(2, 32 * GiB, hugepages_1g=4 * GiB), gates=PLR_GATES)
    hints = policy.get_pod_topology_hints(policy.new_state(), case.pod)
    assert hints is not None and set(hints) >= {"memory"}
    assert all(list(h or []) == [] for h in hints.values())


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: c.description)
def test_allocate_pod_rejects_an_empty_pod_shared_pool_with_the_kubelet_reason(case: PoolCase) -> None:
    policy = static_policy(uniform_machine(2, 32 * GiB, hugepages_1g=4 * GiB), gates=PLR_GATES)
    state = policy.new_state()
    c = counters()
    with pytest.raises(EmptyPodSharedPoolError) as raised:
        policy.allocate_pod(state, case.pod, any_numa(), c)
    assert raised.value.reason == "EmptyPodSharedPoolError"
    assert raised.value.message == case.message
    assert c.errors == {("memory", "pod"): 1}  # M2
    assert state == policy.new_state()


def test_leftover_budget_without_shared_containers_is_kept_v6() -> None:
    policy = static_policy(uniform_machine(2, 32 * GiB), gates=PLR_GATES)
    state = policy.new_state()
    p = pod("p", ctr("a", 3 * GiB), ctr("b", 2 * GiB), plr_memory=8 * GiB)
    assert policy.get_pod_topology_hints(state, p) == {"memory": [hint(0), hint(1), hint(0, 1, preferred=False)]}
    admit(policy, state, p)
    assert table(state, 0)[1] == 8 * GiB
    assert [b.size for c in p.containers for b in policy.container_blocks(state, "p", c.name)] == [3 * GiB, 2 * GiB]


def test_no_fitting_mask_is_an_empty_map_not_an_empty_list_r3_2() -> None:
    policy = static_policy(uniform_machine(2, 8 * GiB), gates=PLR_GATES)
    state = policy.new_state()
    admit(policy, state, pod("big", ctr("a"), plr_memory=4 * GiB))
    p = pod("p", ctr("a"), plr_memory=12 * GiB)  # {0,1} would join a single-NUMA node
    assert policy.get_pod_topology_hints(state, p) == {}


def test_nil_affinity_uses_the_default_hint_step_2() -> None:
    policy = static_policy(uniform_machine(2, 32 * GiB), gates=PLR_GATES)
    state = policy.new_state()
    p = pod("p", ctr("a"), plr_memory=40 * GiB)
    policy.allocate_pod(state, p, None, counters())
    assert policy.pod_blocks(state, "p") == [block([0, 1], 40 * GiB)]


def test_an_insufficient_pod_hint_is_extended_step_2() -> None:
    policy = static_policy(uniform_machine(2, 32 * GiB), gates=PLR_GATES)
    state = policy.new_state()
    p = pod("p", ctr("a"), plr_memory=40 * GiB)
    policy.allocate_pod(state, p, hint(1, preferred=False), counters())
    assert policy.pod_blocks(state, "p") == [block([0, 1], 40 * GiB)]


def test_a_pod_hint_breaking_the_group_rule_is_an_unexpected_admission_error_step_2() -> None:
    policy = static_policy(uniform_machine(2, 32 * GiB), gates=PLR_GATES)
    state = policy.new_state()
    admit(policy, state, pod("first", ctr("a"), plr_memory=4 * GiB))
    c = counters()
    with pytest.raises(UnexpectedAdmissionError) as raised:
        policy.allocate_pod(state, pod("p", ctr("a"), plr_memory=4 * GiB), hint(0, 1, preferred=False), c)
    assert raised.value.message == f"Allocate failed due to {GROUP_RULE_VIOLATED}, which is unexpected"
    assert c.errors == {("memory", "pod"): 1}


@pytest.mark.parametrize(
    "p, gates",
    [
        (pod("p", ctr("a", GiB), plr_memory=None), PLR_GATES),
        (pod("p", ctr("a", GiB), plr_memory=8 * GiB), FeatureGates()),
        (
            PodResources("p", "default", "p", (ctr("a"),), pod=Resources({"cpu": 1000, "memory": GiB}, {})),
            PLR_GATES,
        ),
    ],
    ids=["step 1 no pod-level resources", "R1.5 gate off", "step 1 R2.1 not Guaranteed by spec.resources"],
)
def test_allocate_pod_leaves_other_pods_alone(p: PodResources, gates: FeatureGates) -> None:
    policy = static_policy(uniform_machine(2, 32 * GiB), gates=gates)
    state = policy.new_state()
    c = counters()
    policy.allocate_pod(state, p, hint(0), c)
    assert state == policy.new_state()
    assert not (c.allocations or c.errors or c.assignments)


def test_allocate_pod_is_idempotent() -> None:
    policy = seed_policy()
    state = policy.new_state()
    admit(policy, state, seed_1_pod())
    before = state.to_dict()
    assert admit(policy, state, seed_1_pod()) == {"allocations": {}, "errors": {}, "assignments": {}}
    assert state.to_dict() == before


def test_container_restarts_keep_the_reservation_r8_3() -> None:
    policy = seed_policy()
    state = policy.new_state()
    p = seed_1_pod()
    admit(policy, state, p)
    before = state.to_dict()
    for c in p.containers:
        policy.allocate(state, p, c, hint(0), counters())
    assert state.to_dict() == before


def test_the_budget_returns_only_with_the_last_container_r8_1_r8_2_mm_r6_2() -> None:
    policy = seed_policy()
    state = policy.new_state()
    p = seed_1_pod()
    admit(policy, state, p)
    policy.remove_container(state, p.uid, "database")
    policy.remove_container(state, p.uid, "metrics-exporter")
    assert table(state, 0)[1] == 16 * GiB  # R8.1: nothing goes back while the pod entry exists
    assert policy.container_blocks(state, p.uid, "database") == []
    assert policy.pod_blocks(state, p.uid) == [block([0], 16 * GiB)]
    policy.remove_container(state, p.uid, "backup-agent")
    assert state == policy.new_state()  # R8.2


def test_pod_scope_restart_regenerates_the_stored_mask_when_it_matches_r3_3() -> None:
    policy = static_policy(uniform_machine(2, 32 * GiB), gates=PLR_GATES)
    state = policy.new_state()
    p = pod("p", ctr("only"), plr_memory=8 * GiB)
    admit(policy, state, p, numa=1)
    assert policy.get_pod_topology_hints(state, p) == {"memory": [hint(1)]}
