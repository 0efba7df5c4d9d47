"""Static policy rules of cpu-manager.md, one behaviour per test; the rule number leads each docstring or id."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from enforcer.counters import AllocationCounters
from enforcer.cpumanager.options import StaticPolicyOptions
from enforcer.cpumanager.policy_static import RESERVATION_REQUIRED, StaticPolicy
from enforcer.cpumanager.state import CPUState
from enforcer.errors import ConfigError, SMTAlignmentError, UnexpectedAdmissionError
from enforcer.features import FeatureGates
from enforcer.topology.hints import TopologyHint
from enforcer.topology.machine import CPUTopology
from shared.cpuset import CPUSet
from shared.resources import ContainerResources, PodResources

from .cpu_policy_builders import (
    PLR_GATES,
    container,
    dual_socket_ht_32,
    guaranteed,
    hint,
    hints_as_data,
    kubelet_topology,
    pod,
    seed_policy,
    synthetic_topology,
)


def cs(text: str) -> CPUSet:
    return CPUSet.parse(text)


def policy_on(
    topology: CPUTopology,
    reserved: int | str = 0,
    *,
    options: dict[str, str] | None = None,
    gates: FeatureGates | None = None,
) -> StaticPolicy:
    """The kubelet's NewStaticPolicy layer: a reserved count, or an explicit set when ``reserved`` is text."""
    if isinstance(reserved, str):
        return StaticPolicy.with_reservation(
            topology, num_reserved_cpus=len(cs(reserved)), reserved_cpus=cs(reserved), options=options, gates=gates
        )
    return StaticPolicy.with_reservation(topology, num_reserved_cpus=reserved, options=options, gates=gates)


def allocate(
    policy: StaticPolicy,
    state: CPUState,
    the_pod: PodResources,
    the_container: ContainerResources,
    affinity: TopologyHint | None = None,
    counters: AllocationCounters | None = None,
) -> CPUSet | None:
    policy.allocate(state, the_pod, the_container, affinity, counters or AllocationCounters())
    return state.container_cpus(the_pod.uid, the_container.name)


def single(name: str, cpus: str, uid: str = "pod") -> tuple[PodResources, ContainerResources]:
    c = guaranteed(name, cpus)
    return pod(uid, c), c


# -- §1 sets and eligibility ---------------------------------------------------------------
def test_r1_1_state_of_another_policy_fails_validation() -> None:
    policy = seed_policy()
    with pytest.raises(ConfigError) as err:
        policy.validate_state(CPUState(policy_name="none", default=dual_socket_ht_32().all_cpus))
    assert err.value.message == 'configured policy "static" differs from state checkpoint policy "none"'


def test_r1_2_a_zero_cpu_reservation_fails_startup() -> None:
    with pytest.raises(ConfigError) as err:
        StaticPolicy(dual_socket_ht_32(), reserved_system_cpus=None, reserved_cpu_millis=0)
    assert err.value.message == RESERVATION_REQUIRED
    assert RESERVATION_REQUIRED == (
        "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero"
    )


def test_r1_2_fractional_reservations_round_up() -> None:
    policy = StaticPolicy(dual_socket_ht_32(), reserved_system_cpus=None, reserved_cpu_millis=1500)
    assert len(policy.reserved_cpus) == 2


def test_r1_3_automatic_reservation_takes_the_lowest_whole_cores() -> None:
    """R1.3 example: 8 CPUs with HT pairs (0,4),(1,5)..., reserve 2 -> {0,4}."""
    policy = StaticPolicy(kubelet_topology("topoSingleSocketHT"), reserved_system_cpus=None, reserved_cpu_millis=2000)
    assert policy.reserved_cpus == cs("0,4")


def test_r1_3_reserved_system_cpus_are_used_exactly_and_override_the_millicores() -> None:
    """The kubelet rewrites systemReserved.cpu to |reservedSystemCPUs| (the seeds set cpu "1" with "0,16")."""
    assert seed_policy().reserved_cpus == cs("0,16")


def test_r1_3_reserved_cpus_missing_from_the_machine_fail_startup_naming_them() -> None:
    with pytest.raises(ConfigError) as err:
        StaticPolicy(dual_socket_ht_32(), reserved_system_cpus=cs("0,40-41"), reserved_cpu_millis=1000)
    assert err.value.message.startswith(
        "[cpumanager] unable to build the reserved physical CPUs from the reserved set: unknown CPU ID: 40"
    )
    assert "40-41" in err.value.message


def test_r1_4_reserved_physical_cpus_close_over_siblings() -> None:
    policy = policy_on(kubelet_topology("topoDualSocketHT"), "1")
    assert policy.reserved_physical_cpus == cs("1,7")


def test_r1_5_the_default_set_starts_as_the_whole_machine() -> None:
    assert seed_policy().new_state().default == dual_socket_ht_32().all_cpus


def test_r1_5_strict_reservation_keeps_reserved_cpus_out_of_the_default_set() -> None:
    policy = policy_on(dual_socket_ht_32(), "0,16", options={"strict-cpu-reservation": "true"})
    assert policy.new_state().default == cs("1-15,17-31")


def test_r1_6_exclusive_cpus_never_come_from_the_reserved_set() -> None:
    policy = seed_policy()
    state = policy.new_state()
    the_pod, c = single("big", "30")
    assert allocate(policy, state, the_pod, c) == cs("1-15,17-31")
    assert policy.available_cpus(state) == CPUSet()
    assert state.default == cs("0,16")


@dataclass(frozen=True)
class EligibilityCase:
    description: str
    pod: PodResources
    gates: FeatureGates
    expected: int


ELIGIBILITY = [
    EligibilityCase("R1.7 integer cpu in a Guaranteed pod", pod("p", guaranteed("c", "2")), FeatureGates(), 2),
    EligibilityCase("R1.7(b) 2000m counts as the integer 2", pod("p", guaranteed("c", "2000m")), FeatureGates(), 2),
    EligibilityCase("R1.7(b) 1500m is not an integer", pod("p", guaranteed("c", "1500m")), FeatureGates(), 0),
    EligibilityCase(
        "R1.7(a) a Burstable pod gets nothing",
        pod("p", container("c", cpu="2", memory="1Gi", cpu_limit="4")),
        FeatureGates(),
        0,
    ),
    EligibilityCase("R1.7(a) a BestEffort pod gets nothing", pod("p", container("c")), FeatureGates(), 0),
    EligibilityCase(
        "R1.7(d) PLR + gate: a container without its own limits is not eligible",
        pod("p", container("c", cpu="2"), cpu="4", memory="4Gi"),
        PLR_GATES,
        0,
    ),
    EligibilityCase(
        "R1.7(d) PLR + gate: a Guaranteed-equivalent container is eligible",
        pod("p", guaranteed("c", "2"), cpu="4", memory="4Gi"),
        PLR_GATES,
        2,
    ),
]


@pytest.mark.parametrize("case", ELIGIBILITY, ids=lambda c: c.description)
def test_r1_7_exclusive_eligibility(case: EligibilityCase) -> None:
    policy = policy_on(dual_socket_ht_32(), gates=case.gates)
    assert policy.guaranteed_cpus(case.pod, case.pod.containers[0]) == case.expected


@pytest.mark.parametrize(
    "gates",
    [
        FeatureGates(pod_level_resource_managers=False),
        FeatureGates(pod_level_resources=False, pod_level_resource_managers=True),
    ],
    ids=["PodLevelResourceManagers-off", "PodLevelResources-off"],
)
def test_r1_8_plr_pods_are_skipped_entirely_while_a_gate_is_off(gates: FeatureGates) -> None:
    """R1.8 / PLR R1.5: no hints, no pinning, and nothing is rejected."""
    policy = policy_on(dual_socket_ht_32(), "0,16", gates=gates)
    state = policy.new_state()
    c = guaranteed("c", "2")
    the_pod = pod("p", c, cpu="4", memory="4Gi")
    assert policy.get_topology_hints(state, the_pod, c) is None
    assert policy.get_pod_topology_hints(state, the_pod) is None
    counters = AllocationCounters()
    assert allocate(policy, state, the_pod, c, counters=counters) is None
    assert state == policy.new_state()
    assert counters.to_dict() == AllocationCounters().to_dict()


# -- §2 Allocate ---------------------------------------------------------------------------------
def test_r2_1_shared_containers_change_nothing() -> None:
    policy = seed_policy()
    state = policy.new_state()
    counters = AllocationCounters()
    c = container("web", cpu="500m", memory="1Gi")
    assert allocate(policy, state, pod("p", c), c, counters=counters) is None
    assert state == policy.new_state()
    assert counters.to_dict() == AllocationCounters().to_dict()


def test_r2_2_full_pcpus_only_is_checked_before_the_existing_entry() -> None:
    """The kubelet runs the SMT check first, so even a restored odd-sized entry is refused."""
    policy = policy_on(dual_socket_ht_32(), "0,16", options={"full-pcpus-only": "true"})
    state = policy.new_state()
    the_pod, c = single("c", "3")
    state.set_container_cpus("pod", "c", cs("1-2,17"))
    state.default = state.default - cs("1-2,17")
    counters = AllocationCounters()
    with pytest.raises(SMTAlignmentError) as err:
        policy.allocate(state, the_pod, c, None, counters)
    assert err.value.reason == "SMTAlignmentError"
    assert err.value.message == "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"
    assert counters.to_dict()["errors"] == {"cpu,node": 1}


def test_r2_3_allocate_is_idempotent() -> None:
    policy = seed_policy()
    state = policy.new_state()
    the_pod, c = single("c", "3")
    counters = AllocationCounters()
    first = allocate(policy, state, the_pod, c, hint([1]), counters)
    snapshot = state.copy()
    second = allocate(policy, state, the_pod, c, hint([0]), counters)
    assert first == second == cs("8-9,24")
    assert state == snapshot
    assert counters.to_dict()["allocations"] == {"cpu,node": 1}


def test_r2_5_a_numa_hint_confines_the_cpus() -> None:
    policy = seed_policy()
    the_pod, c = single("c", "4")
    assert allocate(policy, policy.new_state(), the_pod, c, hint([1])) == cs("8-9,24-25")


def test_r2_6_a_best_effort_hint_spills_outside_the_mask() -> None:
    policy = seed_policy()
    state = policy.new_state()
    state.set_container_cpus("other", "c", cs("1-6,17-22"))  # NUMA 0 keeps 7 and 23 free
    state.default = state.default - cs("1-6,17-22")
    the_pod, c = single("c", "4")
    assert allocate(policy, state, the_pod, c, hint([0], preferred=False)) == cs("7-8,23-24")


def test_r2_7_the_result_leaves_the_default_set_and_is_recorded_as_the_original() -> None:
    policy = seed_policy()
    state = policy.new_state()
    the_pod, c = single("c", "2")
    cpus = allocate(policy, state, the_pod, c, hint([0]))
    assert cpus == cs("1,17")
    assert not state.default & cpus
    assert state.original_cpus("pod", "c") == cpus


def test_r2_8_selection_failures_become_unexpected_admission_errors() -> None:
    """R2.8, and PLR M4: allocation_errors_total{cpu,node} +1."""
    policy = seed_policy()
    state = policy.new_state()
    the_pod, c = single("c", "31")
    counters = AllocationCounters()
    with pytest.raises(UnexpectedAdmissionError) as err:
        policy.allocate(state, the_pod, c, None, counters)
    assert err.value.reason == "UnexpectedAdmissionError"
    assert err.value.message == (
        "Allocate failed due to not enough cpus available to satisfy request: requested=31, available=30, "
        "which is unexpected"
    )
    assert counters.to_dict()["errors"] == {"cpu,node": 1}
    assert state.container_cpus("pod", "c") is None


# -- §3 takeByTopology dispatch ---------------------------------------------------------------------
def test_3_4_example_1_packed_takes_whole_cores_of_the_fuller_socket() -> None:
    topology = synthetic_topology(numa_nodes=2, cores_per_numa=6, threads=2)  # socket 0 = 0-5 + 12-17
    policy = policy_on(topology, "0,12")
    the_pod, c = single("c", "4")
    assert allocate(policy, policy.new_state(), the_pod, c) == cs("1-2,13-14")


def test_r3_1_distribute_cpus_across_numa_balances_nodes() -> None:
    """§3.4 Example 2: 4 NUMA x 8 free CPUs, N=10 -> 5 on node 0 and 5 on node 1 (packed: 8 + 2)."""
    topology = synthetic_topology(numa_nodes=4, cores_per_numa=8)
    the_pod, c = single("c", "10")
    distributed = policy_on(topology, options={"distribute-cpus-across-numa": "true"})
    packed = policy_on(topology)
    assert allocate(distributed, distributed.new_state(), the_pod, c) == cs("0-4,8-12")
    assert allocate(packed, packed.new_state(), the_pod, c) == cs("0-9")


def test_4_2_distribution_only_matters_when_one_numa_node_is_not_enough() -> None:
    topology = synthetic_topology(numa_nodes=4, cores_per_numa=8)
    the_pod, c = single("c", "6")
    distributed = policy_on(topology, options={"distribute-cpus-across-numa": "true"})
    assert allocate(distributed, distributed.new_state(), the_pod, c) == cs("0-5")


def test_r3_1_full_pcpus_only_distributes_whole_cores() -> None:
    """Group size = CPUs per core: 4 NUMA x 4 cores x 2 threads, N=8 -> two whole cores on each of 2 nodes."""
    topology = synthetic_topology(numa_nodes=4, cores_per_numa=4, threads=2)
    policy = policy_on(topology, options={"distribute-cpus-across-numa": "true", "full-pcpus-only": "true"})
    the_pod, c = single("c", "12")
    cpus = allocate(policy, policy.new_state(), the_pod, c)
    assert cpus is not None and topology.sibling_cpus(cpus) == cpus
    assert [len(cpus & topology.cpus_in_numa_nodes([n])) for n in topology.numa_ids] == [6, 6, 0, 0]


def test_4_4_distribute_cpus_across_cores_takes_one_thread_per_core_first() -> None:
    """§4.4 / R3.2: the Spread sort strategy replaces the whole-core step."""
    topology = kubelet_topology("topoSingleSocketHT")  # siblings (0,4) (1,5) (2,6) (3,7)
    spread = policy_on(
        topology,
        options={"distribute-cpus-across-cores": "true"},
        gates=FeatureGates(cpu_manager_policy_alpha_options=True),
    )
    packed = policy_on(topology)
    the_pod, c = single("c", "2")
    assert allocate(spread, spread.new_state(), the_pod, c) == cs("0-1")
    assert allocate(packed, packed.new_state(), the_pod, c) == cs("0,4")


def test_4_4_spreading_is_a_preference_never_an_error() -> None:
    topology = kubelet_topology("topoSingleSocketHT")
    spread = policy_on(
        topology,
        options={"distribute-cpus-across-cores": "true"},
        gates=FeatureGates(cpu_manager_policy_alpha_options=True),
    )
    the_pod, c = single("c", "6")
    assert allocate(spread, spread.new_state(), the_pod, c) == cs("0-5")


def uncore_machine() -> CPUTopology:
    """16 CPUs, no SMT, one NUMA node, four uncore caches of 4 CPUs."""
    from enforcer.topology.machine import CPUInfo, NUMANode

    return CPUTopology([CPUInfo(i, i, 0, 0, i // 4) for i in range(16)], [NUMANode(0)])


def test_4_6_uncore_alignment_prefers_a_free_cache() -> None:
    """§4.6 / R3.2: packed selection with uncore alignment on."""
    topology = uncore_machine()
    aligned = policy_on(topology, "0", options={"prefer-align-cpus-by-uncorecache": "true"})
    packed = policy_on(topology, "0")
    the_pod, c = single("c", "4")
    assert allocate(aligned, aligned.new_state(), the_pod, c) == cs("4-7")
    assert allocate(packed, packed.new_state(), the_pod, c) == cs("1-4")


def test_4_6_uncore_alignment_is_best_effort() -> None:
    topology = uncore_machine()
    aligned = policy_on(topology, "0,4,8,12", options={"prefer-align-cpus-by-uncorecache": "true"})
    the_pod, c = single("c", "5")
    cpus = allocate(aligned, aligned.new_state(), the_pod, c)
    assert cpus is not None and len(cpus) == 5


def test_4_5_strict_reservation_never_returns_reserved_cpus_to_the_default_set() -> None:
    policy = policy_on(dual_socket_ht_32(), "0,16", options={"strict-cpu-reservation": "true"})
    state = policy.new_state()
    the_pod, c = single("c", "2")
    allocate(policy, state, the_pod, c)
    policy.remove_container(state, "pod", "c")
    assert state.default == cs("1-15,17-31")
    assert state.check(dual_socket_ht_32(), reserved=policy.reserved_cpus, strict_reservation=True) == []


def test_4_1_full_pcpus_only_counts_reserved_siblings_as_unavailable() -> None:
    """Reserving one thread of a core removes the whole core from what full-pcpus-only may use."""
    policy = policy_on(kubelet_topology("topoDualSocketHT"), "1", options={"full-pcpus-only": "true"})
    state = policy.new_state()
    the_pod, c = single("c", "12")
    with pytest.raises(SMTAlignmentError) as err:
        policy.allocate(state, the_pod, c, None, AllocationCounters())
    assert err.value.available_physical_cpus == 10
    assert err.value.message == (
        "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 10, requested CPUs = 12, "
        "CPUs per core = 2"
    )


# -- §5 init-container reuse --------------------------------------------------------------------------
def example_3_policy() -> StaticPolicy:
    topology = synthetic_topology(numa_nodes=1, cores_per_numa=8)
    return policy_on(topology, "0-1")


def test_5_example_3_app_containers_reuse_the_init_container_cpus() -> None:
    policy = example_3_policy()
    state = policy.new_state()
    init = guaranteed("init", "4", kind="init")
    a, b = guaranteed("a", "2"), guaranteed("b", "2")
    the_pod = pod("p", init, a, b)
    assert allocate(policy, state, the_pod, init) == cs("2-5")
    assert state.reusable == {"p": cs("2-5")}  # R5.2
    assert allocate(policy, state, the_pod, a) == cs("2-3")
    assert state.reusable == {"p": cs("4-5")}  # R5.4
    assert allocate(policy, state, the_pod, b) == cs("4-5")
    assert state.container_cpus("p", "init") == cs("2-5")  # overlapping entries within one pod
    assert state.default == cs("0-1,6-7")
    assert state.check(policy.topology, reserved=policy.reserved_cpus) == []


def test_r5_3_sidecar_cpus_are_never_reused() -> None:
    policy = example_3_policy()
    state = policy.new_state()
    sidecar = guaranteed("sidecar", "2", kind="sidecar")
    app = guaranteed("app", "2")
    the_pod = pod("p", sidecar, app)
    assert allocate(policy, state, the_pod, sidecar) == cs("2-3")
    assert state.reusable == {"p": CPUSet()}
    assert allocate(policy, state, the_pod, app) == cs("4-5")


def test_r5_1_reuse_is_kept_for_the_pod_being_allocated_only() -> None:
    policy = example_3_policy()
    state = policy.new_state()
    init = guaranteed("init", "2", kind="init")
    first = pod("first", init, guaranteed("app", "1"))
    allocate(policy, state, first, init)
    assert "first" in state.reusable
    second_pod, c = single("c", "1", uid="second")
    allocate(policy, state, second_pod, c)
    assert set(state.reusable) == {"second"}


def test_r5_2_a_restored_init_container_still_feeds_the_reuse_set() -> None:
    """R5.2, and R2.4: allocatable = available CPUs plus the pod's reusable ones."""
    policy = example_3_policy()
    state = policy.new_state()
    init = guaranteed("init", "2", kind="init")
    the_pod = pod("p", init, guaranteed("app", "2"))
    state.set_container_cpus("p", "init", cs("6-7"))
    state.set_container_cpus("other", "c", cs("2-5"))
    state.default = cs("0-1")  # only the init container's CPUs can serve the app
    assert allocate(policy, state, the_pod, init) == cs("6-7")
    assert state.reusable == {"p": cs("6-7")}
    assert allocate(policy, state, the_pod, the_pod.container("app")) == cs("6-7")


@pytest.mark.parametrize(
    ("containers", "expected"),
    [
        ((guaranteed("init", "4", kind="init"), guaranteed("sc", "2", kind="sidecar"), guaranteed("app", "3")), 5),
        ((guaranteed("sc", "2", kind="sidecar"), guaranteed("init", "4", kind="init"), guaranteed("app", "3")), 6),
        ((guaranteed("init", "4", kind="init"), guaranteed("app", "3"), guaranteed("shared", "1500m")), 4),
    ],
    ids=["sidecar-plus-apps-beat-init", "init-runs-beside-earlier-sidecars", "only-eligible-counts-are-summed"],
)
def test_r5_5_pod_hints_use_the_sidecar_aware_aggregate(
    containers: tuple[ContainerResources, ...], expected: int
) -> None:
    """max(initMax incl. the sidecars started before each init, sum(app) + sum(sidecars))."""
    assert seed_policy().pod_guaranteed_cpus(pod("p", *containers)) == expected


# -- §6 hints -----------------------------------------------------------------------------------------
def two_numa_eight() -> StaticPolicy:
    """Example 4's machine: 2 NUMA x 8 CPUs, no SMT."""
    return policy_on(synthetic_topology(numa_nodes=2, cores_per_numa=8))


def test_r6_1_shared_containers_have_no_preference() -> None:
    policy = seed_policy()
    c = container("web", cpu="1", memory="1Gi", cpu_limit="2")
    assert policy.get_topology_hints(policy.new_state(), pod("p", c), c) is None


def test_6_example_4_a_too_full_node_is_not_offered() -> None:
    policy = two_numa_eight()
    state = policy.new_state()
    state.set_container_cpus("other", "c", cs("0-5"))
    state.default = state.default - cs("0-5")
    the_pod, c = single("c", "4")
    result = policy.get_topology_hints(state, the_pod, c)
    assert result is not None and result["cpu"] is not None
    assert hints_as_data(result["cpu"]) == [{"mask": [1], "preferred": True}, {"mask": [0, 1], "preferred": False}]
    big_pod, big = single("c", "10")
    result = policy.get_topology_hints(state, big_pod, big)
    assert result is not None and result["cpu"] is not None
    assert hints_as_data(result["cpu"]) == [{"mask": [0, 1], "preferred": True}]


def test_r6_4_when_no_single_node_fits_now_every_hint_is_not_preferred() -> None:
    policy = two_numa_eight()
    state = policy.new_state()
    state.set_container_cpus("other", "c", cs("0-5,8-13"))
    state.default = state.default - cs("0-5,8-13")
    the_pod, c = single("c", "3")
    result = policy.get_topology_hints(state, the_pod, c)
    assert result is not None and result["cpu"] is not None
    assert hints_as_data(result["cpu"]) == [{"mask": [0, 1], "preferred": False}]


def test_r6_2_restored_containers_regenerate_hints_from_their_cpus() -> None:
    policy = two_numa_eight()
    state = policy.new_state()
    the_pod, c = single("c", "2")
    state.set_container_cpus("pod", "c", cs("9-10"))
    state.default = state.default - cs("9-10")
    result = policy.get_topology_hints(state, the_pod, c)
    assert result is not None and result["cpu"] is not None
    assert hints_as_data(result["cpu"]) == [{"mask": [1], "preferred": True}, {"mask": [0, 1], "preferred": False}]


def test_r6_2_a_size_change_cannot_be_honoured() -> None:
    policy = two_numa_eight()
    state = policy.new_state()
    the_pod, c = single("c", "3")
    state.set_container_cpus("pod", "c", cs("9-10"))
    assert policy.get_topology_hints(state, the_pod, c) == {"cpu": []}


def test_r6_3_reusable_cpus_pin_the_hint_to_their_nodes() -> None:
    """A mask that leaves out a reusable CPU is skipped; reusable CPUs count towards the request."""
    policy = two_numa_eight()
    state = policy.new_state()
    state.set_container_cpus("pod", "init", cs("8-11"))
    state.default = state.default - cs("8-11")
    state.reusable["pod"] = cs("8-11")
    the_pod, c = single("app", "6")
    result = policy.get_topology_hints(state, the_pod, c)
    assert result is not None and result["cpu"] is not None
    assert hints_as_data(result["cpu"]) == [{"mask": [1], "preferred": True}, {"mask": [0, 1], "preferred": False}]


def test_r6_5_pod_hints_treat_assigned_cpus_of_the_pod_as_reusable() -> None:
    policy = two_numa_eight()
    state = policy.new_state()
    a, b = guaranteed("a", "2"), guaranteed("b", "4")
    the_pod = pod("p", a, b)
    state.set_container_cpus("p", "a", cs("8-9"))
    state.default = state.default - cs("8-9")
    result = policy.get_pod_topology_hints(state, the_pod)
    assert result is not None and result["cpu"] is not None
    assert hints_as_data(result["cpu"]) == [{"mask": [1], "preferred": True}, {"mask": [0, 1], "preferred": False}]


# -- §8 CFS quota ---------------------------------------------------------------------------------
def test_r8_1_exclusive_containers_run_without_cfs_quota() -> None:
    policy = seed_policy()
    state = policy.new_state()
    the_pod, c = single("c", "2")
    allocate(policy, state, the_pod, c)
    assert policy.cfs_quota_level(state, the_pod, c) == "none"
    assert policy.pod_cfs_quota_disabled(state, the_pod)


def test_r8_1_the_escape_hatch_gate_restores_quota() -> None:
    policy = policy_on(dual_socket_ht_32(), "0,16", gates=FeatureGates(disable_cpu_quota_with_exclusive_cpus=False))
    state = policy.new_state()
    the_pod, c = single("c", "2")
    allocate(policy, state, the_pod, c)
    assert policy.cfs_quota_level(state, the_pod, c) == "container"
    assert not policy.pod_cfs_quota_disabled(state, the_pod)


def test_r8_2_shared_containers_keep_their_quota() -> None:
    """R8.2 (R8.3: pod shared pool containers are in test_policy_static_pod_level.py, R9.2)."""
    policy = seed_policy()
    state = policy.new_state()
    limited = container("limited", cpu="500m", memory="1Gi", cpu_limit="1")
    unlimited = container("unlimited")
    the_pod = pod("p", limited, unlimited)
    assert policy.cfs_quota_level(state, the_pod, limited) == "container"
    assert policy.cfs_quota_level(state, the_pod, unlimited) == "none"
    assert not policy.pod_cfs_quota_disabled(state, the_pod)


def test_options_given_as_a_parsed_value_are_still_checked_for_conflicts() -> None:
    with pytest.raises(ConfigError):
        StaticPolicy.with_reservation(
            dual_socket_ht_32(),
            num_reserved_cpus=0,
            options=StaticPolicyOptions(full_pcpus_only=True, distribute_cpus_across_cores=True),
        )


def test_policies_on_one_machine_object_share_a_hint_family_only_for_equal_inputs() -> None:
    # the extender's replicas of one machine kind share one topology object, so their policies share
    # families; a family built for one free set never answers another
    topology = synthetic_topology(numa_nodes=2, cores_per_numa=8)
    first, twin = policy_on(topology), policy_on(topology)
    state, other = first.new_state(), twin.new_state()
    the_pod = pod("p", guaranteed("a", "6"))
    shared, again = first.get_pod_topology_hints(state, the_pod), twin.get_pod_topology_hints(other, the_pod)
    assert shared is not None and again is not None and shared["cpu"] is again["cpu"]
    other.default = other.default - cs("8-11")  # four CPUs of NUMA node 1 taken on the twin
    narrower = twin.get_pod_topology_hints(other, the_pod)
    assert narrower is not None and narrower["cpu"] is not shared["cpu"]
    assert hints_as_data(narrower["cpu"]) == [{"mask": [0], "preferred": True}, {"mask": [0, 1], "preferred": False}]
    assert hints_as_data(shared["cpu"]) == hints_as_data(first._compute_hints(first.available_cpus(state), CPUSet(), 6))
