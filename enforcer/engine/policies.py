"""The seam between the engine and the resource managers' policies.

Kubelet shape: each manager's policy holds no assignment state; the engine owns one state value per
manager and passes it in, so it can work on a copy and commit only when the whole pod was admitted (a
refused pod leaves no trace). :class:`BoundProvider` binds a policy to the working copy of its state
for one admission, which is what the Topology Manager's scopes talk to
(:class:`~enforcer.topology.manager.HintProvider`).
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from enforcer.counters import AllocationCounters
from enforcer.topology.hints import ProviderHints, TopologyHint
from shared.resources import ContainerResources, PodResources

StateT = TypeVar("StateT")
StateT_contra = TypeVar("StateT_contra", contravariant=True)


class ResourcePolicy(Protocol[StateT_contra]):
    """What the CPU and memory policies both offer the Topology Manager (over their own state type)."""

    def get_topology_hints(
        self, state: StateT_contra, pod: PodResources, container: ContainerResources
    ) -> ProviderHints: ...

    def get_pod_topology_hints(self, state: StateT_contra, pod: PodResources) -> ProviderHints: ...

    def allocate(
        self,
        state: StateT_contra,
        pod: PodResources,
        container: ContainerResources,
        affinity: TopologyHint | None,
        counters: AllocationCounters,
    ) -> None: ...

    def allocate_pod(
        self, state: StateT_contra, pod: PodResources, affinity: TopologyHint | None, counters: AllocationCounters
    ) -> None: ...


class BoundProvider(Generic[StateT]):
    """A policy and the state it works on for one admission: a Topology Manager hint provider."""

    __slots__ = ("_policy", "_state")

    def __init__(self, policy: ResourcePolicy[StateT], state: StateT) -> None:
        self._policy = policy
        self._state = state

    def get_topology_hints(self, pod: PodResources, container: ContainerResources) -> ProviderHints:
        return self._policy.get_topology_hints(self._state, pod, container)

    def get_pod_topology_hints(self, pod: PodResources) -> ProviderHints:
        return self._policy.get_pod_topology_hints(self._state, pod)

    def allocate(
        self,
        pod: PodResources,
        container: ContainerResources,
        affinity: TopologyHint | None,
        counters: AllocationCounters,
    ) -> None:
        self._policy.allocate(self._state, pod, container, affinity, counters)

    def allocate_pod(self, pod: PodResources, affinity: TopologyHint | None, counters: AllocationCounters) -> None:
        self._policy.allocate_pod(self._state, pod, affinity, counters)
