"""CPU selection: the kubelet's ``takeByTopology`` (``cpumanager/cpu_assignment.go``), ported exactly.

Ported from kubernetes/kubernetes ``pkg/kubelet/cm/cpumanager/cpu_assignment.go`` and
``topology/topology.go`` at commit 08715a58e5cd59e77f7a9543522cc50e3e9c4c79 (the v1.36 line: uncore-cache
alignment, the spread strategy, ``alignBySocket`` in the distributed algorithm).

Two algorithms choose which free CPUs a container gets (cpu-manager.md §3):

* **NUMA-packed** (best fit): whole sockets / NUMA nodes (in the machine's hierarchy order), then,
  with ``prefer-align-cpus-by-uncorecache``, whole and partial uncore (L3) caches, then whole cores
  (skipped by the spread strategy of ``distribute-cpus-across-cores``), then single CPUs.
* **NUMA-distributed** (``distribute-cpus-across-numa``): the NUMA-node combination whose leftover free
  CPUs are most balanced (lowest population standard deviation), CPUs handed out in groups.

Faithfulness is the contract: the same CPUs as the Go code, tie for tie, including two Go artefacts
the kubelet's own answers depend on:

* ``iterateCombinations`` builds each combination with ``append`` on a shared accumulator, so the
  slice remembered as the best combination (or best remainder subset) keeps sharing a backing array
  with the combinations enumerated after it and is overwritten by them.  The kubelet then allocates
  from the overwritten combination (e.g. NUMA nodes 0,1,2,7 instead of 0,1,2,3 on an idle 8-node
  machine); :func:`go_remembered_combination` computes what Go's slice growth leaves in it.
* the balance score is rounded to three decimals (mean first, then the deviation), and ties keep the
  first combination found.

Where the Go code would loop forever (a remainder that round-robin can never place), this port
skips that candidate (or reports the kubelet's "accounting error") instead of hanging.

Speed is the other half: a CPU set is an ``int`` bitmask, every grouping is a precomputed mask, and
the per-machine orderings live in a small cache keyed by the topology object (``CPUTopology`` has
``__slots__`` and an expensive hash, so it is neither extended nor hashed).  Orders are computed
from a snapshot of the free set exactly when the Go code computes them, but consumed lazily so a
one-CPU request does not sort every core of the machine.

This module is pure: it neither reads nor writes state and knows nothing about pods, reservations
or topology hints; the static policy decides *which* CPUs are available and how many to take.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Literal

from enforcer.cpumanager.topology_index import TopologyIndex, by_free_count, index_of
from enforcer.errors import CPUAllocationError
from enforcer.topology.machine import CPUTopology
from shared.cpuset import CPUSet

Algorithm = Literal["packed", "distributed"]


@dataclass(frozen=True, slots=True)
class TakeOptions:
    """How ``takeByTopology`` chooses: the static policy derives these from its policy options.

    * ``algorithm``: ``"distributed"`` with ``distribute-cpus-across-numa``, else ``"packed"``;
    * ``cpu_group_size``: distributed only; CPUs per core with ``full-pcpus-only``, else 1;
    * ``spread_across_cores``: the spread sorting strategy (``distribute-cpus-across-cores``);
    * ``prefer_align_uncore``: packed only (``prefer-align-cpus-by-uncorecache``); the kubelet
      never aligns by uncore cache inside the distributed algorithm, so neither do we;
    * ``align_by_socket``: distributed only (``align-by-socket``): prefer NUMA combinations within
      one socket.  Ported from the v1.36 source; no kubelet table exercises it with ``True``.
    """

    algorithm: Algorithm = "packed"
    cpu_group_size: int = 1
    spread_across_cores: bool = False
    prefer_align_uncore: bool = False
    align_by_socket: bool = False

    def __post_init__(self) -> None:
        if self.algorithm not in ("packed", "distributed"):
            raise ValueError(f"unknown takeByTopology algorithm {self.algorithm!r}")
        if self.cpu_group_size < 1:
            raise ValueError(f"cpu_group_size must be at least 1, got {self.cpu_group_size}")


PACKED = TakeOptions()
"""The default static policy: NUMA-packed, packed sorting, no uncore alignment."""


def take_by_topology(
    topology: CPUTopology,
    available: CPUSet,
    num_cpus: int,
    options: TakeOptions = PACKED,
) -> CPUSet:
    """Choose ``num_cpus`` CPUs from ``available`` exactly as the kubelet's ``takeByTopology`` does.

    Raises :class:`~enforcer.errors.CPUAllocationError` with the kubelet's message when the request
    cannot be met.  ``available`` CPUs unknown to ``topology`` are ignored (kubelet ``KeepOnly``),
    but still counted in the "not enough cpus" message, as the kubelet counts them.
    """
    index = index_of(topology)
    free = available.mask & index.all_mask
    if options.algorithm == "distributed":
        result = _take_distributed(index, free, num_cpus, options, len(available))
    else:
        result = _take_packed(
            index, free, num_cpus, options.spread_across_cores, options.prefer_align_uncore, len(available)
        )
    return CPUSet.from_mask(result)


# ---------------------------------------------------------------------------------------------
# The accumulator (kubelet cpuAccumulator) and NUMA-packed.
# ---------------------------------------------------------------------------------------------


class _Accumulator:
    """Free CPUs, CPUs taken so far, and how many are still needed; all orders are the kubelet's."""

    __slots__ = ("index", "free", "result", "needed")

    def __init__(self, index: TopologyIndex, free: int, needed: int) -> None:
        self.index = index
        self.free = free
        self.result = 0
        self.needed = needed

    def take(self, cpus: int) -> None:
        # Go subtracts the size of what it takes even if part of it was taken already; kept as is.
        self.result |= cpus
        self.free &= ~self.result
        self.needed -= cpus.bit_count()

    # -- orders (S1-S3): NUMA-first when sockets >= NUMA nodes, else sockets-first ----------------
    def sorted_numas(self, free: int) -> list[int]:
        index = self.index
        if index.numa_first:
            return by_free_count(index.numas, free)
        return [n for s in self.sorted_sockets(free) for n in by_free_count(index.numas_in_socket[s], free)]

    def sorted_sockets(self, free: int) -> list[int]:
        index = self.index
        if index.numa_first:
            return [s for n in self.sorted_numas(free) for s in by_free_count(index.sockets_in_numa[n], free)]
        return by_free_count(index.sockets, free)

    def sorted_cores(self, free: int) -> Iterator[int]:
        """Cores with a free CPU in the kubelet's order, as of ``free``; sorted one parent at a time."""
        index = self.index
        if index.numa_first:
            parents, children = self.sorted_sockets(free), index.cores_in_socket
        else:
            parents, children = self.sorted_numas(free), index.cores_in_numa
        for parent in parents:
            yield from by_free_count(children[parent], free)

    def sorted_uncores(self, free: int) -> list[int]:
        uncores_in_numa = self.index.uncores_in_numa
        return [u for n in self.sorted_numas(free) for u in by_free_count(uncores_in_numa[n], free)]

    # -- the steps of takeByTopologyNUMAPacked -------------------------------------------------------
    def take_full_numas(self) -> None:
        index = self.index
        if self.needed < index.smallest_numa:
            return
        free = self.free
        numa_mask = index.numa_mask
        for numa in [n for n in self.sorted_numas(free) if numa_mask[n] & free == numa_mask[n]]:
            cpus = numa_mask[numa]
            if self.needed >= cpus.bit_count():
                self.take(cpus)

    def take_full_sockets(self) -> None:
        index = self.index
        if self.needed < index.smallest_socket:
            return
        free = self.free
        socket_mask = index.socket_mask
        for socket in [s for s in self.sorted_sockets(free) if socket_mask[s] & free == socket_mask[s]]:
            cpus = socket_mask[socket]
            if self.needed >= cpus.bit_count():
                self.take(cpus)

    def take_full_uncores(self) -> None:
        free = self.free
        uncore_mask = self.index.uncore_mask
        for uncore in [u for u in self.sorted_uncores(free) if uncore_mask[u] & free == uncore_mask[u]]:
            cpus = uncore_mask[uncore]
            if self.needed >= cpus.bit_count():
                self.take(cpus)

    def take_partial_uncore(self, uncore: int) -> None:
        index = self.index
        per_core = index.cpus_per_core
        cores_needed = (self.needed + per_core - 1) // per_core
        free = self.free
        cpus = 0
        for _, in_uncore, whole in index.cores_in_uncore[uncore]:
            if cores_needed == 0:
                break
            if in_uncore & free:
                cpus |= whole & free
                cores_needed -= 1
        # An odd remainder on an SMT machine leaves the last (highest) CPU of the last core out.
        if self.needed % 2 != 0 and per_core > 1 and cpus.bit_count() > self.needed:
            cpus ^= 1 << (cpus.bit_length() - 1)
        if cpus.bit_count() == self.needed:
            self.take(cpus)

    def take_uncore_caches(self) -> None:
        uncore_mask = self.index.uncore_mask
        full_uncores_exhausted = False
        for uncore in self.sorted_uncores(self.free):
            # Once a pass over the free caches has run, another finds nothing: the free set only
            # shrinks and so does the need, so the pass is skipped after the first time.
            if not full_uncores_exhausted and self.needed >= uncore_mask[uncore].bit_count():
                self.take_full_uncores()
                full_uncores_exhausted = True
            if self.needed < 1:
                return
            self.take_partial_uncore(uncore)
            if self.needed < 1:
                return

    def take_full_cores(self) -> None:
        index = self.index
        smallest = index.smallest_core
        if self.needed < smallest:
            return
        free = self.free
        core_mask = index.core_mask
        for core in self.sorted_cores(free):
            cpus = core_mask[core]
            if cpus & free != cpus:
                continue
            if self.needed >= cpus.bit_count():
                self.take(cpus)
                if self.needed < smallest:
                    return

    def take_remaining_cpus(self, spread: bool) -> None:
        free = self.free
        if spread:
            socket_mask = self.index.socket_mask
            groups: Iterator[int] = (socket_mask[s] & free for s in self.sorted_sockets(free))
        else:
            core_mask = self.index.core_mask
            groups = (core_mask[c] & free for c in self.sorted_cores(free))
        for cpus in groups:
            while cpus:
                lowest = cpus & -cpus
                cpus ^= lowest
                self.take(lowest)
                if self.needed < 1:
                    return


def _not_enough(requested: int, available: int) -> CPUAllocationError:
    return CPUAllocationError(
        f"not enough cpus available to satisfy request: requested={requested}, available={available}"
    )


def _take_packed(
    index: TopologyIndex, free: int, num_cpus: int, spread: bool, align_uncore: bool, available: int
) -> int:
    """kubelet ``takeByTopologyNUMAPacked``; ``available`` is only quoted in the error message."""
    acc = _Accumulator(index, free, num_cpus)
    if acc.needed < 1:
        return 0
    if acc.needed > free.bit_count():
        raise _not_enough(num_cpus, available)
    if index.numa_first:
        acc.take_full_numas()
        if acc.needed < 1:
            return acc.result
        acc.take_full_sockets()
    else:
        acc.take_full_sockets()
        if acc.needed < 1:
            return acc.result
        acc.take_full_numas()
    if acc.needed < 1:
        return acc.result
    if align_uncore:
        acc.take_uncore_caches()
        if acc.needed < 1:
            return acc.result
    if not spread:
        acc.take_full_cores()
        if acc.needed < 1:
            return acc.result
    acc.take_remaining_cpus(spread)
    if acc.needed < 1:
        return acc.result
    raise CPUAllocationError("failed to allocate cpus")


def _take_packed_ignoring_errors(index: TopologyIndex, free: int, num_cpus: int, spread: bool) -> int:
    # The distributed algorithm discards these errors (`cpus, _ := ...`) and takes the empty set.
    try:
        return _take_packed(index, free, num_cpus, spread, False, free.bit_count())
    except CPUAllocationError:
        return 0


# ---------------------------------------------------------------------------------------------
# NUMA-distributed.
# ---------------------------------------------------------------------------------------------


def _go_round(value: float) -> float:
    """Go ``math.Round``: half away from zero (Python's ``round`` rounds half to even)."""
    truncated = float(math.trunc(value))
    if abs(value - truncated) >= 0.5:
        truncated += math.copysign(1.0, value)
    return truncated


def go_owned_prefix(k: int) -> int:
    """How many leading elements a k-combination of ``iterateCombinations`` owns in its Go backing array.

    ``append`` reallocates only when the slice is full, and capacities double from 1 (1, 2, 4, 8, ...;
    exact below 256 elements), so the slice of length ``k`` lives in the array allocated when the
    accumulator reached length 1, 2, 3, 5, 9, 17, ...: positions from there on are shared with every
    later combination of the same prefix, and are overwritten by them.
    """
    return 1 if k < 2 else 1 + (1 << ((k - 1).bit_length() - 1))


def go_remembered_combination(
    chosen: tuple[int, ...], stopped_at: tuple[int, ...] | None, pool_size: int
) -> tuple[int, ...]:
    """What a slice remembered from ``iterateCombinations`` holds when Go reads it afterwards.

    Combinations are index tuples into the pool, in ``itertools.combinations`` order (the order of the
    Go recursion).  ``stopped_at`` is the combination at which the walk was broken off (``None`` if it
    ran to the end).  The remembered slice keeps its owned prefix; the shared tail holds the last
    combination written with that prefix: the one the walk stopped at, or else the prefix's last one.
    """
    k = len(chosen)
    owned = go_owned_prefix(k)
    if owned >= k:
        return chosen
    prefix = chosen[:owned]
    if stopped_at is not None and stopped_at[:owned] == prefix:
        return stopped_at
    return prefix + tuple(range(pool_size - (k - owned), pool_size))


# A combination's best balance score and the positions (in the combination) of the NUMA nodes its
# remainder CPUs come from (``None`` when there is no remainder).
_ComboScore = tuple[float, tuple[int, ...] | None]


class _Balancer:
    """The balance score (kubelet ``standardDeviation``) of the free CPUs left on each NUMA node.

    Every candidate leaves the same total, so the rounded mean is one number for the whole search;
    the squared deviations are kept as exact integers in thousandths and updated only for the nodes a
    candidate touches, which makes equal distributions score bit-for-bit equal, as ties require.
    """

    __slots__ = ("mean_thousandths", "base", "nodes")

    def __init__(self, free_per_numa: dict[int, int], left_in_total: int) -> None:
        self.nodes = len(free_per_numa)
        self.mean_thousandths = int(_go_round(left_in_total / self.nodes * 1000))
        self.base = sum(self.square(v) for v in free_per_numa.values())

    def square(self, free: int) -> int:
        deviation = 1000 * free - self.mean_thousandths
        return deviation * deviation

    def score(self, squares: int) -> float:
        return _go_round(math.sqrt(squares / 1_000_000 / self.nodes) * 1000) / 1000


def _score_combo(
    combo: Sequence[int],
    free_per_numa: dict[int, int],
    num_cpus: int,
    group: int,
    align_by_socket: bool,
    balancer: _Balancer,
) -> _ComboScore | None:
    """The kubelet's evaluation of one NUMA combination; ``None`` when it cannot hold the request.

    Written over NUMA ids with Go's map semantics (a node listed twice is charged twice), so it is
    exact on any machine; :class:`_ComboScorer` memoises it where only the free counts matter.
    """
    k = len(combo)
    if sum(free_per_numa[n] for n in set(combo)) < num_cpus:
        return None
    if sum(free_per_numa[n] // group for n in combo) * group < num_cpus:
        return None
    distribution = (num_cpus // k // group) * group
    if align_by_socket:
        distribution = min([distribution, *(free_per_numa[n] // group * group for n in combo)])
    if any(free_per_numa[n] < distribution for n in combo):
        return None
    after = {n: free_per_numa[n] for n in combo}
    for n in combo:
        after[n] -= distribution
    remainder = num_cpus - distribution * k
    square = balancer.square
    untouched = balancer.base - sum(square(free_per_numa[n]) for n in after)
    if remainder == 0:
        return balancer.score(untouched + sum(square(v) for v in after.values())), None

    candidates = [position for position, n in enumerate(combo) if after[n] >= group]
    best_balance = math.inf
    best: tuple[int, ...] | None = None
    for size in range(len(candidates), 0, -1):
        for chosen in combinations(range(len(candidates)), size):
            subset = [combo[candidates[i]] for i in chosen]
            left = after.copy()
            if sum(left[n] for n in subset) < remainder:
                continue
            if not _hand_out_round_robin(left, subset, remainder, group):
                continue
            balance = balancer.score(untouched + sum(square(v) for v in left.values()))
            if balance < best_balance:
                best_balance, best = balance, chosen
    if best is None:
        return best_balance, None
    # Go reads the remembered subset after the walk (which never breaks off), aliasing included.
    remembered = go_remembered_combination(best, None, len(candidates))
    return best_balance, tuple(candidates[i] for i in remembered)


class _ComboScorer:
    """Scores combinations, memoised by the free counts of their nodes when that is all that matters.

    With distinct NUMA ids the evaluation is the same function of the ordered free counts for every
    combination, so combinations with equal counts share one score (positions, not ids, are cached).
    """

    __slots__ = ("free_per_numa", "num_cpus", "group", "align_by_socket", "balancer", "memo")

    def __init__(
        self, free_per_numa: dict[int, int], num_cpus: int, group: int, align_by_socket: bool, memoise: bool
    ) -> None:
        self.free_per_numa = free_per_numa
        self.num_cpus = num_cpus
        self.group = group
        self.align_by_socket = align_by_socket
        self.balancer = _Balancer(free_per_numa, sum(free_per_numa.values()) - num_cpus)
        self.memo: dict[tuple[int, ...], _ComboScore | None] | None = {} if memoise else None

    def score(self, combo: Sequence[int]) -> _ComboScore | None:
        memo = self.memo
        if memo is None:
            return self._evaluate(combo)
        key = tuple(map(self.free_per_numa.__getitem__, combo))
        try:
            return memo[key]
        except KeyError:
            scored = memo[key] = self._evaluate(combo)
            return scored

    def _evaluate(self, combo: Sequence[int]) -> _ComboScore | None:
        return _score_combo(combo, self.free_per_numa, self.num_cpus, self.group, self.align_by_socket, self.balancer)


def _hand_out_round_robin(left: dict[int, int], subset: Sequence[int], remainder: int, group: int) -> bool:
    """Give ``group`` CPUs at a time to the subset's nodes in turn; False where Go would spin forever."""
    while remainder > 0:
        progressed = False
        for numa in subset:
            if remainder == 0:
                break
            if left[numa] < group:
                continue
            left[numa] -= group
            remainder -= group
            progressed = True
        if not progressed:
            return False
    return True


def _numa_range(index: TopologyIndex, available_numas: int, num_cpus: int, group: int) -> tuple[int, int]:
    """kubelet ``rangeNUMANodesNeededToSatisfy``."""
    groups_total = (index.num_cpus - 1) // group + 1
    groups_per_numa = (groups_total - 1) // len(index.numa_mask) + 1
    groups_needed = (num_cpus - 1) // group + 1
    return (groups_needed - 1) // groups_per_numa + 1, min(groups_needed, available_numas)


def _take_distributed(index: TopologyIndex, free: int, num_cpus: int, options: TakeOptions, available: int) -> int:
    """kubelet ``takeByTopologyNUMADistributed``."""
    group, spread, align = options.cpu_group_size, options.spread_across_cores, options.align_by_socket
    if num_cpus % group != 0:
        return _take_packed(index, free, num_cpus, spread, False, available)
    acc = _Accumulator(index, free, num_cpus)
    if acc.needed < 1:
        return 0
    if acc.needed > free.bit_count():
        raise _not_enough(num_cpus, available)

    numas = acc.sorted_numas(free)
    numa_mask = index.numa_mask
    free_per_numa = {n: (numa_mask[n] & free).bit_count() for n in numas}
    # A NUMA node listed twice (only where a NUMA node spans sockets) makes scores depend on more than
    # the free counts, so such machines are scored without the memo.
    scorer = _ComboScorer(free_per_numa, num_cpus, group, align, memoise=len(free_per_numa) == len(numas))
    least, most = _numa_range(index, len(free_per_numa), num_cpus, group)

    for k in range(least, most + 1):
        best_balance = math.inf
        best_remainder: list[int] | None = None
        best_combo: tuple[int, ...] | None = None
        best_in_one_socket = False
        stopped_at: tuple[int, ...] | None = None
        for chosen in combinations(range(len(numas)), k):
            if best_balance == 0 and (not align or best_in_one_socket):
                stopped_at = chosen
                break
            combo = [numas[i] for i in chosen]
            scored = scorer.score(combo)
            if scored is None:
                continue
            balance, remainder_positions = scored
            in_one_socket = align and len(frozenset().union(*(index.sockets_of_numa[n] for n in combo))) == 1
            is_better = balance < best_balance
            if align and in_one_socket != best_in_one_socket:
                is_better = in_one_socket
            if is_better:
                best_balance = balance
                best_remainder = None if remainder_positions is None else [combo[p] for p in remainder_positions]
                best_combo = chosen
                if align:
                    best_in_one_socket = in_one_socket
        if best_combo is None:
            continue
        # Go allocates from the remembered slice, which later combinations may have overwritten.
        combo = [numas[i] for i in go_remembered_combination(best_combo, stopped_at, len(numas))]
        return _allocate_distribution(acc, combo, best_remainder or (), num_cpus, group, spread)

    return _take_packed(index, free, num_cpus, spread, False, available)


def _allocate_distribution(
    acc: _Accumulator, combo: Sequence[int], remainder_numas: Sequence[int], num_cpus: int, group: int, spread: bool
) -> int:
    index = acc.index
    numa_mask = index.numa_mask
    distribution = (num_cpus // len(combo) // group) * group
    for numa in combo:
        distribution = min(distribution, (numa_mask[numa] & acc.free).bit_count() // group * group)
    for numa in combo:
        acc.take(_take_packed_ignoring_errors(index, acc.free & numa_mask[numa], distribution, spread))
    remainder = num_cpus - distribution * len(combo)
    while remainder > 0:
        progressed = False
        for numa in remainder_numas:
            if remainder == 0:
                break
            if (acc.free & numa_mask[numa]).bit_count() < group:
                continue
            acc.take(_take_packed_ignoring_errors(index, acc.free & numa_mask[numa], group, spread))
            remainder -= group
            progressed = True
        if not progressed:
            break  # the kubelet would spin here forever; report its accounting error instead
    if acc.needed > 0:
        raise CPUAllocationError(f"accounting error, not enough CPUs allocated, remaining: {acc.needed}")
    if acc.needed < 0:
        raise CPUAllocationError(f"accounting error, too many CPUs allocated, remaining: {acc.needed}")
    return acc.result
