"""Memory blocks resized in place under the Static memory policy (extended mode)."""

from __future__ import annotations

import pytest
from resize_builders import GiB, assert_consistent, container, cpus_of, engine, pod, single

from enforcer.engine.node import NodeEngine
from enforcer.errors import AdmissionRejected
from enforcer.memorymanager.state import Block
from enforcer.topology import machine
from shared.cpuset import CPUSet
from shared.resources import ContainerResources, resources_from_maps


def memory_node(**fields: object) -> NodeEngine:
    return engine(memory=True, **fields)  # type: ignore[arg-type]


def blocks(node: NodeEngine, name: str, container_name: str = "c") -> list[Block]:
    return node.memory_policy.container_blocks(node.state.memory, f"default/{name}", container_name)


def reserved_on(node: NodeEngine, numa: int) -> int:
    return node.state.memory.machine_state[numa].memory_map["memory"].reserved


def test_a_memory_grow_charges_the_blocks_own_numa_node() -> None:
    node = memory_node()
    assert node.admit(single("db", "2", "4Gi")).admitted
    assert node.resize(single("db", "2", "8Gi")).status == "Accepted"
    assert blocks(node, "db") == [Block((0,), "memory", 8 * GiB)]
    assert reserved_on(node, 0) == 8 * GiB
    assert_consistent(node)


def test_a_memory_shrink_gives_the_bytes_back() -> None:
    node = memory_node()
    assert node.admit(single("db", "2", "8Gi")).admitted
    assert node.resize(single("db", "2", "2Gi")).status == "Accepted"
    assert blocks(node, "db") == [Block((0,), "memory", 2 * GiB)]
    assert reserved_on(node, 0) == 2 * GiB
    assert_consistent(node)


def test_a_memory_grow_without_free_bytes_on_its_node_is_deferred_until_they_are() -> None:
    node = memory_node()
    assert node.admit(single("db", "2", "4Gi")).admitted
    assert node.admit(single("hog", "2", "48Gi")).admitted
    assert blocks(node, "hog")[0].numa_affinity == (0,)
    result = node.resize(single("db", "2", "8Gi"))
    assert (result.status, result.reason) == ("Deferred", "Deferred")
    assert result.message is not None and result.message.startswith("Node didn't have enough free memory: 4Gi more")
    assert node.remove("default/hog").resizes_applied == ("default/db",)
    assert blocks(node, "db") == [Block((0,), "memory", 8 * GiB)]


def test_a_memory_grow_beyond_what_its_node_can_ever_hold_is_infeasible() -> None:
    node = memory_node()
    assert node.admit(single("db", "2", "4Gi")).admitted
    result = node.resize(single("db", "2", "60Gi"))
    assert (result.status, result.reason) == ("Infeasible", "resizeAllocateMemoryError")
    assert result.message is not None and "on NUMA node(s) [0], which can hold at most" in result.message


def hugepages_container(name: str) -> ContainerResources:
    values = {"cpu": "2", "memory": "1Gi", "hugepages-1Gi": "1Gi"}
    return ContainerResources(name, "app", resources_from_maps(values, values, field=name))


def test_asking_for_another_memory_type_is_inconsistent() -> None:
    node = memory_node()
    assert node.admit(single("db", "2", "1Gi")).admitted
    result = node.resize(pod("db", hugepages_container("c")))
    assert (result.status, result.reason) == ("Infeasible", "inconsistentMemoryAllocationError")


def test_memory_is_resized_without_a_static_cpu_manager() -> None:
    node = memory_node(cpu_policy="none", reserved="")
    assert node.admit(single("db", "2", "4Gi")).admitted
    assert node.resize(single("db", "4", "6Gi")).status == "Accepted"
    assert blocks(node, "db") == [Block((0,), "memory", 6 * GiB)]


def test_a_resize_is_atomic_across_managers() -> None:
    # The CPUs would fit, the memory does not: nothing changes, in either manager.
    node = memory_node()
    assert node.admit(single("db", "2", "4Gi")).admitted
    assert node.admit(single("hog", "2", "48Gi")).admitted
    before = node.snapshot()
    result = node.resize(single("db", "4", "8Gi"))
    assert result.status == "Deferred"
    after = node.snapshot()
    assert after.pop("pendingResizes") != before.pop("pendingResizes")
    after.pop("sequence")
    before.pop("sequence")
    assert after == before
    assert cpus_of(node, "db") == CPUSet.parse("1,17")


@pytest.mark.parametrize("kind", ["init", "sidecar"])
def test_init_container_blocks_stay_and_charges_still_add_up(kind: str) -> None:
    node = memory_node()
    job = pod("job", container("setup", "2", "4Gi", kind=kind), container("c", "2", "2Gi"))  # type: ignore[arg-type]
    assert node.admit(job).admitted
    grown = pod("job", container("setup", "2", "4Gi", kind=kind), container("c", "2", "6Gi"))  # type: ignore[arg-type]
    assert node.resize(grown).status == "Accepted"
    assert blocks(node, "job") == [Block((0,), "memory", 6 * GiB)]
    assert_consistent(node)


def test_machine_fixture_has_the_memory_the_tests_assume() -> None:
    topo: machine.CPUTopology = engine().topology
    assert topo.memory_capacity(0)["memory"] == 64 * GiB


def test_a_container_cannot_gain_exclusive_memory_in_a_resize() -> None:
    # Container scope with pod-level resources: a shared (not Guaranteed-equivalent) container has no blocks.
    node = engine(memory=True, plr=True)
    shared = container("side", "1", "1Gi", cpu_limit="2")
    assert node.admit(pod("mix", container("c", "2", "2Gi"), shared, pod_cpu="4", pod_memory="4Gi")).admitted
    assert node.memory_policy.container_blocks(node.state.memory, "default/mix", "side") == []
    equal = container("side", "1500m", "1Gi")
    result = node.resize(pod("mix", container("c", "2", "2Gi"), equal, pod_cpu="4", pod_memory="4Gi"))
    assert (result.status, result.reason) == ("Infeasible", "inconsistentMemoryAllocationError")
    assert result.message is not None and "from the shared pool to exclusive memory" in result.message


def test_a_container_cannot_lose_its_exclusive_memory_in_a_resize() -> None:
    node = engine(memory=True, plr=True)
    assert node.admit(pod("mix", container("c", "2", "2Gi"), pod_cpu="4", pod_memory="4Gi")).admitted
    burst = container("c", "2", "2Gi", cpu_limit="3")
    result = node.resize(pod("mix", burst, pod_cpu="4", pod_memory="4Gi"))
    assert result.status == "Infeasible"
    assert result.reason in ("inconsistentCPUAllocationError", "inconsistentMemoryAllocationError")
    resizer = node.memory_policy.resizer
    assert resizer is not None
    with pytest.raises(AdmissionRejected) as refused:
        resizer.plan_resize(
            node.state.memory, node.record("default/mix").pod, pod("mix", burst, pod_cpu="4", pod_memory="4Gi")
        )
    assert (refused.value.reason, refused.value.message) == (
        "inconsistentMemoryAllocationError",
        "inconsistentMemoryAllocation Error: Not allowed to move container c from exclusive memory to the shared pool",
    )


def test_pods_the_memory_manager_never_pinned_are_left_alone() -> None:
    node = memory_node()  # PodLevelResourceManagers off: pod-level resources are not pinned (R1.5)
    plr = pod("plr", container("c", "2", "2Gi"), pod_cpu="4", pod_memory="4Gi")
    assert node.admit(plr).admitted
    before = node.state.memory.to_dict()
    assert node.resize(pod("plr", container("c", "2", "3Gi"), pod_cpu="4", pod_memory="4Gi")).status == "Accepted"
    assert node.state.memory.to_dict() == before
