"""The seam between the engine and a memory manager policy (kubelet ``memorymanager/policy.go``).

Policies hold no assignment state: the engine owns one :class:`MemoryState`
per node, passes it to every call, and may hand a copy for a transactional
admission.  A policy therefore mutates only the state it is given.  Pods that
do not fit raise :class:`~enforcer.errors.AdmissionRejected` subclasses with
the kubelet's reason and message; nothing else is raised for a pod.

This module defines the contract only; it imports no policy.
"""

from __future__ import annotations

from typing import Protocol

from enforcer.counters import AllocationCounters
from enforcer.memorymanager.state import Block, MemoryState, MemoryTable
from enforcer.topology.hints import ProviderHints, TopologyHint
from shared.contract import Assignment
from shared.resources import ContainerResources, PodResources


class MemoryResizePlan(Protocol):
    """A resize whose Infeasible rules all passed; applying it may still find the memory busy (Deferred)."""

    def apply(self, state: MemoryState) -> None:
        """Resize in ``state`` (a copy of the planned-on state); raises AdmissionRejected (``Deferred``: not now)."""
        ...


class MemoryResizer(Protocol):
    """In-place resize of the blocks a policy holds (the ``extended`` engine)."""

    def plan_resize(self, state: MemoryState, old_pod: PodResources, new_pod: PodResources) -> MemoryResizePlan | None:
        """Check the resize against every permanent rule (raising the AdmissionRejected that makes it
        Infeasible); None when the memory manager has nothing to change."""
        ...


class MemoryPolicy(Protocol):
    """What the engine calls; ``name`` is the kubelet's policy name ("None" or "Static")."""

    name: str

    def new_state(self) -> MemoryState:
        """A fresh state for this machine and configuration (no pods)."""
        ...

    def validate_state(self, state: MemoryState) -> None:
        """Restart check (``Start``): fill an empty state, or raise ConfigError when it does not fit this node."""
        ...

    def get_topology_hints(self, state: MemoryState, pod: PodResources, container: ContainerResources) -> ProviderHints:
        """Container-scope hints; read-only."""
        ...

    def get_pod_topology_hints(self, state: MemoryState, pod: PodResources) -> ProviderHints:
        """Pod-scope hints (with KEP-5526: from the pod budget, after the empty-pool check); read-only."""
        ...

    def allocate(
        self,
        state: MemoryState,
        pod: PodResources,
        container: ContainerResources,
        affinity: TopologyHint | None,
        counters: AllocationCounters,
    ) -> None:
        """Give the container its blocks; idempotent (a container with blocks is left alone)."""
        ...

    def allocate_pod(
        self, state: MemoryState, pod: PodResources, affinity: TopologyHint | None, counters: AllocationCounters
    ) -> None:
        """KEP-5526 ``AllocatePod``: charge the pod budget once and partition it among the containers."""
        ...

    def remove_container(self, state: MemoryState, pod_uid: str, container_name: str) -> None:
        """Forget the container; return memory to the node (a pod budget only with its last container)."""
        ...

    def state_from_dict(self, doc: object) -> MemoryState:
        """Read a saved state back and run the restart checks on it."""
        ...

    def pod_uids(self, state: MemoryState) -> list[str]:
        """Every pod the state holds blocks for (container or pod level), sorted."""
        ...

    @property
    def resizer(self) -> MemoryResizer | None:
        """The policy's in-place resize of the blocks it holds, or None when it holds none (``None``)."""
        ...

    # -- read API for reporting --------------------------------------------------------
    def container_blocks(self, state: MemoryState, pod_uid: str, container_name: str) -> list[Block]:
        """The container's blocks ([] when it has none)."""
        ...

    def pod_blocks(self, state: MemoryState, pod_uid: str) -> list[Block]:
        """The KEP-5526 pod budget's blocks ([] when the pod has no pod-level entry)."""
        ...

    def memory_numa_nodes(self, state: MemoryState, pod_uid: str, container_name: str) -> tuple[int, ...] | None:
        """``GetMemoryNUMANodes``: the container's ``cpuset.mems``, or None for no binding."""
        ...

    def memory_assignment(self, state: MemoryState, pod: PodResources, container: ContainerResources) -> Assignment:
        """Where the container's memory comes from (the plan's ``memoryAssignment``)."""
        ...

    def numa_memory(self, state: MemoryState) -> dict[int, dict[str, MemoryTable]]:
        """Copies of every NUMA node's tables (free, reserved, allocatable per resource type)."""
        ...
