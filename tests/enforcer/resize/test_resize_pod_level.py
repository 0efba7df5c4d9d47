"""KEP-5419 budget resize of KEP-5526 pods in pod scope: the bubble and the memory pod entry."""

from __future__ import annotations

from resize_builders import GiB, assert_consistent, bare, container, cpus_of, dual_socket_ht_32, engine, pod, single

from enforcer.engine.node import NodeEngine
from shared.cpuset import CPUSet

NUMA0 = dual_socket_ht_32().cpus_in_numa_nodes([0])


def plr_node() -> NodeEngine:
    return engine(scope="pod", plr=True, memory=True)


def database(budget: str = "8", memory: str = "16Gi", db_cpu: str = "6", db_memory: str = "12Gi") -> object:
    return pod(
        "db",
        bare("exporter", kind="sidecar"),
        container("database", db_cpu, db_memory),
        pod_cpu=budget,
        pod_memory=memory,
    )


def bubble(node: NodeEngine) -> CPUSet:
    cpus = node.cpu_policy.pod_cpus(node.state.cpu, "default/db")
    assert cpus is not None
    return cpus


def memory_sizes(node: NodeEngine, container_name: str) -> dict[str, int]:
    blocks = node.memory_policy.container_blocks(node.state.memory, "default/db", container_name)
    return {b.type: b.size for b in blocks}


def pod_memory(node: NodeEngine) -> int:
    return sum(b.size for b in node.memory_policy.pod_blocks(node.state.memory, "default/db") if b.type == "memory")


def admitted_database(node: NodeEngine) -> None:
    decision = node.admit(database())  # type: ignore[arg-type]
    assert decision.admitted, decision
    assert bubble(node) == CPUSet.parse("1-4,17-20")
    assert cpus_of(node, "db", "database") == CPUSet.parse("1-3,17-19")
    assert cpus_of(node, "db", "exporter") == CPUSet.parse("4,20")


def test_a_budget_grow_widens_the_bubble_next_to_it_and_feeds_the_pod_shared_pool() -> None:
    node = plr_node()
    admitted_database(node)
    result = node.resize(database(budget="10", memory="20Gi"))  # type: ignore[arg-type]
    assert result.status == "Accepted"
    assert bubble(node) == CPUSet.parse("1-5,17-21")
    assert cpus_of(node, "db", "database") == CPUSet.parse("1-3,17-19")
    assert cpus_of(node, "db", "exporter") == CPUSet.parse("4-5,20-21")
    assert pod_memory(node) == 20 * GiB
    assert memory_sizes(node, "exporter") == {"memory": 8 * GiB}
    assert_consistent(node)


def test_a_budget_shrink_gives_back_pod_shared_cpus_and_never_an_exclusive_slice() -> None:
    node = plr_node()
    admitted_database(node)
    assert node.resize(database(budget="7")).status == "Accepted"  # type: ignore[arg-type]
    assert cpus_of(node, "db", "database") == CPUSet.parse("1-3,17-19")
    assert len(cpus_of(node, "db", "exporter")) == 1
    assert len(bubble(node)) == 7
    assert len(node.default_cpus()) == 32 - 7
    assert_consistent(node)


def test_a_budget_that_leaves_the_shared_containers_nothing_is_infeasible() -> None:
    node = plr_node()
    admitted_database(node)
    result = node.resize(database(budget="6"))  # type: ignore[arg-type]
    assert (result.status, result.reason) == ("Infeasible", "EmptyPodSharedPoolError")
    assert result.message == (
        "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers"
    )


def test_a_memory_budget_that_leaves_the_shared_containers_nothing_is_infeasible() -> None:
    node = plr_node()
    admitted_database(node)
    result = node.resize(database(memory="12Gi"))  # type: ignore[arg-type]
    assert (result.status, result.reason) == ("Infeasible", "EmptyPodSharedPoolError")
    assert result.message is not None and "leaving no memory for shared containers" in result.message


def test_a_container_resize_inside_the_bubble_repartitions_it() -> None:
    node = plr_node()
    admitted_database(node)
    assert node.resize(database(db_cpu="7", db_memory="13Gi")).status == "Accepted"  # type: ignore[arg-type]
    assert bubble(node) == CPUSet.parse("1-4,17-20")
    assert cpus_of(node, "db", "database") == CPUSet.parse("1-4,17-19")
    assert cpus_of(node, "db", "exporter") == CPUSet.parse("20")
    assert memory_sizes(node, "database") == {"memory": 13 * GiB}
    assert memory_sizes(node, "exporter") == {"memory": 3 * GiB}
    assert_consistent(node)


def test_a_slice_below_its_original_is_prohibited_inside_the_bubble_too() -> None:
    node = plr_node()
    admitted_database(node)
    result = node.resize(database(db_cpu="4"))  # type: ignore[arg-type]
    assert result.reason == "prohibitedCPUAllocationError"


def test_a_fractional_budget_would_drop_the_bubble_and_is_inconsistent() -> None:
    node = plr_node()
    admitted_database(node)
    result = node.resize(database(budget="7500m"))  # type: ignore[arg-type]
    assert result.reason == "inconsistentCPUAllocationError"
    assert result.message is not None and "(requested CPUs = 7500m, allocated CPUs = 8)" in result.message


def test_growing_and_shrinking_back_restores_the_admitted_partition() -> None:
    node = plr_node()
    admitted_database(node)
    fresh = plr_node()
    admitted_database(fresh)
    node.resize(database(budget="12", memory="24Gi", db_cpu="9", db_memory="14Gi"))  # type: ignore[arg-type]
    node.resize(database())  # type: ignore[arg-type]
    assert node.state.cpu == fresh.state.cpu
    assert node.state.memory.to_dict() == fresh.state.memory.to_dict()


def test_a_budget_grow_waits_for_room_on_the_bubbles_numa_node() -> None:
    node = plr_node()
    admitted_database(node)
    assert node.admit(single("filler", "6", "2Gi")).admitted
    assert cpus_of(node, "filler").is_subset_of(NUMA0)
    result = node.resize(database(budget="10"))  # type: ignore[arg-type]
    assert (result.status, result.reason) == ("Deferred", "Deferred")
    assert node.remove("default/filler").resizes_applied == ("default/db",)
    assert len(bubble(node)) == 10 and bubble(node).is_subset_of(NUMA0)
    assert_consistent(node)


def test_a_budget_larger_than_the_numa_node_can_ever_hold_is_infeasible() -> None:
    node = plr_node()
    admitted_database(node)
    result = node.resize(database(budget="16"))  # type: ignore[arg-type]
    assert (result.status, result.reason) == ("Infeasible", "resizeAllocateCPUsError")


def test_a_memory_budget_larger_than_the_numa_node_can_ever_hold_is_infeasible() -> None:
    node = plr_node()
    admitted_database(node)
    result = node.resize(database(memory="60Gi"))  # type: ignore[arg-type]
    assert (result.status, result.reason) == ("Infeasible", "resizeAllocateMemoryError")


def test_a_memory_budget_grow_waits_for_free_memory_on_its_numa_node() -> None:
    node = plr_node()
    admitted_database(node)
    assert node.admit(single("hog", "2", "30Gi")).admitted
    result = node.resize(database(memory="30Gi"))  # type: ignore[arg-type]
    assert (result.status, result.reason) == ("Deferred", "Deferred")
    assert pod_memory(node) == 16 * GiB
    assert node.remove("default/hog").resizes_applied == ("default/db",)
    assert pod_memory(node) == 30 * GiB
    assert_consistent(node)


def test_a_finished_init_containers_entry_is_refitted_inside_a_shrunk_bubble() -> None:
    node = plr_node()

    def job(budget: str) -> object:
        return pod(
            "job",
            container("setup", "4", "1Gi", kind="init"),
            bare("sidecar", kind="sidecar"),
            container("app", "2", "1Gi"),
            pod_cpu=budget,
            pod_memory="4Gi",
        )

    assert node.admit(job("8")).admitted  # type: ignore[arg-type]
    # Admission packs the init slice next to the app's; place it where the shrink will give CPUs back.
    node.state.cpu.entries["default/job"]["setup"] = CPUSet.parse("3-4,19-20")
    assert_consistent(node)
    assert node.resize(job("4")).status == "Accepted"  # type: ignore[arg-type]
    shrunk = node.cpu_policy.pod_cpus(node.state.cpu, "default/job")
    assert shrunk is not None and len(shrunk) == 4
    assert cpus_of(node, "job", "setup") == shrunk
    assert cpus_of(node, "job", "app").is_subset_of(shrunk)
    assert_consistent(node)


def test_a_fractional_budget_that_pinned_nothing_cannot_become_whole() -> None:
    node = plr_node()
    assert node.admit(database(budget="7500m")).admitted  # type: ignore[arg-type]
    assert node.cpu_policy.pod_cpus(node.state.cpu, "default/db") is None
    result = node.resize(database(budget="8"))  # type: ignore[arg-type]
    assert (result.status, result.reason) == ("Infeasible", "inconsistentCPUAllocationError")
    assert result.message is not None and "from shared pool to exclusively allocated pool" in result.message


def test_full_pcpus_only_needs_a_budget_of_whole_cores() -> None:
    node = engine(scope="pod", plr=True, options={"full-pcpus-only": "true"})
    assert node.admit(database()).admitted  # type: ignore[arg-type]
    result = node.resize(database(budget="9"))  # type: ignore[arg-type]
    assert (result.status, result.reason) == ("Infeasible", "SMTAlignmentError")
    assert node.resize(database(budget="10")).status == "Accepted"  # type: ignore[arg-type]
    assert len(bubble(node)) == 10


def test_exclusive_slices_larger_than_the_budget_are_infeasible() -> None:
    node = plr_node()
    two = pod("db", container("a", "3"), container("b", "2"), pod_cpu="6", pod_memory="4Gi")
    assert node.admit(two).admitted
    grown = pod("db", container("a", "3"), container("b", "4"), pod_cpu="6", pod_memory="4Gi")
    result = node.resize(grown)
    assert (result.status, result.reason) == ("Infeasible", "resizeAllocateCPUsError")


def test_memory_slices_larger_than_the_budget_are_infeasible() -> None:
    node = plr_node()
    two = pod("db", container("a", "3", "2Gi"), container("b", "2", "1Gi"), pod_cpu="6", pod_memory="4Gi")
    assert node.admit(two).admitted
    grown = pod("db", container("a", "3", "2Gi"), container("b", "2", "3Gi"), pod_cpu="6", pod_memory="4Gi")
    result = node.resize(grown)
    assert (result.status, result.reason) == ("Infeasible", "resizeAllocateMemoryError")


def test_the_memory_repartition_matches_a_fresh_admission_with_init_containers() -> None:
    def shaped(budget: str, app: str) -> object:
        return pod(
            "job",
            container("setup", "2", "2Gi", kind="init"),
            container("agent", "1", "1Gi", kind="sidecar"),
            bare("shared-init", kind="init"),
            bare("logger", kind="sidecar"),
            container("app", "2", app),
            pod_cpu="6",
            pod_memory=budget,
        )

    node = plr_node()
    assert node.admit(shaped("8Gi", "3Gi")).admitted  # type: ignore[arg-type]
    assert node.resize(shaped("10Gi", "5Gi")).status == "Accepted"  # type: ignore[arg-type]
    fresh = plr_node()
    assert fresh.admit(shaped("10Gi", "5Gi")).admitted  # type: ignore[arg-type]
    assert node.state.memory.entries == fresh.state.memory.entries
    assert node.state.memory.pod_entries == fresh.state.memory.pod_entries
    assert_consistent(node)
