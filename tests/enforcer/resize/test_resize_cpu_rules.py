"""KEP-5554 rules for exclusive CPUs, as the extended engine answers them (reason strings are a contract)."""

from __future__ import annotations

import pytest
from resize_builders import (
    assert_consistent,
    bare,
    container,
    cpus_of,
    dual_socket_ht_32,
    engine,
    four_numa_16,
    pod,
    single,
)

from enforcer.engine import builder
from shared.cpuset import CPUSet


def admitted(node: object, *pods: object) -> None:
    for p in pods:
        decision = node.admit(p)  # type: ignore[attr-defined]
        assert decision.admitted, decision


# -- Infeasible rules ------------------------------------------------------------------------------


def test_going_below_the_original_cpus_is_prohibited() -> None:
    node = engine()
    admitted(node, single("db", "4"))
    result = node.resize(single("db", "2"))
    assert (result.status, result.reason) == ("Infeasible", "prohibitedCPUAllocationError")
    assert result.message == (
        "prohibitedCPUAllocation Error: Skip resize, Not allowed to reduce container exclusively allocated pool "
        "below promised, (requested CPUs = 2, allocated CPUs = 4, promised CPUs = 4, guaranteed CPUs = 2)"
    )
    assert cpus_of(node, "db") == CPUSet.parse("1-2,17-18")


def test_moving_an_exclusive_container_to_shared_cpus_is_inconsistent() -> None:
    node = engine()
    admitted(node, single("db", "2"))
    result = node.resize(single("db", "1500m"))
    assert (result.status, result.reason) == ("Infeasible", "inconsistentCPUAllocationError")
    assert result.message == (
        "inconsistentCPUAllocation Error: Not allowed to move a container from  exclusively allocated pool to "
        "shared pool, not allowed (requested CPUs = 1500m, allocated CPUs = 2)"
    )


def test_moving_a_shared_container_to_exclusive_cpus_is_inconsistent() -> None:
    node = engine()
    admitted(node, single("db", "1500m"))
    result = node.resize(single("db", "2"))
    assert (result.status, result.reason) == ("Infeasible", "inconsistentCPUAllocationError")
    assert result.message == (
        "inconsistentCPUAllocation Error: Not allowed to move a container from shared pool to exclusively "
        "allocated pool, (requested CPUs = 2, allocated CPUs = 1500m)"
    )


def test_an_exclusive_container_without_a_recorded_original_cannot_be_resized() -> None:
    written = engine()
    admitted(written, single("db", "2"))
    document = written.snapshot()
    del document["cpu"]["originals"]  # a state written before originals were kept
    node = builder.restore(written.topology, written.config, document)
    result = node.resize(single("db", "4"))
    assert (result.status, result.reason) == ("Infeasible", "getOriginalCPUSetError")
    assert result.message == (
        "getOriginalCPUSet Error: Skip resize, unable to get OriginalCPUSet, nothing to be done, "
        "(podUID = default/db, containerName c)"
    )


def test_full_pcpus_only_still_needs_whole_cores() -> None:
    node = engine(options={"full-pcpus-only": "true"})
    admitted(node, single("db", "2"))
    result = node.resize(single("db", "3"))
    assert (result.status, result.reason) == ("Infeasible", "SMTAlignmentError")
    assert result.message == "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"


def test_full_pcpus_only_grows_by_whole_cores() -> None:
    node = engine(options={"full-pcpus-only": "true"})
    admitted(node, single("db", "2"))
    assert node.resize(single("db", "6")).status == "Accepted"
    assert cpus_of(node, "db") == CPUSet.parse("1-3,17-19")


@pytest.mark.parametrize("size", ["15", "16"])
def test_a_single_numa_node_grow_larger_than_its_node_can_ever_hold_is_infeasible(size: str) -> None:
    node = engine(topology_policy="single-numa-node")  # NUMA 0 holds 14 assignable CPUs (0,16 reserved)
    admitted(node, single("db", "2"))
    result = node.resize(single("db", size))
    assert (result.status, result.reason) == ("Infeasible", "resizeAllocateCPUsError")
    assert result.message is not None
    assert result.message.startswith("resizeAllocateCPUs Error: Resources cannot be allocated with Topology locality")
    assert node.pending_resize("default/db") is not None  # kept as Infeasible, not retried


def test_a_restricted_grow_that_fits_the_node_only_elsewhere_is_infeasible() -> None:
    # 4 CPUs fit one NUMA node, so only single-node sets are preferred; NUMA 0 has 3 assignable CPUs and
    # a running container never moves, so the kubelet's restricted policy could never place it.
    node = engine(four_numa_16(), topology_policy="restricted", reserved="0")
    admitted(node, single("db", "2"))
    result = node.resize(single("db", "4"))
    assert (result.status, result.reason) == ("Infeasible", "resizeAllocateCPUsError")


def test_a_restricted_grow_needing_two_numa_nodes_extends_the_held_one() -> None:
    node = engine(four_numa_16(), topology_policy="restricted", reserved="0")
    admitted(node, single("db", "2"))
    assert node.resize(single("db", "5")).status == "Accepted"
    assert cpus_of(node, "db") == CPUSet.parse("1-3,4-5")
    assert_consistent(node)


def test_single_numa_node_never_extends_to_a_second_node() -> None:
    node = engine(four_numa_16(), topology_policy="single-numa-node", reserved="0")
    admitted(node, single("db", "2"))
    assert node.resize(single("db", "5")).reason == "resizeAllocateCPUsError"


# -- Deferred vs Accepted ---------------------------------------------------------------------------


def test_a_grow_that_fits_the_numa_node_but_not_now_is_deferred_then_applied() -> None:
    node = engine(topology_policy="single-numa-node")
    admitted(node, single("db", "2"), single("batch", "10"))
    assert cpus_of(node, "batch").is_subset_of(dual_socket_ht_32().cpus_in_numa_nodes([0]))
    result = node.resize(single("db", "6"))
    assert (result.status, result.reason) == ("Deferred", "Deferred")
    assert cpus_of(node, "db") == CPUSet.parse("1,17")
    removed = node.remove("default/batch")
    assert removed.resizes_applied == ("default/db",)
    assert cpus_of(node, "db") == CPUSet.parse("1-3,17-19")
    assert_consistent(node)


def test_best_effort_spills_to_the_closest_free_cpus_when_the_held_node_is_full() -> None:
    node = engine(topology_policy="best-effort")
    admitted(node, single("db", "2"), single("batch", "12"))
    assert node.resize(single("db", "6")).status == "Accepted"
    grown = cpus_of(node, "db")
    assert CPUSet.parse("1,17").is_subset_of(grown)
    assert dual_socket_ht_32().numa_nodes_of(grown) == (0, 1)
    assert_consistent(node)


def test_without_a_topology_policy_a_grow_takes_the_closest_free_cpus() -> None:
    node = engine(topology_policy="none")
    admitted(node, single("db", "2"))
    assert node.resize(single("db", "4")).status == "Accepted"
    assert cpus_of(node, "db") == CPUSet.parse("1-2,17-18")


def test_a_shrink_returns_the_released_cpus_to_the_shared_pool() -> None:
    node = engine()
    admitted(node, single("db", "2"))
    node.resize(single("db", "8"))
    assert node.resize(single("db", "2")).status == "Accepted"
    assert cpus_of(node, "db") == CPUSet.parse("1,17")
    assert node.default_cpus() == dual_socket_ht_32().all_cpus - CPUSet.parse("1,17")


def test_a_shrink_after_two_grows_keeps_the_original_and_the_closest() -> None:
    node = engine()
    admitted(node, single("db", "2"))
    node.resize(single("db", "4"))
    node.resize(single("db", "8"))
    assert node.resize(single("db", "4")).status == "Accepted"
    assert cpus_of(node, "db") == CPUSet.parse("1-2,17-18")


def test_pod_scope_grows_every_container_inside_the_pods_numa_node() -> None:
    node = engine(scope="pod")
    web = pod("web", container("app", "2"), container("proxy", "2"))
    admitted(node, web)
    grown = pod("web", container("app", "4"), container("proxy", "4"))
    assert node.resize(grown).status == "Accepted"
    app, proxy = cpus_of(node, "web", "app"), cpus_of(node, "web", "proxy")
    assert len(app) == len(proxy) == 4 and not app & proxy
    assert dual_socket_ht_32().numa_nodes_of(app | proxy) == (0,)
    assert_consistent(node)


def test_pod_scope_checks_the_whole_pods_size_against_the_numa_node() -> None:
    node = engine(scope="pod")
    admitted(node, pod("web", container("app", "2"), container("proxy", "2")))
    result = node.resize(pod("web", container("app", "8"), container("proxy", "8")))
    assert (result.status, result.reason) == ("Infeasible", "resizeAllocateCPUsError")


def test_cpus_a_finished_init_container_still_names_are_reused_first_and_not_released() -> None:
    node = engine()
    admitted(node, pod("job", container("setup", "4", kind="init"), container("c", "2")))
    assert cpus_of(node, "job", "setup") == CPUSet.parse("1-2,17-18")
    assert cpus_of(node, "job") == CPUSet.parse("1,17")
    assert node.resize(pod("job", container("setup", "4", kind="init"), container("c", "4"))).status == "Accepted"
    assert cpus_of(node, "job") == CPUSet.parse("1-2,17-18")
    assert node.resize(pod("job", container("setup", "4", kind="init"), container("c", "2"))).status == "Accepted"
    assert not CPUSet.parse("2,18") & node.default_cpus()  # still named by the init container's entry
    assert_consistent(node)


def test_containers_shrink_before_others_grow_in_one_resize() -> None:
    # NUMA 0 is full; b gives back the two CPUs a needs, in one atomic request (R4.6 order).
    node = engine()
    admitted(node, pod("duo", container("a", "2"), container("b", "2")))
    assert node.resize(pod("duo", container("a", "2"), container("b", "4"))).status == "Accepted"
    admitted(node, single("filler", "8"))
    numa0 = dual_socket_ht_32().cpus_in_numa_nodes([0])
    assert cpus_of(node, "filler").is_subset_of(numa0)
    assert not (node.default_cpus() & numa0) - CPUSet.parse("0,16")
    assert node.resize(pod("duo", container("a", "4"), container("b", "2"))).status == "Accepted"
    assert len(cpus_of(node, "duo", "a")) == 4 and cpus_of(node, "duo", "a").is_subset_of(numa0)
    assert_consistent(node)


def test_a_pod_the_policy_never_pinned_resizes_without_touching_the_cpu_state() -> None:
    # Pod-level resources with PodLevelResourceManagers off: no pinning (PLR R1.5), so nothing to resize.
    node = engine()
    plr_pod = pod("plr", container("c", "2"), pod_cpu="4", pod_memory="2Gi")
    admitted(node, plr_pod)
    before = node.state.cpu.copy()
    assert node.resize(pod("plr", container("c", "3"), pod_cpu="4", pod_memory="2Gi")).status == "Accepted"
    assert node.state.cpu == before


def test_container_scope_pod_level_pods_resize_their_node_level_slices() -> None:
    node = engine(scope="container", plr=True)
    admitted(node, pod("plr", bare("sidecar", kind="sidecar"), container("app", "4"), pod_cpu="8", pod_memory="2Gi"))
    assert cpus_of(node, "plr", "app") == CPUSet.parse("1-2,17-18")
    grown = pod("plr", bare("sidecar", kind="sidecar"), container("app", "6"), pod_cpu="8", pod_memory="2Gi")
    assert node.resize(grown).status == "Accepted"
    assert cpus_of(node, "plr", "app") == CPUSet.parse("1-3,17-19")
    assert node.state.cpu.pod_cpus("default/plr") is None
    assert_consistent(node)
