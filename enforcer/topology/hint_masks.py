"""Exact hint generation on any number of NUMA nodes: the kubelet's answer without its 2^N hint lists.

The kubelet's providers emit one hint per non-empty set of NUMA nodes that can hold the request
(``bitmask.IterateBitMasks``): 255 sets on 8 nodes, 2^64 - 1 on 64.  Our providers return a
:class:`LayeredHints` per resource instead: a sequence that *is* that exhaustive list (iterating it
yields the kubelet's hints, element by element, in its order) but can also hand out only its first
layers -- every hint on at most ``k`` nodes, plus a few masks that are always kept.  The Topology
Manager merge (:func:`merge_layered`) asks for as many layers as the proof below needs and gets the
same merged hint as the exhaustive merge.  Where the proof would need more masks than
:data:`EXACT_MASK_BUDGET`, it says so: see "Beyond reach" at the end.

Notation
--------
A dimension ``d`` (one resource of one provider) offers the family ``F_d`` of masks that can hold its
request; ``P_d`` is the preferred part.  The merge (``merge.py``) takes one mask per dimension, ANDs
them, and keeps the lowest ``rank``: preferred candidates (all hints preferred, all masks equal) first,
by ``key`` (count, [distance sum], value); then non-preferred ones by tier against
``T = max_d min{|M| : M in F_d}`` (tier 0: ``|X| == T``; tier 1: ``|X| < T``, wider first; tier 2:
``|X| > T``).  ``merge.py`` proves the fold is an argmin over the SET of candidates, so the merged
answer is ``min(C)`` for the candidate set ``C``, and it only depends on ``C`` and ``T``.

The families (what makes the proof work)
----------------------------------------
Each family is a *threshold* part plus an *explicit* part, ``F_d = Th_d ∪ Ex_d``:

* CPU (``generateCPUTopologyHints``): ``M`` fits iff it contains every NUMA node of the reusable CPUs
  ``R`` and ``|R| + sum_{n in M} free(n) >= request``.  ``Th`` is all of it, ``Ex`` is empty.
* Memory (``calculateHints``): a single node fits if not in a multi-node group and its free memory
  (plus reuse for that mask) holds every type; a multi-node mask with a used node fits only if it is
  exactly that node's group; a multi-node mask of unused nodes fits iff their free memory holds every
  type (allocatable >= free, so H1 follows).  ``Th`` = the multi-node masks of unused nodes with
  ``sum free_t >= size_t`` for every type; ``Ex`` = the singles, the existing groups and the masks
  this pod's init containers left memory on (reuse counts only for those exact masks).  A mask in
  ``Ex`` is checked with the full rules H1-H5.

``Th`` is upward closed inside its domain (supersets within it fit too) and described by sums, so
three numbers per dimension are computed exactly from per-node figures: ``m_d`` = the fewest nodes of
any mask in ``F_d`` (:func:`min_cover_size`), ``a_d`` = the kubelet's "minimal affinity" (the fewest
nodes whose *capacity* holds the request: preferred masks have exactly ``a_d`` nodes, or, with
align-by-socket, span the fewest sockets), and the *superset slack* ``σ_d``.

Lemma 1 (shrinking).  If ``X = ∩_d M_d`` and ``X ⊆ M'_d ⊆ M_d`` with ``M'_d ∈ F_d``, then
``∩_d M'_d = X``.  (It contains ``X`` and is contained in ``∩ M_d``.)  So every candidate ``X`` is
produced by a choice in which each threshold mask is *inclusion-minimal* among the masks of ``Th_d``
that contain ``X``.

Lemma 2 (how big a minimal superset is).  Let ``M ⊇ X`` be inclusion-minimal in ``Th_d``.  Each node
``z`` of ``Z = M - X`` (minus the nodes ``R`` forces in) is critical for some sum ``q``: dropping it
breaks ``sum_q``.  Take the critical nodes ``Q_q`` of one sum and drop the heaviest: the rest weigh
less than ``need_q``, so ``|Q_q| - 1`` is less than ``c_q``, the number of the machine's *smallest*
positive weights that reach ``need_q``.  Hence ``|M| <= |X| + |forced| + sum_q c_q`` (and at least 2
nodes for memory's multi-node part): :meth:`LayeredHints.superset_bound`.

Theorem.  Let ``E_d(K)`` be ``F_d`` restricted to masks of at most ``K`` nodes, plus ``Ex_d`` and the
widest mask of ``Th_d`` (always emitted), with exactly the exhaustive list's preferred flags; let
``h'`` be the merge over ``E(K)``, where ``C_K ⊆ C`` is its candidate set.

1. ``T`` is unchanged once ``K >= m_d`` for every dimension (a smallest mask is kept).
2. If ``h'`` is preferred, it is the exhaustive answer: a preferred candidate is one mask ``X`` offered
   as preferred by every dimension, so ``|X| = a_d = m_d <= K`` for every dimension without the socket
   rule; with it (CPU only), ``h'`` has at most ``K`` nodes and beats every wider preferred mask by
   count.  Every preferred candidate of ``C`` that can beat ``h'`` is in ``C_K``, and ``h' = min``.
3. If ``h'`` is not preferred, let ``s`` be ``T`` when ``|h'| <= T`` (tiers 0 and 1) and ``|h'|``
   otherwise (tier 2).  Every candidate that beats ``h'`` has at most ``s`` nodes (tier order above).
   By the lemmas such a candidate is produced by masks of at most ``max_d superset_bound(s)`` nodes
   (or by always-emitted ones).  With ``K`` at least that, and at least every preferred size (no
   preferred candidate hides beyond ``K``), every beater would be in ``C_K``; ``h'`` is the minimum of
   ``C_K``, so nothing beats it and ``h'`` is the exhaustive answer.
4. A cheaper certificate for the common tier-0 answer: every candidate lies within the nodes that some
   fitting mask of every dimension can hold (its "reach").  Let ``L`` be the lowest-key ``T``-node
   subset of the reach (the ``T`` lowest nodes, or the closest such set under prefer-closest): no
   ``T``-node candidate has a lower key.  If no preferred candidate exists and ``L`` is a candidate
   (``h'`` itself, or shown by one mask per dimension whose AND is ``L``: :func:`_achievable`), then
   ``L`` is tier 0, which beats every other tier, and lowest in it: the exhaustive answer, without
   wider layers.

:func:`merge_layered` merges with ``K = max m_d``, which decides every preferred answer (2), then
certifies a non-preferred answer by (4) or widens once to the bound of (3).  Restricted and single-numa-node
only ever admit preferred answers, so they never need step 3 to decide admission (single-numa-node
keeps only preferred single-node hints before merging: one layer, always exact).

Which masks the merge can never choose, in words: a non-minimal mask matters only as a superset that
carves a smaller AND out of another dimension's mask (lemma 1), and only up to the size lemma 2
bounds; masks wider than every preferred size cannot be preferred candidates; the "all non-nil masks
equal" rule means a preferred candidate is a single mask every dimension offers, so masks of other
sizes never make one.

Beyond reach
------------
The layers ``K`` needs can exceed :data:`EXACT_MASK_BUDGET` masks on huge machines (e.g. five of 64
nodes: 8.3 million masks).  Then:

* a preferred answer is found exactly by a search over the threshold sums instead of enumeration
  (:func:`_best_preferred_by_search`: ascending mask value, or with prefer-closest a branch and bound on
  the distance sum, :class:`ClosestSearch`), so restricted and single-numa-node admit exactly what the
  exhaustive merge admits.  A search that has to look at more than the budget of masks stops and the
  merge is counted as a fallback: this can happen with align-by-socket (preferred masks of several
  sizes are enumerated) or a prefer-closest search that does not close, and restricted could then
  refuse a pod whose only preferred masks lie beyond what was looked at;
* a non-preferred answer is decided by part 4 when it can be; otherwise (:data:`FALLBACK_NAME`) it is a
  tier-0 candidate found cheaply (:func:`_some_tier0_candidate`) or the merge of the widest affordable
  layers: the pod is admitted as best-effort always admits, possibly on another non-preferred mask than
  the kubelet's; :func:`fallback_count` counts these and a warning is logged with the layers used and
  needed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, combinations
from math import comb
from typing import overload

from enforcer.topology import bitmask
from enforcer.topology.hints import TopologyHint

log = logging.getLogger(__name__)

EXACT_MASK_BUDGET = 1 << 16
"""The most masks one dimension may enumerate per merge (every mask of 16 NUMA nodes)."""

MAX_MASKS_PER_SIZE = 2048
"""How many NUMA sets of one size an in-place resize lists when it looks for room to grow (not hints)."""

FALLBACK_NAME = "bounded-layers"
"""What a best-effort merge beyond :data:`EXACT_MASK_BUDGET` does (module docstring, "Beyond reach")."""

_fallbacks = 0
_fallbacks_lock = threading.Lock()


def fallback_count() -> int:
    """How many merges used :data:`FALLBACK_NAME` since start (``numaguard_topology_hint_fallbacks_total``)."""
    return _fallbacks


def _count_fallback() -> None:
    global _fallbacks
    with _fallbacks_lock:
        _fallbacks += 1


# --- counting and enumerating masks ---------------------------------------------------------------------------------


def masks_up_to(numa_count: int, size: int) -> int:
    """How many masks have 1..``size`` of ``numa_count`` nodes."""
    return sum(comb(numa_count, s) for s in range(1, min(size, numa_count) + 1))


def affordable_size(numa_count: int, budget: int = EXACT_MASK_BUDGET) -> int:
    """The widest layer whose masks, with all narrower ones, fit in ``budget`` (at least 1)."""
    size = 1
    while size < numa_count and masks_up_to(numa_count, size + 1) <= budget:
        size += 1
    return size


def candidate_masks(
    numa_ids: Sequence[int], max_size: int, *, always: Iterable[tuple[int, ...]] = ()
) -> Iterator[tuple[int, ...]]:
    """Every NUMA set of at most ``max_size`` nodes, plus ``always``, in ``IterateBitMasks`` order."""
    ids = sorted(numa_ids)
    limit = min(max_size, len(ids))
    wider = sorted({tuple(sorted(m)) for m in always if len(m) > limit}, key=lambda m: (len(m), m))
    for size in range(1, limit + 1):
        yield from combinations(ids, size)
    yield from wider


# --- sums over nodes ------------------------------------------------------------------------------------------------


def min_size_for(capacities: Iterable[int], request: int) -> int:
    """The fewest nodes whose combined capacity can hold ``request`` (len+1 when none can)."""
    ordered = sorted(capacities, reverse=True)
    total = 0
    for count, capacity in enumerate(ordered, start=1):
        total += capacity
        if total >= request:
            return count
    return len(ordered) + 1


def smallest_weights_count(values: Iterable[int], need: int) -> int:
    """``c``: how many of the smallest positive values reach ``need`` (all of them when they cannot).

    Lemma 2: an inclusion-minimal cover of ``need`` has at most this many nodes critical for it.
    """
    if need <= 0:
        return 0
    total = 0
    positives = sorted(v for v in values if v > 0)
    for count, value in enumerate(positives, start=1):
        total += value
        if total >= need:
            return count
    return len(positives)


def min_cover_size(
    weights: Sequence[Sequence[int]], needs: Sequence[int], *, floor: int = 1, forced: int = 0
) -> int | None:
    """The fewest nodes (at least ``floor``, including the ``forced`` ones) whose weights reach every need.

    ``weights[i]`` holds node ``i``'s weight for each need; ``forced`` is a bitmask of node indexes that
    must be in.  Exact: one need is greedy; several are a depth-first search bounded by each need's
    heaviest remaining weights.  ``None`` when even every node together falls short.
    """
    count = len(weights)
    forced_ids = [i for i in range(count) if forced >> i & 1]
    have = [sum(weights[i][q] for i in forced_ids) for q in range(len(needs))]
    residual = [max(0, need - got) for need, got in zip(needs, have, strict=True)]
    free_ids = [i for i in range(count) if not forced >> i & 1]
    for q, need in enumerate(residual):
        if sum(weights[i][q] for i in free_ids) < need:
            return None
    base = len(forced_ids)
    if base + len(free_ids) < floor:
        return None
    lower = max(
        [floor - base, 0] + [_greedy_count([weights[i][q] for i in free_ids], r) for q, r in enumerate(residual)]
    )
    if len(residual) <= 1:
        return base + lower
    rows = [tuple(weights[i]) for i in free_ids]
    for extra in range(lower, len(rows) + 1):
        if _exists_cover(rows, residual, extra):
            return base + extra
    return None  # pragma: no cover - every node together reaches every need (checked above)


def _greedy_count(values: list[int], need: int) -> int:
    if need <= 0:
        return 0
    total = 0
    for count, value in enumerate(sorted(values, reverse=True), start=1):
        total += value
        if total >= need:
            return count
    return len(values) + 1


def _exists_cover(rows: Sequence[tuple[int, ...]], needs: Sequence[int], size: int) -> bool:
    """Whether some ``size`` rows reach every need (branch and bound on the heaviest remaining weights)."""
    order = sorted(range(len(rows)), key=lambda i: sum(rows[i]), reverse=True)
    ordered = [rows[i] for i in order]
    width = len(needs)
    # suffix_top[p][q]: weights of rows p.. for need q, heaviest first, as running sums
    suffix_top: list[list[list[int]]] = []
    for p in range(len(ordered) + 1):
        tops = []
        for q in range(width):
            running = [0]
            for value in sorted((r[q] for r in ordered[p:]), reverse=True):
                running.append(running[-1] + value)
            tops.append(running)
        suffix_top.append(tops)

    def search(position: int, left: int, sums: tuple[int, ...]) -> bool:
        if all(s >= n for s, n in zip(sums, needs, strict=True)):
            return True
        if left == 0 or position == len(ordered):
            return False
        tops = suffix_top[position]
        for q in range(width):
            if sums[q] + tops[q][min(left, len(tops[q]) - 1)] < needs[q]:
                return False
        row = ordered[position]
        taken = tuple(s + v for s, v in zip(sums, row, strict=True))
        return search(position + 1, left - 1, taken) or search(position + 1, left, sums)

    return search(0, size, (0,) * width)


# --- the families ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Threshold:
    """``Th_d``: masks inside ``domain``, holding ``forced``, of at least ``floor`` nodes, whose per-node
    ``weights[node][q]`` add up to ``needs[q]`` for every ``q``."""

    domain: int
    forced: int
    weights: Mapping[int, tuple[int, ...]]
    needs: tuple[int, ...]
    floor: int = 1

    def fits(self, mask: int) -> bool:
        if mask & ~self.domain or self.forced & ~mask or mask.bit_count() < self.floor:
            return False
        sums = [0] * len(self.needs)
        rest = mask
        while rest:
            low = rest & -rest
            rest ^= low
            for q, value in enumerate(self.weights[low.bit_length() - 1]):
                sums[q] += value
        return all(s >= n for s, n in zip(sums, self.needs, strict=True))


class LayeredHints(Sequence[TopologyHint]):
    """One dimension's hints: the exhaustive list (as a sequence) and its first layers (for the merge).

    ``generate(k)`` returns the hints of every fitting mask of at most ``k`` nodes plus the always-kept
    masks (``explicit`` and the widest threshold mask), in ``IterateBitMasks`` order, with the
    exhaustive list's preferred flags; ``hint_for(mask)`` is the same rule for one mask.
    """

    __slots__ = (
        "numa_count",
        "min_fit_size",
        "preferred_size",
        "preferred_max",
        "superset_slack",
        "superset_floor",
        "threshold",
        "explicit",
        "hint_for",
        "_generate",
        "_layers",
    )

    def __init__(
        self,
        *,
        numa_count: int,
        min_fit_size: int,
        preferred_size: int,
        preferred_max: int,
        superset_slack: int,
        superset_floor: int,
        threshold: Threshold | None,
        explicit: tuple[int, ...],
        hint_for: Callable[[int], TopologyHint | None],
        generate: Callable[[int], list[TopologyHint]],
    ) -> None:
        self.numa_count = numa_count
        self.min_fit_size = min_fit_size
        self.preferred_size = preferred_size
        self.preferred_max = preferred_max
        self.superset_slack = superset_slack
        self.superset_floor = superset_floor
        self.threshold = threshold
        self.explicit = explicit
        self.hint_for = hint_for
        self._generate = generate
        self._layers: dict[int, list[TopologyHint]] = {}

    def up_to(self, size: int) -> list[TopologyHint]:
        """Every hint of at most ``size`` nodes plus the always-kept ones (all of them from ``numa_count``)."""
        size = min(size, self.numa_count)
        layer = self._layers.get(size)
        if layer is None:
            layer = self._layers[size] = self._generate(size)
        return layer

    def superset_bound(self, size: int) -> int:
        """Lemma 2: no inclusion-minimal threshold mask holding a ``size``-node mask has more nodes."""
        return min(self.numa_count, max(self.superset_floor, size + self.superset_slack))

    def all_hints(self) -> list[TopologyHint]:
        """The kubelet's exhaustive list."""
        return self.up_to(self.numa_count)

    @overload
    def __getitem__(self, index: int) -> TopologyHint: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[TopologyHint]: ...

    def __getitem__(self, index: int | slice) -> TopologyHint | Sequence[TopologyHint]:
        return self.all_hints()[index]

    def __len__(self) -> int:
        return len(self.all_hints())

    def __iter__(self) -> Iterator[TopologyHint]:
        return iter(self.all_hints())

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence holding the same hints in the same order (it *is* the exhaustive list)."""
        if isinstance(other, LayeredHints):
            return self.all_hints() == other.all_hints()
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return self.all_hints() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        return True  # never built for an empty family (providers return [] or {} for those)

    def __repr__(self) -> str:
        return (
            f"LayeredHints(numa={self.numa_count}, min_fit={self.min_fit_size}, preferred={self.preferred_size}, "
            f"layers={sorted(self._layers)})"
        )


# --- the merge driver -----------------------------------------------------------------------------------------------

Merge = Callable[[Sequence[Sequence[TopologyHint]]], TopologyHint]
MaskKey = Callable[[int], tuple[int, int, int]]


def merge_layered(
    dimensions: Sequence[Sequence[TopologyHint]],
    merge: Merge,
    key: MaskKey,
    *,
    closest: bool = False,
    budget: int | None = None,
) -> TopologyHint:
    """The exhaustive merge's answer, merging only the layers the theorem (module docstring) needs.

    ``merge`` is the merge over explicit hint lists, ``key`` the preferred order of masks
    (count, distance sum or 0, value), ``closest`` whether that sum is used (prefer-closest); ``budget``
    defaults to :data:`EXACT_MASK_BUDGET` (read per call).
    Plain lists pass through unchanged.
    """
    if budget is None:
        budget = EXACT_MASK_BUDGET
    layered = [d for d in dimensions if isinstance(d, LayeredHints)]
    if not layered:
        return merge(dimensions)
    numa_count = max(d.numa_count for d in layered)
    widest = affordable_size(numa_count, budget)
    target = 0
    for dimension in dimensions:
        if isinstance(dimension, LayeredHints):
            target = max(target, dimension.min_fit_size)
        else:
            counts = [h.mask.bit_count() for h in dimension if h.mask is not None]
            target = max(target, min(counts, default=0))
    first = max(d.min_fit_size for d in layered)

    def layers(size: int) -> list[Sequence[TopologyHint]]:
        return [d.up_to(size) if isinstance(d, LayeredHints) else d for d in dimensions]

    if first > widest:
        found, exact = _best_preferred_by_search(dimensions, layered, key, budget, closest=closest)
        if found is not None:
            hint = TopologyHint(found, True)
            return hint if exact else _fallback(hint, used=widest, needed=first)
        # no preferred candidate (exactly so unless the search was cut short): restricted and single-numa-node
        # refuse exactly as the exhaustive merge does; best-effort's non-preferred mask is certified by part 4,
        # or else a tier-0 candidate (T nodes) found cheaply; narrower layers would misjudge T
        if exact:
            floor = _lowest_in_reach(dimensions, target, key, budget, closest=closest)
            if floor is not None and _achievable(floor, dimensions):
                return TopologyHint(floor, False)
        candidate = _some_tier0_candidate(dimensions, layered, target, budget)
        if candidate is not None:
            return _fallback(TopologyHint(candidate, False), used=widest, needed=first)
        return _fallback(merge(layers(widest)), used=widest, needed=first)
    best = merge(layers(first))
    if best.preferred:
        return best
    mask = best.mask or 0
    beat = target if mask.bit_count() <= target else mask.bit_count()
    preferred_max = min(d.preferred_max for d in layered)  # a preferred candidate is preferred everywhere
    needed = max([first, preferred_max] + [d.superset_bound(beat) for d in layered])
    if needed <= first:
        return best
    if preferred_max <= first:  # no preferred candidate anywhere: theorem, part 4
        floor = _lowest_in_reach(dimensions, target, key, budget, closest=closest)
        if floor is not None and (floor == mask or _achievable(floor, dimensions)):
            return TopologyHint(floor, False)
    if needed <= widest:
        return merge(layers(needed))
    if preferred_max > widest:
        found, exact = _best_preferred_by_search(dimensions, layered, key, budget, closest=closest)
        if found is not None:
            hint = TopologyHint(found, True)
            return hint if exact else _fallback(hint, used=widest, needed=needed)
    return _fallback(merge(layers(widest)), used=widest, needed=needed)


def _reach(dimensions: Sequence[Sequence[TopologyHint]]) -> int:
    """The nodes that can be in some fitting mask of every dimension (a candidate lies within them)."""
    reach = -1
    for dimension in dimensions:
        if isinstance(dimension, LayeredHints):
            nodes = dimension.threshold.domain if dimension.threshold is not None else 0
            for mask in dimension.explicit:
                nodes |= mask
        elif any(h.mask is None for h in dimension):
            continue
        else:
            nodes = 0
            for h in dimension:
                nodes |= h.mask or 0
        reach &= nodes
    return reach if reach != -1 else 0


def _lowest_in_reach(
    dimensions: Sequence[Sequence[TopologyHint]], size: int, key: MaskKey, budget: int, *, closest: bool
) -> int | None:
    """The lowest-key ``size``-node subset of :func:`_reach`: no candidate of that size has a lower key.

    None when the reach is too small, or the prefer-closest search did not close within ``budget``.
    """
    reach = _reach(dimensions)
    if size <= 0 or reach.bit_count() < size:
        return None
    if not closest:
        return bitmask.lowest_bits(reach, size)
    nodes = [n for n in range(reach.bit_length()) if reach >> n & 1]
    free_for_all = Threshold(reach, 0, {n: () for n in nodes}, ())
    search = ClosestSearch(free_for_all, size, lambda mask: True, key, budget)
    best = search.best()
    return None if search.truncated else best


def _fitting_supersets(mask: int, dimension: Sequence[TopologyHint]) -> list[int] | None:
    """Some masks of ``dimension`` holding ``mask`` (itself, the widest threshold mask, explicit ones);
    None for a dimension with a nil hint (the whole machine: it holds any mask and carves nothing)."""
    if isinstance(dimension, LayeredHints):
        wider = [dimension.threshold.domain] if dimension.threshold is not None else []
        tried = dict.fromkeys((mask, *wider, *dimension.explicit))
        return [m for m in tried if m & mask == mask and dimension.hint_for(m) is not None]
    if any(h.mask is None for h in dimension):
        return None
    return [h.mask for h in dimension if h.mask is not None and h.mask & mask == mask]


def _achievable(mask: int, dimensions: Sequence[Sequence[TopologyHint]]) -> bool:
    """A sufficient test that ``mask`` is a candidate: one mask per dimension whose AND is ``mask``.

    Either one dimension offers ``mask`` itself and every other one a superset; or one dimension offers
    ``mask`` plus some extra nodes (grown greedily) and every other one a superset without them.
    """
    supersets = [_fitting_supersets(mask, d) for d in dimensions]
    if any(found is not None and not found for found in supersets):
        return False  # some dimension holds no superset: no AND can be this mask
    if any(found is not None and mask in found for found in supersets):
        return True
    for i, carver in enumerate(dimensions):
        if not isinstance(carver, LayeredHints):
            continue
        grown = _grow(mask, carver)
        if grown is None:
            continue
        extra = grown & ~mask
        others = [found for j, found in enumerate(supersets) if j != i and found is not None]
        if others and all(any(not m & extra for m in found) for found in others):
            return True  # nil dimensions are the whole machine: neutral in the AND
    return False


def _grow(mask: int, dimension: LayeredHints) -> int | None:
    """``mask`` plus nodes of the threshold domain, heaviest first, until the dimension offers it."""
    threshold = dimension.threshold
    if threshold is None:
        return None
    grown = mask
    order = sorted(
        (n for n in threshold.weights if threshold.domain >> n & 1 and not mask >> n & 1),
        key=lambda n: tuple(-w for w in threshold.weights[n]),
    )
    for node in order:
        if dimension.hint_for(grown) is not None:
            return grown
        grown |= 1 << node
    return grown if dimension.hint_for(grown) is not None else None


def _fallback(best: TopologyHint, *, used: int, needed: int) -> TopologyHint:
    _count_fallback()
    log.warning(
        "topology hint merge beyond the exact mask budget: non-preferred answer from the narrower layers",
        extra={"fallback": FALLBACK_NAME, "layers_used": used, "layers_needed": needed, "hint": str(best)},
    )
    return best


def _some_tier0_candidate(
    dimensions: Sequence[Sequence[TopologyHint]], layered: Sequence[LayeredHints], target: int, budget: int
) -> int | None:
    """A candidate of ``T`` nodes (tier 0, the best non-preferred tier): the lowest ``T``-node mask of a
    dimension whose narrowest masks have ``T`` nodes that every other dimension covers with one of its masks.

    Not necessarily the kubelet's lowest tier-0 mask (an AND of wider masks can be lower), but one of its
    candidates, with the count the kubelet's answer has.
    """

    def covered(mask: int, dimension: Sequence[TopologyHint]) -> bool:
        if isinstance(dimension, LayeredHints):
            wider = [dimension.threshold.domain] if dimension.threshold is not None else []
            return any(
                m & mask == mask and dimension.hint_for(m) is not None for m in (mask, *wider, *dimension.explicit)
            )
        return any(h.mask is None or h.mask & mask == mask for h in dimension)

    for owner in layered:
        if owner.min_fit_size != target:
            continue
        own = [m for m in owner.explicit if m.bit_count() == target]
        scanned = ThresholdScan(owner.threshold, target, budget) if owner.threshold is not None else ()
        for mask in chain(sorted(own), (m for m in scanned if owner.hint_for(m) is not None)):
            if all(covered(mask, d) for d in dimensions if d is not owner):
                return mask
    return None


def _best_preferred_by_search(
    dimensions: Sequence[Sequence[TopologyHint]],
    layered: Sequence[LayeredHints],
    key: MaskKey,
    budget: int,
    *,
    closest: bool,
) -> tuple[int | None, bool]:
    """The lowest-key mask every dimension offers as preferred (theorem, part 2), without enumerating layers.

    Returns ``(mask or None, exact)``.  A preferred candidate is one mask ``X`` preferred in every dimension
    (nil preferred hints match any).  For the layered dimensions ``X`` is either one of their explicit masks
    or in every threshold part; the latter are searched in ascending mask value (the narrowest order) and
    checked against every dimension.  Not exact only when more than ``budget`` threshold masks had to be
    looked at (align-by-socket's preferred masks of several sizes, or a prefer-closest search cut short).
    """
    sized = all(d.preferred_max == d.preferred_size for d in layered)
    # a preferred mask fits (at least m_d nodes) and, where only the size decides, has exactly a_d nodes
    # (align-by-socket also prefers masks narrower or wider than a_d that span the fewest sockets)
    low = max(
        [d.min_fit_size for d in layered] + [d.preferred_size for d in layered if d.preferred_max == d.preferred_size]
    )
    high = min(d.preferred_max for d in layered)
    if sized and len({d.preferred_size for d in layered}) != 1:
        return None, True  # preferred masks have a_d nodes in every dimension: no mask is preferred by all
    explicit_sets: list[set[int] | None] = []
    for dimension in dimensions:
        if isinstance(dimension, LayeredHints):
            continue
        if any(h.mask is None and h.preferred for h in dimension):
            explicit_sets.append(None)
        else:
            explicit_sets.append({h.mask for h in dimension if h.preferred and h.mask is not None})

    def offered_by_all(mask: int) -> bool:
        for d in layered:
            hint = d.hint_for(mask)
            if hint is None or not hint.preferred:
                return False
        return all(masks is None or mask in masks for masks in explicit_sets)

    found = [m for d in layered for m in d.explicit if offered_by_all(m)]
    thresholds = [d.threshold for d in layered]
    exact = True
    if all(t is not None for t in thresholds):
        joint = _joint([t for t in thresholds if t is not None])
        for size in range(low, high + 1):
            if found and min(m.bit_count() for m in found) < size:
                break  # count comes first in the key
            if closest:
                search = ClosestSearch(joint, size, offered_by_all, key, budget)
                best = search.best()
                if best is not None:
                    found.append(best)
                exact = exact and not search.truncated
                continue
            scan = ThresholdScan(joint, size, budget)
            for mask in scan:
                if offered_by_all(mask):
                    found.append(mask)
                    break  # ascending values: without distances the first one is the lowest key
            exact = exact and not scan.truncated
    return (min(found, key=key) if found else None), exact


def _joint(thresholds: Sequence[Threshold]) -> Threshold:
    domain = -1
    forced = 0
    for t in thresholds:
        domain &= t.domain
        forced |= t.forced
    nodes = [n for n in thresholds[0].weights if domain >> n & 1]
    weights = {n: tuple(v for t in thresholds for v in t.weights[n]) for n in nodes}
    needs = tuple(v for t in thresholds for v in t.needs)
    return Threshold(domain, forced, weights, needs, max(t.floor for t in thresholds))


class ThresholdScan:
    """The ``size``-node masks of a threshold family in ascending value (depth-first, bounded by sums).

    Stops after ``budget`` masks and then says so in ``truncated``.
    """

    def __init__(self, threshold: Threshold, size: int, budget: int) -> None:
        self.threshold = threshold
        self.size = size
        self.budget = budget
        self.truncated = False

    def __iter__(self) -> Iterator[int]:
        threshold, size = self.threshold, self.size
        forced = threshold.forced
        if forced & ~threshold.domain or size < threshold.floor or forced.bit_count() > size:
            return
        nodes = sorted(n for n in threshold.weights if not forced >> n & 1 and threshold.domain >> n & 1)
        needs = list(threshold.needs)
        width = len(needs)
        base = [0] * width
        rest = forced
        while rest:
            low = rest & -rest
            rest ^= low
            for q, value in enumerate(threshold.weights[low.bit_length() - 1]):
                base[q] += value
        # prefix_top[p][q]: running sums of the heaviest weights among nodes[:p]
        prefix_top: list[list[list[int]]] = []
        for p in range(len(nodes) + 1):
            tops = []
            for q in range(width):
                running = [0]
                for value in sorted((threshold.weights[n][q] for n in nodes[:p]), reverse=True):
                    running.append(running[-1] + value)
                tops.append(running)
            prefix_top.append(tops)
        emitted = 0

        def search(upper: int, left: int, sums: list[int], mask: int) -> Iterator[int]:
            # the highest remaining node first, lowest choice first: masks come out in ascending value
            nonlocal emitted
            if left == 0:
                if all(s >= n for s, n in zip(sums, needs, strict=True)):
                    emitted += 1
                    yield mask
                return
            for index in range(left - 1, upper):
                if emitted >= self.budget:
                    self.truncated = True
                    return
                tops = prefix_top[index]
                node_weights = threshold.weights[nodes[index]]
                if any(
                    sums[q] + node_weights[q] + tops[q][min(left - 1, len(tops[q]) - 1)] < needs[q]
                    for q in range(width)
                ):
                    continue
                taken = [s + v for s, v in zip(sums, node_weights, strict=True)]
                yield from search(index, left - 1, taken, mask | 1 << nodes[index])

        yield from search(len(nodes), size - forced.bit_count(), base, forced)


class ClosestSearch:
    """The lowest-key ``size``-node mask of a threshold family that ``accept`` takes, under prefer-closest.

    Depth-first over the nodes in ascending id (take or leave each), pruned by the sums (the heaviest
    remaining weights must still reach every need) and by the distance sum: what is chosen, plus the
    ``left`` cheapest marginal costs among the remaining nodes, plus ``left`` choose 2 times the cheapest
    pair, is a lower bound of any completion.  Branches whose bound exceeds the best sum found are cut,
    and so are those that can at best tie it with a higher mask value (the lowest completion takes the
    lowest remaining ids).  Gives up after ``budget`` visited branches
    and then says so in ``truncated``.
    """

    def __init__(
        self, threshold: Threshold, size: int, accept: Callable[[int], bool], key: MaskKey, budget: int
    ) -> None:
        self.threshold = threshold
        self.size = size
        self.accept = accept
        self.key = key
        self.budget = budget
        self.truncated = False

    def best(self) -> int | None:
        threshold, key = self.threshold, self.key
        forced = threshold.forced
        if forced & ~threshold.domain or self.size < threshold.floor or forced.bit_count() > self.size:
            return None
        nodes = sorted(n for n in threshold.weights if not forced >> n & 1 and threshold.domain >> n & 1)
        own = {n: key(1 << n)[1] for n in nodes}
        forced_ids = [n for n in threshold.weights if forced >> n & 1]
        pair: dict[int, dict[int, int]] = {n: {} for n in nodes}
        for i, a in enumerate(nodes):
            for b in nodes[i + 1 :]:
                pair[a][b] = pair[b][a] = key(1 << a | 1 << b)[1] - own[a] - own[b]
        cheapest_pair = min((cost for row in pair.values() for cost in row.values()), default=0)
        width = len(threshold.needs)
        needs = threshold.needs
        suffix_top: list[list[list[int]]] = []
        for p in range(len(nodes) + 1):
            tops = []
            for q in range(width):
                running = [0]
                for value in sorted((threshold.weights[n][q] for n in nodes[p:]), reverse=True):
                    running.append(running[-1] + value)
                tops.append(running)
            suffix_top.append(tops)
        base_sums = [sum(threshold.weights[n][q] for n in forced_ids) for q in range(width)]
        base_cost = key(forced)[1] if forced else 0
        # marginal[n]: what adding n costs given the chosen nodes (forced ones first)
        marginal = {n: key(forced | 1 << n)[1] - base_cost if forced else own[n] for n in nodes}
        best_mask: int | None = None
        best_key: tuple[int, int, int] | None = None
        visits = 0

        def search(position: int, left: int, mask: int, cost: int, sums: list[int], marg: dict[int, int]) -> None:
            nonlocal best_mask, best_key, visits
            visits += 1
            if visits > self.budget:
                self.truncated = True
                return
            if left == 0:
                if all(s >= n for s, n in zip(sums, needs, strict=True)) and self.accept(mask):
                    candidate = key(mask)
                    if best_key is None or candidate < best_key:
                        best_mask, best_key = mask, candidate
                return
            rest = nodes[position:]
            if len(rest) < left:
                return
            tops = suffix_top[position]
            if any(sums[q] + tops[q][min(left, len(tops[q]) - 1)] < needs[q] for q in range(width)):
                return
            if best_key is not None:
                cheapest = sorted(marg[n] for n in rest)[:left]
                bound = cost + sum(cheapest) + left * (left - 1) // 2 * cheapest_pair
                if bound > best_key[1]:
                    return
                if bound == best_key[1] and mask | sum(1 << n for n in rest[:left]) > best_key[2]:
                    return  # at best a tie on the sum, and every completion has a higher value
            node = nodes[position]
            taken = {n: v + pair[node][n] for n, v in marg.items() if n != node}
            weights = threshold.weights[node]
            search(
                position + 1,
                left - 1,
                mask | 1 << node,
                cost + marg[node],
                [s + w for s, w in zip(sums, weights, strict=True)],
                taken,
            )
            if not self.truncated:
                search(position + 1, left, mask, cost, sums, marg)

        search(0, self.size - forced.bit_count(), forced, base_cost, base_sums, marginal)
        return best_mask
