"""The hint merge every Topology Manager policy shares (kubelet ``policy.go``, ``HintMerger``).

Role: turn the providers' hints into the one best hint, with the kubelet's exact
answer, without enumerating the cross product the kubelet enumerates. This
module does not decide admission (the ``policy_*`` modules do), knows nothing of
pods, scopes or providers (:mod:`enforcer.topology.manager` does), and performs no I/O.

What the kubelet computes (topology-manager.md M1-M6, ``HintMerger.Merge``)
---------------------------------------------------------------------------
Every permutation (one hint per dimension, a dimension being one resource of one
provider) becomes a candidate: its mask is the AND of the default affinity and
every non-nil mask; it is *preferred* iff every hint is preferred AND every
non-nil mask is equal to the first non-nil one (``mergePermutation``). Empty
masks are skipped; the others are folded left, in cross-product order, through
``HintMerger.compare``; nothing left gives ``{default affinity, false}``.

Why the fold is an argmin (so order and first-found ties do not matter)
-----------------------------------------------------------------------
Let ``key(m)`` be ``(count, mask)`` ("narrowest"), or ``(count, sum of
distances, mask)`` with prefer-closest (comparing sums is comparing the
kubelet's averages: both masks have the same count, hence the same divisor).
``key`` is a strict total order on distinct masks, and ``CompareNUMAAffinityMasks``
returns exactly the lower key (equal masks keep the current hint, which is the
same hint). Then, case by case, ``compare(current, candidate)`` keeps the lower of:

* any preferred candidate below any non-preferred one;
* among preferred candidates: the lower ``key``;
* among non-preferred ones, with T = ``BestNonPreferredAffinityCount``, the
  lower ``rank``: ``(0, key)`` when count == T, ``(1, -count, key)`` when
  count < T, ``(2, key)`` when count > T. (Case 1 compares keys, whose first
  component is the count, so a candidate in any lower tier wins; case 2 moves
  only to a lower key of count T; cases 3a-3cc are the tier-1 order.)

Each is a strict total order in which two candidates tie only when they are the
same (mask, preferred) pair, i.e. the same hint. A left fold with "replace iff
strictly better" over a strict total order returns the minimum, whatever the
visiting order. So the kubelet's answer is a function of the SET of candidate
(mask, preferred) pairs, and we may dedupe, reorder and prune freely. The
property tests check this against a literal port of the Go fold.

How we find the minimum without the cross product
-------------------------------------------------
1. Preferred candidates (exact, linear): a permutation is preferred iff it picks
   preferred hints only, and all its non-nil masks are one same mask M. So the
   preferred masks are M & default for each M that every dimension offers as a
   preferred hint (or covers with a preferred nil hint), plus the default
   affinity when every dimension has a preferred nil hint. Take the lowest key.
2. Otherwise every candidate is non-preferred and only its mask matters: a
   depth-first branch and bound over the dimensions (fewest distinct masks
   first), on the partial AND of the masks chosen so far:
   * dedupe: each dimension's masks are made distinct (after the AND with the
     default affinity); a partial mask already explored at a depth is not
     explored again (its completions are the same set);
   * bound: every completion of a partial mask p is a non-empty subset of p, and
     ``lower_bound(p)`` is a lower bound of the rank of any such subset (for
     "narrowest" it is exact: tier 0 with the T lowest bits of p when
     count(p) >= T, p itself otherwise). Past the first descent, a second bound
     joins it: a completion is also a subset of one mask per remaining
     dimension, so a node of a k-node answer shares a mask with each of the
     other k-1 in every remaining dimension ("co-occurrence"); nodes with too
     few such companions cannot be in it. A branch whose bound is not below the
     best rank found cannot improve it (equal rank means the same mask);
   * order: each dimension's masks are grouped by size, each group sorted by
     bound only when the search first reaches it; a mask's subsets never have
     a lower bound than the mask, so a scan stops at the first mask whose bound
     reaches the best rank, and the first answers found tend to be the best.
   Both steps are exact by the argmin argument; pruning only skips branches that
   cannot hold a strictly better mask. Keys and ranks are packed into single
   ints (see ``_KEY_COUNT_SHIFT``) so the hot loops compare ints, not tuples.

Cost: step 1 is linear in the number of hints. Step 2 looks at no more
(partial mask, mask) pairs than the kubelet visits permutations, since partial
masks are deduplicated, and usually at a tiny fraction: on realistic hint lists
the best mask is among the first tried and the bounds close every other branch.
Up to 2^N partial masks per depth can exist (N NUMA nodes), so 8-NUMA worst
cases stay in milliseconds; adversarial inputs on many NUMA nodes can still be
slow (see ``bench/bench_merge.py`` for figures).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Sequence

from enforcer.topology import bitmask, hint_masks, hints
from enforcer.topology.numa_info import NUMAInfo

# --- collecting hints (R2.1) ---------------------------------------------------------------------------------------

DONT_CARE = hints.TopologyHint(None, True)
CANNOT_SATISFY = hints.TopologyHint(None, False)


def filter_providers_hints(providers_hints: Sequence[hints.ProviderHints]) -> list[Sequence[hints.TopologyHint]]:
    """``filterProvidersHints``: one dimension per (provider, resource), nil vs empty kept apart.

    Resources are taken in the mapping's order (the kubelet ranges over a Go map,
    whose order is random; the merge result does not depend on it).
    """
    dimensions: list[Sequence[hints.TopologyHint]] = []
    for provider in providers_hints:
        if not provider:
            dimensions.append([DONT_CARE])
            continue
        for resource_hints in provider.values():
            if resource_hints is None:
                dimensions.append([DONT_CARE])
            elif isinstance(resource_hints, hint_masks.LayeredHints):
                dimensions.append(resource_hints)  # never empty; materialized layer by layer when merged
            elif len(resource_hints) == 0:
                dimensions.append([CANNOT_SATISFY])
            else:
                dimensions.append(list(resource_hints))
    return dimensions


# --- the merge ------------------------------------------------------------------------------------------------------

# Ranks and keys are packed into single ints (lower is better), so the hot loops compare ints, not tuples:
#   key  = count << 112 | distance sum (prefer-closest only) << 64 | mask      (NUMA ids 0..63, sums < 2^48)
#   rank = tier << 128 | (tier 1 only: (128 - count) << 120) | key
_KEY_COUNT_SHIFT, _KEY_SUM_SHIFT = 112, 64
_TIER_SHIFT, _TIER1_COUNT_SHIFT = 128, 120
_TIER1, _TIER2 = 1 << _TIER_SHIFT, 2 << _TIER_SHIFT
_UNREACHABLE = 3 << _TIER_SHIFT
_EXACT_SUBSET_LIMIT = 64  # enumerate a mask's subsets for the prefer-closest bound up to this many


class _Bucket:
    """The masks of one size in one dimension; sorted by bound only when a search first reaches them.

    A mask's bound is ``prefix | low`` for its ``(low, mask)`` entry: the prefix (tier and size) is shared
    by the whole bucket, so only small ints are sorted and compared until a bound is actually needed.
    """

    __slots__ = ("bound", "size", "masks", "_entries")

    def __init__(self, bound: int, size: int, masks: list[int]) -> None:
        self.bound = bound
        self.size = size
        self.masks = masks
        self._entries: tuple[int, list[tuple[int, int]]] | None = None

    def entries(self, ranking: _Ranking) -> tuple[int, list[tuple[int, int]]]:
        if self._entries is None:
            self._entries = ranking.bucket_entries(self.size, self.masks)
        return self._entries


class _Ranking:
    """The total orders of the module docstring, packed into ints, with memoised keys, ranks and bounds."""

    __slots__ = ("_numa_info", "_prefer_closest", "_target", "_keys", "_ranks", "_bounds", "_min_self", "_min_other")

    def __init__(self, numa_info: NUMAInfo, *, prefer_closest: bool, target: int) -> None:
        self._numa_info = numa_info
        self._prefer_closest = prefer_closest
        self._target = target
        self._keys: dict[int, int] = {}
        self._ranks: dict[int, int] = {}
        self._bounds: dict[int, int] = {}
        self._min_self = 0
        self._min_other = 0
        if prefer_closest and numa_info.distances is not None and numa_info.nodes:
            nodes = numa_info.nodes
            rows = numa_info.distances
            self._min_self = min(rows[i][i] for i in nodes)
            self._min_other = min((rows[i][j] for i in nodes for j in nodes if i != j), default=0)

    def key(self, mask: int) -> int:
        """Lower is better between two hints of the same preference (``CompareNUMAAffinityMasks``)."""
        key = self._keys.get(mask)
        if key is None:
            key = mask.bit_count() << _KEY_COUNT_SHIFT | mask
            if self._prefer_closest:
                key |= self._numa_info.distance_sum(mask) << _KEY_SUM_SHIFT
            self._keys[mask] = key
        return key

    def rank(self, mask: int) -> int:
        """Lower is better between two non-preferred candidates (``compare`` with T)."""
        rank = self._ranks.get(mask)
        if rank is None:
            size = mask.bit_count()
            if size == self._target:
                rank = self.key(mask)
            elif size < self._target:
                rank = _TIER1 | (128 - size) << _TIER1_COUNT_SHIFT | self.key(mask)
            else:
                rank = _TIER2 | self.key(mask)
            self._ranks[mask] = rank
        return rank

    def lower_bound(self, mask: int) -> int:
        """A lower bound of ``rank`` over the non-empty subsets of ``mask`` (never above a subset's bound)."""
        bound = self._bounds.get(mask)
        if bound is None:
            size = mask.bit_count()
            if size == 0:
                bound = _UNREACHABLE
            elif self._target == 0:
                bound = _TIER2 | self._min_key(mask, size, 1)
            elif size <= self._target:
                bound = self.rank(mask)
            else:
                bound = self._min_key(mask, size, self._target)
            self._bounds[mask] = bound
        return bound

    def buckets(self, masks: set[int]) -> list[_Bucket]:
        """A dimension's distinct non-empty masks, grouped by size, groups by increasing bound."""
        grouped = itertools.groupby(sorted(masks, key=int.bit_count), key=int.bit_count)
        buckets = [_Bucket(self._bucket_bound(size, group := list(members)), size, group) for size, members in grouped]
        buckets.sort(key=lambda bucket: bucket.bound)
        return buckets

    def bucket_entries(self, size: int, masks: list[int]) -> tuple[int, list[tuple[int, int]]]:
        """``(prefix, [(low, mask)])`` for masks of one size, by increasing ``prefix | low`` == lower_bound().

        The common cases are inlined (this is the hot path on long hint lists); the rest defers to lower_bound().
        """
        target = self._target
        if target == 0 or (size > target and self._prefer_closest):
            lower_bound = self.lower_bound
            return 0, sorted([(lower_bound(m), m) for m in masks])
        if size > target:
            lowest_bits = bitmask.lowest_bits
            return target << _KEY_COUNT_SHIFT, sorted([(lowest_bits(m, target), m) for m in masks])
        # size <= target: the bound is the rank itself
        prefix = size << _KEY_COUNT_SHIFT
        if size < target:
            prefix |= _TIER1 | (128 - size) << _TIER1_COUNT_SHIFT
        if self._prefer_closest:
            distance_sum = self._numa_info.distance_sum
            return prefix, sorted([(distance_sum(m) << _KEY_SUM_SHIFT | m, m) for m in masks])
        ordered = sorted(masks)
        return prefix, list(zip(ordered, ordered, strict=True))

    def _bucket_bound(self, size: int, masks: list[int]) -> int:
        """A lower bound of lower_bound() over masks of one size: their shared tier and size, the machine's
        smallest distance sum for that size, and the smallest mask value a subset could have."""
        target = self._target
        if target == 0:
            tier, subset_size, lowest = _TIER2, 1, bitmask.lowest_bits(functools.reduce(operator.or_, masks), 1)
        elif size > target:
            tier, subset_size = 0, target
            lowest = bitmask.lowest_bits(functools.reduce(operator.or_, masks), target)
        else:
            tier = 0 if size == target else _TIER1 | (128 - size) << _TIER1_COUNT_SHIFT
            subset_size, lowest = size, min(masks)
        return tier | subset_size << _KEY_COUNT_SHIFT | self._spread_bound(subset_size) << _KEY_SUM_SHIFT | lowest

    def _spread_bound(self, size: int) -> int:
        """The machine-wide smallest distance sum a ``size``-node mask could have (0 without prefer-closest)."""
        if not self._prefer_closest:
            return 0
        return size * self._min_self + size * (size - 1) * self._min_other

    def co_occurrence_bound(self, partial: int, company: Sequence[int]) -> int:
        """A lower bound of ``rank`` over the subsets of ``partial`` whose nodes all keep company.

        ``company[i]``: the nodes that share a mask with node ``i`` in every remaining dimension. A k-node
        answer only holds nodes with at least k companions (themselves included) inside ``partial``.
        """
        companions: list[tuple[int, int]] = []
        widest = 0
        rest = partial
        while rest:
            low = rest & -rest
            rest ^= low
            together = partial & company[low.bit_length() - 1]
            if together & low:
                size = together.bit_count()
                companions.append((size, low))
                widest = max(widest, size)
        if widest == 0:
            return _UNREACHABLE
        target = self._target
        if target == 0:
            tier, size = _TIER2, 1
        elif widest >= target:
            tier, size = 0, target
        else:
            tier, size = _TIER1 | (128 - widest) << _TIER1_COUNT_SHIFT, widest
        eligible = 0
        for companion_count, node in companions:
            if companion_count >= size:
                eligible |= node
        lowest = bitmask.lowest_bits(eligible, size)
        return tier | size << _KEY_COUNT_SHIFT | self._spread_bound(size) << _KEY_SUM_SHIFT | lowest

    def _min_key(self, mask: int, size: int, subset_size: int) -> int:
        """A lower bound of ``key`` over the ``subset_size``-node subsets of ``mask`` (``size`` nodes).

        Narrowest: exact, the lowest bits. Prefer-closest: exact (the closest subset) when there are few
        subsets to try, else the machine-wide smallest sum with the lowest bits (a valid, looser bound).
        """
        if self._prefer_closest and math.comb(size, subset_size) <= _EXACT_SUBSET_LIMIT:
            spread, closest = self._numa_info.closest_subset(mask, subset_size)
            return subset_size << _KEY_COUNT_SHIFT | spread << _KEY_SUM_SHIFT | closest
        spread = self._spread_bound(subset_size)
        return subset_size << _KEY_COUNT_SHIFT | spread << _KEY_SUM_SHIFT | bitmask.lowest_bits(mask, subset_size)


def merge_filtered_hints(
    numa_info: NUMAInfo, dimensions: Sequence[Sequence[hints.TopologyHint]], *, prefer_closest: bool
) -> hints.TopologyHint:
    """``HintMerger.Merge`` over filtered dimensions: the kubelet's answer (see the module docstring).

    Dimensions given as :class:`~enforcer.topology.hint_masks.LayeredHints` are the kubelet's exhaustive
    lists; only the layers that decide the answer are merged (proof in :mod:`enforcer.topology.hint_masks`).
    """
    if any(isinstance(d, hint_masks.LayeredHints) for d in dimensions):

        def key(mask: int) -> tuple[int, int, int]:
            return (mask.bit_count(), numa_info.distance_sum(mask) if prefer_closest else 0, mask)

        def merge(lists: Sequence[Sequence[hints.TopologyHint]]) -> hints.TopologyHint:
            return _merge_hint_lists(numa_info, lists, prefer_closest=prefer_closest)

        return hint_masks.merge_layered(dimensions, merge, key, closest=prefer_closest)
    return _merge_hint_lists(numa_info, dimensions, prefer_closest=prefer_closest)


def _merge_hint_lists(
    numa_info: NUMAInfo, dimensions: Sequence[Sequence[hints.TopologyHint]], *, prefer_closest: bool
) -> hints.TopologyHint:
    universe = numa_info.default_affinity
    # only the distinct masks of a dimension matter, with or without their preferred flag
    offered = [{h.mask for h in dimension} for dimension in dimensions]
    offered_preferred = [{h.mask for h in dimension if h.preferred} for dimension in dimensions]
    ranking = _Ranking(numa_info, prefer_closest=prefer_closest, target=_max_of_min_counts(offered))
    preferred = _best_preferred_mask(offered_preferred, universe, ranking)
    if preferred is not None:
        return hints.TopologyHint(preferred, True)
    best = _best_non_preferred_mask(offered, universe, ranking)
    return hints.TopologyHint(universe if best is None else best, False)


def _max_of_min_counts(offered: Sequence[set[int | None]]) -> int:
    """``maxOfMinAffinityCounts`` (BestNonPreferredAffinityCount): the widest of the narrowest non-nil masks."""
    target = 0
    for masks in offered:
        counts = [m.bit_count() for m in masks if m is not None]
        if counts:
            target = max(target, min(counts))
    return target


def _best_preferred_mask(offered_preferred: Sequence[set[int | None]], universe: int, ranking: _Ranking) -> int | None:
    """Step 1: the lowest-key mask of a permutation that is all preferred and all one mask.

    ``offered_preferred`` holds each dimension's preferred masks, ``None`` standing for a preferred nil hint.
    """
    constraining: list[set[int | None]] = []  # the dimensions without a preferred nil hint
    candidates: set[int | None] = {universe}  # all nil hints give the default affinity
    for masks in offered_preferred:
        if None in masks:
            candidates |= masks  # an offered mask pairs with nil hints elsewhere
        elif masks:
            constraining.append(masks)
        else:
            return None
    if constraining:
        constraining.sort(key=len)
        candidates = set(constraining[0])
        for masks in constraining[1:]:
            candidates &= masks
    best: int | None = None
    best_key = _UNREACHABLE
    for raw in candidates:
        if raw is None:
            continue
        merged = raw & universe
        if merged:
            key = ranking.key(merged)
            if key < best_key:
                best, best_key = merged, key
    return best


def _best_non_preferred_mask(offered: Sequence[set[int | None]], universe: int, ranking: _Ranking) -> int | None:
    """Step 2: the lowest-rank non-empty AND over all permutations (none of them is preferred)."""
    dimensions: list[set[int]] = []
    for raw_masks in offered:
        masks = {universe if m is None else m & universe for m in raw_masks}
        masks.discard(0)
        if not masks:
            return None
        dimensions.append(masks)
    if not dimensions:
        return None
    dimensions.sort(key=len)
    return _BranchAndBound(dimensions, ranking).best_mask(universe)


class _BranchAndBound:
    """Depth-first search over the dimensions on the partial AND, pruned by lower bounds (module docstring).

    Two bounds: the mask-only one of :meth:`_Ranking.lower_bound`, and, once the search goes past its first
    descent (easy merges never pay for it), a co-occurrence bound. A final mask is a subset of one chosen hint
    per remaining dimension, so each of its nodes only keeps company with nodes that share a hint with it in
    every remaining dimension; a node with fewer than k such companions cannot be in a k-node answer.
    """

    __slots__ = (
        "_levels",
        "_ranking",
        "_explored",
        "_last",
        "_best_rank",
        "_best_mask",
        "_dimensions",
        "_company",
        "_descents",
    )

    def __init__(self, dimensions: list[set[int]], ranking: _Ranking) -> None:
        self._dimensions = dimensions
        self._levels = [ranking.buckets(masks) for masks in dimensions]
        self._ranking = ranking
        self._explored: list[set[int]] = [set() for _ in dimensions]
        self._last = len(dimensions) - 1
        self._best_rank = _UNREACHABLE
        self._best_mask: int | None = None
        self._company: list[list[int]] | None = None
        self._descents = 0

    def best_mask(self, universe: int) -> int | None:
        self._explore(0, universe)
        return self._best_mask

    def _explore(self, level: int, partial: int) -> None:
        ranking = self._ranking
        seen = self._explored[level]
        last = level == self._last
        for bucket in self._levels[level]:
            if bucket.bound >= self._best_rank:
                break
            prefix, entries = bucket.entries(ranking)
            for low, mask in entries:
                if prefix | low >= self._best_rank:
                    break
                merged = partial & mask
                if not merged:
                    continue
                if last:
                    rank = ranking.rank(merged)
                    if rank < self._best_rank:
                        self._best_rank, self._best_mask = rank, merged
                elif merged not in seen and self._bound(merged, level + 1) < self._best_rank:
                    seen.add(merged)
                    self._explore(level + 1, merged)

    def _bound(self, partial: int, next_level: int) -> int:
        bound = self._ranking.lower_bound(partial)
        if bound >= self._best_rank:
            return bound
        self._descents += 1
        if self._company is None:
            if self._descents <= len(self._levels):
                return bound
            self._company = self._company_tables()
        return max(bound, self._ranking.co_occurrence_bound(partial, self._company[next_level]))

    def _company_tables(self) -> list[list[int]]:
        """Per level, by node: the nodes sharing a mask with it in every dimension from that level on.

        Level 0 is never asked for (bounds are taken on partials that still face levels 1..last).
        """
        width = max(max(masks).bit_length() for masks in self._dimensions)
        tables: list[list[int]] = [[] for _ in self._dimensions]
        following: list[int] | None = None
        for level in range(self._last, 0, -1):
            company = [0] * width
            for mask in self._dimensions[level]:
                rest = mask
                while rest:
                    low = rest & -rest
                    company[low.bit_length() - 1] |= mask
                    rest ^= low
            if following is not None:
                company = [nodes & more for nodes, more in zip(company, following, strict=True)]
            tables[level] = following = company
        return tables
