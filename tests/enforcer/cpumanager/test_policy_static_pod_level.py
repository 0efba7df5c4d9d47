"""KEP-5526 pod-level resource managers, CPU side (pod-level-resource-managers.md; "PLR" rule numbers)."""

from __future__ import annotations

import pytest

from enforcer.counters import AllocationCounters
from enforcer.cpumanager.policy_static import StaticPolicy
from enforcer.cpumanager.state import CPUState
from enforcer.errors import EmptyPodSharedPoolError, SMTAlignmentError, UnexpectedAdmissionError
from enforcer.features import FeatureGates
from enforcer.topology.hints import TopologyHint
from shared.cpuset import CPUSet
from shared.resources import ContainerResources, PodResources

from .cpu_policy_builders import (
    PLR_GATES,
    container,
    dual_socket_ht_32,
    guaranteed,
    hint,
    hints_as_data,
    pod,
    seed_policy,
    synthetic_topology,
)


def cs(text: str) -> CPUSet:
    return CPUSet.parse(text)


def small_machine(cores: int = 10) -> StaticPolicy:
    """One NUMA node, no SMT, CPU 0 reserved: bubbles start at CPU 1 (the spec's worked examples)."""
    return StaticPolicy.with_reservation(
        synthetic_topology(numa_nodes=1, cores_per_numa=cores),
        num_reserved_cpus=1,
        reserved_cpus=cs("0"),
        gates=PLR_GATES,
    )


def entries_of(state: CPUState, uid: str) -> dict[str, str]:
    return {name: str(cpus) for name, cpus in sorted(state.entries.get(uid, {}).items())}


def seed_1_pod() -> PodResources:
    return pod(
        "db",
        container("metrics-exporter", "sidecar"),
        container("backup-agent", "sidecar"),
        guaranteed("database", "6", memory="12Gi"),
        cpu="8",
        memory="16Gi",
    )


def seed_2_pod() -> PodResources:
    return pod(
        "ml",
        container("service-mesh-sidecar", "sidecar"),
        guaranteed("ml-training", "3", memory="6Gi"),
        cpu="4",
        memory="8Gi",
    )


# -- worked examples ----------------------------------------------------------------------------
def test_example_a_seed_1_pod_scope_bubble_is_partitioned_on_numa_0() -> None:
    policy = seed_policy()
    state = policy.new_state()
    the_pod = seed_1_pod()
    hints = policy.get_pod_topology_hints(state, the_pod)
    assert hints is not None and hints["cpu"] is not None
    assert {"mask": [0], "preferred": True} in hints_as_data(hints["cpu"])
    counters = AllocationCounters()
    policy.allocate_pod(state, the_pod, hint([0]), counters)
    assert state.pod_cpus("db") == cs("1-4,17-20")
    assert entries_of(state, "db") == {"backup-agent": "4,20", "database": "1-3,17-19", "metrics-exporter": "4,20"}
    assert state.default == cs("0,5-16,21-31")
    assert counters.to_dict() == {
        "allocations": {"cpu,pod": 3},
        "errors": {},
        "assignments": {"cpu,pod_exclusive": 1, "cpu,pod_shared": 2},
    }
    levels = {
        c.name: (policy.isolation_level(state, the_pod, c), policy.cfs_quota_level(state, the_pod, c))
        for c in the_pod.containers
    }
    assert levels == {
        "database": ("container", "none"),
        "metrics-exporter": ("pod", "pod"),
        "backup-agent": ("pod", "pod"),
    }
    assert state.check(dual_socket_ht_32(), reserved=policy.reserved_cpus) == []


def test_example_b_seed_2_container_scope_pins_only_the_eligible_container_from_the_node() -> None:
    policy = seed_policy(topology_manager_policy="single-numa-node")
    state = policy.new_state()
    the_pod = seed_2_pod()
    counters = AllocationCounters()
    sidecar, training = the_pod.containers
    assert policy.get_topology_hints(state, the_pod, sidecar) is None
    training_hints = policy.get_topology_hints(state, the_pod, training)
    assert training_hints is not None and training_hints["cpu"] is not None
    assert {"mask": [0], "preferred": True} in hints_as_data(training_hints["cpu"])
    policy.allocate(state, the_pod, sidecar, None, counters)
    policy.allocate(state, the_pod, training, hint([0]), counters)
    assert entries_of(state, "ml") == {"ml-training": "1-2,17"}
    assert state.pod_cpus("ml") is None  # the budget is not reserved anywhere (PLR R6.3)
    assert counters.to_dict() == {
        "allocations": {"cpu,node": 1},
        "errors": {},
        "assignments": {"cpu,node_exclusive": 1},
    }
    assert policy.isolation_level(state, the_pod, training) == "container"
    assert policy.isolation_level(state, the_pod, sidecar) == "host"


def test_example_c_one_exclusive_slice_and_a_shared_pool() -> None:
    policy = small_machine()
    state = policy.new_state()
    the_pod = pod("c", guaranteed("c1", "3"), container("c2"), container("c3"), cpu="5", memory="5Gi")
    policy.allocate_pod(state, the_pod, hint([0]), AllocationCounters())
    assert entries_of(state, "c") == {"c1": "1-3", "c2": "4-5", "c3": "4-5"}


def test_example_c_without_container_resources_everyone_shares_the_bubble() -> None:
    policy = small_machine()
    state = policy.new_state()
    the_pod = pod("c", container("c1"), container("c2"), container("c3"), cpu="5", memory="5Gi")
    policy.allocate_pod(state, the_pod, hint([0]), AllocationCounters())
    assert entries_of(state, "c") == {"c1": "1-5", "c2": "1-5", "c3": "1-5"}


def example_c_rejected_pod() -> PodResources:
    return pod("c", guaranteed("c1", "3"), guaranteed("c2", "2"), container("c3"), cpu="5", memory="5Gi")


def test_example_c_an_empty_pool_gives_an_unsatisfiable_pod_hint() -> None:
    """PLR R3.2: restricted and single-numa-node then reject with TopologyAffinityError at merge."""
    policy = small_machine()
    assert policy.get_pod_topology_hints(policy.new_state(), example_c_rejected_pod()) == {"cpu": []}


def test_example_c_an_empty_pool_fails_allocate_pod_under_best_effort() -> None:
    """PLR §4 step 2 and M2: reason EmptyPodSharedPoolError, allocation_errors_total{cpu,pod} +1."""
    policy = small_machine()
    state = policy.new_state()
    counters = AllocationCounters()
    with pytest.raises(EmptyPodSharedPoolError) as err:
        policy.allocate_pod(state, example_c_rejected_pod(), None, counters)
    assert err.value.reason == "EmptyPodSharedPoolError"
    assert err.value.message == (
        "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers"
    )
    assert counters.to_dict()["errors"] == {"cpu,pod": 1}
    assert state == policy.new_state()


def example_d_pod() -> PodResources:
    return pod(
        "d",
        guaranteed("S1", "2", kind="sidecar"),
        guaranteed("I1", "4", kind="init"),
        container("I2", "init"),
        container("S2", "sidecar"),
        guaranteed("A", "3"),
        container("B"),
        cpu="8",
        memory="8Gi",
    )


def test_example_d_init_and_sidecar_rules() -> None:
    policy = small_machine()
    state = policy.new_state()
    counters = AllocationCounters()
    the_pod = example_d_pod()
    assert policy.validate_pod_scope_resources(the_pod) is None
    policy.allocate_pod(state, the_pod, hint([0]), counters)
    assert entries_of(state, "d") == {
        "S1": "1-2",  # exclusive sidecar, removed from everything after it
        "I1": "3-6",  # exclusive regular init, from bubble - S1
        "I2": "3-8",  # shared regular init: bubble - sidecars so far, bursting over I1's CPUs
        "A": "3-5",  # exclusive app slice, reusing I1's CPUs
        "B": "6-8",  # the final pod shared pool, an explicit cpuset...
        "S2": "6-8",  # ...shared by the non-eligible sidecar too
    }
    assert counters.to_dict() == {
        "allocations": {"cpu,pod": 6},
        "errors": {},
        "assignments": {"cpu,pod_exclusive": 3, "cpu,pod_shared": 3},
    }


# -- §2 eligibility ------------------------------------------------------------------------------
def test_r2_1_qos_comes_from_spec_resources_alone() -> None:
    policy = small_machine()
    burstable_container = container("c", cpu="1", memory="1Gi", cpu_limit="2")
    assert policy.pod_guaranteed_cpus(pod("p", burstable_container, cpu="4", memory="4Gi")) == 4
    not_guaranteed = pod("p", guaranteed("c", "1"), cpu="2", memory="4Gi", cpu_limit="4")
    assert policy.pod_guaranteed_cpus(not_guaranteed) == 0
    state = policy.new_state()
    policy.allocate_pod(state, not_guaranteed, None, AllocationCounters())
    assert state == policy.new_state()


@pytest.mark.parametrize(
    ("the_container", "expected"),
    [
        (guaranteed("c", "2"), 2),
        (container("c", cpu="2", memory="1Gi", memory_limit="2Gi"), 0),
        (container("c", cpu="2"), 0),
        (guaranteed("c", "1500m"), 0),
    ],
    ids=["equivalent-integer", "memory-request-below-limit", "no-memory", "non-integer-cpu"],
)
def test_r2_2_exclusive_slices_need_cpu_and_memory_requests_equal_to_limits_and_an_integer(
    the_container: ContainerResources, expected: int
) -> None:
    policy = small_machine()
    the_pod = pod("p", the_container, cpu="4", memory="4Gi")
    assert policy.guaranteed_cpus(the_pod, the_pod.containers[0]) == expected


def test_r2_4_a_non_integer_pod_budget_pins_nothing() -> None:
    policy = small_machine()
    state = policy.new_state()
    the_pod = pod("p", guaranteed("c", "2"), cpu="7500m", memory="8Gi")
    assert policy.pod_guaranteed_cpus(the_pod) == 0
    assert policy.get_pod_topology_hints(state, the_pod) is None
    policy.allocate_pod(state, the_pod, hint([0]), AllocationCounters())
    assert state == policy.new_state()


def test_v1_an_exclusive_init_container_larger_than_what_sidecars_leave_is_rejected() -> None:
    """PLR §5 V1: a regular init container only gets the budget minus the sidecars started before it."""
    policy = small_machine()
    the_pod = pod(
        "v1",
        guaranteed("sc", "3", kind="sidecar"),
        guaranteed("init", "3", kind="init"),
        container("app"),
        cpu="5",
        memory="4Gi",
    )
    assert policy.validate_pod_scope_resources(the_pod) == (
        "pod rejected, largest exclusive init container requests 3 cpus, but only 2 available"
    )
    assert policy.get_pod_topology_hints(policy.new_state(), the_pod) == {"cpu": []}


def test_v6_exclusive_slices_below_the_budget_without_shared_containers_waste_the_rest() -> None:
    """PLR §5 V6: not rejected; the leftover stays reserved in the bubble and unused."""
    policy = small_machine()
    state = policy.new_state()
    the_pod = pod("v6", guaranteed("a", "2"), cpu="4", memory="4Gi")
    policy.allocate_pod(state, the_pod, hint([0]), AllocationCounters())
    assert state.pod_cpus("v6") == cs("1-4")
    assert entries_of(state, "v6") == {"a": "1-2"}
    assert state.default == cs("0,5-9")


# -- §3 hints ------------------------------------------------------------------------------------
def test_r3_1_one_pod_hint_from_the_budget() -> None:
    policy = seed_policy()
    the_pod = pod("p", container("c"), cpu="15", memory="1Gi")
    hints = policy.get_pod_topology_hints(policy.new_state(), the_pod)
    assert hints is not None and hints["cpu"] is not None
    # 15 fits one NUMA node in theory (16 CPUs) but each has only 15 assignable (0/16 reserved on NUMA 0).
    assert hints_as_data(hints["cpu"]) == [
        {"mask": [1], "preferred": True},
        {"mask": [0, 1], "preferred": False},
    ]


def test_r3_3_restart_regenerates_the_pod_hint_from_assigned_cpus() -> None:
    policy = seed_policy()
    state = policy.new_state()
    the_pod = pod("p", guaranteed("a", "2"), guaranteed("b", "2"), cpu="4", memory="4Gi")
    policy.allocate_pod(state, the_pod, hint([1]), AllocationCounters())
    hints = policy.get_pod_topology_hints(state, the_pod)
    assert hints is not None and hints["cpu"] is not None
    assert hints_as_data(hints["cpu"]) == [{"mask": [1], "preferred": True}, {"mask": [0, 1], "preferred": False}]


# -- §4 AllocatePod --------------------------------------------------------------------------------
def test_step_3_full_pcpus_only_applies_to_the_pod_total() -> None:
    gates = PLR_GATES
    policy = StaticPolicy(
        dual_socket_ht_32(),
        reserved_system_cpus=cs("0,16"),
        reserved_cpu_millis=0,
        options={"full-pcpus-only": "true"},
        gates=gates,
    )
    odd = pod("odd", guaranteed("a", "2"), container("b"), cpu="5", memory="5Gi")
    counters = AllocationCounters()
    with pytest.raises(SMTAlignmentError) as err:
        policy.allocate_pod(policy.new_state(), odd, hint([0]), counters)
    assert err.value.message == "SMT Alignment Error: requested 5 cpus not multiple cpus per core = 2"
    assert counters.to_dict()["errors"] == {"cpu,pod": 1}
    state = policy.new_state()
    even = pod("even", guaranteed("a", "1"), container("b"), cpu="4", memory="4Gi")
    policy.allocate_pod(state, even, hint([0]), AllocationCounters())
    assert state.pod_cpus("even") == cs("1-2,17-18")
    assert entries_of(state, "even") == {"a": "1", "b": "2,17-18"}


def test_step_4_the_bubble_follows_the_hint_and_leaves_the_default_set() -> None:
    policy = seed_policy()
    state = policy.new_state()
    policy.allocate_pod(state, seed_1_pod(), hint([1]), AllocationCounters())
    assert state.pod_cpus("db") == cs("8-11,24-27")
    assert not state.default & cs("8-11,24-27")


def test_step_4_without_an_affinity_the_bubble_is_packed_anywhere() -> None:
    policy = seed_policy()
    state = policy.new_state()
    policy.allocate_pod(state, seed_1_pod(), None, AllocationCounters())
    assert state.pod_cpus("db") == cs("1-4,17-20")


def test_step_4_a_bubble_that_does_not_fit_is_an_unexpected_admission_error() -> None:
    policy = seed_policy()
    state = policy.new_state()
    counters = AllocationCounters()
    the_pod = pod("huge", container("c"), cpu="31", memory="1Gi")
    with pytest.raises(UnexpectedAdmissionError) as err:
        policy.allocate_pod(state, the_pod, None, counters)
    assert err.value.message == (
        "Allocate failed due to not enough cpus available to satisfy request: requested=31, available=30, "
        "which is unexpected"
    )
    assert counters.to_dict()["errors"] == {"cpu,pod": 1}


def test_step_7_shared_containers_get_an_explicit_cpuset_not_the_default_set() -> None:
    policy = seed_policy()
    state = policy.new_state()
    the_pod = seed_1_pod()
    policy.allocate_pod(state, the_pod, hint([0]), AllocationCounters())
    assert state.cpus_or_default("db", "backup-agent") == cs("4,20")
    assert policy.container_cpus(state, "db", "backup-agent") == cs("4,20")


def test_originals_are_recorded_for_exclusive_slices_only() -> None:
    policy = small_machine()
    state = policy.new_state()
    policy.allocate_pod(state, example_d_pod(), hint([0]), AllocationCounters())
    assert {n: str(c) for n, c in state.originals["d"].items()} == {"S1": "1-2", "I1": "3-6", "A": "3-5"}


# -- §6 container scope ---------------------------------------------------------------------------
def test_r6_4_container_scope_keeps_init_container_reuse() -> None:
    policy = small_machine()
    state = policy.new_state()
    init, app = guaranteed("init", "3", kind="init"), guaranteed("app", "3")
    the_pod = pod("p", init, app, container("shared"), cpu="6", memory="6Gi")
    for c in the_pod.containers:
        policy.allocate(state, the_pod, c, None, AllocationCounters())
    assert entries_of(state, "p") == {"app": "1-3", "init": "1-3"}
    assert state.pod_cpus("p") is None


def test_m5_non_eligible_containers_in_container_scope_count_nothing() -> None:
    policy = seed_policy()
    counters = AllocationCounters()
    the_pod = seed_2_pod()
    policy.allocate(policy.new_state(), the_pod, the_pod.containers[0], None, counters)
    assert counters.to_dict() == AllocationCounters().to_dict()


# -- §7 ephemeral containers ----------------------------------------------------------------------
def test_r7_1_ephemeral_containers_use_the_node_default_set_not_the_pod_pool() -> None:
    policy = seed_policy()
    state = policy.new_state()
    policy.allocate_pod(state, seed_1_pod(), hint([0]), AllocationCounters())
    assert policy.container_cpus(state, "db", "debugger") is None
    assert state.cpus_or_default("db", "debugger") == state.default


# -- §8 removal --------------------------------------------------------------------------------------
def test_r8_1_removing_a_container_returns_nothing_while_the_pod_lives() -> None:
    policy = seed_policy()
    state = policy.new_state()
    policy.allocate_pod(state, seed_1_pod(), hint([0]), AllocationCounters())
    before = state.default
    policy.remove_container(state, "db", "database")
    assert state.default == before
    assert state.pod_cpus("db") == cs("1-4,17-20")
    assert entries_of(state, "db") == {"backup-agent": "4,20", "metrics-exporter": "4,20"}
    # the dead container's slice is not handed to the pod shared pool either
    assert state.container_cpus("db", "backup-agent") == cs("4,20")


def test_r8_2_the_last_container_returns_the_whole_bubble() -> None:
    policy = seed_policy()
    state = policy.new_state()
    counters = AllocationCounters()
    policy.allocate_pod(state, seed_1_pod(), hint([0]), counters)
    for name in ("database", "metrics-exporter", "backup-agent"):
        policy.remove_container(state, "db", name)
    assert state == policy.new_state()
    assert counters.to_dict()["allocations"] == {"cpu,pod": 3}  # M5: counters never decrease


def test_r8_3_a_restarting_container_keeps_its_reservation() -> None:
    policy = seed_policy()
    state = policy.new_state()
    the_pod = seed_1_pod()
    policy.allocate_pod(state, the_pod, hint([0]), AllocationCounters())
    snapshot = state.copy()
    policy.allocate_pod(state, the_pod, hint([1]), AllocationCounters())
    assert state == snapshot


# -- §9 isolation levels and CFS quota ---------------------------------------------------------------
def test_r9_1_isolation_levels() -> None:
    policy = small_machine()
    state = policy.new_state()
    exclusive = guaranteed("exclusive", "2")
    fractional = guaranteed("fractional", "1500m")
    bare = container("bare")
    the_pod = pod("p", exclusive, fractional, bare, cpu="6", memory="6Gi")
    policy.allocate_pod(state, the_pod, None, AllocationCounters())
    assert [policy.isolation_level(state, the_pod, c) for c in the_pod.containers] == ["container", "pod", "pod"]
    other = pod("q", container("web", cpu="1", memory="1Gi", cpu_limit="2"))
    assert policy.isolation_level(state, other, other.containers[0]) == "host"


def test_r9_1_without_the_gate_an_entry_is_always_container_level() -> None:
    policy = StaticPolicy.with_reservation(
        synthetic_topology(numa_nodes=1, cores_per_numa=4), num_reserved_cpus=1, gates=FeatureGates()
    )
    state = policy.new_state()
    c = container("bare")
    the_pod = pod("p", c, cpu="2", memory="1Gi")
    state.set_container_cpus("p", "bare", cs("1-2"))
    assert policy.isolation_level(state, the_pod, c) == "container"


def test_r9_2_only_container_level_counts_as_exclusive_for_cfs() -> None:
    policy = small_machine()
    state = policy.new_state()
    exclusive = guaranteed("exclusive", "2")
    fractional = guaranteed("fractional", "1500m")
    bare = container("bare")
    the_pod = pod("p", exclusive, fractional, bare, cpu="6", memory="6Gi")
    policy.allocate_pod(state, the_pod, None, AllocationCounters())
    assert [policy.container_has_exclusive_cpus(state, the_pod, c) for c in the_pod.containers] == [True, False, False]
    assert [policy.cfs_quota_level(state, the_pod, c) for c in the_pod.containers] == ["none", "container", "pod"]


def test_r9_3_the_pod_cgroup_follows_the_upstream_rule() -> None:
    """Open question in the spec; upstream disables the pod quota when any container is exclusive."""
    policy = seed_policy()
    state = policy.new_state()
    the_pod = seed_1_pod()
    policy.allocate_pod(state, the_pod, hint([0]), AllocationCounters())
    assert policy.pod_cfs_quota_disabled(state, the_pod)
    shared_only = pod("s", container("a"), container("b"), cpu="2", memory="1Gi")
    policy.allocate_pod(state, shared_only, hint([1]), AllocationCounters())
    assert not policy.pod_cfs_quota_disabled(state, shared_only)


def test_allocate_pod_uses_the_affinity_it_is_given() -> None:
    policy = seed_policy()
    state = policy.new_state()
    policy.allocate_pod(state, seed_1_pod(), TopologyHint(0b10, True), AllocationCounters())
    assert state.pod_cpus("db") == cs("8-11,24-27")
