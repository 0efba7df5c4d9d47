"""In-place resize of exclusive CPUs: KEP-5554 for container slices, and KEP-5526 pod bubbles.

The kubelet v1.36 answers ``Infeasible`` to every resize of a Guaranteed pod under the static policy.
This module is what the ``extended`` engine does instead.  Rule numbers refer to
``shared/spec/in-place-resize.md`` (R6.x = KEP-5554) and ``pod-level-resource-managers.md``.

Exclusive containers (KEP-5554, ported from the KEP's implementation branch ``cpu_assignment_resize.go``):

* the CPUs first given to a container (``CPUState.originals``) are promised: a grow keeps every current
  CPU and adds the closest free ones (the NUMA nodes, sockets, uncore caches and cores the container
  already uses come first, :func:`take_for_resize`); a shrink keeps the original CPUs and, of the others,
  the ones closest to them (so the farthest, normally the most recently added, are released first);
* fewer CPUs than the original is ``prohibitedCPUAllocationError``; a container moving between exclusive
  and shared CPUs is ``inconsistentCPUAllocationError``; an exclusive container without a recorded original
  is ``getOriginalCPUSetError``; ``full-pcpus-only`` still needs whole cores (``SMTAlignmentError``).

Pod-level budgets (KEP-5526 pods in pod scope): the bubble grows like one container (retaining the whole
bubble), shrinks from its pod shared pool only (never from an exclusive slice), and the slices inside it
resize by the rules above with the bubble as their free pool; the pod shared pool must stay non-empty
while the pod has shared containers (``EmptyPodSharedPoolError``).

Where the KEP is silent or answers differently, the decisions are:

* Deferred vs Infeasible (the kubelet's meaning: Deferred = fits the node, just not now).  A grow stays on
  NUMA node sets that contain every NUMA node the container (container scope) or pod (pod scope) already
  uses.  Under ``restricted`` and ``single-numa-node`` only such sets the Topology Manager would prefer for
  the new size qualify (one NUMA node for ``single-numa-node``).  If none of them could ever hold the new
  size (all CPUs but the reserved ones and the pod's other exclusive CPUs), the resize is Infeasible
  (``resizeAllocateCPUsError``); if one could but none has the free CPUs now, it is Deferred.  KEP-5554
  alpha answers Infeasible for every Topology Manager failure; being retried when room appears is the
  point of the extended mode.  Under ``best-effort`` the narrowest preferred such set with room is used,
  else the CPUs spill to the closest free ones; under ``none`` the closest free CPUs are taken.  A CPU
  never migrates: a container is not moved to other NUMA nodes to make room.
* A shrink never fails for lack of room; it never changes the NUMA affinity the pod was admitted with.
* Released CPUs go back to the shared pool unless a finished regular init container of the same pod
  still names them (as on container removal); such CPUs are reused first by the pod's next grow.
* Regular init containers have finished by the time a pod is resized (their resources are immutable,
  in-place-resize.md L5): their entries are kept, and inside a bubble re-fitted to it.
* ``distribute-cpus-across-numa`` resizes with the packed, closest-first order: a grow's purpose is
  locality with what the container holds, and upstream's distributed resize variant is not ported.

Only the state object passed in is changed.  Errors carry the kubelet's (KEP-5554's) reason strings;
"not now" is :class:`ResizeDeferred`, whose reason is the PodResizePending reason ``Deferred``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations, islice
from typing import TYPE_CHECKING

from enforcer.cpumanager.assignment import _by_free_count, _Index, _index_of, _Member
from enforcer.cpumanager.state import CPUState
from enforcer.errors import (
    AdmissionRejected,
    CPUAllocationError,
    EmptyPodSharedPoolError,
    ResizeDeferred,
    SMTAlignmentError,
    TopologyAffinityError,
)
from enforcer.topology import hint_masks
from enforcer.topology.machine import CPUTopology
from shared import quantity
from shared.cpuset import EMPTY, CPUSet
from shared.resources import CPU, ContainerResources, PodResources

if TYPE_CHECKING:
    from enforcer.cpumanager.policy_static import StaticPolicy

STRICT_TOPOLOGY_POLICIES = ("restricted", "single-numa-node")


# ---------------------------------------------------------------------------------------------
# Errors (KEP-5554 reason strings; messages from the KEP's implementation branch).
# ---------------------------------------------------------------------------------------------


class ProhibitedCPUAllocationError(AdmissionRejected):
    """A resize below the container's original (promised) CPUs (R6.3)."""

    reason = "prohibitedCPUAllocationError"

    @classmethod
    def below_original(
        cls, requested: str, allocated: str, promised: int, guaranteed: int
    ) -> ProhibitedCPUAllocationError:
        return cls(
            "prohibitedCPUAllocation Error: Skip resize, Not allowed to reduce container exclusively allocated pool "
            f"below promised, (requested CPUs = {requested}, allocated CPUs = {allocated}, "
            f"promised CPUs = {promised}, guaranteed CPUs = {guaranteed})"
        )


class InconsistentCPUAllocationError(AdmissionRejected):
    """A container moving between exclusive and shared CPUs (R6.4)."""

    reason = "inconsistentCPUAllocationError"

    @classmethod
    def to_shared(cls, requested: str, allocated: str) -> InconsistentCPUAllocationError:
        # The double space is upstream's.
        return cls(
            "inconsistentCPUAllocation Error: Not allowed to move a container from  exclusively allocated pool to "
            f"shared pool, not allowed (requested CPUs = {requested}, allocated CPUs = {allocated})"
        )

    @classmethod
    def to_exclusive(cls, requested: str, allocated: str) -> InconsistentCPUAllocationError:
        return cls(
            "inconsistentCPUAllocation Error: Not allowed to move a container from shared pool to exclusively "
            f"allocated pool, (requested CPUs = {requested}, allocated CPUs = {allocated})"
        )


class GetOriginalCPUSetError(AdmissionRejected):
    """An exclusive container whose original CPUs are not in the state (R6.4)."""

    reason = "getOriginalCPUSetError"

    @classmethod
    def missing(cls, pod_uid: str, container_name: str) -> GetOriginalCPUSetError:
        return cls(
            "getOriginalCPUSet Error: Skip resize, unable to get OriginalCPUSet, nothing to be done, "
            f"(podUID = {pod_uid}, containerName {container_name})"
        )


class ResizeAllocateCPUsError(AdmissionRejected):
    """The new size can never be placed under the Topology Manager policy, or CPU selection failed (R6.4)."""

    reason = "resizeAllocateCPUsError"

    @classmethod
    def because(cls, cause: str) -> ResizeAllocateCPUsError:
        return cls(f"resizeAllocateCPUs Error: {cause}")


@dataclass(frozen=True, slots=True)
class ResizeAlignment:
    """The Topology Manager settings a grow must honour (the node's policy and scope)."""

    policy: str = "none"
    scope: str = "container"

    @property
    def strict(self) -> bool:
        """Whether a grow must stay inside a preferred NUMA set (restricted, single-numa-node)."""
        return self.policy in STRICT_TOPOLOGY_POLICIES


# ---------------------------------------------------------------------------------------------
# Resize-aware takeByTopology (NUMA-packed), kubelet KEP-5554 branch ``cpu_assignment_resize.go``.
# ---------------------------------------------------------------------------------------------


def _held_first(members: Sequence[_Member], held: int, free: int) -> list[int]:
    """Resize sort: members already holding a retained CPU first, then the rest; each part fewest free first."""
    mine = [m for m in members if m[2] & held]
    others = [m for m in members if not m[2] & held]
    return _by_free_count(mine, free) + _by_free_count(others, free)


class _ResizeAccumulator:
    """``cpuAccumulatorForResize``: the kubelet accumulator whose orders put retained topology first."""

    __slots__ = ("index", "free", "result", "needed")

    def __init__(self, index: _Index, free: int, retained: int, count: int) -> None:
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
    index = _index_of(topology)
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


# ---------------------------------------------------------------------------------------------
# Where a grow may go: NUMA sets the Topology Manager would accept, and what they can hold.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _NUMASet:
    numa_mask: int
    cpus: CPUSet
    size: int


class _Placement:
    """The policy's view a resize needs: free CPUs, blocked CPUs, selection options, NUMA sets."""

    def __init__(self, policy: StaticPolicy, alignment: ResizeAlignment) -> None:
        self.policy = policy
        self.topology = policy.topology
        self.alignment = alignment
        options = policy.options
        # full-pcpus-only grows by whole cores only: the siblings of reserved CPUs are never handed out.
        self.blocked = policy.reserved_physical_cpus if options.full_pcpus_only else policy.reserved_cpus
        self.spread = options.distribute_cpus_across_cores
        self.align_uncore = options.prefer_align_cpus_by_uncorecache
        self.align_by_socket = options.align_by_socket

    def take(self, free: CPUSet, retained: CPUSet, count: int) -> CPUSet:
        try:
            return take_for_resize(
                self.topology, free, retained, count, spread=self.spread, align_uncore=self.align_uncore
            )
        except CPUAllocationError as err:
            raise ResizeAllocateCPUsError.because(err.message) from err

    def free_cpus(self, state: CPUState) -> CPUSet:
        return state.default - self.blocked

    def numa_sets(self, holding: CPUSet, count: int) -> list[_NUMASet]:
        """Preferred NUMA sets for ``count`` CPUs that contain every NUMA node of ``holding``.

        Preferred as the kubelet's hint generation says (R6.3): as few NUMA nodes as the smallest set whose
        CPUs (reserved ones included) number ``count``, or the socket rule under align-by-socket; one NUMA
        node for single-numa-node.  Narrowest first, then the lowest mask.  Only the sizes a preferred set
        can have are enumerated, at most ``MAX_MASKS_PER_SIZE`` sets per size on huge machines.
        """
        topo = self.topology
        numa_ids = sorted(topo.numa_masks)
        required = tuple(topo.numa_nodes_of(holding))
        others = [n for n in numa_ids if n not in required]
        capacities = [topo.numa_masks[n].bit_count() for n in numa_ids]
        min_affinity = min(hint_masks.min_size_for(capacities, count), len(numa_ids))
        numa_per_socket = len(numa_ids) // max(1, topo.num_sockets)
        min_sockets = -(-min_affinity // numa_per_socket) if self.align_by_socket and numa_per_socket else 0
        largest = max(min_affinity, min_sockets * numa_per_socket)
        if self.alignment.policy == "single-numa-node":
            largest = 1
        result: list[_NUMASet] = []
        for size in range(max(1, len(required)), largest + 1):
            for extra in islice(combinations(others, size - len(required)), hint_masks.MAX_MASKS_PER_SIZE):
                numa_mask = 0
                cpu_mask = 0
                sockets: set[int] = set()
                for numa in (*required, *extra):
                    numa_mask |= 1 << numa
                    cpu_mask |= topo.numa_masks[numa]
                    sockets.update(topo.sockets_of_numa.get(numa, ()))
                if size == min_affinity or (min_sockets > 0 and len(sockets) == min_sockets):
                    result.append(_NUMASet(numa_mask, CPUSet.from_mask(cpu_mask), size))
        result.sort(key=lambda s: (s.size, s.numa_mask))
        return result

    def check_can_ever_hold(self, holding: CPUSet, count: int, held_elsewhere: CPUSet) -> None:
        """Infeasible unless some acceptable place could hold ``count`` CPUs once every other pod is gone.

        ``held_elsewhere``: the pod's own exclusive CPUs outside this grow, which do not go away.
        """
        if self.alignment.policy in ("none", "best-effort"):
            capacity = len(self.topology.all_cpus - self.blocked - held_elsewhere)
            if capacity < count:
                raise ResizeAllocateCPUsError.because(
                    f"not enough cpus on this node: requested={count}, at most {capacity} can ever be exclusive"
                )
            return
        for numa_set in self.numa_sets(holding, count):
            if len(numa_set.cpus - self.blocked - held_elsewhere) >= count:
                return
        raise ResizeAllocateCPUsError.because(
            f"{TopologyAffinityError().message}: no NUMA node set containing NUMA node(s) "
            f"{_numa_list(self.topology, holding)} can hold {count} exclusive CPUs under the "
            f"{self.alignment.policy} Topology Manager policy"
        )

    def grow_region(self, holding: CPUSet, count: int, need: int, free: CPUSet) -> CPUSet | None:
        """Where ``need`` more CPUs come from (None: anywhere); raises ResizeDeferred when nowhere now."""
        if self.alignment.policy == "none":
            if len(free) >= need:
                return None
        else:
            for numa_set in self.numa_sets(holding, count):
                if len(free & numa_set.cpus) >= need:
                    return numa_set.cpus
            if not self.alignment.strict and len(free) >= need:
                return None  # best-effort: no aligned room, spill to the closest free CPUs
        # key facts first: the webhook's warning is cut at the apiserver's 120 characters
        where = "" if self.alignment.policy == "none" else ", too few on an acceptable NUMA node set"
        raise ResizeDeferred(
            f"{need} more exclusive CPUs needed, now on NUMA node(s) {_numa_list(self.topology, holding)}, "
            f"{len(free)} free on the node{where}"
        )


def _numa_list(topology: CPUTopology, cpus: CPUSet) -> str:
    return "{" + ",".join(map(str, topology.numa_nodes_of(cpus))) + "}"


def _cpu_string(container: ContainerResources) -> str:
    return quantity.format_millicores(container.resources.request(CPU))


def _pod_cpu_string(pod: PodResources) -> str:
    return quantity.format_millicores(pod.pod.request(CPU) if pod.pod is not None else 0)


# ---------------------------------------------------------------------------------------------
# Plans: everything that makes a resize Infeasible is found before the state is touched.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _SliceChange:
    """One exclusive container: what it holds, what it was promised, how many CPUs it will hold."""

    name: str
    kind: str
    current: CPUSet
    original: CPUSet
    count: int

    @property
    def grows(self) -> bool:
        return self.count > len(self.current)

    @property
    def shrinks(self) -> bool:
        return self.count < len(self.current)


def _exclusive_changes(
    policy: StaticPolicy, state: CPUState, old: PodResources, new: PodResources
) -> tuple[list[_SliceChange], list[ContainerResources]]:
    """R6.3/R6.4 per long-running container: the exclusive ones, and the shared ones (new spec)."""
    changes: list[_SliceChange] = []
    shared: list[ContainerResources] = []
    group = policy.topology.cpus_per_core()
    for container in new.containers:
        if container.kind == "init":
            continue  # finished; immutable (L5)
        before = old.container(container.name)
        old_count = policy.guaranteed_cpus(old, before)
        new_count = policy.guaranteed_cpus(new, container)
        if old_count == 0 and new_count == 0:
            shared.append(container)
            continue
        if new_count == 0:
            raise InconsistentCPUAllocationError.to_shared(_cpu_string(container), _cpu_string(before))
        if old_count == 0:
            raise InconsistentCPUAllocationError.to_exclusive(_cpu_string(container), _cpu_string(before))
        current = state.container_cpus(new.uid, container.name)
        original = state.original_cpus(new.uid, container.name)
        if current is None or original is None:
            raise GetOriginalCPUSetError.missing(new.uid, container.name)
        if new_count < len(original):
            raise ProhibitedCPUAllocationError.below_original(
                _cpu_string(container), _cpu_string(before), len(original), new_count
            )
        if new_count != len(current) and policy.options.full_pcpus_only and new_count % group:
            raise SMTAlignmentError.not_multiple(new_count, group)
        changes.append(_SliceChange(container.name, container.kind, current, original, new_count))
    return changes, shared


def _pod_entries(state: CPUState, pod_uid: str) -> dict[str, CPUSet]:
    return dict(state.entries.get(pod_uid, {}))


def _release(state: CPUState, pod_uid: str, cpus: CPUSet) -> None:
    """Back to the shared pool, except what another entry of the pod (a finished init container) names."""
    in_use = EMPTY
    for held in state.entries.get(pod_uid, {}).values():
        in_use = in_use | held
    state.default = state.default | (cpus - in_use)


@dataclass(frozen=True)
class _ContainerPlan:
    """Node-level exclusive slices (container scope, or pod scope without a KEP-5526 bubble)."""

    pod: PodResources
    changes: tuple[_SliceChange, ...]
    pod_count: int

    def units(self, alignment: ResizeAlignment) -> list[list[_SliceChange]]:
        growing = [c for c in self.changes if c.grows]
        if not growing:
            return []
        return [growing] if alignment.scope == "pod" else [[c] for c in growing]

    def unit_holding(
        self, unit: list[_SliceChange], alignment: ResizeAlignment, held: dict[str, CPUSet] | None = None
    ) -> CPUSet:
        """The CPUs whose NUMA nodes a grow must keep: the container's, or in pod scope the whole pod's."""
        members = self.changes if alignment.scope == "pod" else unit
        return _union(c.current if held is None else held[c.name] for c in members)

    def unit_count(self, unit: list[_SliceChange], alignment: ResizeAlignment) -> int:
        return self.pod_count if alignment.scope == "pod" else unit[0].count

    def check(self, place: _Placement) -> None:
        alignment = place.alignment
        exclusive = _union(c.current for c in self.changes)
        for unit in self.units(alignment):
            holding = self.unit_holding(unit, alignment)
            held_elsewhere = exclusive - holding  # the pod's other exclusive containers keep theirs
            place.check_can_ever_hold(holding, self.unit_count(unit, alignment), held_elsewhere)

    def apply(self, place: _Placement, state: CPUState) -> None:
        uid = self.pod.uid
        for change in self.changes:  # decreases first (R4.6), so a grow may reuse what they free
            if change.shrinks:
                kept = place.take(change.current - change.original, change.original, change.count)
                state.set_container_cpus(uid, change.name, kept)
                _release(state, uid, change.current - kept)
        alignment = place.alignment
        for unit in self.units(alignment):
            entries = _pod_entries(state, uid)
            exclusive = {c.name for c in self.changes}
            long_running = _union(entries[name] for name in exclusive)
            # CPUs only a finished regular init container still names are the pod's to reuse first.
            reusable = _union(cpus for name, cpus in entries.items() if name not in exclusive)
            free = place.free_cpus(state) | (reusable - long_running)
            holding = self.unit_holding(unit, alignment, entries)  # after this resize's decreases
            need = sum(c.count - len(c.current) for c in unit)
            region = place.grow_region(holding, self.unit_count(unit, alignment), need, free)
            pool = free if region is None else free & region
            for change in unit:
                grown = place.take(pool, change.current, change.count)
                state.set_container_cpus(uid, change.name, grown)
                state.default = state.default - grown
                pool = pool - grown


@dataclass(frozen=True)
class _BubblePlan:
    """A KEP-5526 pod in pod scope: one bubble, exclusive slices and a pod shared pool inside it."""

    old: PodResources
    new: PodResources
    bubble: CPUSet
    total: int
    changes: tuple[_SliceChange, ...]

    def check(self, place: _Placement) -> None:
        if self.total > len(self.bubble):
            place.check_can_ever_hold(self.bubble, self.total, EMPTY)

    def apply(self, place: _Placement, state: CPUState) -> None:
        uid = self.new.uid
        slices = {c.name: c.current for c in self.changes}
        for change in self.changes:
            if change.shrinks:
                slices[change.name] = place.take(change.current - change.original, change.original, change.count)
        bubble = self.bubble
        if self.total > len(bubble):
            need = self.total - len(bubble)
            free = place.free_cpus(state)
            region = place.grow_region(bubble, self.total, need, free)
            bubble = place.take(free if region is None else free & region, bubble, self.total)
            state.default = state.default - bubble
        pool = bubble - _union(slices.values())
        for change in self.changes:
            if change.grows:
                grown = place.take(pool, change.current, change.count)
                slices[change.name] = grown
                pool = pool - grown
        if self.total < len(bubble):
            # The pod shared pool gives back its CPUs farthest from the slices; slices are never touched.
            exclusive = _union(slices.values())
            kept = place.take(bubble - exclusive, exclusive, self.total)
            state.default = state.default | (bubble - kept)
            bubble = kept
        self._write(place, state, uid, bubble, slices)

    def _write(self, place: _Placement, state: CPUState, uid: str, bubble: CPUSet, slices: dict[str, CPUSet]) -> None:
        """PLR §4 steps 5-7 over the resized bubble, keeping every slice where it is."""
        sidecars = _union(slices[c.name] for c in self.changes if c.kind == "sidecar")
        pool = bubble - _union(slices.values())
        state.set_pod_cpus(uid, bubble)
        for container in self.new.containers:
            if container.name in slices:
                state.set_container_cpus(uid, container.name, slices[container.name])
            elif container.kind != "init":
                state.set_container_cpus(uid, container.name, pool)
            else:
                runnable = bubble - sidecars
                count = place.policy.guaranteed_cpus(self.new, container)
                held = state.container_cpus(uid, container.name)
                if count == 0 or held is None:
                    state.set_container_cpus(uid, container.name, runnable)
                elif not held.is_subset_of(runnable):
                    kept = held & runnable
                    state.set_container_cpus(uid, container.name, place.take(runnable - kept, kept, count))


def _union(sets: Iterable[CPUSet]) -> CPUSet:
    mask = 0
    for cpus in sets:
        mask |= cpus.mask
    return CPUSet.from_mask(mask)


def _plan(
    policy: StaticPolicy, state: CPUState, old: PodResources, new: PodResources, alignment: ResizeAlignment
) -> _ContainerPlan | _BubblePlan | None:
    """Check every Infeasible rule and return what to change (None: the CPU manager has nothing to do)."""
    if new.pod_level_resources_set and not policy.gates.pod_level_managers_enabled:
        return None  # R1.8: the policy never pinned this pod
    plr_pod_scope = alignment.scope == "pod" and new.pod_level_resources_set
    if plr_pod_scope:
        return _plan_bubble(policy, state, old, new)
    changes, _ = _exclusive_changes(policy, state, old, new)
    if not any(c.grows or c.shrinks for c in changes):
        return None
    return _ContainerPlan(new, tuple(changes), policy.pod_guaranteed_cpus(new))


def _plan_bubble(policy: StaticPolicy, state: CPUState, old: PodResources, new: PodResources) -> _BubblePlan | None:
    bubble = state.pod_cpus(new.uid)
    total = policy.pod_guaranteed_cpus(new)
    if bubble is None:
        if total > 0:  # the budget was fractional, so nothing was pinned (PLR R2.4)
            raise InconsistentCPUAllocationError.to_exclusive(_pod_cpu_string(new), _pod_cpu_string(old))
        return None
    if total == 0:
        raise InconsistentCPUAllocationError.to_shared(_pod_cpu_string(new), _pod_cpu_string(old))
    rejection = policy.validate_pod_scope_resources(new)
    if rejection is not None:
        raise EmptyPodSharedPoolError(rejection)
    group = policy.topology.cpus_per_core()
    if total != len(bubble) and policy.options.full_pcpus_only and total % group:
        raise SMTAlignmentError.not_multiple(total, group)
    changes, _ = _exclusive_changes(policy, state, old, new)
    exclusive = sum(c.count for c in changes)
    if exclusive > total:
        raise ResizeAllocateCPUsError.because(
            f"exclusive containers need {exclusive} cpus, more than the pod budget of {total}"
        )
    if total == len(bubble) and not any(c.grows or c.shrinks for c in changes):
        return None
    return _BubblePlan(old, new, bubble, total, tuple(changes))


# ---------------------------------------------------------------------------------------------
# Entry points (StaticPolicy.resize_infeasibility / StaticPolicy.resize delegate here).
# ---------------------------------------------------------------------------------------------


def resize_infeasibility(
    policy: StaticPolicy, state: CPUState, old: PodResources, new: PodResources, alignment: ResizeAlignment
) -> tuple[str, str] | None:
    """(reason, message) when the resize can never be honoured on this node, else None."""
    try:
        plan = _plan(policy, state, old, new, alignment)
        if plan is not None:
            plan.check(_Placement(policy, alignment))
    except AdmissionRejected as err:
        return err.reason, err.message
    return None


def resize(
    policy: StaticPolicy, state: CPUState, old: PodResources, new: PodResources, alignment: ResizeAlignment
) -> None:
    """Resize the pod's exclusive CPUs in ``state``.

    Raises the Infeasible errors above, or :class:`ResizeDeferred` when the CPUs are not free now; the
    state may then be half-changed, so callers work on a copy (the engine always does).
    """
    plan = _plan(policy, state, old, new, alignment)
    if plan is None:
        return
    place = _Placement(policy, alignment)
    plan.check(place)
    plan.apply(place, state)
