"""Small builders shared by the memory manager tests: machines, pods, policies.

Sizes are bytes; ``GiB``/``MiB`` keep tables readable.  Pods are built already
defaulted (requests == limits where a test wants Guaranteed), as the engine
hands them to policies.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from enforcer.counters import AllocationCounters
from enforcer.features import FeatureGates
from enforcer.memorymanager.policy_static import StaticMemoryPolicy
from enforcer.memorymanager.state import Block, MemoryState
from enforcer.topology import machine
from enforcer.topology.hints import TopologyHint, mask_of
from shared.resources import ContainerKind, ContainerResources, PodResources, Resources

MiB = 1024 * 1024
GiB = 1024 * MiB
HP1G = "hugepages-1Gi"
HP2M = "hugepages-2Mi"

PLR_GATES = FeatureGates(pod_level_resources=True, pod_level_resource_managers=True)
DEFAULT_GATES = FeatureGates()

SEED_TOPOLOGY_FILE = Path(__file__).resolve().parents[2] / "fixtures" / "memory-dual-socket-ht-32.json"


def seed_topology() -> machine.CPUTopology:
    """2 NUMA nodes x (64Gi memory + 8Gi of 1Gi hugepages), 16 CPUs each."""
    return machine.load(SEED_TOPOLOGY_FILE)


def numa_machine(nodes: Mapping[int, Mapping[str, int]]) -> machine.CPUTopology:
    """One CPU per NUMA node; ``nodes`` maps NUMA id to capacity per resource type."""
    cpus = [machine.CPUInfo(id=i, core=i, socket=i, numa=i, uncore=i) for i in sorted(nodes)]
    return machine.CPUTopology(cpus, [machine.NUMANode(i, dict(mem)) for i, mem in nodes.items()])


def uniform_machine(count: int, memory: int, hugepages_1g: int = 0) -> machine.CPUTopology:
    per_node = {"memory": memory} | ({HP1G: hugepages_1g} if hugepages_1g else {})
    return numa_machine({i: per_node for i in range(count)})


def static_policy(
    topology: machine.CPUTopology,
    reserved: Mapping[int, Mapping[str, int]] | None = None,
    gates: FeatureGates = DEFAULT_GATES,
) -> StaticMemoryPolicy:
    reserved = reserved if reserved is not None else {0: {"memory": 512 * MiB}}
    return StaticMemoryPolicy(topology, reserved_memory=reserved, gates=gates)


def ctr(
    name: str,
    memory: int | None = None,
    *,
    kind: ContainerKind = "app",
    cpu: int = 1000,
    limit_memory: int | None = None,
    limit_cpu: int | None = None,
    hugepages: Mapping[str, int] | None = None,
) -> ContainerResources:
    """A container; with ``memory`` None it has no resources at all."""
    if memory is None:
        return ContainerResources(name, kind)
    requests = {"cpu": cpu, "memory": memory, **(hugepages or {})}
    limits = {
        "cpu": cpu if limit_cpu is None else limit_cpu,
        "memory": memory if limit_memory is None else limit_memory,
        **(hugepages or {}),
    }
    return ContainerResources(name, kind, Resources(requests, limits))


def pod(
    uid: str,
    *containers: ContainerResources,
    plr_memory: int | None = None,
    plr_cpu: int = 8000,
    plr_hugepages: Mapping[str, int] | None = None,
) -> PodResources:
    """A pod; ``plr_memory`` sets Guaranteed pod-level resources (spec.resources)."""
    level = None
    if plr_memory is not None:
        values = {"cpu": plr_cpu, "memory": plr_memory, **(plr_hugepages or {})}
        level = Resources(dict(values), dict(values))
    ordered = tuple(c for c in containers if c.is_init) + tuple(c for c in containers if not c.is_init)
    return PodResources(uid=uid, namespace="default", name=uid, containers=ordered, pod=level)


def hint(*numa_ids: int, preferred: bool = True) -> TopologyHint:
    return TopologyHint(mask_of(numa_ids), preferred)


def any_numa(preferred: bool = False) -> TopologyHint:
    return TopologyHint(None, preferred)


def block(numa_ids: tuple[int, ...] | list[int], size: int, kind: str = "memory") -> Block:
    return Block(tuple(numa_ids), kind, size)


def table(state: MemoryState, node: int, kind: str = "memory") -> tuple[int, int]:
    """(free, reserved) of one table."""
    t = state.machine_state[node].memory_map[kind]
    return t.free, t.reserved


def counters() -> AllocationCounters:
    return AllocationCounters()
