"""The ``Static`` memory policy (kubelet ``policy_static.go``), KEP-5526 pod-level variant included.

Pools and invariants, per NUMA node and resource type (``memory``,
``hugepages-<size>``), in bytes:

* SYSTEM RESERVED: ``reservedMemory`` of that node; never handed out.
* ALLOCATABLE: capacity minus system reserved (``memory`` also minus the
  node's hugepages); what hints are sized against (H1).
* RESERVED / FREE: charged to blocks / still available; they always sum to
  allocatable.  A block is charged on the nodes of its mask in ascending order.
* GROUPS (``cells``): a node serves either single-node blocks or blocks of one
  multi-node mask, never both (H3, H4, A4), until its last block is released.

Guaranteed pods only.  Container scope (and pod scope without pod-level
resources) charges every container's blocks, minus what earlier regular init
containers of the pod leave behind on the same mask (A5-A7).  With pod-level
resources and both gates on, pod scope charges the pod budget ONCE
(:meth:`StaticMemoryPolicy.allocate_pod`) and carves it into exclusive blocks
and one shared block set; the budget goes back only with the pod's last
container (R8.1, R8.2).

Rule numbers: ``memory-manager.md`` (R, H, A) and ``pod-level-resource-managers.md``.
"""

from __future__ import annotations

from collections.abc import Mapping

from enforcer.counters import AllocationCounters
from enforcer.errors import ConfigError, EmptyPodSharedPoolError, MemoryAllocationError, UnexpectedAdmissionError
from enforcer.features import FeatureGates
from enforcer.memorymanager import placement, requests, restore
from enforcer.memorymanager import resize as memory_resize
from enforcer.memorymanager.policy import MemoryPolicy, MemoryResizePlan, MemoryResizer
from enforcer.memorymanager.state import (
    Block,
    MemoryState,
    MemoryTable,
    NUMANodeState,
    bits_mask,
    mask_bits,
    ordered_types,
)
from enforcer.topology.hints import ProviderHints, TopologyHint
from enforcer.topology.machine import CPUTopology
from shared import pod_level, quantity
from shared.contract import Assignment
from shared.qos import qos_class
from shared.resources import HUGEPAGES_PREFIX, MEMORY, ContainerResources, PodResources

RESOURCE = "memory"  # the resource_name label of the resource_manager_* metrics

NO_SYSTEM_RESERVED = "[memorymanager] you should specify the system reserved memory"
NO_DEFAULT_AFFINITY = (
    "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available"
)
NO_DEFAULT_PREFERRED = "[memorymanager] failed to find the default preferred hint"
NO_EXTENSION = "[memorymanager] failed to find NUMA nodes to extend the current topology hint"
NO_EXTENDED_PREFERRED = "[memorymanager] failed to find the extended preferred hint"
GROUP_RULE_VIOLATED = "[memorymanager] preferred hint violates NUMA node allocation"
EMPTY_MACHINE_STATE = "[memorymanager] machine state can not be empty when it has memory assignments"


class StaticMemoryPolicy:
    """NUMA-aligned, accounted memory for Guaranteed pods; see the module docstring for the pools."""

    name: str = "Static"

    def __init__(
        self,
        topology: CPUTopology,
        *,
        reserved_memory: Mapping[int, Mapping[str, int]],
        gates: FeatureGates | None = None,
    ) -> None:
        total_memory = sum(per_node.get(MEMORY, 0) for per_node in reserved_memory.values())
        if total_memory <= 0:
            raise ConfigError(NO_SYSTEM_RESERVED)
        self._topology = topology
        self._reserved = {node: dict(per_node) for node, per_node in reserved_memory.items()}
        self._gates = gates or FeatureGates()
        self._default_machine = self._build_default_machine_state()

    # -- state -------------------------------------------------------------------------
    def _build_default_machine_state(self) -> dict[int, NUMANodeState]:
        """``getDefaultMachineState``: empty tables from capacity minus ``reservedMemory`` (R2.2, R2.3).

        Every node gets a table for every hugepages size of the machine, sized 0 where the node has
        no pages of it.  The kubelet's tables come from cAdvisor, which lists each page size the kernel
        offers on every node (``nodeN/hugepages/hugepages-*``, zero counts included), and its
        ``calculateHints``, ``isAffinitySatisfyRequest`` and ``updateMachineState`` read the table of
        every node of a mask without a nil check.  So a multi-node mask is fine for a size only some of
        its nodes have (its free sum is what counts), and the block names a table on each of its
        nodes, as ``validateState`` requires ("the memory assignment uses memory resource that does
        not exist").  A topology document may leave a size out of a node; it reads as 0 here.
        """
        machine: dict[int, NUMANodeState] = {}
        hugepage_sizes = ordered_types(n for n in self._topology.memory_resources() if n.startswith(HUGEPAGES_PREFIX))
        for node_id in self._topology.numa_ids:
            capacity = self._topology.memory_capacity(node_id)
            reserved = self._reserved.get(node_id, {})
            tables: dict[str, MemoryTable] = {}
            hugepages_bytes = 0
            for name in hugepage_sizes:
                size = capacity.get(name, 0)
                tables[name] = self._empty_table(node_id, name, size, reserved.get(name, 0), 0)
                hugepages_bytes += size
            tables[MEMORY] = self._empty_table(
                node_id, MEMORY, capacity.get(MEMORY, 0), reserved.get(MEMORY, 0), hugepages_bytes
            )
            machine[node_id] = NUMANodeState(0, {n: tables[n] for n in ordered_types(tables)}, [node_id])
        return machine

    @staticmethod
    def _empty_table(node_id: int, name: str, total: int, reserved: int, hugepages: int) -> MemoryTable:
        allocatable = total - reserved - hugepages
        if allocatable < 0:
            # the kubelet's unsigned arithmetic would wrap around here; refuse instead
            raise ConfigError(
                f"reservedMemory: NUMA node {node_id} reserves {quantity.format_bytes(reserved)} of {name}, "
                f"more than the {quantity.format_bytes(total - hugepages)} it has"
            )
        return MemoryTable(total=total, system_reserved=reserved, allocatable=allocatable, reserved=0, free=allocatable)

    def new_state(self) -> MemoryState:
        return MemoryState(self.name, {n: s.copy() for n, s in self._default_machine.items()})

    def validate_state(self, state: MemoryState) -> None:
        """``Start``/``validateState``: fill an empty state; refuse one this machine and config did not write."""
        if state.policy_name != self.name:
            raise ConfigError(
                f'[memorymanager] configured policy "{self.name}" differs from state checkpoint policy '
                f'"{state.policy_name}"'
            )
        if not state.machine_state:
            if state.entries:
                raise ConfigError(EMPTY_MACHINE_STATE)
            state.machine_state = {n: s.copy() for n, s in self._default_machine.items()}
            return
        restore.add_zero_size_tables(state.machine_state, self._default_machine)
        expected = restore.expected_machine_state(
            self._default_machine, state, pod_entries_enabled=self._gates.pod_level_resource_managers
        )
        if not restore.machine_states_equal(state.machine_state, expected):
            raise ConfigError(restore.STATE_MISMATCH)

    # -- hints -------------------------------------------------------------------------
    @property
    def _managers(self) -> bool:
        """Both KEP-5526 gates (R1.1): whether pod-level resources are pinned at all."""
        return self._gates.pod_level_managers_enabled

    def _guaranteed(self, pod: PodResources) -> bool:
        return qos_class(pod, pod_level_resources_gate=self._gates.pod_level_resources) == "Guaranteed"

    def get_topology_hints(self, state: MemoryState, pod: PodResources, container: ContainerResources) -> ProviderHints:
        if not self._guaranteed(pod):
            return None  # R3.1
        wanted = requests.container_requests(pod, container, self._gates)
        if pod_level.never_pinned(pod, managers_enabled=self._managers):
            return None  # R3.3
        blocks = state.container_blocks(pod.uid, container.name)
        if blocks is not None:
            return _regenerate_hints(blocks, wanted)  # H7
        return placement.calculate_hints(
            state.machine_state, wanted, state.reusable.get(pod.uid, {}), self._topology.distances
        )

    def get_pod_topology_hints(self, state: MemoryState, pod: PodResources) -> ProviderHints:
        if not self._guaranteed(pod):
            return None
        wanted = requests.pod_requests(pod, self._gates)
        if pod_level.never_pinned(pod, managers_enabled=self._managers):
            return None
        if pod_level.managers_apply(pod, managers_enabled=self._managers) and requests.empty_pool_violation(
            pod, self._gates
        ):
            return {name: [] for name in wanted}  # PLR R3.2: unsatisfiable, not "don't care"
        if not wanted:
            return None
        for container in pod.containers:
            blocks = state.container_blocks(pod.uid, container.name)
            if blocks is not None:
                return _regenerate_hints(blocks, wanted)  # H7, pod scope: any container with blocks
        return placement.calculate_hints(
            state.machine_state, wanted, state.reusable.get(pod.uid, {}), self._topology.distances
        )

    # -- allocation --------------------------------------------------------------------
    def allocate(
        self,
        state: MemoryState,
        pod: PodResources,
        container: ContainerResources,
        affinity: TopologyHint | None,
        counters: AllocationCounters,
    ) -> None:
        """A1-A7 for one container; the TM hint is ``affinity`` (None: no hint, as a nil mask)."""
        if not self._guaranteed(pod) or pod_level.never_pinned(pod, managers_enabled=self._managers):
            return  # A1
        blocks = state.container_blocks(pod.uid, container.name)
        if blocks is not None:
            self._update_reusable(state, pod, container, blocks)  # A1: only reuse bookkeeping
            return
        wanted = requests.container_requests(pod, container, self._gates)
        if not wanted:
            # Not Guaranteed-equivalent under pod-level resources: node shared pool, no
            # blocks, no metrics (PLR R6.2, M5).  The indexed upstream fails the default
            # hint here instead; the spec's container-scope rules are followed.
            return
        machine = state.machine_state
        try:
            mask = self._choose_mask(state, pod, wanted, affinity)
        except MemoryAllocationError as err:
            counters.error(RESOURCE, "node")  # M4
            raise UnexpectedAdmissionError.allocate_failed(err.message) from None

        bits = mask_bits(mask)
        reusable = state.reusable.get(pod.uid, {}).get(mask, {})
        new_blocks: list[Block] = []
        for name, size in wanted.items():
            new_blocks.append(Block(bits, name, size))
            placement.charge(machine, bits, name, max(0, size - reusable.get(name, 0)))  # A5, A6
            counters.allocation(RESOURCE, "node")  # M3: one per resource type
        self._update_reusable(state, pod, container, new_blocks)
        state.set_container_blocks(pod.uid, container.name, new_blocks)
        self._shrink_init_blocks(state, pod, container, new_blocks)
        counters.assignment(RESOURCE, "node_exclusive")

    def allocate_pod(
        self, state: MemoryState, pod: PodResources, affinity: TopologyHint | None, counters: AllocationCounters
    ) -> None:
        """PLR §4 memory steps 1-6; ``affinity`` is the hint stored for the pod's first container.

        Only pods with pod-level resources under both gates are handled; a pod
        that already has a pod entry is left alone (idempotent, like ``allocate``).
        """
        if not self._guaranteed(pod) or not pod_level.managers_apply(pod, managers_enabled=self._managers):
            return
        if state.pod_blocks(pod.uid) is not None:
            return
        total = requests.pod_requests(pod, self._gates)
        violation = requests.empty_pool_violation(pod, self._gates)
        if violation is not None:
            counters.error(RESOURCE, "pod")  # M2
            raise EmptyPodSharedPoolError(violation)
        try:
            mask = self._choose_mask(state, pod, total, affinity)
        except MemoryAllocationError as err:
            counters.error(RESOURCE, "pod")
            raise UnexpectedAdmissionError.allocate_failed(err.message) from None
        bits = mask_bits(mask)
        blocks = requests.partition(pod, total, bits, self._gates)  # steps 3-5
        state.set_pod_blocks(pod.uid, [Block(bits, name, size) for name, size in total.items()])  # step 6
        for name, size in total.items():
            placement.charge(state.machine_state, bits, name, size)
        for ctr in pod.containers:
            state.set_container_blocks(pod.uid, ctr.name, blocks[ctr.name])
            eligible = bool(requests.container_requests(pod, ctr, self._gates))
            counters.assignment(RESOURCE, "pod_exclusive" if eligible else "pod_shared")
            counters.allocation(RESOURCE, "pod")  # M1: every container

    def _choose_mask(
        self, state: MemoryState, pod: PodResources, wanted: Mapping[str, int], affinity: TopologyHint | None
    ) -> int:
        """A2-A4: the Topology Manager hint, defaulted, extended, and checked against the group rule."""
        machine = state.machine_state
        reusable = state.reusable.get(pod.uid, {})
        best = affinity if affinity is not None else TopologyHint(None, False)
        if best.mask is None:
            default = placement.best_hint(machine, wanted, reusable)
            if default is None:
                raise MemoryAllocationError(NO_DEFAULT_AFFINITY)
            if not default.preferred and best.preferred:
                raise MemoryAllocationError(NO_DEFAULT_PREFERRED)
            best = default
        mask = best.mask or 0
        if mask & ~bits_mask(machine):
            raise MemoryAllocationError(f"[memorymanager] the hint {best} names NUMA nodes this machine does not have")
        if not placement.affinity_satisfies(machine, mask, wanted):
            extended = placement.best_hint(machine, wanted, reusable, containing=mask)
            if extended is None:
                raise MemoryAllocationError(NO_EXTENSION)
            if not extended.preferred and best.preferred:
                raise MemoryAllocationError(NO_EXTENDED_PREFERRED)
            best = extended
            mask = best.mask or 0
        if placement.violates_group_rule(machine, mask):
            raise MemoryAllocationError(GROUP_RULE_VIOLATED)
        return mask

    @staticmethod
    def _update_reusable(
        state: MemoryState, pod: PodResources, container: ContainerResources, blocks: list[Block]
    ) -> None:
        """A7 (``updatePodReusableMemory``): regular init containers feed reuse, the others consume it."""
        for uid in [u for u in state.reusable if u != pod.uid]:
            del state.reusable[uid]
        if container.kind == "init":
            per_pod = state.reusable.setdefault(pod.uid, {})
            for block in blocks:
                per_mask = per_pod.setdefault(block.mask, {})
                if block.size > per_mask.get(block.type, 0):
                    per_mask[block.type] = block.size
            return
        for block in blocks:
            current = state.reusable.get(pod.uid, {}).get(block.mask, {}).get(block.type, 0)
            if current != 0:
                state.reusable[pod.uid][block.mask][block.type] = 0 if block.size >= current else current - block.size

    @staticmethod
    def _shrink_init_blocks(
        state: MemoryState, pod: PodResources, container: ContainerResources, blocks: list[Block]
    ) -> None:
        """A7 (``updateInitContainersMemoryBlocks``): earlier init blocks give up what was reused.

        Afterwards the blocks of the pod add up to what was charged for it.
        """
        for block in blocks:
            remaining = block.size
            for init in pod.init_containers():
                if init.name == container.name or remaining == 0:
                    break
                if init.is_sidecar:
                    continue  # sidecar memory is never reused
                init_blocks = state.container_blocks(pod.uid, init.name)
                if not init_blocks:
                    continue
                shrunk: list[Block] = []
                for old in init_blocks:
                    if old.size == 0 or old.type != block.type or old.mask != block.mask:
                        shrunk.append(old)
                        continue
                    if old.size > remaining:
                        shrunk.append(Block(old.numa_affinity, old.type, old.size - remaining))
                        remaining = 0
                    else:
                        remaining -= old.size
                        shrunk.append(Block(old.numa_affinity, old.type, 0))
                state.set_container_blocks(pod.uid, init.name, shrunk)

    # -- release -----------------------------------------------------------------------
    def remove_container(self, state: MemoryState, pod_uid: str, container_name: str) -> None:
        """R6.1; for a KEP-5526 pod R8.1/R8.2: the budget returns with the last container entry."""
        if self._gates.pod_level_resource_managers:
            pod_blocks = state.pod_blocks(pod_uid)
            if pod_blocks is not None:
                state.delete_container(pod_uid, container_name)
                if not state.entries.get(pod_uid):
                    placement.release(state.machine_state, pod_blocks)
                    state.delete_pod(pod_uid)
                return
        blocks = state.container_blocks(pod_uid, container_name)
        if blocks is None:
            return
        state.delete_container(pod_uid, container_name)
        placement.release(state.machine_state, blocks)
        if pod_uid not in state.entries:
            # The pod is gone, and so is what its init containers left for later containers (A7).
            # The kubelet keeps it until the next Allocate of another pod, which is harmless there
            # because a UID never comes back; here a pod released and admitted again under the same
            # UID would otherwise "reuse" bytes nobody holds, and its blocks would outgrow the charge.
            state.reusable.pop(pod_uid, None)

    # -- in-place resize (extended mode; the rules live in enforcer.memorymanager.resize) ----
    @property
    def resizer(self) -> MemoryResizer | None:
        return self

    def plan_resize(self, state: MemoryState, old_pod: PodResources, new_pod: PodResources) -> MemoryResizePlan | None:
        """Check the resize of the pod's blocks; raises the AdmissionRejected that makes it Infeasible."""
        return memory_resize.plan_resize(self._gates, state, old_pod, new_pod)

    # -- read API ------------------------------------------------------------------------
    def state_from_dict(self, doc: object) -> MemoryState:
        """Read a saved state back and run the restart checks on it (kubelet checkpoint restore + ``Start``)."""
        state = MemoryState.from_dict(doc)
        self.validate_state(state)
        return state

    def pod_uids(self, state: MemoryState) -> list[str]:
        """Pods holding blocks, container-level or pod-level."""
        return sorted(set(state.entries) | set(state.pod_entries))

    def container_blocks(self, state: MemoryState, pod_uid: str, container_name: str) -> list[Block]:
        return state.container_blocks(pod_uid, container_name) or []

    def pod_blocks(self, state: MemoryState, pod_uid: str) -> list[Block]:
        return state.pod_blocks(pod_uid) or []

    def memory_numa_nodes(self, state: MemoryState, pod_uid: str, container_name: str) -> tuple[int, ...] | None:
        nodes = {n for b in state.container_blocks(pod_uid, container_name) or [] for n in b.numa_affinity}
        return tuple(sorted(nodes)) if nodes else None

    def memory_assignment(self, state: MemoryState, pod: PodResources, container: ContainerResources) -> Assignment:
        if self.memory_numa_nodes(state, pod.uid, container.name) is None:
            return "node_shared"
        if state.pod_blocks(pod.uid) is not None:
            eligible = requests.container_requests(pod, container, self._gates)
            return "pod_exclusive" if eligible else "pod_shared"
        return "node_exclusive"

    def numa_memory(self, state: MemoryState) -> dict[int, dict[str, MemoryTable]]:
        return {
            node_id: {name: table.copy() for name, table in node.memory_map.items()}
            for node_id, node in sorted(state.machine_state.items())
        }


def _regenerate_hints(blocks: list[Block], wanted: Mapping[str, int]) -> ProviderHints:
    """H7 (``regenerateHints``): the stored masks as preferred hints, or None when they no longer match."""
    if len(blocks) != len(wanted):
        return None
    hints: dict[str, list[TopologyHint]] = {name: [] for name in wanted}
    for block in blocks:
        if block.type not in wanted or block.size != wanted[block.type]:
            return None
        hints[block.type].append(TopologyHint(block.mask, True))
    return hints


_conforms: type[MemoryPolicy] = StaticMemoryPolicy
