"""``NodeService``: the enforcer's facade over the engine, the durable store and the cgroup reconciler.

Invariants:

* **One decision at a time.**  Every call that reads or changes the engine
  holds one lock, so no CPU or NUMA memory can be handed out twice however
  many clients call at once.  The engine itself is not thread-safe.
* **Durable before acknowledged.**  A change is answered only after a write
  that includes it returned: a journal append of the pods it touched, or a
  compaction (:mod:`enforcer.service.persistence` decides which;
  :mod:`enforcer.state.journal` writes).  Writes are group commits
  (:mod:`enforcer.service.group_commit`): one write covers every change decided
  while the previous one was on its way.  If a write fails, the engine is
  rebuilt from the document on disk (the changes are rolled back in memory
  too), their callers get ``StateWriteFailed``, and the next write is a whole
  new base.  Every start writes a new base.
* **A refused request changes nothing**: the engine decides on a copy of its
  state (a refused pod or an illegal resize leaves no trace) and nothing is
  written.
* **No state, no writes.**  When the saved state could not be loaded or
  verified (:class:`~enforcer.service.startup.StateProblem`), every
  state-changing call raises ``StateUnavailable`` until ``recover-state`` and
  a restart; reads keep working.
* **cgroups follow, never lead.**  After a change the affected pods are handed
  to the reconciler's worker (plus the pods that follow the default set when it
  changed); the answer does not wait for cgroupfs.

Must not: import FastAPI (``routes`` translates), talk to the Kubernetes API
(``kube`` calls :meth:`observe_pod` / :meth:`release`), or touch cgroupfs
(the reconciler does, outside the lock).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, TypeVar

from enforcer.cgroups import driver as cgdriver
from enforcer.counters import AllocationCounters
from enforcer.engine import builder
from enforcer.engine.config import NodeConfig
from enforcer.engine.node import Decision, NodeEngine, RemoveResult, ResizeDecision, UnknownPodError
from enforcer.engine.records import PodRecord
from enforcer.engine.view import PodView
from enforcer.service import admission_metrics, legality, models, wire
from enforcer.service.errors import (
    AdmissionRefusedError,
    DeadlineExceededError,
    IllegalResizeError,
    StateUnavailableError,
    StateWriteError,
)
from enforcer.service.group_commit import GroupCommit
from enforcer.service.in_flight import RequestsInFlight
from enforcer.service.metrics import EnforcerMetrics
from enforcer.service.persistence import EnginePersistence, PendingWrite
from enforcer.service.reconciler import CgroupLayout, DesiredPod, DesiredState, Reconciler, ResizeJob
from enforcer.service.startup import LoadedState, StateProblem
from enforcer.state import errors as state_errors
from enforcer.state import journal
from enforcer.topology.machine import CPUTopology
from shared import contract
from shared.cpuset import CPUSet
from shared.resources import PodResources, QOSClass

log = logging.getLogger(__name__)
_T = TypeVar("_T")

ReleaseCause = Literal["api", "pod_deleted", "pod_finished", "not_bound"]
STATE_WRITE_FAILED = "StateWriteFailed"


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class AllocateOutcome:
    created: bool  # False: the pod was already allocated with this spec (an idempotent retry)
    allocation: models.AllocationStatus
    # time.perf_counter() when the decision left the lock and when it was durable: how a caller
    # splits its wait (the API's Server-Timing header); not part of the outcome's value
    decided_at: float = field(default=0.0, compare=False)
    durable_at: float = field(default=0.0, compare=False)


@dataclass(frozen=True, slots=True)
class _Allocated:
    """An admission decided under the lock, to be answered once ``seq`` is durable."""

    seq: int
    existed: bool
    allocation: models.AllocationStatus
    default_changed: bool


@dataclass(frozen=True, slots=True)
class _Released:
    """A release decided under the lock, to be answered once ``seq`` is durable."""

    seq: int
    result: RemoveResult
    resized_uids: tuple[str, ...]  # other pods whose Deferred resizes the release applied


@dataclass(frozen=True, slots=True)
class _Resized:
    """A resize decided under the lock (or judged, for a dry run), to be answered once ``seq`` is durable."""

    seq: int
    decision: ResizeDecision
    allocation: models.AllocationStatus
    job: ResizeJob | None
    allocation_changed: bool
    resized_uids: tuple[str, ...] = ()  # other pods whose Deferred resizes this one's retry applied


@dataclass(frozen=True, slots=True)
class RuntimePod:
    """What the Kubernetes watch knows about a pod on this node: its QoS class and container ids by name."""

    qos: QOSClass
    container_ids: Mapping[str, str]


class _Writer:
    """The group commit's :class:`~enforcer.service.group_commit.Writer` for one service."""

    def __init__(self, service: NodeService) -> None:
        self._service = service

    def prepare(self) -> PendingWrite:
        return self._service._prepare_write()

    def write(self, job: PendingWrite) -> None:
        self._service._persistence.write(job)

    def settle(self, job: PendingWrite, failure: state_errors.CheckpointError | None) -> None:
        self._service._settle_write(job, failure)


class NodeService:
    """See the module docstring for the invariants every method keeps."""

    def __init__(
        self,
        *,
        node_name: str,
        topology: CPUTopology,
        config: NodeConfig,
        store: journal.JournaledStore,
        loaded: LoadedState,
        driver: cgdriver.CgroupDriver,
        layout: CgroupLayout,
        metrics: EnforcerMetrics,
    ) -> None:
        self.node_name = node_name
        self.topology = topology
        self.config = config
        self.store = store
        self.metrics = metrics
        self._lock = threading.Lock()
        self.in_flight = RequestsInFlight()  # the API's state-changing requests; cgroup passes step aside for them
        self._group: GroupCommit[PendingWrite] = GroupCommit(
            self._lock, _Writer(self), metrics, write_on_loop=self.in_flight.alone
        )
        self._engine: NodeEngine | None = loaded.engine
        self._problem: StateProblem | None = loaded.problem
        self._persistence = EnginePersistence(store, loaded.snapshot, loaded.engine)
        self._touched: set[str] = set()  # pods changed since the last write was prepared
        self._runtime: dict[str, RuntimePod] = {}
        self._resize_since: dict[str, datetime] = {}
        self._in_progress: dict[str, datetime] = {}
        self._started = _now()
        self.reconciler = Reconciler(driver, layout, self.desired_state, metrics=metrics, in_flight=self.in_flight)
        # Every start writes a new base (compacting the journal): start-up replays at most one run's journal,
        # and the backup is the base of the previous start (what ``recover-state --mode from-backup`` restores).
        if self._engine is not None:
            try:
                self._save_now(self._engine)
            except StateWriteError as err:
                self._engine = None
                self._problem = StateProblem(STATE_WRITE_FAILED, err.message)
        if self._problem is not None:
            log.error(
                "state unavailable: refusing state-changing calls until recover-state",
                extra={"reason": self._problem.reason, "error": self._problem.message, "path": str(store.path)},
            )
        self.metrics.set_state(
            available=self._problem is None, reason=None if self._problem is None else self._problem.reason
        )

    # -- status ----------------------------------------------------------------------------
    @property
    def problem(self) -> StateProblem | None:
        return self._problem

    def state_status(self) -> models.StateStatus:
        problem = self._problem
        return models.StateStatus(
            available=problem is None,
            reason=None if problem is None else problem.reason,
            message=None if problem is None else problem.message,
            path=str(self.store.path),
        )

    def readiness(self) -> models.Readiness:
        problem = self._problem
        checks = {"topology": True, "state": problem is None}
        if problem is None:
            return models.Readiness(ready=True, checks=checks)
        return models.Readiness(ready=False, reason=problem.reason, message=problem.message, checks=checks)

    # -- the lock and the durable commit ---------------------------------------------------------
    @contextlib.contextmanager
    def _timed(self, operation: str) -> Iterator[None]:
        """Measure how long a decision keeps the lock (the caller holds it)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.metrics.child(self.metrics.decision_seconds, operation).observe(time.perf_counter() - started)

    @contextlib.contextmanager
    def _decision(self, operation: str) -> Iterator[None]:
        """Hold the lock for a read, measured like a decision."""
        with self._lock, self._timed(operation):
            yield

    def _writable(self) -> NodeEngine:
        if self._engine is None:
            problem = self._problem
            detail = f"{problem.reason}: {problem.message}" if problem is not None else "state not loaded"
            raise StateUnavailableError(
                f"the enforcer's state is unavailable ({detail}); state-changing calls are refused until an "
                "operator runs `numaguard recover-state` and restarts the enforcer"
            )
        return self._engine

    def _changed(self, uid: str) -> int:
        """Number the change to pod ``uid`` just decided (lock held); answer once it is durable."""
        self._touched.add(uid)
        return self._group.changed()

    # The group commit's writer (see _Writer; lock held for prepare and settle).
    def _prepare_write(self) -> PendingWrite:
        engine = self._writable()
        touched, self._touched = self._touched, set()
        return self._persistence.prepare(engine, touched)

    def _settle_write(self, job: PendingWrite, failure: state_errors.CheckpointError | None) -> None:
        self._persistence.settle(self._engine, job, failed=failure is not None)
        if failure is None:
            return
        log.error(
            "state write failed; undurable changes rolled back",
            extra={"error": failure.message, "changes": self._group.undurable},
        )
        document = self._persistence.document
        if document is not None:
            self._engine = builder.restore(self.topology, self.config, document)
            self._persistence.rolled_back(self._engine)

    def _save_now(self, engine: NodeEngine) -> None:
        """The first save of a fresh (or journal-less) state, before anything is served."""
        job = self._persistence.prepare(engine, whole=True)
        try:
            self._persistence.write(job)
        except state_errors.CheckpointError as err:
            raise StateWriteError(f"the initial state could not be saved: {err.message}") from None
        self._persistence.settle(engine, job, failed=False)

    # -- state-changing calls ----------------------------------------------------------------
    # Each call is decided under the lock, answered once durable, then followed up (log, cgroups).
    # The plain method serves threads (the pod watch, tests); the ``_async`` one serves the API's
    # handlers on the event loop, which then hold no thread while the write is on its way.

    def allocate(self, pod: PodResources) -> AllocateOutcome:
        """Admit and allocate; idempotent by uid (same spec: same allocation, ``created=False``).

        Raises AdmissionRefusedError (the kubelet's reason), PodConflictError (same uid,
        other spec), StateUnavailableError, StateWriteError."""
        with self._group.condition:
            allocated = self._decide_allocation(pod)
            self._group.await_durable(allocated.seq)
        return self._allocated(pod, allocated)

    async def allocate_async(self, pod: PodResources, *, deadline: float | None = None) -> AllocateOutcome:
        """:meth:`allocate` on the event loop (taking the lock there is fine: it is only ever held briefly).

        ``deadline`` (``time.monotonic()``): past it a NEW pod is not decided (DeadlineExceededError), so a
        caller that gave up never leaves an allocation behind; a known pod still gets its allocation."""
        with self._lock:
            if deadline is not None and time.monotonic() > deadline and not self._holds(pod.uid):
                raise DeadlineExceededError(
                    f"the caller's time budget for pod {pod.key} ran out before its turn; nothing was allocated"
                )
            allocated = self._decide_allocation(pod)
        decided_at = time.perf_counter()
        await self._group.await_durable_async(allocated.seq)
        return self._allocated(
            pod, allocated, decided_at=decided_at, durable_at=time.perf_counter(), on_loop=self.in_flight.alone()
        )

    def _holds(self, uid: str) -> bool:
        return self._engine is not None and uid in self._engine.state.pods

    def _decide_allocation(self, pod: PodResources) -> _Allocated:
        with self._timed("allocate"):
            engine = self._writable()
            existed = pod.uid in engine.state.pods
            default_before = engine.default_cpus()
            errors_before = dict(engine.state.counters.errors)
            started = time.perf_counter()
            decision = engine.admit(pod)
            if not existed:
                self._count_admission(engine, pod, decision, errors_before, time.perf_counter() - started)
            if not decision.admitted:
                raise AdmissionRefusedError(
                    decision.reason or "UnexpectedAdmissionError", decision.message or "the node refused the pod"
                )
            allocation = self._allocation(engine, pod.uid, view=decision.view)
            # a retry is answered only once the original allocation is durable too
            seq = self._group.last if existed else self._changed(pod.uid)
            return _Allocated(seq, existed, allocation, default_changed=engine.default_cpus() != default_before)

    def _count_admission(
        self,
        engine: NodeEngine,
        pod: PodResources,
        decision: Decision,
        errors_before: Mapping[tuple[str, str], int],
        seconds: float,
    ) -> None:
        counts = admission_metrics.count(
            engine.config,
            pod,
            admitted=decision.admitted,
            reason=decision.reason,
            view=decision.view,
            errors_before=errors_before,
            errors_after=engine.state.counters.errors,
        )
        self.metrics.observe_admission(counts, milliseconds=seconds * 1000, reason=decision.reason)

    def _allocated(
        self,
        pod: PodResources,
        allocated: _Allocated,
        *,
        decided_at: float = 0.0,
        durable_at: float = 0.0,
        on_loop: bool = False,
    ) -> AllocateOutcome:
        """Log and queue the new pod's cgroups.  ``on_loop`` (on the event loop, the request alone in flight):
        the loop programs them itself once the answer is out, when nothing else came in meanwhile
        (:meth:`Reconciler.run_here`).  The callback runs when this coroutine next yields, which is after
        its answer is written: the app's middleware is plain ASGI, and uvicorn writes without yielding
        unless the socket's buffer is full (then the pass may come first, which costs only time)."""
        if not allocated.existed:
            log.info("pod allocated", extra={"pod_uid": pod.uid, "pod": pod.key})
            self.reconciler.request([pod.uid], default_changed=allocated.default_changed, wake=not on_loop)
            if on_loop:
                asyncio.get_running_loop().call_soon(self.reconciler.run_here)
        return AllocateOutcome(not allocated.existed, allocated.allocation, decided_at, durable_at)

    def release(self, uid: str, *, cause: ReleaseCause = "api") -> models.ReleaseResult:
        """Release a pod's allocation; idempotent (``released=False`` when nothing was held)."""
        with self._group.condition:
            released = self._decide_release(uid)
            if released is None:
                return models.ReleaseResult(released=False)
            self._group.await_durable(released.seq)
        return self._released(uid, released, cause)

    async def release_async(self, uid: str, *, cause: ReleaseCause = "api") -> models.ReleaseResult:
        """:meth:`release` on the event loop."""
        with self._lock:
            released = self._decide_release(uid)
        if released is None:
            return models.ReleaseResult(released=False)
        await self._group.await_durable_async(released.seq)
        return self._released(uid, released, cause)

    def _decide_release(self, uid: str) -> _Released | None:
        with self._timed("release"):
            engine = self._writable()
            before = dict(engine.state.pods)
            result = engine.remove(uid)
            if not result.known:
                return None
            resized = _changed_pods(before, engine) if result.resizes_applied else ()
            seq = self._changed(uid)
            self._resize_since.pop(uid, None)
            self._in_progress.pop(uid, None)
            return _Released(seq, result, resized)

    def _released(self, uid: str, released: _Released, cause: ReleaseCause) -> models.ReleaseResult:
        self.metrics.child(self.metrics.releases, cause).inc()
        log.info("pod released", extra={"pod_uid": uid, "cause": cause})
        self.reconciler.forget(uid)
        # freed exclusive CPUs return to the default set: the containers that follow it widen, and the pods
        # whose Deferred resizes the release applied are re-programmed
        self.reconciler.request(released.resized_uids, default_changed=True)
        return models.ReleaseResult(released=True, resizes_applied=list(released.result.resizes_applied))

    def resize(self, uid: str, desired: PodResources, *, dry_run: bool = False) -> contract.ResizeResult:
        """Decide an in-place resize (and apply it unless ``dry_run``).

        Raises UnknownPodError, IllegalResizeError, StateUnavailableError, StateWriteError."""
        with self._group.condition:
            resized = self._decide_resize(uid, desired, dry_run=dry_run)
            self._group.await_durable(resized.seq)
        return self._resized(uid, resized, dry_run=dry_run)

    async def resize_async(self, uid: str, desired: PodResources, *, dry_run: bool = False) -> contract.ResizeResult:
        """:meth:`resize` on the event loop."""
        with self._lock:
            resized = self._decide_resize(uid, desired, dry_run=dry_run)
        await self._group.await_durable_async(resized.seq)
        return self._resized(uid, resized, dry_run=dry_run)

    def _decide_resize(self, uid: str, desired: PodResources, *, dry_run: bool) -> _Resized:
        job: ResizeJob | None = None
        with self._timed("resize_dry_run" if dry_run else "resize"):
            engine = self._writable()
            record = engine.record(uid)
            violations = legality.resize_violations(
                record.pod, desired, pod_level_resources=self.config.gates.pod_level_resources
            )
            if violations:
                message = "; ".join(f"{v.field}: {v.message}" for v in violations)
                raise IllegalResizeError(message, field=violations[0].field)
            before = self._desired_pod(engine, uid)
            default_before = engine.default_cpus()
            records_before = dict(engine.state.pods)
            decision = engine.resize(desired, dry_run=dry_run)
            allocation_changed = False
            others: tuple[str, ...] = ()
            if not dry_run:
                now = _now()
                if decision.status == "Accepted":
                    self._resize_since.pop(uid, None)
                    if before.resources != engine.record(uid).pod:
                        self._in_progress[uid] = now
                        job = ResizeJob(before, self._desired_pod(engine, uid))
                else:
                    self._resize_since.setdefault(uid, now)
                allocation_changed = engine.default_cpus() != default_before or bool(decision.resizes_applied)
                if decision.resizes_applied:
                    others = tuple(u for u in _changed_pods(records_before, engine) if u != uid)
            allocation = self._allocation(engine, uid)
            seq = self._group.last if dry_run else self._changed(uid)
            return _Resized(seq, decision, allocation, job, allocation_changed, others)

    def _resized(self, uid: str, resized: _Resized, *, dry_run: bool) -> contract.ResizeResult:
        decision = resized.decision
        if not dry_run:
            log.info("pod resize decided", extra={"pod_uid": uid, "status": decision.status, "reason": decision.reason})
            if resized.job is not None or resized.allocation_changed:
                self.reconciler.request(
                    [uid, *resized.resized_uids], default_changed=resized.allocation_changed, resize=resized.job
                )
        return contract.ResizeResult(
            status=decision.status, reason=decision.reason, message=decision.message, allocation=resized.allocation
        )

    # -- reads -------------------------------------------------------------------------------
    def allocations(self, namespace: str | None = None) -> models.AllocationListStatus:
        with self._decision("list"):
            engine = self._engine
            items = []
            if engine is not None:
                for uid in engine.pod_uids():
                    if namespace is not None and engine.state.pods[uid].pod.namespace != namespace:
                        continue
                    items.append(self._allocation(engine, uid))
        return models.AllocationListStatus(
            node=self.node_name,
            items=items,
            state=self.state_status(),
            startup_divergences=list(self.reconciler.startup_divergences),
        )

    def read(self, fn: Callable[[NodeEngine], _T]) -> _T | None:
        """Run a read-only function on the engine under the lock; None while no state is loaded."""
        with self._decision("read"):
            return None if self._engine is None else fn(self._engine)

    def allocation(self, uid: str) -> models.AllocationStatus:
        """Raises UnknownPodError (404) for a uid with no allocation (or when no state is loaded)."""
        with self._decision("get"):
            engine = self._engine
            if engine is None:
                raise UnknownPodError(f"no allocation for pod {uid} (the enforcer's state is unavailable)")
            return self._allocation(engine, uid)

    def topology_view(self) -> contract.TopologyView:
        with self._decision("topology"):
            usage = None if self._engine is None else self._usage(self._engine)
        if usage is None:
            return contract.TopologyView(node=self.node_name, topology=self.topology.to_document())
        return wire.topology_view(self.topology, node=self.node_name, usage=usage)

    def metrics_text(self) -> bytes:
        with self._decision("metrics"):
            engine = self._engine
            if engine is None:
                counters = AllocationCounters()
            else:
                counters = copy.deepcopy(engine.state.counters)
                self.metrics.set_usage(self.topology, self._usage(engine), len(engine.state.pods))
        return self.metrics.render(counters)

    def allocated_uids(self) -> set[str]:
        with self._lock:
            return set() if self._engine is None else set(self._engine.state.pods)

    def check(self) -> list[str]:
        """The engine's consistency problems (empty when none), for tests and operators."""
        with self._lock:
            return [] if self._engine is None else self._engine.check()

    # -- the Kubernetes watch -------------------------------------------------------------
    def observe_pod(self, uid: str, qos: QOSClass, container_ids: Mapping[str, str]) -> None:
        """A pod on this node and its containers' runtime ids; new ids trigger a reconcile of that pod."""
        runtime = RuntimePod(qos, dict(container_ids))
        with self._lock:
            changed = self._runtime.get(uid) != runtime
            self._runtime[uid] = runtime
        if changed:
            self.reconciler.request([uid])

    def forget_pod(self, uid: str) -> None:
        with self._lock:
            self._runtime.pop(uid, None)

    # -- internals -----------------------------------------------------------------------------
    def _allocation(self, engine: NodeEngine, uid: str, *, view: PodView | None = None) -> models.AllocationStatus:
        """``view``: the pod's view when the caller has it already (an admission's decision carries it).
        The record's pod hashed its spec once already (``contract.spec_hash`` keeps it in ``pod.memo``)."""
        if view is None:
            view = engine.view(uid)
        return wire.allocation(
            view,
            node=self.node_name,
            spec_hash=contract.spec_hash(engine.record(uid).pod),
            resize=self._resize_status(engine, uid),
            cgroups=self.reconciler.status(uid),
        )

    def _resize_status(self, engine: NodeEngine, uid: str) -> contract.ResizeStatus | None:
        pending = engine.pending_resize(uid)
        if pending is not None:
            state: contract.ResizeState = "Deferred" if uid in engine.state.pending_resizes else "Infeasible"
            return wire.resize_status(
                state,
                reason=pending.reason,
                message=pending.message,
                desired=pending.desired,
                since=self._resize_since.get(uid, self._started),
            )
        since = self._in_progress.get(uid)
        if since is None:
            return None
        cgroups = self.reconciler.status(uid)
        if cgroups is not None and cgroups.in_sync and cgroups.checked_at >= since:
            del self._in_progress[uid]
            return None
        return wire.resize_status("InProgress", reason=None, message=None, desired=engine.record(uid).pod, since=since)

    def _usage(self, engine: NodeEngine) -> wire.NodeUsage:
        memory = engine.numa_memory()
        return wire.NodeUsage(
            default_cpus=engine.default_cpus(), reserved_cpus=engine.cpu_policy.reserved_cpus, memory=memory
        )

    def _desired_pod(self, engine: NodeEngine, uid: str) -> DesiredPod:
        view = engine.view(uid)
        runtime = self._runtime.get(uid)
        return DesiredPod(
            uid=uid,
            qos=view.qos_class,  # type: ignore[arg-type]
            view=view,
            resources=engine.record(uid).pod,
            container_ids=runtime.container_ids if runtime is not None else {},
        )

    def desired_state(self, uids: Collection[str] | None) -> DesiredState:
        """The reconciler's view of the pods it should drive (all when ``uids`` is None)."""
        with self._lock:
            engine = self._engine
            if engine is None:
                return DesiredState((), CPUSet())  # unknown allocations: leave every cgroup as it is
            managed = engine.pod_uids() if uids is None else [u for u in uids if u in engine.state.pods]
            pods = [self._desired_pod(engine, uid) for uid in managed]
            for uid, runtime in sorted(self._runtime.items()):
                if uid not in engine.state.pods and (uids is None or uid in uids):
                    pods.append(DesiredPod(uid=uid, qos=runtime.qos, container_ids=runtime.container_ids))
            return DesiredState(tuple(pods), engine.default_cpus())


def _changed_pods(before: Mapping[str, PodRecord], engine: NodeEngine) -> tuple[str, ...]:
    """Pods whose records a decision replaced (the engine replaces a record whenever it changes the pod)."""
    return tuple(uid for uid, record in engine.state.pods.items() if before.get(uid) is not record)
