"""Where memory may go: NUMA hints, the best hint, the group rule, and charging the tables.

Ports ``calculateHints``, ``findBestHint``, ``extendTopologyManagerHint``,
``isAffinitySatisfyRequest``, ``isAffinityViolatingNUMAAllocations``,
``updateMachineState`` and ``releaseMemory`` of the kubelet's ``policy_static.go``
(rules H1-H6, A2-A6, R6.1 of ``memory-manager.md``).  Functions take the
machine state (``{numa id: NUMANodeState}``) and mutate it only where their
name says so (:func:`charge`, :func:`release`).

Masks are ints (bit n = NUMA node n), hints are
:class:`~enforcer.topology.hints.TopologyHint`; a type a node does not have
reads as zero bytes (Go would dereference a nil table).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from enforcer.memorymanager.state import Block, MemoryTable, NUMANodeState, bits_mask, mask_bits
from enforcer.topology import hint_masks
from enforcer.topology.hints import TopologyHint
from shared.resources import MEMORY

MachineState = dict[int, NUMANodeState]
_EMPTY = MemoryTable(0, 0, 0, 0, 0)


def _table(machine: Mapping[int, NUMANodeState], node_id: int, resource: str) -> MemoryTable:
    node = machine.get(node_id)
    table = node.memory_map.get(resource) if node is not None else None
    return table if table is not None else _EMPTY


def _groups_equal(a: Iterable[int], b: Iterable[int]) -> bool:
    return sorted(a) == sorted(b)


def calculate_hints(
    machine: Mapping[int, NUMANodeState],
    requests: Mapping[str, int],
    reusable: Mapping[int, Mapping[str, int]],
    distances: Mapping[int, Sequence[int]] | None = None,
) -> dict[str, list[TopologyHint]]:
    """H1-H6: one hint list per requested type (the same masks for all); ``{}`` when no mask fits.

    ``reusable`` is the pod's init-container memory by mask (A7), which counts as free (H5).
    """
    masks: list[tuple[int, ...]] = []
    min_affinity_size = len(machine)
    node_ids = list(machine)
    min_size = max(
        (
            hint_masks.min_size_for((_table(machine, n, name).allocatable for n in node_ids), size)
            for name, size in requests.items()
        ),
        default=1,
    )
    groups = {tuple(sorted(state.cells)) for state in machine.values() if len(state.cells) > 1}
    for bits in hint_masks.candidate_masks(node_ids, min_size, distances=distances, extra=groups):
        # H1: enough allocatable (capacity, not free) for every type
        if any(sum(_table(machine, n, name).allocatable for n in bits) < size for name, size in requests.items()):
            continue
        # H2: the narrowest capacity-fitting mask decides what "preferred" means
        min_affinity_size = min(min_affinity_size, len(bits))
        single = len(bits) == 1
        # H3: a node in a multi-node group is not available alone
        if single and len(machine[bits[0]].cells) > 1:
            continue
        # H4: a used node joins only the very group it already belongs to
        if not single and any(
            machine[n].number_of_assignments > 0
            and (len(machine[n].cells) == 1 or not _groups_equal(machine[n].cells, bits))
            for n in bits
        ):
            continue
        # H5: enough free memory, counting what this pod's init containers leave behind
        mask = bits_mask(bits)
        if any(
            sum(_table(machine, n, name).free for n in bits) + reusable.get(mask, {}).get(name, 0) < size
            for name, size in requests.items()
        ):
            continue
        masks.append(bits)
    if not masks:
        return {}  # H6b: no key at all, which the Topology Manager reads as "don't care"
    # H6: same masks for every type; preferred iff as narrow as the narrowest capacity fit
    return {
        name: [TopologyHint(bits_mask(bits), len(bits) == min_affinity_size) for bits in masks] for name in requests
    }


def is_narrower(a: int, b: int) -> bool:
    """``BitMask.IsNarrowerThan``: fewer nodes, ties to the lower mask value."""
    ca, cb = a.bit_count(), b.bit_count()
    return a < b if ca == cb else ca < cb


def find_best_hint(hints: Iterable[TopologyHint]) -> TopologyHint | None:
    """``findBestHint``: preferred beats not preferred, then the narrowest; ``None`` for no hints."""
    best: TopologyHint | None = None
    for hint in hints:
        if best is None or _better(hint, best):
            best = hint
    return best


def _better(hint: TopologyHint, best: TopologyHint) -> bool:
    if hint.preferred != best.preferred:
        return hint.preferred
    return is_narrower(hint.mask or 0, best.mask or 0)


def hints_for_choice(hints: Mapping[str, Sequence[TopologyHint]]) -> Sequence[TopologyHint]:
    """Upstream decides on the ``memory`` hints only, as every type carries the same masks."""
    return hints.get(MEMORY, ())


def affinity_satisfies(machine: Mapping[int, NUMANodeState], mask: int, requests: Mapping[str, int]) -> bool:
    """``isAffinitySatisfyRequest``: the mask's free memory covers every type (reuse not counted)."""
    bits = mask_bits(mask)
    return all(sum(_table(machine, n, name).free for n in bits) >= size for name, size in requests.items())


def violates_group_rule(machine: Mapping[int, NUMANodeState], mask: int) -> bool:
    """A4: the final mask breaks the group rule of H3 or H4 (a used node serves exactly one NUMA group).

    A multi-node mask may not touch a used node of another group, nor a node used alone
    (``isAffinityViolatingNUMAAllocations``, H4).  A single-node mask may not land on a node
    of a multi-node group (H3): upstream checks only the first half, so a best-effort merge
    of a CPU hint {n} with a memory group hint {n,m} lets the kubelet charge a single-node
    block to a grouped node, after which the node's ``cells`` say [n] while node m's say
    [n,m] and ``validateState`` fails at the next kubelet start whenever Go's map order
    rebuilds node n's group from the wider block (kubernetes/kubernetes#113035).  The
    spec's A4 names both halves; refusing here keeps every admitted state restorable.
    """
    bits = mask_bits(mask)
    if len(bits) == 1:
        node = machine[bits[0]]
        return node.number_of_assignments > 0 and len(node.cells) > 1
    return any(
        machine[n].number_of_assignments > 0
        and (len(machine[n].cells) == 1 or not _groups_equal(machine[n].cells, bits))
        for n in bits
    )


def charge(machine: MachineState, bits: Sequence[int], resource: str, size: int) -> None:
    """A6 (``updateMachineState``): count the block on every node of the mask, take bytes node by node."""
    for node_id in bits:
        node = machine[node_id]
        node.number_of_assignments += 1
        node.cells = list(bits)
        if size == 0:
            continue
        table = node.memory_map.get(resource)
        if table is None or table.free <= 0:
            continue
        taken = min(table.free, size)
        table.reserved += taken
        table.free -= taken
        size -= taken


def release(machine: MachineState, blocks: Iterable[Block]) -> None:
    """R6.1 (``releaseMemory``): uncount every block, return its bytes from reserved to free node by node."""
    for block in blocks:
        size = block.size
        for node_id in block.numa_affinity:
            node = machine[node_id]
            node.number_of_assignments -= 1
            if node.number_of_assignments == 0:
                node.cells = [node_id]
            if size == 0:
                continue
            table = node.memory_map.get(block.type)
            if table is None or table.reserved == 0:
                continue
            returned = min(table.reserved, size)
            table.free += returned
            table.reserved -= returned
            size -= returned
