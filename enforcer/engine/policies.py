"""The seams between the engine and the resource managers.

Kubelet shape: each manager's policy holds no assignment state; the engine owns
one state value per manager and passes it in, so it can work on a copy and
commit only when the whole pod was admitted (a refused pod leaves no trace).
"""

from __future__ import annotations

from typing import Any, Protocol

from enforcer.counters import AllocationCounters
from enforcer.topology.hints import ProviderHints, TopologyHint
from shared.resources import ContainerResources, PodResources


class ResourcePolicy(Protocol):
    """What the CPU and memory policies both offer the Topology Manager and the engine."""

    name: str

    def new_state(self) -> Any: ...

    def get_topology_hints(self, state: Any, pod: PodResources, container: ContainerResources) -> ProviderHints: ...

    def get_pod_topology_hints(self, state: Any, pod: PodResources) -> ProviderHints: ...

    def allocate(
        self,
        state: Any,
        pod: PodResources,
        container: ContainerResources,
        affinity: TopologyHint | None,
        counters: AllocationCounters,
    ) -> None: ...

    def allocate_pod(
        self, state: Any, pod: PodResources, affinity: TopologyHint | None, counters: AllocationCounters
    ) -> None: ...

    def remove_container(self, state: Any, pod_uid: str, container_name: str) -> None: ...
