"""Topology hints as plain values, and the seams between the managers.

A NUMA mask is a plain ``int`` bitmask (bit *n* = NUMA node *n*), the
kubelet's ``bitmask.BitMask``; ``None`` is the nil mask ("any NUMA node").
Providers (CPU manager, memory manager) return :data:`ProviderHints`:

* ``None`` or ``{}``                 -> "don't care" for every resource;
* ``{"cpu": None}``                  -> "don't care" for that resource;
* ``{"cpu": []}``                    -> that resource cannot be satisfied;
* ``{"cpu": [TopologyHint, ...]}``   -> the candidate placements.

The difference between ``None`` and ``[]`` is load-bearing (topology-manager.md R2.1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TopologyHint:
    """``{NUMANodeAffinity, Preferred}``; ``mask=None`` means any NUMA node."""

    mask: int | None
    preferred: bool

    def numa_ids(self) -> list[int]:
        """The NUMA ids in the mask, ascending (empty for the nil mask)."""
        ids: list[int] = []
        mask = self.mask or 0
        while mask:
            low = mask & -mask
            ids.append(low.bit_length() - 1)
            mask ^= low
        return ids

    def __str__(self) -> str:
        where = "any" if self.mask is None else "{" + ",".join(map(str, self.numa_ids())) + "}"
        return f"{where}{'' if self.preferred else ' (not preferred)'}"


ProviderHints = Mapping[str, Sequence[TopologyHint] | None] | None


def mask_of(numa_ids: Sequence[int]) -> int:
    mask = 0
    for n in numa_ids:
        mask |= 1 << n
    return mask
