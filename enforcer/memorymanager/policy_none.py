"""The ``None`` memory policy (kubelet ``policy_none.go``): no hints, no blocks, no NUMA binding.

Every method is a no-op or an empty answer; the only check is that a restored
state was written by this policy too.
"""

from __future__ import annotations

from enforcer.counters import AllocationCounters
from enforcer.errors import ConfigError
from enforcer.memorymanager.policy import MemoryPolicy, MemoryResizer
from enforcer.memorymanager.state import Block, MemoryState, MemoryTable
from enforcer.topology.hints import ProviderHints, TopologyHint
from shared.contract import Assignment
from shared.resources import ContainerResources, PodResources


class NoneMemoryPolicy:
    """Memory is neither accounted nor pinned; every container may use every NUMA node."""

    name: str = "None"

    def new_state(self) -> MemoryState:
        return MemoryState(policy_name=self.name)

    def validate_state(self, state: MemoryState) -> None:
        if state.policy_name != self.name:
            raise ConfigError(
                f'[memorymanager] configured policy "{self.name}" differs from state checkpoint policy '
                f'"{state.policy_name}"'
            )

    def get_topology_hints(self, state: MemoryState, pod: PodResources, container: ContainerResources) -> ProviderHints:
        return None

    def get_pod_topology_hints(self, state: MemoryState, pod: PodResources) -> ProviderHints:
        return None

    def allocate(
        self,
        state: MemoryState,
        pod: PodResources,
        container: ContainerResources,
        affinity: TopologyHint | None,
        counters: AllocationCounters,
    ) -> None:
        return None

    def allocate_pod(
        self, state: MemoryState, pod: PodResources, affinity: TopologyHint | None, counters: AllocationCounters
    ) -> None:
        return None

    def remove_container(self, state: MemoryState, pod_uid: str, container_name: str) -> None:
        return None

    def state_from_dict(self, doc: object) -> MemoryState:
        """Read a saved state back and run the restart checks on it (kubelet checkpoint restore + ``Start``)."""
        state = MemoryState.from_dict(doc)
        self.validate_state(state)
        return state

    def pod_uids(self, state: MemoryState) -> list[str]:
        """Pods holding blocks, container-level or pod-level."""
        return sorted(set(state.entries) | set(state.pod_entries))

    @property
    def resizer(self) -> MemoryResizer | None:
        """Nothing is pinned, so a resize never concerns the memory manager."""
        return None

    def container_blocks(self, state: MemoryState, pod_uid: str, container_name: str) -> list[Block]:
        return []

    def pod_blocks(self, state: MemoryState, pod_uid: str) -> list[Block]:
        return []

    def memory_numa_nodes(self, state: MemoryState, pod_uid: str, container_name: str) -> tuple[int, ...] | None:
        return None

    def memory_assignment(self, state: MemoryState, pod: PodResources, container: ContainerResources) -> Assignment:
        return "node_shared"

    def numa_memory(self, state: MemoryState) -> dict[int, dict[str, MemoryTable]]:
        return {}


_conforms: type[MemoryPolicy] = NoneMemoryPolicy
