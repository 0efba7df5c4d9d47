"""In-place resize of memory blocks under the Static memory policy (beyond kubelet v1.36).

The kubelet v1.36 answers ``Infeasible`` to every resize of a Guaranteed pod under the Static memory
policy; no KEP covers it.  The ``extended`` engine resizes blocks where they are:

* a block keeps its NUMA mask: a grow takes more bytes of the same NUMA nodes, a shrink gives bytes back.
  A mask never widens, so the group rule (a node serves one NUMA group, memory-manager.md A4) and the
  alignment the pod was admitted with both hold.  Consequently: Infeasible
  (``resizeAllocateMemoryError``) when the mask's allocatable memory could not hold the pod's blocks on it
  even with every other pod gone; Deferred when it could but the bytes are not free now;
* a container gaining or losing its blocks (becoming or ceasing to be Guaranteed-equivalent), or a change
  to which memory types it asks for, is Infeasible (``inconsistentMemoryAllocationError``, named after
  KEP-5554's CPU reason);
* a KEP-5526 pod (pod entry, pod scope) resizes its budget on the pod mask and re-partitions it among
  its containers exactly as allocation does (PLR §4 memory steps 3-5); the pod shared pool must stay
  non-empty (``EmptyPodSharedPoolError``, §5);
* regular init containers have finished and are immutable (in-place-resize.md L5): their blocks stay.

Bytes are charged and returned node by node in ascending order, as allocation does
(:func:`enforcer.memorymanager.placement.charge`), without touching the assignment counts: the number
of blocks does not change.  Only the state object passed in is changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from enforcer.errors import AdmissionRejected, EmptyPodSharedPoolError, ResizeDeferred
from enforcer.features import FeatureGates
from enforcer.memorymanager import requests
from enforcer.memorymanager.state import Block, MemoryState, MemoryTable, NUMANodeState, ordered_types
from shared import pod_level, quantity
from shared.resources import PodResources


class InconsistentMemoryAllocationError(AdmissionRejected):
    """A container would gain or lose exclusive memory, or change its memory types."""

    reason = "inconsistentMemoryAllocationError"


class ResizeAllocateMemoryError(AdmissionRejected):
    """The blocks' NUMA nodes can never hold the new size."""

    reason = "resizeAllocateMemoryError"


@dataclass(frozen=True, slots=True)
class _Change:
    """One block's new size; ``owner`` is a container name, or "" for a KEP-5526 pod entry."""

    owner: str
    block: Block
    size: int

    @property
    def delta(self) -> int:
        return self.size - self.block.size


def _tables(machine: Mapping[int, NUMANodeState], bits: Sequence[int], resource: str) -> list[MemoryTable]:
    """The mask's tables for one resource type (a type a node lacks holds nothing there)."""
    return [t for n in bits if (t := machine[n].memory_map.get(resource)) is not None]


def _check_can_ever_hold(state: MemoryState, pod_uid: str, changes: Sequence[_Change]) -> None:
    """Infeasible when a mask's allocatable memory is smaller than what the pod alone will hold there."""
    machine = state.machine_state
    after: dict[tuple[tuple[int, ...], str], int] = {}
    resized = {(c.owner, c.block.type): c.size for c in changes}
    pod_entry = state.pod_blocks(pod_uid)
    charged = (
        [("", b) for b in pod_entry]
        if pod_entry is not None
        else [(name, b) for name, blocks in state.entries.get(pod_uid, {}).items() for b in blocks]
    )
    for owner, block in charged:
        key = (block.numa_affinity, block.type)
        after[key] = after.get(key, 0) + resized.get((owner, block.type), block.size)
    for (bits, resource), size in sorted(after.items()):
        allocatable = sum(t.allocatable for t in _tables(machine, bits, resource))
        if size > allocatable:
            raise ResizeAllocateMemoryError(
                f"resizeAllocateMemory Error: the pod needs {quantity.format_bytes(size)} of {resource} on NUMA "
                f"node(s) {list(bits)}, which can hold at most {quantity.format_bytes(allocatable)}"
            )


def _release_bytes(machine: dict[int, NUMANodeState], block: Block, size: int) -> None:
    for node_id in block.numa_affinity:
        table = machine[node_id].memory_map.get(block.type)
        if size == 0:
            return
        if table is None or table.reserved == 0:
            continue
        returned = min(table.reserved, size)
        table.reserved -= returned
        table.free += returned
        size -= returned


def _charge_bytes(machine: dict[int, NUMANodeState], block: Block, size: int) -> None:
    for node_id in block.numa_affinity:
        table = machine[node_id].memory_map.get(block.type)
        if size == 0:
            return
        if table is None or table.free <= 0:
            continue
        taken = min(table.free, size)
        table.free -= taken
        table.reserved += taken
        size -= taken


def _apply_bytes(state: MemoryState, changes: Sequence[_Change]) -> None:
    """Decreases first (R4.6), then increases if the masks have the bytes free; else Deferred."""
    machine = state.machine_state
    for change in changes:
        if change.delta < 0:
            _release_bytes(machine, change.block, -change.delta)
    wanted: dict[tuple[tuple[int, ...], str], int] = {}
    for change in changes:
        if change.delta > 0:
            key = (change.block.numa_affinity, change.block.type)
            wanted[key] = wanted.get(key, 0) + change.delta
    for (bits, resource), size in sorted(wanted.items()):
        free = sum(t.free for t in _tables(machine, bits, resource))
        if free < size:
            raise ResizeDeferred(
                f"Node didn't have enough free memory: {quantity.format_bytes(size)} more {resource} needed on "
                f"NUMA node(s) {list(bits)}, {quantity.format_bytes(free)} free"
            )
    for change in changes:
        if change.delta > 0:
            _charge_bytes(machine, change.block, change.delta)


def _container_changes(gates: FeatureGates, state: MemoryState, new: PodResources) -> list[_Change]:
    changes: list[_Change] = []
    for container in new.containers:
        if container.kind == "init":
            continue
        blocks = state.container_blocks(new.uid, container.name)
        wanted = requests.container_requests(new, container, gates)
        if blocks is None:
            if wanted:
                raise InconsistentMemoryAllocationError(
                    f"inconsistentMemoryAllocation Error: Not allowed to move container {container.name} from the "
                    "shared pool to exclusive memory"
                )
            continue
        if not wanted:
            raise InconsistentMemoryAllocationError(
                f"inconsistentMemoryAllocation Error: Not allowed to move container {container.name} from exclusive "
                "memory to the shared pool"
            )
        held = {b.type for b in blocks}
        if held != set(wanted):
            raise InconsistentMemoryAllocationError(
                f"inconsistentMemoryAllocation Error: container {container.name} holds {ordered_types(held)}, "
                f"the resize asks for {ordered_types(wanted)}"
            )
        for block in blocks:
            if wanted[block.type] != block.size:
                changes.append(_Change(container.name, block, wanted[block.type]))
    return changes


@dataclass(frozen=True)
class _PodBudgetPlan:
    new: PodResources
    bits: tuple[int, ...]
    total: dict[str, int]
    changes: tuple[_Change, ...]


def _pod_budget_plan(
    gates: FeatureGates, state: MemoryState, pod_blocks: list[Block], new: PodResources
) -> _PodBudgetPlan:
    total = requests.pod_requests(new, gates)
    held = {b.type for b in pod_blocks}
    if held != set(total):
        raise InconsistentMemoryAllocationError(
            f"inconsistentMemoryAllocation Error: the pod holds {ordered_types(held)}, "
            f"the resize asks for {ordered_types(total)}"
        )
    violation = requests.empty_pool_violation(new, gates)
    if violation is not None:
        raise EmptyPodSharedPoolError(violation)
    for name, budget in total.items():
        exclusive = sum(
            requests.container_requests(new, c, gates).get(name, 0) for c in new.containers if c.is_long_running
        )
        if exclusive > budget:
            raise ResizeAllocateMemoryError(
                f"resizeAllocateMemory Error: exclusive containers need {quantity.format_bytes(exclusive)} of "
                f"{name}, more than the pod budget of {quantity.format_bytes(budget)}"
            )
    changes = tuple(_Change("", b, total[b.type]) for b in pod_blocks if total[b.type] != b.size)
    return _PodBudgetPlan(new, pod_blocks[0].numa_affinity, total, changes)


def _plan(gates: FeatureGates, state: MemoryState, new: PodResources) -> list[_Change] | _PodBudgetPlan:
    pod_blocks = state.pod_blocks(new.uid)
    if pod_blocks:
        plan = _pod_budget_plan(gates, state, pod_blocks, new)
        _check_can_ever_hold(state, new.uid, plan.changes)
        return plan
    changes = _container_changes(gates, state, new)
    _check_can_ever_hold(state, new.uid, changes)
    return changes


class StaticMemoryResizePlan:
    """A checked resize of one pod's blocks: every Infeasible rule passed, ready to apply to a state."""

    __slots__ = ("_new", "_plan", "_gates")

    def __init__(self, gates: FeatureGates, new: PodResources, plan: list[_Change] | _PodBudgetPlan) -> None:
        self._gates = gates
        self._new = new
        self._plan = plan

    def apply(self, state: MemoryState) -> None:
        """Resize the pod's blocks in ``state`` (a copy of the planned-on state); raises the errors above
        (Deferred: :class:`ResizeDeferred`). On an error the state may be half-changed: callers work on a copy.
        """
        new, plan = self._new, self._plan
        if isinstance(plan, list):
            _apply_bytes(state, plan)
            for change in plan:
                blocks = state.container_blocks(new.uid, change.owner) or []
                state.set_container_blocks(
                    new.uid,
                    change.owner,
                    [Block(b.numa_affinity, b.type, change.size) if b.type == change.block.type else b for b in blocks],
                )
            return
        _apply_bytes(state, plan.changes)
        state.set_pod_blocks(new.uid, [Block(plan.bits, name, size) for name, size in plan.total.items()])
        for name, blocks in requests.partition(new, plan.total, plan.bits, self._gates).items():
            state.set_container_blocks(new.uid, name, blocks)


def plan_resize(
    gates: FeatureGates, state: MemoryState, old: PodResources, new: PodResources
) -> StaticMemoryResizePlan | None:
    """Check the resize against every permanent rule (raising the AdmissionRejected that makes it Infeasible).

    ``old`` is the allocated spec; the memory state already holds it, so only ``new`` is read. None: the
    Memory Manager never pinned this pod (R1.5).
    """
    del old
    if pod_level.never_pinned(new, managers_enabled=gates.pod_level_managers_enabled):
        return None
    return StaticMemoryResizePlan(gates, new, _plan(gates, state, new))
