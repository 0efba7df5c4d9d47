"""In-place resize of exclusive CPUs: KEP-5554 for container slices, and KEP-5526 pod bubbles.

The kubelet v1.36 answers ``Infeasible`` to every resize of a Guaranteed pod under the static policy.
This module is what the ``extended`` engine does instead.  Rule numbers refer to
``shared/spec/in-place-resize.md`` (R6.x = KEP-5554) and ``pod-level-resource-managers.md``.

Exclusive containers (KEP-5554, ported from the KEP's implementation branch ``cpu_assignment_resize.go``):

* the CPUs first given to a container (``CPUState.originals``) are promised: a grow keeps every current
  CPU and adds the closest free ones (the NUMA nodes, sockets, uncore caches and cores the container
  already uses come first, :func:`~enforcer.cpumanager.resize_take.take_for_resize`); a shrink keeps the
  original CPUs and, of the others, the ones closest to them (so the farthest, normally the most
  recently added, are released first);
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

from collections.abc import Iterable
from dataclasses import dataclass

from enforcer.cpumanager.policy import ResizeAlignment
from enforcer.cpumanager.resize_errors import (
    GetOriginalCPUSetError,
    InconsistentCPUAllocationError,
    ProhibitedCPUAllocationError,
    ResizeAllocateCPUsError,
)
from enforcer.cpumanager.resize_placement import Placement, ResizablePolicy
from enforcer.cpumanager.state import CPUState
from enforcer.errors import EmptyPodSharedPoolError, SMTAlignmentError
from shared import pod_level, quantity
from shared.cpuset import EMPTY, CPUSet
from shared.resources import CPU, ContainerResources, PodResources


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
    policy: ResizablePolicy, state: CPUState, old: PodResources, new: PodResources
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

    def check(self, place: Placement) -> None:
        alignment = place.alignment
        exclusive = _union(c.current for c in self.changes)
        for unit in self.units(alignment):
            holding = self.unit_holding(unit, alignment)
            held_elsewhere = exclusive - holding  # the pod's other exclusive containers keep theirs
            place.check_can_ever_hold(holding, self.unit_count(unit, alignment), held_elsewhere)

    def apply(self, place: Placement, state: CPUState) -> None:
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

    def check(self, place: Placement) -> None:
        if self.total > len(self.bubble):
            place.check_can_ever_hold(self.bubble, self.total, EMPTY)

    def apply(self, place: Placement, state: CPUState) -> None:
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

    def _write(self, place: Placement, state: CPUState, uid: str, bubble: CPUSet, slices: dict[str, CPUSet]) -> None:
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
    policy: ResizablePolicy, state: CPUState, old: PodResources, new: PodResources, alignment: ResizeAlignment
) -> _ContainerPlan | _BubblePlan | None:
    """Check every Infeasible rule and return what to change (None: the CPU manager has nothing to do)."""
    if pod_level.never_pinned(new, managers_enabled=policy.gates.pod_level_managers_enabled):
        return None  # R1.8: the policy never pinned this pod
    plr_pod_scope = alignment.scope == "pod" and new.pod_level_resources_set
    if plr_pod_scope:
        return _plan_bubble(policy, state, old, new)
    changes, _ = _exclusive_changes(policy, state, old, new)
    if not any(c.grows or c.shrinks for c in changes):
        return None
    return _ContainerPlan(new, tuple(changes), policy.pod_guaranteed_cpus(new))


def _plan_bubble(policy: ResizablePolicy, state: CPUState, old: PodResources, new: PodResources) -> _BubblePlan | None:
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
# Entry point (StaticPolicy.plan_resize delegates here).
# ---------------------------------------------------------------------------------------------


class StaticResizePlan:
    """A checked resize of one pod's exclusive CPUs: every Infeasible rule passed, ready to apply to a state."""

    __slots__ = ("_plan", "_place")

    def __init__(self, plan: _ContainerPlan | _BubblePlan, place: Placement) -> None:
        self._plan = plan
        self._place = place

    def apply(self, state: CPUState) -> None:
        """Resize in ``state`` (a copy of the state the plan was made on).

        Raises :class:`ResizeDeferred` when the CPUs are not free now; the state may then be half-changed,
        so callers work on a copy (the engine always does).
        """
        self._plan.apply(self._place, state)


def plan_resize(
    policy: ResizablePolicy, state: CPUState, old: PodResources, new: PodResources, alignment: ResizeAlignment
) -> StaticResizePlan | None:
    """Check every rule that makes the resize Infeasible (raising its AdmissionRejected); None: nothing to do."""
    plan = _plan(policy, state, old, new, alignment)
    if plan is None:
        return None
    place = Placement(policy, alignment)
    plan.check(place)
    return StaticResizePlan(plan, place)
