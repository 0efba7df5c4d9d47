"""The Topology Manager: its scopes gather the providers' hints, the policy merges them, providers allocate.

Kubelet shape (``topologymanager/scope_container.go``, ``scope_pod.go``, ``topology_manager.go``):

* container scope: for each container in order, gather every provider's hints for that container, merge,
  and let every provider allocate it with the merged hint before the next container is looked at (so a
  container's hints see what the previous containers took);
* pod scope: gather every provider's pod hints once, merge once, and give every container the same hint;
  with KEP-5526 (pod-level resources and both gates on) each provider allocates the whole pod at once
  (``AllocatePod``), otherwise container by container with the pod's hint.

A refused merge raises :class:`~enforcer.errors.TopologyAffinityError` (for a KEP-5526 pod in pod scope
the kubelet's :class:`~enforcer.errors.PodLevelTopologyAffinityError`: same reason, its own message); a
provider refuses by raising its own :class:`~enforcer.errors.AdmissionRejected`. The ``none`` policy aligns
nothing (no hint is stored), but the providers are still asked for hints, as the engine has always done:
their hint gathering is where some KEP-5526 rules refuse a pod.

The manager holds no state: the providers it is given are bound to the working copy of their state for
one admission (see :class:`HintProvider`), so a refused pod leaves no trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from enforcer.counters import AllocationCounters
from enforcer.errors import PodLevelTopologyAffinityError, TopologyAffinityError
from enforcer.topology import options
from enforcer.topology.hints import ProviderHints, TopologyHint
from enforcer.topology.policy import TopologyPolicy
from shared.resources import ContainerResources, PodResources


class HintProvider(Protocol):
    """A resource manager bound to its working state for one admission (kubelet ``HintProvider``)."""

    def get_topology_hints(self, pod: PodResources, container: ContainerResources) -> ProviderHints: ...

    def get_pod_topology_hints(self, pod: PodResources) -> ProviderHints: ...

    def allocate(
        self,
        pod: PodResources,
        container: ContainerResources,
        affinity: TopologyHint | None,
        counters: AllocationCounters,
    ) -> None: ...

    def allocate_pod(self, pod: PodResources, affinity: TopologyHint | None, counters: AllocationCounters) -> None: ...


@dataclass(frozen=True, slots=True)
class Affinities:
    """The merged hints of one admitted pod (kubelet ``Store``): the pod's, in pod scope, and each container's."""

    pod: TopologyHint | None
    containers: tuple[tuple[ContainerResources, TopologyHint | None], ...]


class TopologyManager:
    """One node's Topology Manager: a policy and a scope, over providers handed in per admission."""

    def __init__(
        self,
        policy: TopologyPolicy,
        scope: str,
        *,
        allocates_pod: Callable[[PodResources], bool],
    ) -> None:
        """``allocates_pod``: whether a pod in pod scope goes through the providers' ``allocate_pod`` (KEP-5526)."""
        options.validate_scope_name(scope)
        self.policy = policy
        self.scope = scope
        self._allocates_pod = allocates_pod

    def admit(self, pod: PodResources, providers: Sequence[HintProvider], counters: AllocationCounters) -> Affinities:
        """Align and allocate the pod on every provider, or raise AdmissionRejected (state left to the caller)."""
        if self.scope == options.SCOPE_POD:
            return self._admit_pod_scope(pod, providers, counters)
        return self._admit_container_scope(pod, providers, counters)

    def _admit_pod_scope(
        self, pod: PodResources, providers: Sequence[HintProvider], counters: AllocationCounters
    ) -> Affinities:
        allocates_pod = self._allocates_pod(pod)
        try:
            hint = self._merge([provider.get_pod_topology_hints(pod) for provider in providers])
        except TopologyAffinityError:
            if allocates_pod:  # admitUsingPodResources has its own message
                raise PodLevelTopologyAffinityError(PodLevelTopologyAffinityError.POD_SCOPE) from None
            raise
        if allocates_pod:
            for provider in providers:
                provider.allocate_pod(pod, hint, counters)
        else:
            for container in pod.containers:
                for provider in providers:
                    provider.allocate(pod, container, hint, counters)
        return Affinities(hint, tuple((container, hint) for container in pod.containers))

    def _admit_container_scope(
        self, pod: PodResources, providers: Sequence[HintProvider], counters: AllocationCounters
    ) -> Affinities:
        merged: list[tuple[ContainerResources, TopologyHint | None]] = []
        for container in pod.containers:
            hint = self._merge([provider.get_topology_hints(pod, container) for provider in providers])
            for provider in providers:
                provider.allocate(pod, container, hint, counters)
            merged.append((container, hint))
        return Affinities(None, tuple(merged))

    def _merge(self, providers_hints: list[ProviderHints]) -> TopologyHint | None:
        """The policy's merge; ``None`` under the ``none`` policy (no alignment is stored)."""
        if self.policy.name == options.POLICY_NONE:
            return None
        best, admit = self.policy.merge(providers_hints)
        if not admit:
            raise TopologyAffinityError()
        return best
