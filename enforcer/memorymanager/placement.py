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
from enforcer.topology.family_memo import FamilyMemo
from enforcer.topology.hint_masks import (
    LayeredHints,
    Threshold,
    ThresholdScan,
    candidate_masks,
    min_cover_size,
    smallest_weights_count,
)
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
) -> dict[str, Sequence[TopologyHint]]:
    """H1-H6: one hint list per requested type (the same masks for all); ``{}`` when no mask fits.

    ``reusable`` is the pod's init-container memory by mask (A7), which counts as free (H5).  Each list is
    the :class:`~enforcer.topology.hint_masks.LayeredHints` of :func:`hint_family` (``distances`` is
    accepted for the callers' convenience; preferred hints do not depend on it), shared by every call
    with equal inputs (``_FAMILIES``).
    """
    if reusable:  # not kept: rare, and the key would need the reuse table too
        family = hint_family(machine, requests, reusable)
    else:
        family = _FAMILIES.get(
            _family_key(machine, requests), lambda: hint_family(machine, requests, reusable), _always
        )
    if family is None:
        return {}  # H6b: no key at all, which the Topology Manager reads as "don't care"
    return {name: family for name in requests}


FAMILY_CACHE_ENTRIES = 256
"""Distinct (machine memory state, request) inputs whose hint families are kept for reuse.

About 4 KB each with the layers a merge generated (tracemalloc), so at most about 1 MB; 4,096 entries
hit 79% instead of 75% in ``bench.bench_extender dry-runs`` but kept 16 MB alive, in the enforcer too,
and every kept object is one more for the collector to scan."""

_NodeKey = tuple[int, int, tuple[int, ...], tuple[tuple[int, int], ...]]  # id, assignments, cells, (allocatable, free)
_FamilyKey = tuple[tuple[_NodeKey, ...], tuple[tuple[str, int], ...]]


def _family_key(machine: Mapping[int, NUMANodeState], requests: Mapping[str, int]) -> _FamilyKey:
    """Everything :class:`_MemoryRules` reads: per node (in the machine's order) its assignments, group
    and the requested types' allocatable and free bytes; the requests in their order."""
    names = tuple(requests)
    nodes = []
    for node_id, node in machine.items():
        tables = node.memory_map
        sums = []
        for name in names:
            table = tables.get(name)
            sums.append((0, 0) if table is None else (table.allocatable, table.free))
        nodes.append((node_id, node.number_of_assignments, tuple(node.cells), tuple(sums)))
    return tuple(nodes), tuple(requests.items())


class _MemoryRules:
    """H1-H5 for one request on one machine state, mask by mask, and the sums behind them.

    Reads the machine only here: what the rules need is copied out (the tables' sums, each node's
    assignments and group), so the rules, and a family built on them, do not change when the state
    they were computed from is charged afterwards (``_FAMILIES`` shares them)."""

    def __init__(
        self,
        machine: Mapping[int, NUMANodeState],
        requests: Mapping[str, int],
        reusable: Mapping[int, Mapping[str, int]],
    ) -> None:
        self.requests = requests
        self.reusable = reusable
        self.node_ids = list(machine)
        self.names = list(requests)
        self.sizes = tuple(requests[name] for name in self.names)
        allocatable: dict[int, tuple[int, ...]] = {}
        free: dict[int, tuple[int, ...]] = {}
        for n, node in machine.items():
            tables = [node.memory_map.get(name) or _EMPTY for name in self.names]
            allocatable[n] = tuple(t.allocatable for t in tables)
            free[n] = tuple(t.free for t in tables)
        self.allocatable, self.free = allocatable, free
        self.used = {n: node.number_of_assignments > 0 for n, node in machine.items()}
        self.cells = {n: tuple(sorted(node.cells)) for n, node in machine.items()}  # sorted: H4 compares groups
        self.unused = [n for n in self.node_ids if not self.used[n]]
        self._hints: dict[tuple[int, ...], TopologyHint | None] = {}
        # H2: the narrowest capacity-fitting mask, over every mask (len(machine) when none fits)
        narrowest = min_cover_size([self.allocatable[n] for n in self.node_ids], self.sizes)
        self.min_affinity_size = len(machine) if narrowest is None else narrowest

    def fits(self, bits: Sequence[int]) -> bool:
        sizes = self.sizes
        # H1: enough allocatable (capacity, not free) for every type
        allocatable = self.allocatable
        if any(sum(allocatable[n][q] for n in bits) < size for q, size in enumerate(sizes)):
            return False
        single = len(bits) == 1
        cells = self.cells
        # H3: a node in a multi-node group is not available alone
        if single and len(cells[bits[0]]) > 1:
            return False
        # H4: a used node joins only the very group it already belongs to
        if not single:
            group = tuple(sorted(bits))
            if any(self.used[n] and (len(cells[n]) == 1 or cells[n] != group) for n in bits):
                return False
        # H5: enough free memory, counting what this pod's init containers leave behind
        reuse = self.reusable.get(bits_mask(bits), {})
        free = self.free
        return all(
            sum(free[n][q] for n in bits) + reuse.get(name, 0) >= size
            for q, (name, size) in enumerate(zip(self.names, sizes, strict=True))
        )

    def hint(self, bits: Sequence[int]) -> TopologyHint | None:
        """The hint for one mask, or None when it does not fit (H6: preferred iff as narrow as H2's)."""
        key = tuple(bits)
        if key in self._hints:
            return self._hints[key]
        hint: TopologyHint | None = None
        if bits and all(n in self.used for n in bits) and self.fits(bits):
            hint = TopologyHint(bits_mask(bits), len(bits) == self.min_affinity_size)
        self._hints[key] = hint
        return hint

    def threshold(self, containing: int = 0) -> Threshold:
        """Multi-node masks of unused nodes whose free memory holds every type (H1 follows: free <= allocatable)."""
        return Threshold(bits_mask(self.unused), containing, {n: self.free[n] for n in self.unused}, self.sizes, 2)

    def explicit(self) -> list[tuple[int, ...]]:
        """Masks outside the threshold part: single nodes, existing groups, masks with reusable memory."""
        masks: set[tuple[int, ...]] = {(n,) for n in self.node_ids}
        masks |= {cells for cells in self.cells.values() if len(cells) > 1}
        masks |= {mask_bits(mask) for mask in self.reusable if mask}
        return sorted(masks, key=lambda m: (len(m), m))


def hint_family(
    machine: Mapping[int, NUMANodeState],
    requests: Mapping[str, int],
    reusable: Mapping[int, Mapping[str, int]],
) -> LayeredHints | None:
    """The memory hints of one request as layers (see :mod:`enforcer.topology.hint_masks`); None if none fit."""
    rules = _MemoryRules(machine, requests, reusable)
    explicit = [bits for bits in rules.explicit() if rules.hint(bits) is not None]
    unused = rules.unused
    widest_threshold = tuple(sorted(unused))
    positions = [rules.free[n] for n in unused]
    threshold_min = min_cover_size(positions, rules.sizes, floor=2) if len(unused) >= 2 else None
    sizes = [len(bits) for bits in explicit] + ([threshold_min] if threshold_min is not None else [])
    if not sizes:
        return None
    always = explicit + ([widest_threshold] if threshold_min is not None else [])
    slack = sum(smallest_weights_count((rules.free[n][q] for n in unused), size) for q, size in enumerate(rules.sizes))

    def generate(max_size: int) -> list[TopologyHint]:
        result: list[TopologyHint] = []
        for bits in candidate_masks(rules.node_ids, max_size, always=always):
            hint = rules.hint(bits)
            if hint is not None:
                result.append(hint)
        return result

    return LayeredHints(
        numa_count=len(machine),
        min_fit_size=min(sizes),
        preferred_size=rules.min_affinity_size,
        preferred_max=rules.min_affinity_size,
        superset_slack=slack,
        superset_floor=2,
        threshold=rules.threshold() if threshold_min is not None else None,
        explicit=tuple(bits_mask(bits) for bits in explicit),
        hint_for=lambda mask: rules.hint(mask_bits(mask)),
        generate=generate,
    )


# The hint family of each distinct input (FamilyMemo says why).  Nodes of one kind often hold the same memory
# per NUMA node (requests come in a few sizes): three quarters of the families the extender's dry runs asked for
# had been computed before (``bench.bench_extender dry-runs``, 256 entries), and one was a fifth of a dry run.  A
# family only reads what ``_family_key`` holds (``_MemoryRules`` copies it out of the tables), so a shared one
# answers exactly as a new one would.
_FAMILIES: FamilyMemo[_FamilyKey, LayeredHints | None] = FamilyMemo(FAMILY_CACHE_ENTRIES)


def _always(_: LayeredHints | None) -> bool:
    return True


def best_hint(
    machine: Mapping[int, NUMANodeState],
    requests: Mapping[str, int],
    reusable: Mapping[int, Mapping[str, int]],
    containing: int = 0,
) -> TopologyHint | None:
    """``findBestHint`` over the ``memory`` hints that contain ``containing`` (all of them for 0).

    The same answer as :func:`find_best_hint` over the exhaustive list (preferred first, then the
    narrowest, then the lowest mask), found size by size without listing the masks: the explicit masks
    are checked one by one, the threshold part is scanned in ascending value.  Upstream decides on the
    ``memory`` hints only (every type carries the same masks), so None without a ``memory`` request.
    """
    if MEMORY not in requests:
        return None
    rules = _MemoryRules(machine, requests, reusable)
    explicit = [
        bits_mask(bits)
        for bits in rules.explicit()
        if bits_mask(bits) & containing == containing and rules.hint(bits) is not None
    ]
    threshold = rules.threshold(containing)
    unused = bits_mask(rules.unused)
    threshold_min: int | None = None
    if len(rules.unused) >= 2 and not containing & ~unused:
        index = {n: i for i, n in enumerate(rules.unused)}
        forced = sum(1 << index[n] for n in mask_bits(containing))
        threshold_min = min_cover_size([rules.free[n] for n in rules.unused], rules.sizes, floor=2, forced=forced)

    def lowest_of_size(size: int) -> int | None:
        found = [m for m in explicit if m.bit_count() == size]
        if threshold_min is not None and size >= threshold_min:
            first = next(iter(ThresholdScan(threshold, size, 1)), None)
            if first is not None:
                found.append(first)
        return min(found) if found else None

    preferred = lowest_of_size(rules.min_affinity_size)
    if preferred is not None:
        return TopologyHint(preferred, True)
    sizes = sorted({m.bit_count() for m in explicit} | ({threshold_min} if threshold_min is not None else set()))
    for size in sizes:
        mask = lowest_of_size(size)
        if mask is not None:
            return TopologyHint(mask, size == rules.min_affinity_size)
    return None


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
