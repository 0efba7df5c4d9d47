"""The machine's NUMA nodes and distances as the Topology Manager's merge reads them (kubelet ``NUMAInfo``).

Kept apart from the merge so the policies, the merge and the factory all depend on it and on nothing of
each other.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from enforcer.errors import ConfigError
from enforcer.topology import bitmask, options


@dataclass(frozen=True, slots=True)
class NUMAInfo:
    """The NUMA nodes of the machine and their distances (kubelet ``NUMAInfo``).

    ``distances[i][j]`` is indexed by NUMA id, as the kubelet indexes cadvisor's
    rows; rows are only needed (and checked) when prefer-closest is on.
    """

    nodes: tuple[int, ...]
    distances: Mapping[int, tuple[int, ...]] | None = None
    default_affinity: int = field(init=False)
    # by NUMA id: d[i][i], and d[i][j] + d[j][i], so that a mask's distance sum is a few look-ups
    _own_distance: tuple[int, ...] = field(init=False, repr=False)
    _pair_distance: tuple[tuple[int, ...], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "default_affinity", bitmask.from_ids(self.nodes))
        own: list[int] = []
        pair: list[tuple[int, ...]] = []
        if self.distances is not None and self.nodes:
            rows = self.distances
            width = max(self.nodes) + 1
            present = set(self.nodes)
            own = [rows[i][i] if i in present else 0 for i in range(width)]
            pair = [
                tuple(rows[i][j] + rows[j][i] if i in present and j in present else 0 for j in range(width))
                for i in range(width)
            ]
        object.__setattr__(self, "_own_distance", tuple(own))
        object.__setattr__(self, "_pair_distance", tuple(pair))

    @classmethod
    def build(
        cls, numa_ids: Sequence[int], distances: Mapping[int, Sequence[int]] | None, *, need_distances: bool
    ) -> NUMAInfo:
        """``NewNUMAInfo``: with prefer-closest every node needs a distance row.

        A row lists the distances to every NUMA node in id order, as sysfs (and our topology documents) do:
        with one entry per node it is read by position; otherwise it must be indexed by NUMA id. The kubelet
        always indexes by id, which is the same thing when the ids are 0..n-1 (every machine we know of).
        """
        try:
            bitmask.from_ids(numa_ids)
        except bitmask.BitMaskError as exc:
            raise ConfigError(f"cannot discover NUMA topology: {exc}") from exc
        if not need_distances:
            return cls(tuple(numa_ids))
        options.require_distances(numa_ids, distances)
        assert distances is not None  # require_distances raised otherwise
        ordered = sorted(numa_ids)
        highest = max(ordered, default=-1)
        rows: dict[int, tuple[int, ...]] = {}
        for node in numa_ids:
            row = tuple(distances[node])
            if any(not 0 <= d < 1 << 32 for d in row):
                raise ConfigError(f"cannot discover NUMA topology: NUMA node {node} has a distance outside 0..2^32-1")
            if len(row) == len(ordered):
                by_id = dict(zip(ordered, row, strict=True))
                rows[node] = tuple(by_id.get(other, 0) for other in range(highest + 1))
            elif len(row) > highest:
                rows[node] = row
            else:
                raise ConfigError(
                    f"cannot discover NUMA topology: the distance row of NUMA node {node} has {len(row)} "
                    f"entries for {len(ordered)} NUMA nodes"
                )
        return cls(tuple(numa_ids), rows)

    def distance_sum(self, mask: int) -> int:
        """Sum of ``d[i][j]`` over ordered pairs of the mask, i == j included (``CalculateAverageFor`` x count²)."""
        if self.distances is None:
            raise ConfigError("NUMA distances are required by prefer-closest-numa-nodes")
        own, pair = self._own_distance, self._pair_distance
        first = (mask & -mask).bit_length() - 1
        rest = mask & (mask - 1)
        if not rest:
            return own[first] if mask else 0
        third_on = rest & (rest - 1)
        if not third_on & (third_on - 1):  # two or three nodes: the common cases, without building a list
            second = (rest & -rest).bit_length() - 1
            total = own[first] + own[second] + pair[first][second]
            if third_on:
                third = third_on.bit_length() - 1
                total += own[third] + pair[first][third] + pair[second][third]
            return total
        ids = bitmask.ids_of(mask)
        total = 0
        for position, first in enumerate(ids):
            total += own[first]
            row = pair[first]
            for second in ids[position + 1 :]:
                total += row[second]
        return total

    def closest_subset(self, mask: int, size: int) -> tuple[int, int]:
        """``(distance sum, mask)`` of the closest ``size``-node subset of ``mask``, lower value on ties.

        By enumeration: keep ``comb(count(mask), size)`` small.
        """
        own, pair = self._own_distance, self._pair_distance
        if size == 2 and mask.bit_count() == 3:  # the common case (a triple hint, a pair target), unrolled
            first_bit = mask & -mask
            second_bit = (mask ^ first_bit) & -(mask ^ first_bit)
            third_bit = mask ^ first_bit ^ second_bit
            a, b, c = (first_bit.bit_length() - 1, second_bit.bit_length() - 1, third_bit.bit_length() - 1)
            return min(
                (own[a] + own[b] + pair[a][b], first_bit | second_bit),
                (own[a] + own[c] + pair[a][c], first_bit | third_bit),
                (own[b] + own[c] + pair[b][c], second_bit | third_bit),
            )
        ids = bitmask.ids_of(mask)
        if size == 2:
            return min((own[a] + own[b] + pair[a][b], 1 << a | 1 << b) for a, b in itertools.combinations(ids, 2))
        subsets = (bitmask.from_ids(subset) for subset in itertools.combinations(ids, size))
        return min((self.distance_sum(subset), subset) for subset in subsets)

    def narrowest(self, first: int, second: int) -> int:
        """``NUMAInfo.Narrowest``."""
        return first if bitmask.is_narrower_than(first, second) else second

    def closest(self, first: int, second: int) -> int:
        """``NUMAInfo.Closest``: narrower, then lower average distance, then lower value."""
        if bitmask.count(first) != bitmask.count(second):
            return self.narrowest(first, second)
        first_sum, second_sum = self.distance_sum(first), self.distance_sum(second)
        if first_sum == second_sum:
            return first if bitmask.is_less_than(first, second) else second
        return first if first_sum < second_sum else second
