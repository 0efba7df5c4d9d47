"""Where a resize's CPUs may go: the NUMA sets the Topology Manager would accept, and what they can hold.

Infeasible (never, on this node) versus Deferred (not now) is decided here for grows; see
:mod:`enforcer.cpumanager.resize` for the rules. Reads the static policy through :class:`ResizablePolicy`,
so this module does not import the policy that calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations, islice
from typing import Protocol

from enforcer.cpumanager.options import StaticPolicyOptions
from enforcer.cpumanager.policy import ResizeAlignment
from enforcer.cpumanager.resize_errors import ResizeAllocateCPUsError
from enforcer.cpumanager.resize_take import take_for_resize
from enforcer.cpumanager.state import CPUState
from enforcer.errors import CPUAllocationError, ResizeDeferred, TopologyAffinityError
from enforcer.features import FeatureGates
from enforcer.topology import hint_masks
from enforcer.topology.machine import CPUTopology
from shared.cpuset import CPUSet
from shared.resources import ContainerResources, PodResources


class ResizablePolicy(Protocol):
    """What a resize reads of the static policy: the machine, the reservation, options and sizing rules."""

    @property
    def topology(self) -> CPUTopology: ...

    @property
    def options(self) -> StaticPolicyOptions: ...

    @property
    def gates(self) -> FeatureGates: ...

    @property
    def reserved_cpus(self) -> CPUSet: ...

    @property
    def reserved_physical_cpus(self) -> CPUSet: ...

    def guaranteed_cpus(self, pod: PodResources, container: ContainerResources) -> int: ...

    def pod_guaranteed_cpus(self, pod: PodResources) -> int: ...

    def validate_pod_scope_resources(self, pod: PodResources) -> str | None: ...


@dataclass(frozen=True, slots=True)
class _NUMASet:
    numa_mask: int
    cpus: CPUSet
    size: int


class Placement:
    """The policy's view a resize needs: free CPUs, blocked CPUs, selection options, NUMA sets."""

    def __init__(self, policy: ResizablePolicy, alignment: ResizeAlignment) -> None:
        self.policy = policy
        self.topology = policy.topology
        self.alignment = alignment
        options = policy.options
        # full-pcpus-only grows by whole cores only: the siblings of reserved CPUs are never handed out.
        self.blocked = policy.reserved_physical_cpus if options.full_pcpus_only else policy.reserved_cpus
        self.spread = options.distribute_cpus_across_cores
        self.align_uncore = options.prefer_align_cpus_by_uncorecache
        self.align_by_socket = options.align_by_socket

    def take(self, free: CPUSet, retained: CPUSet, count: int) -> CPUSet:
        try:
            return take_for_resize(
                self.topology, free, retained, count, spread=self.spread, align_uncore=self.align_uncore
            )
        except CPUAllocationError as err:
            raise ResizeAllocateCPUsError.because(err.message) from err

    def free_cpus(self, state: CPUState) -> CPUSet:
        return state.default - self.blocked

    def numa_sets(self, holding: CPUSet, count: int) -> list[_NUMASet]:
        """Preferred NUMA sets for ``count`` CPUs that contain every NUMA node of ``holding``.

        Preferred as the kubelet's hint generation says (R6.3): as few NUMA nodes as the smallest set whose
        CPUs (reserved ones included) number ``count``, or the socket rule under align-by-socket; one NUMA
        node for single-numa-node.  Narrowest first, then the lowest mask.  Only the sizes a preferred set
        can have are enumerated, at most ``MAX_MASKS_PER_SIZE`` sets per size on huge machines.
        """
        topo = self.topology
        numa_ids = sorted(topo.numa_masks)
        required = tuple(topo.numa_nodes_of(holding))
        others = [n for n in numa_ids if n not in required]
        capacities = [topo.numa_masks[n].bit_count() for n in numa_ids]
        min_affinity = min(hint_masks.min_size_for(capacities, count), len(numa_ids))
        numa_per_socket = len(numa_ids) // max(1, topo.num_sockets)
        min_sockets = -(-min_affinity // numa_per_socket) if self.align_by_socket and numa_per_socket else 0
        largest = max(min_affinity, min_sockets * numa_per_socket)
        if self.alignment.policy == "single-numa-node":
            largest = 1
        result: list[_NUMASet] = []
        for size in range(max(1, len(required)), largest + 1):
            for extra in islice(combinations(others, size - len(required)), hint_masks.MAX_MASKS_PER_SIZE):
                numa_mask = 0
                cpu_mask = 0
                sockets: set[int] = set()
                for numa in (*required, *extra):
                    numa_mask |= 1 << numa
                    cpu_mask |= topo.numa_masks[numa]
                    sockets.update(topo.sockets_of_numa.get(numa, ()))
                if size == min_affinity or (min_sockets > 0 and len(sockets) == min_sockets):
                    result.append(_NUMASet(numa_mask, CPUSet.from_mask(cpu_mask), size))
        result.sort(key=lambda s: (s.size, s.numa_mask))
        return result

    def check_can_ever_hold(self, holding: CPUSet, count: int, held_elsewhere: CPUSet) -> None:
        """Infeasible unless some acceptable place could hold ``count`` CPUs once every other pod is gone.

        ``held_elsewhere``: the pod's own exclusive CPUs outside this grow, which do not go away.
        """
        if self.alignment.policy in ("none", "best-effort"):
            capacity = len(self.topology.all_cpus - self.blocked - held_elsewhere)
            if capacity < count:
                raise ResizeAllocateCPUsError.because(
                    f"not enough cpus on this node: requested={count}, at most {capacity} can ever be exclusive"
                )
            return
        for numa_set in self.numa_sets(holding, count):
            if len(numa_set.cpus - self.blocked - held_elsewhere) >= count:
                return
        raise ResizeAllocateCPUsError.because(
            f"{TopologyAffinityError().message}: no NUMA node set containing NUMA node(s) "
            f"{_numa_list(self.topology, holding)} can hold {count} exclusive CPUs under the "
            f"{self.alignment.policy} Topology Manager policy"
        )

    def grow_region(self, holding: CPUSet, count: int, need: int, free: CPUSet) -> CPUSet | None:
        """Where ``need`` more CPUs come from (None: anywhere); raises ResizeDeferred when nowhere now."""
        if self.alignment.policy == "none":
            if len(free) >= need:
                return None
        else:
            for numa_set in self.numa_sets(holding, count):
                if len(free & numa_set.cpus) >= need:
                    return numa_set.cpus
            if not self.alignment.strict and len(free) >= need:
                return None  # best-effort: no aligned room, spill to the closest free CPUs
        where = "this node" if self.alignment.policy == "none" else "an acceptable NUMA node set"
        raise ResizeDeferred(
            f"Node didn't have enough free exclusive CPUs: {need} more needed on {where} "
            f"(now on NUMA node(s) {_numa_list(self.topology, holding)}), {len(free)} free on the node"
        )


def _numa_list(topology: CPUTopology, cpus: CPUSet) -> str:
    return "{" + ",".join(map(str, topology.numa_nodes_of(cpus))) + "}"
