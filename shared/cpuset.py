"""Immutable CPU sets in the Linux list syntax (``"0-3,8-11"``; ``""`` is empty).

A :class:`CPUSet` is a thin wrapper around one Python ``int`` used as a bitmask
(bit *n* set means logical CPU *n* is in the set).  Union, intersection,
difference and counting are therefore single integer operations, which is what
the allocator's hot loops need; iteration walks the set bits in ascending order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from shared.errors import CPUSetParseError

# Linux never exposes more CPUs than this; it also bounds what a hostile string
# such as "0-99999999999" can make us allocate.
MAX_CPU_ID = 1 << 16


class CPUSet:
    """An immutable, hashable set of logical CPU ids."""

    __slots__ = ("_mask",)

    _mask: int

    def __init__(self, cpus: Iterable[int] = ()) -> None:
        mask = 0
        for cpu in cpus:
            if not isinstance(cpu, int) or isinstance(cpu, bool) or cpu < 0 or cpu > MAX_CPU_ID:
                raise CPUSetParseError(cpu, "cpu ids are integers between 0 and 65536")
            mask |= 1 << cpu
        object.__setattr__(self, "_mask", mask)

    # -- construction -------------------------------------------------------------
    @classmethod
    def from_mask(cls, mask: int) -> CPUSet:
        """Wrap a bitmask without copying or validating it (hot path)."""
        inst = object.__new__(cls)
        object.__setattr__(inst, "_mask", mask)
        return inst

    @classmethod
    def from_range(cls, first: int, last: int) -> CPUSet:
        """CPUs ``first..last`` inclusive."""
        if first < 0 or last < first:
            return EMPTY
        return cls.from_mask(((1 << (last - first + 1)) - 1) << first)

    @classmethod
    def parse(cls, text: str) -> CPUSet:
        """Parse the Linux list format; surrounding whitespace (sysfs newlines) is ignored."""
        if not isinstance(text, str):
            raise CPUSetParseError(text, "expected a string")
        body = text.strip()
        if body == "":
            return EMPTY
        mask = 0
        for part in body.split(","):
            bounds = part.split("-")
            if len(bounds) > 2:
                raise CPUSetParseError(text, f"range {part!r} has more than one '-'")
            try:
                values = [_parse_id(b) for b in bounds]
            except ValueError:
                raise CPUSetParseError(text, f"{part!r} is not a cpu id or an a-b range") from None
            first, last = values[0], values[-1]
            if first > last:
                raise CPUSetParseError(text, f"range {part!r} is descending")
            mask |= ((1 << (last - first + 1)) - 1) << first
        return cls.from_mask(mask)

    # -- views ----------------------------------------------------------------------
    @property
    def mask(self) -> int:
        return self._mask

    def __len__(self) -> int:
        return self._mask.bit_count()

    def size(self) -> int:
        return self._mask.bit_count()

    def is_empty(self) -> bool:
        return self._mask == 0

    def __bool__(self) -> bool:
        return self._mask != 0

    def __contains__(self, cpu: object) -> bool:
        return isinstance(cpu, int) and cpu >= 0 and bool(self._mask >> cpu & 1)

    def __iter__(self) -> Iterator[int]:
        mask = self._mask
        while mask:
            low = mask & -mask
            yield low.bit_length() - 1
            mask ^= low

    def sorted(self) -> list[int]:
        return list(self)

    def first(self) -> int:
        """The lowest CPU id; raises ``ValueError`` on the empty set."""
        if not self._mask:
            raise ValueError("empty cpuset has no first cpu")
        return (self._mask & -self._mask).bit_length() - 1

    # -- algebra ------------------------------------------------------------------
    def union(self, *others: CPUSet) -> CPUSet:
        mask = self._mask
        for other in others:
            mask |= other._mask
        return CPUSet.from_mask(mask)

    def intersection(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask & other._mask)

    def difference(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask & ~other._mask)

    def symmetric_difference(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask ^ other._mask)

    __or__ = union

    def __and__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask & other._mask)

    def __sub__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask & ~other._mask)

    def __xor__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask ^ other._mask)

    def is_subset_of(self, other: CPUSet) -> bool:
        return self._mask & ~other._mask == 0

    def is_superset_of(self, other: CPUSet) -> bool:
        return other._mask & ~self._mask == 0

    def isdisjoint(self, other: CPUSet) -> bool:
        return self._mask & other._mask == 0

    def __le__(self, other: CPUSet) -> bool:
        return self.is_subset_of(other)

    def __ge__(self, other: CPUSet) -> bool:
        return self.is_superset_of(other)

    # -- identity -----------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUSet) and other._mask == self._mask

    def __hash__(self) -> int:
        return hash(("CPUSet", self._mask))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("CPUSet is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (CPUSet.from_mask, (self._mask,))

    # -- formatting ---------------------------------------------------------------
    def __str__(self) -> str:
        """Linux list format, sorted and merged: ``"0-3,8"``."""
        parts: list[str] = []
        mask = self._mask
        offset = 0
        while mask:
            # skip the zero run, then measure the run of ones
            zeros = (mask & -mask).bit_length() - 1
            mask >>= zeros
            offset += zeros
            ones = (~mask & (mask + 1)).bit_length() - 1
            first, last = offset, offset + ones - 1
            parts.append(str(first) if first == last else f"{first}-{last}")
            mask >>= ones
            offset += ones
        return ",".join(parts)

    def __repr__(self) -> str:
        return f"CPUSet({str(self)!r})"


def _parse_id(token: str) -> int:
    # int() accepts " 3", "+3" and "3_0"; the kernel list syntax does not.
    if not token.isascii() or not token.isdigit():
        raise ValueError(token)
    value = int(token)
    if value > MAX_CPU_ID:
        raise ValueError(token)
    return value


EMPTY = CPUSet.from_mask(0)
