"""Resize-aware ``takeByTopology`` (NUMA-packed), from the kubelet KEP-5554 branch ``cpu_assignment_resize.go``.

A grow keeps every CPU it holds and adds the free CPUs closest to them (the NUMA nodes, sockets, uncore
caches and cores already used come first); a shrink keeps the promised CPUs and the ones closest to them.
Pure selection over the machine's :class:`~enforcer.cpumanager.topology_index.TopologyIndex`: no state,
no policy, no pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from enforcer.cpumanager.topology_index import Member, TopologyIndex, by_free_count, index_of
from enforcer.errors import CPUAllocationError
from enforcer.topology.machine import CPUTopology
from shared.cpuset import CPUSet


def _held_first(members: Sequence[Member], held: int, free: int) -> list[int]:
    """Resize sort: members already holding a retained CPU first, then the rest; each part fewest free first."""
    mine = [m for m in members if m[2] & held]
    others = [m for m in members if not m[2] & held]
    return by_free_count(mine, free) + by_free_count(others, free)


class _ResizeAccumulator:
    """``cpuAccumulatorForResize``: the kubelet accumulator whose orders put retained topology first."""

    __slots__ = ("index", "free", "result", "needed")

    def __init__(self, index: TopologyIndex, free: int, retained: int, count: int) -> None:
        self.index = index
        self.result = retained
        self.free = free & ~retained
        self.needed = count - retained.bit_count()

    def take(self, cpus: int) -> None:
        self.result |= cpus
        self.free &= ~cpus
        self.needed -= cpus.bit_count()

    def is_full(self, mask: int) -> bool:
        """The group holds no CPU of anyone else: each CPU is retained or free."""
        return mask & (self.result | self.free) == mask

    # -- orders ----------------------------------------------------------------------------------
    def sorted_numas(self) -> list[int]:
        index, held, free = self.index, self.result, self.free
        if index.numa_first:
            return _held_first(index.numas, held, free)
        return [n for s in self.sorted_sockets() for n in _held_first(index.numas_in_socket[s], held, free)]

    def sorted_sockets(self) -> list[int]:
        index, held, free = self.index, self.result, self.free
        if index.numa_first:
            return [s for n in self.sorted_numas() for s in _held_first(index.sockets_in_numa[n], held, free)]
        return _held_first(index.sockets, held, free)

    def sorted_cores(self) -> list[int]:
        index, held, free = self.index, self.result, self.free
        if index.numa_first:
            return [c for s in self.sorted_sockets() for c in _held_first(index.cores_in_socket[s], held, free)]
        return [c for n in self.sorted_numas() for c in _held_first(index.cores_in_numa[n], held, free)]

    def sorted_uncores(self) -> list[int]:
        index, held, free = self.index, self.result, self.free
        return [u for n in self.sorted_numas() for u in _held_first(index.uncores_in_numa[n], held, free)]

    # -- steps -----------------------------------------------------------------------------------
    def take_full(self, order: Iterable[int], masks: dict[int, int]) -> None:
        """``takeFull{NUMANodes,Sockets,Uncore,Cores}ForResize``: groups complete with the retained CPUs."""
        for ident in order:
            mask = masks[ident]
            if not self.is_full(mask):
                continue
            cpus = mask & self.free
            if self.needed < cpus.bit_count():
                continue
            self.take(cpus)

    def take_partial_uncore(self, uncore: int) -> None:
        index = self.index
        per_core = index.cpus_per_core
        members = index.cores_in_uncore[uncore]
        if per_core != 1:
            # First complete the cores of this cache that already hold a retained CPU.
            for _, in_uncore, whole in members:
                if not (in_uncore & self.free and in_uncore & self.result) or not self.is_full(whole):
                    continue
                cpus = whole & self.free
                if self.needed < cpus.bit_count():
                    break
                self.take(cpus)
        cores_needed = (self.needed + per_core - 1) // per_core
        with_free = [whole & self.free for _, in_uncore, whole in members if in_uncore & self.free]
        cpus = 0
        if cores_needed <= len(with_free):
            for whole in with_free[:cores_needed]:
                cpus |= whole
        # An odd remainder on an SMT machine leaves the last (highest) CPU of the last core out.
        if self.needed % 2 != 0 and per_core > 1 and cpus.bit_count() > self.needed:
            cpus ^= 1 << (cpus.bit_length() - 1)
        if cpus.bit_count() == self.needed:
            self.take(cpus)

    def take_uncore_caches(self) -> None:
        self.take_full(self.sorted_uncores(), self.index.uncore_mask)
        if self.needed < 1:
            return
        for uncore in self.sorted_uncores():
            self.take_partial_uncore(uncore)
            if self.needed < 1:
                return

    def take_remaining_cpus(self, spread: bool) -> None:
        index = self.index
        if spread:
            groups = [index.socket_mask[s] & self.free for s in self.sorted_sockets()]
        else:
            groups = [index.core_mask[c] & self.free for c in self.sorted_cores()]
        for cpus in groups:
            while cpus:
                lowest = cpus & -cpus
                cpus ^= lowest
                if not lowest & self.free:
                    continue  # listed twice by an odd topology: taken already
                self.take(lowest)
                if self.needed < 1:
                    return


def take_for_resize(
    topology: CPUTopology,
    free: CPUSet,
    retained: CPUSet,
    count: int,
    *,
    spread: bool = False,
    align_uncore: bool = False,
) -> CPUSet:
    """``takeByTopologyNUMAPackedForResize``: ``count`` CPUs made of all of ``retained`` plus CPUs of ``free``.

    Grow: ``retained`` is the current set and ``free`` the free CPUs.  Shrink: ``retained`` is the original
    set and ``free`` the rest of the current set.  Raises :class:`CPUAllocationError` with the kubelet's
    messages when ``free`` cannot make up the difference.
    """
    index = index_of(topology)
    acc = _ResizeAccumulator(index, free.mask & index.all_mask, retained.mask, count)
    if acc.needed < 0:
        raise CPUAllocationError(
            f"requested number of CPUs ( {count} ) are less than number of retained CPUs ( {len(retained)} )"
        )
    if acc.needed == 0:
        return retained
    if acc.needed > acc.free.bit_count():
        raise CPUAllocationError(
            f"not enough cpus available to satisfy request: requested={count}, available={len(free | retained)}"
        )
    if index.numa_first:
        first, second = (acc.sorted_numas, index.numa_mask), (acc.sorted_sockets, index.socket_mask)
    else:
        first, second = (acc.sorted_sockets, index.socket_mask), (acc.sorted_numas, index.numa_mask)
    for order, masks in (first, second):
        acc.take_full(order(), masks)
        if acc.needed < 1:
            return CPUSet.from_mask(acc.result)
    if align_uncore:
        acc.take_uncore_caches()
        if acc.needed < 1:
            return CPUSet.from_mask(acc.result)
    if not spread:
        acc.take_full(acc.sorted_cores(), index.core_mask)
        if acc.needed < 1:
            return CPUSet.from_mask(acc.result)
    acc.take_remaining_cpus(spread)
    if acc.needed < 1:
        return CPUSet.from_mask(acc.result)
    raise CPUAllocationError("failed to allocate cpus")
