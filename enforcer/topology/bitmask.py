"""NUMA bitmasks as plain ``int`` values (the kubelet's ``topologymanager/bitmask``).

Bit *n* set means NUMA node *n*. The kubelet stores masks in a ``uint64``, so ids
are limited to 0..63 here as well (``NewBitMask`` fails outside that range); a
wider mask could never come out of a real kubelet and would make our answers
diverge from its answers.

The helpers reproduce the kubelet's orderings exactly, because the merge's
tie-breaks depend on them:

* :func:`is_narrower_than`: fewer bits wins, then the lower integer value;
* :func:`is_less_than`: raw integer comparison ({0,1}=3 < {0,2}=5);
* :func:`iterate_bitmasks`: all 1-element subsets, then 2-element ones, ... in
  lexicographic order over the given ids.

This module is pure arithmetic: no hints, no policies, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import combinations

MAX_NUMA_ID = 63
"""The highest NUMA id a kubelet bitmask can hold (``uint64``)."""


class BitMaskError(ValueError):
    """A NUMA id outside 0..63 (the kubelet's ``NewBitMask`` error)."""


def from_ids(ids: Iterable[int]) -> int:
    """``bitmask.NewBitMask(ids...)``; raises :class:`BitMaskError` like the kubelet does."""
    mask = 0
    for numa_id in ids:
        if numa_id < 0 or numa_id > MAX_NUMA_ID:
            raise BitMaskError("bit number must be in range 0-63")
        mask |= 1 << numa_id
    return mask


def count(mask: int) -> int:
    """``Count``: the number of NUMA nodes in the mask."""
    return mask.bit_count()


def ids_of(mask: int) -> list[int]:
    """``GetBits``: the NUMA ids in the mask, ascending."""
    ids: list[int] = []
    while mask:
        low = mask & -mask
        ids.append(low.bit_length() - 1)
        mask ^= low
    return ids


def is_less_than(a: int, b: int) -> bool:
    """``IsLessThan``: raw integer order, so masks with lower-numbered bits come first."""
    return a < b


def is_narrower_than(a: int, b: int) -> bool:
    """``IsNarrowerThan``: fewer NUMA nodes, or as many and a lower integer value."""
    count_a, count_b = a.bit_count(), b.bit_count()
    if count_a == count_b:
        return a < b
    return count_a < count_b


def and_all(first: int, masks: Iterable[int]) -> int:
    """``bitmask.And(first, masks...)``."""
    for mask in masks:
        first &= mask
    return first


def lowest_bits(mask: int, how_many: int) -> int:
    """The ``how_many`` lowest set bits of ``mask`` (all of it when it has fewer).

    This is the smallest integer value any ``how_many``-node subset of ``mask``
    can have, which the merge uses as an exact bound for "narrowest".
    """
    picked = 0
    while how_many > 0 and mask:
        low = mask & -mask
        picked |= low
        mask ^= low
        how_many -= 1
    return picked


def iterate_bitmasks(ids: Sequence[int]) -> Iterator[int]:
    """``IterateBitMasks``: every non-empty subset of ``ids``, by size, then lexicographically.

    The order is the kubelet's (the CPU and memory managers emit their hints in
    it), so hint lists built from it match the kubelet's element by element.
    """
    for size in range(1, len(ids) + 1):
        for subset in combinations(ids, size):
            yield from_ids(subset)


def masks_of_size(ids: Sequence[int], size: int) -> Iterator[int]:
    """The ``size``-node subsets of ``ids`` in :func:`iterate_bitmasks` order."""
    for subset in combinations(ids, size):
        yield from_ids(subset)


def format_mask(mask: int | None) -> str:
    """Human-readable form for logs and reasons: ``{0,2}``, or ``any`` for the nil mask."""
    if mask is None:
        return "any"
    return "{" + ",".join(str(i) for i in ids_of(mask)) + "}"
