"""Which NUMA masks hint providers consider: all of them on small machines, a pruned set on big ones.

The kubelet's providers emit a hint for every non-empty subset of NUMA nodes
(``bitmask.IterateBitMasks``): 255 masks on 8 nodes, 2^64 - 1 on 64, which is why
it refuses machines with more than 8 NUMA nodes unless ``max-allowable-numa-nodes``
is raised, and never finishes on 34+.  We keep the kubelet's exact enumeration up
to :data:`EXHAUSTIVE_NUMA_LIMIT` nodes (same hints, same order, hence the same
merged answer).  Beyond it we prune, and the pruning is chosen so that what the
Topology Manager would pick is still among the candidates:

1. Sizes below the narrowest mask that could ever hold the request (by capacity)
   cannot pass the providers' capacity test, so skipping them changes nothing.
2. Only the narrowest feasible size and the next one are emitted.  Preferred hints
   are exactly the narrowest masks, so every preferred candidate of the merge is
   kept; the next size keeps the non-preferred fall-back the best-effort policy
   uses when the providers' preferred masks do not intersect.
3. When a size has more than :data:`MAX_MASKS_PER_SIZE` subsets (e.g. 41,664
   three-node subsets of 64), only compact neighbourhoods are emitted: each node
   with its nearest neighbours by SLIT distance (ties by id).  A pod that needs
   several NUMA nodes is better served by close ones, which is also what
   ``prefer-closest-numa-nodes`` would choose among equally narrow masks.
4. Masks the caller must consider anyway (a memory group already in use) are added.

Masks come out in the kubelet's order (by size, then lexicographic), so ties in
the merge still resolve to the lowest mask.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import combinations
from math import comb

EXHAUSTIVE_NUMA_LIMIT = 8
MAX_MASKS_PER_SIZE = 2048


def min_size_for(capacities: Iterable[int], request: int) -> int:
    """The fewest nodes whose combined capacity can hold ``request`` (len+1 when none can)."""
    ordered = sorted(capacities, reverse=True)
    total = 0
    for count, capacity in enumerate(ordered, start=1):
        total += capacity
        if total >= request:
            return count
    return len(ordered) + 1


def candidate_masks(
    numa_ids: Sequence[int],
    min_size: int,
    *,
    distances: Mapping[int, Sequence[int]] | None = None,
    extra: Iterable[tuple[int, ...]] = (),
) -> Iterator[tuple[int, ...]]:
    """NUMA id tuples to build hints from, in ``IterateBitMasks`` order."""
    ids = sorted(numa_ids)
    if len(ids) <= EXHAUSTIVE_NUMA_LIMIT:
        for size in range(1, len(ids) + 1):
            yield from combinations(ids, size)
        return
    wanted: set[tuple[int, ...]] = {tuple(sorted(m)) for m in extra}
    low = max(1, min_size)
    for size in range(low, min(low + 1, len(ids)) + 1):
        if comb(len(ids), size) <= MAX_MASKS_PER_SIZE:
            wanted.update(combinations(ids, size))
        else:
            wanted.update(_neighbourhoods(ids, size, distances))
    yield from sorted(wanted, key=lambda m: (len(m), m))


def _neighbourhoods(
    ids: Sequence[int], size: int, distances: Mapping[int, Sequence[int]] | None
) -> set[tuple[int, ...]]:
    index = {n: i for i, n in enumerate(ids)}
    result: set[tuple[int, ...]] = set()
    for start in ids:
        row = distances.get(start) if distances is not None else None

        def distance(other: int, row: Sequence[int] | None = row, start: int = start) -> tuple[int, int]:
            if row is None:
                return (abs(index[other] - index[start]), other)
            return (row[index[other]], other)

        nearest = sorted(ids, key=distance)[:size]
        result.add(tuple(sorted(nearest)))
    return result
