"""From the engine's allocations to cgroup values, and a worker that keeps the cgroups there.

:func:`pod_targets` turns one pod's :class:`~enforcer.engine.view.PodView`
into :class:`~enforcer.cgroups.reconcile.CgroupTarget` s for the pod cgroup
and every container cgroup whose id is known:

* ``cpuset.cpus``: the container's set from the view (exclusive slice, pod
  shared pool, or the node's default set for ``node_shared`` containers); the
  pod cgroup gets the union of its containers' sets, so cgroup v1's "child
  within parent" rule always holds.  An empty set is never written.
* ``cpuset.mems``: the container's NUMA binding, or every NUMA node when it
  has none; the pod cgroup gets the union.
* CPU quota by the view's ``cfsQuota`` level (cpu-manager.md R8,
  pod-level-resource-managers.md R9): ``container`` -> limit x period at the
  container (``max`` without a limit); ``pod`` and ``none`` -> ``max`` at the
  container.  The pod cgroup gets the pod's CPU limit (the pod-level limit, or
  the sum when every container declares one) unless it has an exclusive
  container with quota disabled and no pod-shared container: the kubelet lifts
  the pod quota for pods with exclusive CPUs, and keeps it where the seed's
  pod-shared containers are "bounded at the pod level" (R9.3 leaves the mixed
  case open; a pod quota of the full pod limit never throttles the exclusive
  slice, which its cpuset already bounds).
* memory limits: the container's limit (``max`` without one); the pod's when
  declared as the kubelet does.

Pods on the node that the engine does not manage (seen by the Kubernetes
watch) have only their cpusets managed: they follow the default set, so no
pod ever runs on another pod's exclusive CPUs.

:class:`Reconciler` drives targets through the configured driver with
:func:`enforcer.cgroups.reconcile.reconcile` (which orders writes safely,
never writes an empty cpuset and reports divergences), applies an Accepted
resize with the kubelet's actuation order first (:mod:`enforcer.cgroups.resize`),
keeps each pod's last :class:`~enforcer.service.models.CgroupStatus`, and runs
a worker thread: woken after each change (passes at most every
``COALESCE_SECONDS``, so a burst of changes shares one pass), and every
``interval`` seconds for a full pass that repairs drift.  A change pass is
incremental: it re-views and re-programs only the pods the change touched, plus,
when the node's default set changed, the pods that follow it
(:func:`follows_default`, remembered from the last pass that saw each pod), so
its cost does not grow with the pods the node holds; the periodic full pass is
the safety net.  The worker holds default-set changes for
:data:`FOLLOWERS_DELAY_SECONDS` before it re-programs the followers, so a burst
of bindings costs one follower pass, not one per binding.  A pass runs in steps
of :data:`PODS_PER_STEP` pods and steps aside for the API's requests in flight
(:mod:`enforcer.service.in_flight`): a decision never waits for cgroupfs work.
The first full pass after start-up is kept as the start-up divergence report.

A new pod allocated while no other request is in flight is programmed on the
event loop right after its answer went out (:meth:`Reconciler.run_here`), not by
the worker.  Why: a pass is Python, and a thread running Python beside the loop
makes each of the loop's system calls (the next request's reads, its durable
write, its answer) wait for the interpreter lock, up to the switch interval each
time, so one pass delayed several requests by more than its own length; on the
loop it delays at most the request that arrives during it, by what is left of it
(BENCHMARKS.md, "Enforcer").  The worker still takes everything else: passes with
others in flight, resizes, followers, full passes, and every pass once cgroupfs
was slow (:mod:`enforcer.service.loop_work`).

Must not: decide allocations, hold the service's decision lock while it
touches cgroupfs (it reads the desired state through a callback that takes
the lock briefly), or make the event loop wait (for the run lock, or for
requests in flight).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal, Protocol

from enforcer.cgroups import driver as cgdriver
from enforcer.cgroups import errors as cgerrors
from enforcer.cgroups import hierarchy, naming, reconcile
from enforcer.cgroups import resize as cgresize
from enforcer.engine.view import ContainerView, PodView
from enforcer.service import models
from enforcer.service.loop_work import LoopWorkGuard
from enforcer.service.metrics import EnforcerMetrics
from shared.cpuset import CPUSet
from shared.resources import CPU, MEMORY, PodResources, QOSClass

log = logging.getLogger(__name__)

Trigger = Literal["change", "periodic", "startup", "manual"]
RunThread = Literal["worker", "event_loop", "caller"]
"""Where a pass ran: the reconciler's worker thread, the event loop (:meth:`Reconciler.run_here`), or a caller's."""
COALESCE_SECONDS = 0.05
"""The worker's pause after each pass: the most a change waits for its cgroups beyond the pass itself."""
_EXCLUSIVE = ("node_exclusive", "pod_exclusive")
PODS_PER_STEP: Final = 4
"""Pods a pass drives between two looks at the API's requests (about a millisecond of Python with the
dry-run driver, less with real cgroupfs, whose writes release the interpreter lock)."""
FOLLOWERS_DELAY_SECONDS: Final = 1.0
"""How long the worker lets default-set changes pile up before it re-programs the pods that follow the set.

Every exclusive allocation or release changes the default set, and every follower (shared
containers, pods the engine does not manage) is then re-programmed: on a node with 100 shared pods a
pass per allocation was ~25 ms of CPU, a third of a core under a burst of bindings, taken from the
decisions.  Held for a second, a burst's changes cost one follower pass per second.  What the delay
allows is bounded and harmless: a newly exclusive CPU stays in the followers' cpusets for up to a
second (plus the pass), while the pod that owns it is still being bound, pulled and started (its
containers are pinned when they start, by the runtime hook); the kubelet allows the same overlap for
its whole reconcile period (``cpuManagerReconcilePeriod``, 10 s by default).  Pods changed by the
decision itself (the new pod, a resized one) are not held."""
STEP_ASIDE_BUDGET_SECONDS: Final = 0.5
"""The most one pass waits, in all, for the API's requests in flight; past it the pass runs to its end, so under
sustained load cgroups still follow (a change then waits at most this much more than without the stepping aside).

Why half a second: under back-to-back allocations the API is in flight ~90% of the time, so a pass
progresses in the gaps at a tenth of its speed; the follower pass of a node with 100 shared pods (~25 ms
of Python with the dry-run driver) then needs ~250 ms of gaps.  With 50 ms the budget ran out a fifth of
the way and the rest of the pass competed with the allocations (p99 1.2-4x the same node without shared
pods, ``python -m bench.bench_enforcer --shared-pair 200``).  Nothing waits on a pass meanwhile: the
runtime hook writes while the pass steps aside, new pods' cgroups do not exist yet at binding, and the
followers are already held a second (:data:`FOLLOWERS_DELAY_SECONDS`)."""


LOOP_PASS_MAX_SECONDS_PER_POD: Final = 0.001
"""The event loop runs a pass itself only while the last pass drove cgroupfs at less than this per pod.

Measured with the recording driver at 1,024 CPUs, a pod's whole pass is ~0.2-0.3 ms of CPU
(``python -m bench.bench_enforcer --held-split``), of which the driver's reads and writes are a part;
real cgroupfs writes take microseconds.  A millisecond per pod means the kernel is making writes wait
(a cpuset change waiting for an RCU grace period, a memory limit reclaiming): the worker then takes
every pass, so the loop keeps serving, until one of its passes is quick again."""


class StepAside(Protocol):
    """What a pass waits on between steps (:class:`enforcer.service.in_flight.RequestsInFlight`)."""

    @property
    def count(self) -> int: ...

    def wait_idle(self, timeout: float) -> float: ...


@dataclass(frozen=True, slots=True)
class CgroupLayout:
    """How the kubelet and the runtime name cgroups on this node, and the machine facts targets need."""

    driver: naming.CgroupDriverName
    runtime: naming.RuntimeName
    cgroup_root: naming.CgroupName = ()
    cpu_period_us: int = cgdriver.DEFAULT_CPU_PERIOD_US
    all_numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class DesiredPod:
    """One pod whose cgroups the reconciler manages.

    ``view`` and ``resources`` are None for a pod the engine does not manage
    (it only follows the default set).  ``container_ids`` maps container names
    to CRI ids (``containerd://<id>``) as the pod status reports them; a
    container without one has no cgroup the enforcer can name yet.
    """

    uid: str
    qos: QOSClass
    view: PodView | None = None
    resources: PodResources | None = None
    container_ids: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DesiredState:
    pods: tuple[DesiredPod, ...]
    default_cpus: CPUSet


DesiredSource = Callable[[Collection[str] | None], DesiredState]
"""Reads the desired state of some pods (None: every pod) under the service's lock."""


@dataclass(frozen=True, slots=True)
class ResizeJob:
    """An Accepted resize to actuate in the kubelet's order: the pod before and after."""

    before: DesiredPod
    after: DesiredPod


# -- desired values ----------------------------------------------------------------------


def _quota(limit_millis: int | None, period_us: int) -> cgdriver.CPUQuota:
    if not limit_millis:
        return cgdriver.CPUQuota.unlimited(period_us)
    # the kubelet's MilliCPUToQuota: at least the kernel's 1ms minimum
    return cgdriver.CPUQuota(max(limit_millis * period_us // 1000, cgdriver.MIN_CPU_QUOTA_US), period_us)


def _memory_limit(limit: int | None) -> int | None:
    return limit if limit else None


def container_values(c: ContainerView, layout: CgroupLayout) -> reconcile.CgroupTarget:
    """A container's values under a placeholder path (the caller names the cgroup)."""
    mems = c.memory_numa_nodes if c.memory_numa_nodes is not None else layout.all_numa_nodes
    quota = _quota(c.cpu_limit_millis if c.cfs_quota == "container" else None, layout.cpu_period_us)
    return reconcile.CgroupTarget(
        path="container",
        cpus=c.cpus if c.cpus else None,
        mems=mems or None,
        cpu_quota=quota,
        memory_limit=_memory_limit(c.memory_limit_bytes),
    )


def _declared(resources: PodResources, name: str) -> bool:
    """The kubelet sets a pod-level limit only when the pod declares it, or every container does."""
    if resources.pod is not None and name in resources.pod.limits:
        return True
    return bool(resources.containers) and all(name in c.resources.limits for c in resources.containers)


def pod_values(view: PodView, resources: PodResources, layout: CgroupLayout) -> reconcile.CgroupTarget:
    cpus = CPUSet().union(*(c.cpus for c in view.containers))
    mems: set[int] = set()
    for c in view.containers:
        mems.update(c.memory_numa_nodes if c.memory_numa_nodes is not None else layout.all_numa_nodes)
    levels = {c.cfs_quota for c in view.containers}
    unbounded_exclusive = any(c.assignment in _EXCLUSIVE and c.cfs_quota == "none" for c in view.containers)
    cpu_limit = view.pod_cpu_limit_millis if _declared(resources, CPU) else None
    if unbounded_exclusive and "pod" not in levels:
        cpu_limit = None
    memory_limit = view.pod_memory_limit_bytes if _declared(resources, MEMORY) else None
    return reconcile.CgroupTarget(
        path="pod",
        cpus=cpus if cpus else None,
        mems=tuple(sorted(mems)) or None,
        cpu_quota=_quota(cpu_limit, layout.cpu_period_us),
        memory_limit=_memory_limit(memory_limit),
    )


def _at(target: reconcile.CgroupTarget, path: str) -> reconcile.CgroupTarget:
    return reconcile.CgroupTarget(
        path=path,
        cpus=target.cpus,
        mems=target.mems,
        cpu_quota=target.cpu_quota,
        memory_limit=target.memory_limit,
    )


def pod_targets(pod: DesiredPod, *, layout: CgroupLayout, default_cpus: CPUSet) -> list[reconcile.CgroupTarget]:
    """The pod cgroup first, then each container with a known id; raises CgroupNameError for unnameable ids."""
    pod_path = naming.pod_cgroup_path(pod.qos, pod.uid, driver=layout.driver, cgroup_root=layout.cgroup_root)

    def container_path(container_id: str) -> str:
        return naming.container_cgroup_path(pod_path, container_id, driver=layout.driver, runtime=layout.runtime)

    if pod.view is None or pod.resources is None:
        shared = default_cpus if default_cpus else None
        targets = [reconcile.CgroupTarget(path=pod_path, cpus=shared)]
        targets += [
            reconcile.CgroupTarget(path=container_path(cid), cpus=shared)
            for _, cid in sorted(pod.container_ids.items())
        ]
        return targets
    targets = [_at(pod_values(pod.view, pod.resources, layout), pod_path)]
    for c in pod.view.containers:
        container_id = pod.container_ids.get(c.name)
        if container_id:
            targets.append(_at(container_values(c, layout), container_path(container_id)))
    return targets


def follows_default(pod: DesiredPod, default_cpus: CPUSet) -> bool:
    """Whether some cgroup of the pod holds the node's default set, so a change of that set must reach it."""
    if pod.view is None:
        return True  # not managed by the engine: its cgroups follow the default set
    return any(c.assignment == "node_shared" or c.cpus == default_cpus for c in pod.view.containers)


def _limits(target: reconcile.CgroupTarget) -> cgresize.CgroupLimits:
    return cgresize.CgroupLimits(
        cpus=target.cpus, mems=target.mems, cpu_quota=target.cpu_quota, memory_limit=target.memory_limit
    )


# -- the reconciler ----------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


class Reconciler:
    """Runs reconciles on request and periodically; see the module docstring."""

    def __init__(
        self,
        driver: cgdriver.CgroupDriver,
        layout: CgroupLayout,
        desired: DesiredSource,
        *,
        metrics: EnforcerMetrics,
        clock: Callable[[], datetime] = _now,
        in_flight: StepAside | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``timer``: seconds, for how long a pass's cgroupfs work took (tests script it)."""
        self.driver = driver
        self._timer = timer
        self._loop_guard = LoopWorkGuard(LOOP_PASS_MAX_SECONDS_PER_POD)
        self._in_flight = in_flight
        self.layout = layout
        self._desired = desired
        self._metrics = metrics
        self._clock = clock
        self._run_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: set[str] = set()
        self._pending_all = False
        self._default_changed_at: float | None = None  # monotonic time of the oldest default-set change not applied
        # Pods with a cgroup that follows the node's default set (node_shared containers, pod_shared ones with
        # no pool of their own, pods the engine does not manage), as the last pass that saw them found them.
        self._followers: set[str] = set()
        self._resizes: list[ResizeJob] = []
        self._status: dict[str, models.CgroupStatus] = {}
        self._status_lock = threading.Lock()
        self.startup_divergences: tuple[models.CgroupDivergence, ...] = ()
        self._startup_done = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._last_full = 0.0

    # -- requests (any thread; never blocks on cgroupfs) -------------------------------
    def request(
        self,
        uids: Iterable[str] = (),
        *,
        default_changed: bool = False,
        everything: bool = False,
        resize: ResizeJob | None = None,
        wake: bool = True,
    ) -> None:
        """Queue pods for the next pass: ``uids``, plus every pod that follows the default set when it changed.

        ``everything``: every pod (what the periodic pass does anyway).  ``wake=False``: the caller
        calls :meth:`run_here` next, so the worker is woken only for what only it does (a resize, a
        full pass, and the timer of a default-set change it does not hold yet); waking it for
        nothing would cost the caller's thread a turn for the interpreter lock.
        """
        with self._pending_lock:
            self._pending.update(uids)
            new_default_change = default_changed and self._default_changed_at is None
            if new_default_change:
                self._default_changed_at = time.monotonic()
            self._pending_all = self._pending_all or everything
            if resize is not None:
                self._resizes.append(resize)
        if wake or new_default_change or everything or resize is not None:
            self._wake.set()

    def run_here(self) -> bool:
        """Program the queued pods on the calling thread (the event loop, after an answer went out); False if not.

        Runs only what is cheap and safe to run without stepping aside: at most :data:`PODS_PER_STEP`
        queued pods, no resize, no full pass, no requests in flight (a request that arrived since
        would wait for the pass), no pass running (the loop never waits for the run lock), and
        cgroupfs quick the last time (:data:`LOOP_PASS_MAX_SECONDS_PER_POD`).  Otherwise the worker
        is woken and takes the queue.  Followers stay held for the worker either way.
        """
        busy = self._in_flight is not None and self._in_flight.count > 0
        if busy or not self._loop_guard.allows() or not self._run_lock.acquire(blocking=False):
            self._wake.set()
            return False
        uids: set[str] = set()
        try:
            with self._pending_lock:
                if self._resizes or self._pending_all or len(self._pending) > PODS_PER_STEP:
                    self._wake.set()
                    return False
                uids, self._pending = self._pending, set()
            if uids:
                self._run(uids, "change", thread="event_loop", step_aside=False)
            return True
        except Exception:  # a callback on the loop: nothing above it would count or retry the failure
            self._metrics.reconcile_errors.labels(kind="internal").inc()
            log.exception("cgroup reconcile crashed on the event loop; the worker retries its pods")
            self.request(uids)
            return False
        finally:
            self._run_lock.release()

    def forget(self, uid: str) -> None:
        """Drop what is known about a released pod's cgroups."""
        with self._status_lock:
            self._status.pop(uid, None)
            self._followers.discard(uid)

    def status(self, uid: str) -> models.CgroupStatus | None:
        with self._status_lock:
            return self._status.get(uid)

    # -- runs ----------------------------------------------------------------------------
    def run_requested(
        self, trigger: Trigger = "change", *, hold_followers: bool = False
    ) -> reconcile.ReconcileReport | None:
        """Apply queued resizes, then reconcile the requested pods (every pod when asked); None if nothing queued.

        ``hold_followers`` (the worker): the pods that follow the default set join only once its
        oldest unapplied change is :data:`FOLLOWERS_DELAY_SECONDS` old (see there)."""
        with self._run_lock:
            with self._pending_lock:
                uids, everything, resizes = set(self._pending), self._pending_all, list(self._resizes)
                default_changed = self._default_changed_at is not None and (
                    not hold_followers or self._followers_wait() <= 0
                )
                self._pending.clear()
                self._pending_all = False
                if default_changed:
                    self._default_changed_at = None
                self._resizes.clear()
            for job in resizes:
                self._actuate_resize(job)
            if default_changed:
                with self._status_lock:
                    uids |= self._followers
            if not uids and not everything:
                return None
            return self._run(None if everything else uids, trigger, thread=self._thread())

    def run_all(self, trigger: Trigger = "manual") -> reconcile.ReconcileReport:
        """Reconcile every pod now (drift repair); the first such run after start-up is the start-up report."""
        with self._run_lock:
            with self._pending_lock:
                self._pending.clear()
                self._pending_all = False
                self._default_changed_at = None
                resizes = list(self._resizes)
                self._resizes.clear()
            for job in resizes:
                self._actuate_resize(job)
            return self._run(None, trigger, thread=self._thread())

    def program(self, targets: Sequence[reconcile.CgroupTarget]) -> reconcile.ReconcileReport:
        """Drive ``targets`` now, serialised with the worker's passes (the runtime hook's entry point).

        Untracked v1 children are contained first (:mod:`enforcer.cgroups.hierarchy`); the caller gets the
        report and decides what a failure means for it.  Raises CgroupError for targets that cannot be ordered.
        """
        with self._run_lock:
            report = reconcile.reconcile(hierarchy.with_untracked_children(targets, self.driver), self.driver)
        log.info("cgroups programmed", extra={"targets": len(targets), **report.counts()})
        self._metrics.cgroup_writes.inc(len(report.applied))
        self._metrics.count_divergences(d.field for d in report.divergences)
        if report.failures:
            self._metrics.reconcile_errors.labels(kind="write").inc(len(report.failures))
        return report

    def _thread(self) -> RunThread:
        return "worker" if threading.current_thread() is self._worker else "caller"

    def _run(
        self, uids: Collection[str] | None, trigger: Trigger, *, thread: RunThread, step_aside: bool = True
    ) -> reconcile.ReconcileReport:
        """One pass over ``uids`` (every pod when None), :data:`PODS_PER_STEP` pods at a time.  Run lock held.

        Before each step the pass lets the API's requests in flight finish (within
        :data:`STEP_ASIDE_BUDGET_SECONDS` for the whole pass; see :mod:`enforcer.service.in_flight`),
        unless ``step_aside`` is False (:meth:`run_here`).
        A step reads its pods' desired state and drives their cgroups; pods are independent
        here (a pod's cgroups and its containers' are one subtree, ordered within the step).
        The slowest step's cgroupfs time per pod decides whether the loop may run the next pass.
        """
        owners: dict[str, str] = {}
        parts: list[reconcile.ReconcileReport] = []
        seen: list[DesiredPod] = []
        slowest_per_pod = 0.0
        for state in self._steps(uids, step_aside=step_aside):
            targets: list[reconcile.CgroupTarget] = []
            unnameable: dict[str, str] = {}
            for pod in state.pods:
                try:
                    pod_list = pod_targets(pod, layout=self.layout, default_cpus=state.default_cpus)
                except cgerrors.CgroupError as err:
                    unnameable[pod.uid] = err.message
                    self._metrics.reconcile_errors.labels(kind="naming").inc()
                    log.error("pod cgroups cannot be named", extra={"pod_uid": pod.uid, "error": err.message})
                    continue
                for target in pod_list:
                    if target.path not in owners:
                        owners[target.path] = pod.uid
                        targets.append(target)
            started = self._timer()
            try:
                part = reconcile.reconcile(hierarchy.with_untracked_children(targets, self.driver), self.driver)
            except cgerrors.CgroupError as err:
                self._metrics.reconcile_errors.labels(kind="reconcile").inc()
                log.error("cgroup reconcile failed", extra={"error": err.message, "trigger": trigger})
                part = reconcile.ReconcileReport()
            slowest_per_pod = max(slowest_per_pod, (self._timer() - started) / max(1, len(state.pods)))
            self._record(state, owners, part, unnameable)
            parts.append(part)
            seen.extend(state.pods)
        self._loop_guard.record(slowest_per_pod)
        report = reconcile.ReconcileReport.combined(parts)
        if uids is None:  # a full pass saw every pod: statuses of released pods go, and so do their followers
            self._keep_only(seen)
        log.info("cgroup pass", extra={"trigger": trigger, "ran_on": thread, "pods": len(seen), **report.counts()})
        self._metrics.child(self._metrics.reconcile_runs, trigger, thread).inc()
        self._metrics.cgroup_writes.inc(len(report.applied))
        self._metrics.count_divergences(d.field for d in report.divergences)
        if report.failures:
            self._metrics.reconcile_errors.labels(kind="write").inc(len(report.failures))
        if uids is None:
            self._metrics.pending_cgroups.set(len(report.pending))
            self._last_full = time.monotonic()
        if uids is None and not self._startup_done:
            self._startup_done = True
            self.startup_divergences = tuple(_divergence(d) for d in report.divergences)
            self._metrics.startup_divergences.set(len(report.divergences))
            if report.divergences:
                log.warning(
                    "cgroups diverged from the saved allocations at start-up",
                    extra={
                        "divergences": [f"{d.path} {d.field}: {d.actual} -> {d.expected}" for d in report.divergences]
                    },
                )
        return report

    def _steps(self, uids: Collection[str] | None, *, step_aside: bool) -> Iterator[DesiredState]:
        """The pass's pods, a step at a time, each read after stepping aside for the API's requests.

        A full pass reads every pod at once (one look under the service's lock, so no pod is
        missed or seen twice) and drives it in steps; a change pass reads each step's pods
        when it comes to them, so its reads, too, leave the lock free between steps."""
        budget = STEP_ASIDE_BUDGET_SECONDS if step_aside else 0.0
        budget -= self._step_aside(budget)
        if uids is None:
            state = self._desired(None)
            if not state.pods:
                yield state
            for start in range(0, len(state.pods), PODS_PER_STEP):
                if start:
                    budget -= self._step_aside(budget)
                yield DesiredState(state.pods[start : start + PODS_PER_STEP], state.default_cpus)
            return
        ordered = sorted(uids)
        for start in range(0, len(ordered), PODS_PER_STEP):
            if start:
                budget -= self._step_aside(budget)
            yield self._desired(ordered[start : start + PODS_PER_STEP])

    def _step_aside(self, budget: float) -> float:
        """Wait while API requests are in flight, at most ``budget`` seconds; the seconds waited.  Run lock held.

        The run lock is let go while waiting: between two steps nothing is half written, so the
        runtime hook's :meth:`program` (a container starting now) need not wait for the API too."""
        if self._in_flight is None or budget <= 0 or not self._in_flight.count:
            return 0.0
        self._run_lock.release()
        try:
            waited = self._in_flight.wait_idle(budget)
        finally:
            self._run_lock.acquire()
        self._metrics.reconcile_step_aside.inc(waited)
        return waited

    def _record(
        self,
        state: DesiredState,
        owners: Mapping[str, str],
        report: reconcile.ReconcileReport,
        unnameable: Mapping[str, str],
    ) -> None:
        now = self._clock()
        divergences: dict[str, list[models.CgroupDivergence]] = {}
        pending: dict[str, list[str]] = {}
        held: dict[str, list[str]] = {}
        failures: dict[str, list[str]] = {}
        for d in report.divergences:
            divergences.setdefault(owners.get(d.path, ""), []).append(_divergence(d))
        for path in report.pending:
            pending.setdefault(owners.get(path, ""), []).append(path)
        for h in report.held:
            held.setdefault(owners.get(h.path, ""), []).append(f"{h.path}: usage {h.usage} above new limit {h.limit}")
        for f in report.failures:
            failures.setdefault(owners.get(f.path, ""), []).append(f.message)
        for uid, message in unnameable.items():
            failures.setdefault(uid, []).append(message)
        with self._status_lock:
            for pod in state.pods:
                if follows_default(pod, state.default_cpus):
                    self._followers.add(pod.uid)
                else:
                    self._followers.discard(pod.uid)
                if pod.view is None:
                    continue
                uid = pod.uid
                self._status[uid] = models.CgroupStatus(
                    in_sync=uid not in failures and uid not in held,
                    checked_at=now,
                    divergences=divergences.get(uid, []),
                    pending=pending.get(uid, []),
                    held=held.get(uid, []),
                    failures=failures.get(uid, []),
                )

    def _keep_only(self, pods: Collection[DesiredPod]) -> None:
        """After a full pass: forget the statuses and followers of pods it did not see (released meanwhile)."""
        managed = {pod.uid for pod in pods if pod.view is not None}
        present = {pod.uid for pod in pods}
        with self._status_lock:
            for uid in set(self._status) - managed:
                del self._status[uid]
            self._followers &= present

    def _actuate_resize(self, job: ResizeJob) -> None:
        """The kubelet's order (memory then CPU; pod grows, containers shrink, pod shrinks, containers grow)."""
        try:
            before = pod_targets(job.before, layout=self.layout, default_cpus=CPUSet())
            after = pod_targets(job.after, layout=self.layout, default_cpus=CPUSet())
            old = {t.path: t for t in before}
            changes = [
                cgresize.LimitsChange(t.path, _limits(old[t.path]), _limits(t))
                for t in after
                if t.path in old and self.driver.exists(t.path)
            ]
            if not changes or changes[0].path != after[0].path:
                return  # no pod cgroup yet: the following reconcile writes the final values directly
            plan = cgresize.plan_resize(changes[0], changes[1:])
            result = cgresize.apply_resize_plan(plan, self.driver)
        except cgerrors.CgroupError as err:
            # an unorderable plan (a value missing on one side): the reconcile that follows writes it
            log.warning("resize plan not applied", extra={"pod_uid": job.after.uid, "error": err.message})
            return
        self._metrics.cgroup_writes.inc(len(result.with_outcome("written")))
        failed = result.with_outcome("failed")
        if failed:
            self._metrics.reconcile_errors.labels(kind="resize").inc(len(failed))
        log.info(
            "resize actuated",
            extra={
                "pod_uid": job.after.uid,
                "written": len(result.with_outcome("written")),
                "held": len(result.with_outcome("held")),
                "failed": len(failed),
            },
        )

    # -- the worker ----------------------------------------------------------------------
    def start(self, interval: float) -> None:
        """Start the worker thread: runs requested reconciles, and a full pass every ``interval`` seconds (0: never)."""
        if self._worker is not None:
            return
        self._stop.clear()
        self._last_full = time.monotonic()
        self._worker = threading.Thread(target=self._loop, args=(interval,), name="cgroup-reconciler", daemon=True)
        self._worker.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._worker is not None:
            self._worker.join(timeout)
            self._worker = None

    def _followers_wait(self) -> float:
        """Seconds until the held default-set change is due (``inf`` when none is held).  Pending lock held."""
        if self._default_changed_at is None:
            return math.inf
        return self._default_changed_at + FOLLOWERS_DELAY_SECONDS - time.monotonic()

    def _loop(self, interval: float) -> None:
        while not self._stop.is_set():
            with self._pending_lock:
                due = self._followers_wait()
            if interval > 0:
                due = min(due, self._last_full + interval - time.monotonic())
            self._wake.wait(None if math.isinf(due) else max(0.0, due))
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                if interval > 0 and time.monotonic() - self._last_full >= interval:
                    self.run_all("periodic")
                else:
                    self.run_requested("change", hold_followers=True)
            except Exception:  # the loop must outlive any one failure; the next pass retries
                self._metrics.reconcile_errors.labels(kind="internal").inc()
                log.exception("cgroup reconcile crashed")
            # Let changes pile up for a moment: under a burst of allocations one pass then covers
            # them all instead of a pass per change competing with the API for the CPU.
            self._stop.wait(COALESCE_SECONDS)


def _divergence(d: reconcile.Divergence) -> models.CgroupDivergence:
    return models.CgroupDivergence(path=d.path, field=d.field, expected=d.expected, actual=d.actual)
