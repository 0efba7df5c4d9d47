"""``NodeEngine``: the kubelet's admission path for one node, as a pure value machine.

Flow of an admission (kubelet ``topologymanager`` scopes + ``cm`` managers):

1. resource fit against node allocatable (``OutOfcpu`` ...);
2. the Topology Manager (:mod:`enforcer.topology.manager`): container scope gathers
   hints per container, merges and allocates that container before the next one;
   pod scope gathers pod hints once, merges once, gives every container the same
   hint and allocates (KEP-5526 ``AllocatePod`` when pod-level resources and both
   gates are on);
3. providers are called in kubelet order: CPU manager, then memory manager, each
   bound to its state in the working copy;
4. in-place resize decisions come from :mod:`enforcer.engine.resize`.

Everything runs on a copy of the state; the copy replaces the state only when
the whole pod was admitted.  Decisions are therefore atomic: a refused pod (or
resize) leaves no trace, which is what the enforcer's durability rests on.
Callers serialise access (the enforcer holds a lock around every call).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from enforcer.counters import AllocationCounters
from enforcer.cpumanager.policy import CPUPolicy
from enforcer.cpumanager.state import CPUState
from enforcer.engine import fit, podcodec
from enforcer.engine import resize as resize_rules
from enforcer.engine.config import NodeConfig
from enforcer.engine.policies import BoundProvider
from enforcer.engine.records import EngineState, EngineStateView, PendingResize, PodRecord
from enforcer.engine.view import ContainerView, PodView
from enforcer.errors import AdmissionRejected, EnforcerError
from enforcer.memorymanager.policy import MemoryPolicy
from enforcer.memorymanager.state import MemoryState, MemoryTable
from enforcer.topology.hints import TopologyHint, mask_of
from enforcer.topology.machine import CPUTopology
from enforcer.topology.manager import Affinities, HintProvider, TopologyManager
from shared import contract, qos
from shared.contract import Assignment, CFSQuota, ResizeOutcome
from shared.cpuset import CPUSet
from shared.resources import CPU, MEMORY, PodResources, QOSClass

SNAPSHOT_VERSION = 1


class PodConflictError(EnforcerError):
    """A known pod UID was sent again with a different spec (the API answers 409)."""

    reason = "AllocationConflict"


class UnknownPodError(EnforcerError):
    """No allocation exists for this pod UID (the API answers 404)."""

    reason = "NotFound"


@dataclass(frozen=True)
class Decision:
    """The answer to an ``add``: admitted with a view, or refused with the kubelet's reason."""

    admitted: bool
    reason: str | None = None
    message: str | None = None
    view: PodView | None = None
    qos_class: str | None = None


@dataclass(frozen=True)
class Trial:
    """A dry-run admission: the decision, and the state the pod would leave (the committed one when refused)."""

    decision: Decision
    state: EngineStateView


@dataclass(frozen=True)
class _Admission:
    decision: Decision
    work: EngineState | None = None  # a new pod admitted: the state holding it
    refusals: AllocationCounters | None = None  # refused by a manager: this attempt's counts


@dataclass(frozen=True)
class ResizeDecision:
    status: ResizeOutcome
    reason: str | None
    message: str | None
    view: PodView | None
    resizes_applied: tuple[str, ...] = ()


@dataclass(frozen=True)
class RemoveResult:
    known: bool
    resizes_applied: tuple[str, ...] = ()


class NodeEngine:
    """One node's CPU, memory and topology managers over one state value."""

    def __init__(
        self,
        topology: CPUTopology,
        config: NodeConfig,
        *,
        cpu_policy: CPUPolicy,
        memory_policy: MemoryPolicy,
        topology_manager: TopologyManager,
        state: EngineState | None = None,
    ) -> None:
        self.topology = topology
        self.config = config
        self.cpu_policy = cpu_policy
        self.memory_policy = memory_policy
        self.topology_manager = topology_manager
        self.allocatable = fit.node_allocatable(topology, config)
        self._state = state or EngineState(cpu=cpu_policy.new_state(), memory=memory_policy.new_state())
        if state is not None:
            state.used = self._sum_requests(state.pods)  # derived: whoever built the state need not know it

    @property
    def state(self) -> EngineStateView:
        """The committed state, read-only: only a decision of this engine replaces it."""
        return self._state

    # ---------------------------------------------------------------- queries
    def _providers(self, work: EngineState) -> tuple[HintProvider, ...]:
        """The managers bound to the working state, in the kubelet's provider order (CPU, then memory)."""
        cpu: BoundProvider[CPUState] = BoundProvider(self.cpu_policy, work.cpu)
        memory: BoundProvider[MemoryState] = BoundProvider(self.memory_policy, work.memory)
        return (cpu, memory)

    def pod_uids(self) -> list[str]:
        return sorted(self._state.pods, key=lambda uid: self._state.pods[uid].sequence)

    def find(self, namespace: str, name: str) -> str | None:
        for uid, record in self._state.pods.items():
            if record.pod.namespace == namespace and record.pod.name == name:
                return uid
        return None

    def record(self, uid: str) -> PodRecord:
        try:
            return self._state.pods[uid]
        except KeyError:
            raise UnknownPodError(f"no allocation for pod {uid}") from None

    def view(self, uid: str) -> PodView:
        return self._view(self._state, self.record(uid))

    def pending_resize(self, uid: str) -> PendingResize | None:
        return self._state.pending_resizes.get(uid) or self._state.infeasible_resizes.get(uid)

    def used_requests(self, *, excluding: str | None = None) -> dict[str, int]:
        """What the admitted pods (but ``excluding``) request, from the state's running total: O(1) in pods held."""
        used = dict(self._state.used)
        record = None if excluding is None else self._state.pods.get(excluding)
        if record is not None:
            fit.take_from(used, self.requests_of(record.pod))
        return used

    def _put_record(self, work: EngineState, record: PodRecord) -> None:
        """Add or replace a pod's record in ``work``, keeping its running total of requests."""
        uid = record.pod.uid
        old = work.pods.get(uid)
        if old is not None:
            fit.take_from(work.used, self.requests_of(old.pod))
        fit.add_to(work.used, self.requests_of(record.pod))
        work.pods[uid] = record

    def _drop_record(self, work: EngineState, uid: str) -> None:
        """Remove a pod's record from ``work``, keeping its running total of requests."""
        fit.take_from(work.used, self.requests_of(work.pods.pop(uid).pod))

    def _sum_requests(self, pods: dict[str, PodRecord]) -> dict[str, int]:
        """The running total recomputed from scratch (restore, and the consistency check)."""
        return fit.used_by(self.requests_of(r.pod) for r in pods.values())

    def default_cpus(self) -> CPUSet:
        return self.cpu_policy.default_cpus(self._state.cpu)

    def held_cpus(self) -> CPUSet:
        """Every CPU an admitted pod keeps from others: exclusive container sets and KEP-5526 bubbles."""
        return self._state.cpu.assigned_cpus()

    def numa_memory(self) -> dict[int, dict[str, MemoryTable]]:
        """The memory manager's per-NUMA tables (empty under the ``None`` policy, which keeps none)."""
        return self.memory_policy.numa_memory(self._state.memory)

    # ---------------------------------------------------------------- add
    def admit(self, pod: PodResources) -> Decision:
        """Admit and allocate a pod; idempotent by UID (same spec again returns the same answer)."""
        outcome = self._decide(pod)
        if outcome.work is not None:
            self._state = outcome.work
        elif outcome.refusals is not None:
            self._state.counters.errors.update(outcome.refusals.errors)  # a refusal is counted, nothing else
        return outcome.decision

    def trial(self, pod: PodResources) -> Trial:
        """The decision ``admit`` would make and the state it would leave, committing nothing (the
        refusal counters included): the scheduler extender's "would this node admit it?"."""
        outcome = self._decide(pod)
        return Trial(outcome.decision, self._state if outcome.work is None else outcome.work)

    def _decide(self, pod: PodResources) -> _Admission:
        """The decision, with the working copy that holds the pod when it is new and admitted, or the
        refusal counts when a manager refused it; the committed state is not touched."""
        existing = self._state.pods.get(pod.uid)
        pod_qos = qos.qos_class(pod, pod_level_resources_gate=self.config.gates.pod_level_resources)
        pod = _with_qos(pod, pod_qos)  # the hash covers the QoS class the API server would have set
        if existing is not None:
            if not _same_request(existing, pod):
                raise PodConflictError(
                    f"pod {pod.uid} ({pod.key}) is already allocated with a different spec; release it first"
                )
            return _Admission(Decision(True, view=self.view(pod.uid), qos_class=pod_qos))
        shortfalls = fit.shortfalls(self.requests_of(pod), self.used_requests(), self.allocatable)
        if shortfalls:
            first = shortfalls[0]
            return _Admission(Decision(False, first.reason, first.message(), qos_class=pod_qos))
        work = self._state.copy()
        attempt = AllocationCounters()
        try:
            hint = self._allocate(work, pod, attempt)
        except AdmissionRejected as err:
            return _Admission(Decision(False, err.reason, err.message, qos_class=pod_qos), refusals=attempt)
        work.counters.merge(attempt)
        work.sequence += 1
        record = PodRecord(pod, contract.spec_hash(pod), hint, work.sequence)
        self._put_record(work, record)
        return _Admission(Decision(True, view=self._view(work, record), qos_class=pod_qos), work=work)

    def _allocate(self, work: EngineState, pod: PodResources, counters: AllocationCounters) -> TopologyHint | None:
        """Topology Manager admission on ``work``; raises AdmissionRejected. The hint the pod was admitted with."""
        affinities = self.topology_manager.admit(pod, self._providers(work), counters)
        if self.topology_manager.scope == "pod":
            return affinities.pod
        return self._first_aligned(work, pod, affinities)

    def _first_aligned(self, work: EngineState, pod: PodResources, affinities: Affinities) -> TopologyHint | None:
        """Container scope: the hint of the first container some manager aligned (pinned CPUs or blocks)."""
        for container, hint in affinities.containers:
            if hint is None or hint.mask is None:
                continue
            cpus = self.cpu_policy.container_cpus(work.cpu, pod.uid, container.name)
            blocks = self.memory_policy.container_blocks(work.memory, pod.uid, container.name)
            if cpus or blocks:
                return hint
        return None

    # ---------------------------------------------------------------- remove
    def remove(self, uid: str) -> RemoveResult:
        """Release a pod (idempotent) and retry Deferred resizes that may now fit."""
        record = self._state.pods.get(uid)
        if record is None:
            return RemoveResult(False)
        work = self._state.copy()
        self._release(work, record.pod)
        self._drop_record(work, uid)
        work.pending_resizes.pop(uid, None)
        work.infeasible_resizes.pop(uid, None)
        self._state = work
        return RemoveResult(True, self.retry_pending_resizes())

    def _release(self, work: EngineState, pod: PodResources) -> None:
        for container in pod.containers:
            self.cpu_policy.remove_container(work.cpu, pod.uid, container.name)
            self.memory_policy.remove_container(work.memory, pod.uid, container.name)

    # ---------------------------------------------------------------- resize
    def resize(self, desired: PodResources, *, dry_run: bool = False) -> ResizeDecision:
        """Decide and, when Accepted, apply an in-place resize (the whole pod is one atomic request).

        ``dry_run`` answers the same question without changing anything (the webhook's
        feasibility check for a dry-run review)."""
        record = self.record(desired.uid)
        desired = _with_qos(desired, record.pod.qos_class)
        if dry_run:
            saved = self._state
            self._state = saved.copy()
            try:
                if _same_request(record, desired):
                    return ResizeDecision("Accepted", None, None, self.view(desired.uid))
                status, reason, message = self._try_resize(record, desired)
                return ResizeDecision(status, reason, message, self._view(saved, record))
            finally:
                self._state = saved
        self._state.pending_resizes.pop(desired.uid, None)
        self._state.infeasible_resizes.pop(desired.uid, None)
        if _same_request(record, desired):
            return ResizeDecision("Accepted", None, None, self.view(desired.uid))
        status, reason, message = self._try_resize(record, desired)
        applied: tuple[str, ...] = ()
        if status == "Accepted":
            applied = self.retry_pending_resizes()
        else:
            self._state.sequence += 1
            queue = self._state.pending_resizes if status == "Deferred" else self._state.infeasible_resizes
            queue[desired.uid] = PendingResize(desired, reason or status, message or "", self._state.sequence)
        return ResizeDecision(status, reason, message, self.view(desired.uid), applied)

    def _try_resize(self, record: PodRecord, desired: PodResources) -> tuple[ResizeOutcome, str | None, str | None]:
        verdict = resize_rules.decide(self, self._state, record.pod, desired)
        if verdict.status != "Accepted" or verdict.work is None:
            return verdict.status, verdict.reason, verdict.message
        work = verdict.work
        work.sequence += 1
        resized = PodRecord(desired, contract.spec_hash(desired), record.hint, record.sequence)
        resized.hint = self._widened_hint(work, resized)
        self._put_record(work, resized)
        self._state = work
        return "Accepted", None, None

    def _widened_hint(self, work: EngineState, record: PodRecord) -> TopologyHint | None:
        """A grow that spilled onto more NUMA nodes (best-effort, or a restricted grow past one node)
        leaves the pod aligned to the union: report that, not the hint it was admitted with."""
        hint = record.hint
        if hint is None or hint.mask is None:
            return hint
        used = 0
        for c in self._view(work, record).containers:
            if c.assignment != "node_shared":
                used |= mask_of(self.topology.numa_nodes_of(c.cpus))
            if c.memory_numa_nodes is not None:
                used |= mask_of(c.memory_numa_nodes)
        if not used & ~hint.mask:
            return hint
        return TopologyHint(hint.mask | used, hint.preferred)

    def retry_pending_resizes(self) -> tuple[str, ...]:
        """Retry Deferred resizes in the kubelet's priority order until none more fits."""
        applied: list[str] = []
        progress = True
        while progress and self._state.pending_resizes:
            progress = False
            for uid in self._pending_order():
                pending = self._state.pending_resizes[uid]
                record = self._state.pods.get(uid)
                if record is None:
                    del self._state.pending_resizes[uid]
                    continue
                status, reason, message = self._try_resize(record, pending.desired)
                if status == "Accepted":
                    del self._state.pending_resizes[uid]
                    applied.append(record.pod.key)
                    progress = True
                    break
                if status == "Infeasible":
                    del self._state.pending_resizes[uid]
                    self._state.infeasible_resizes[uid] = PendingResize(
                        pending.desired, reason or status, message or "", pending.sequence
                    )
                else:
                    pending.reason, pending.message = reason or status, message or ""
        return tuple(applied)

    def _pending_order(self) -> list[str]:
        """Kubelet order: non-increasing first, higher priority, Guaranteed before Burstable, oldest first."""

        def key(uid: str) -> tuple[int, int, int, int]:
            pending = self._state.pending_resizes[uid]
            current = self.requests_of(self._state.pods[uid].pod)
            wanted = self.requests_of(pending.desired)
            increases = any(wanted.get(n, 0) > current.get(n, 0) for n in (CPU, MEMORY))
            guaranteed = pending.desired.qos_class == "Guaranteed"
            return (int(increases), -pending.desired.priority, int(not guaranteed), pending.sequence)

        return sorted(self._state.pending_resizes, key=key)

    # ---------------------------------------------------------------- views
    def requests_of(self, pod: PodResources) -> dict[str, int]:
        return qos.effective_pod_requests(pod, pod_level_resources_gate=self.config.gates.pod_level_resources)

    def _view(self, state: EngineState, record: PodRecord) -> PodView:
        pod = record.pod
        cpu, mem = self.cpu_policy, self.memory_policy
        default = cpu.default_cpus(state.cpu)
        bubble: CPUSet | None = cpu.pod_cpus(state.cpu, pod.uid)
        pod_blocks = mem.pod_blocks(state.memory, pod.uid)
        limits = qos.effective_pod_limits(pod, pod_level_resources_gate=self.config.gates.pod_level_resources)
        containers: list[ContainerView] = []
        exclusive_long_running = CPUSet()
        shared_pool: CPUSet | None = None
        for c in pod.containers:
            level = cpu.isolation_level(state.cpu, pod, c)
            own: CPUSet | None = cpu.container_cpus(state.cpu, pod.uid, c.name)
            assignment: Assignment
            if level == "container":
                assignment = "pod_exclusive" if bubble is not None else "node_exclusive"
                cpus = own if own is not None else CPUSet()
                if c.is_long_running:
                    exclusive_long_running = exclusive_long_running | cpus
            elif level == "pod":
                assignment = "pod_shared"
                cpus = own if own is not None else (bubble or default)
                if c.is_long_running:
                    shared_pool = cpus
            else:
                assignment = "node_shared"
                cpus = default
            memory_assignment: Assignment = mem.memory_assignment(state.memory, pod, c)
            numa_nodes: tuple[int, ...] | None = mem.memory_numa_nodes(state.memory, pod.uid, c.name)
            quota: CFSQuota = cpu.cfs_quota_level(state.cpu, pod, c)
            containers.append(
                ContainerView(
                    name=c.name,
                    kind=c.kind,
                    assignment=assignment,
                    memory_assignment=memory_assignment,
                    cpus=cpus,
                    memory_numa_nodes=numa_nodes,
                    cfs_quota=quota,
                    cpu_limit_millis=c.resources.limits.get(CPU),
                    memory_limit_bytes=c.resources.limits.get(MEMORY),
                )
            )
        pool_nodes: tuple[int, ...] | None = None
        if pod_blocks:
            pool_nodes = tuple(sorted({n for b in pod_blocks for n in b.numa_affinity}))
        if bubble is not None and shared_pool is None:
            shared_pool = bubble - exclusive_long_running
        hint = record.hint
        affinity = tuple(hint.numa_ids()) if hint is not None and hint.mask is not None else None
        if affinity is not None and not any(
            v.assignment != "node_shared" or v.memory_assignment != "node_shared" for v in containers
        ):
            affinity = None  # no provider aligned anything: the hint did not apply
        return PodView(
            uid=pod.uid,
            namespace=pod.namespace,
            name=pod.name,
            qos_class=pod.qos_class or "BestEffort",
            numa_affinity=affinity,
            pod_shared_pool_cpus=shared_pool if bubble is not None else None,
            pod_shared_pool_memory_numa_nodes=pool_nodes,
            pod_cpus=bubble,
            containers=tuple(containers),
            spec_hash=record.spec_hash,
            pod_cpu_limit_millis=limits.get(CPU),
            pod_memory_limit_bytes=limits.get(MEMORY),
        )

    # ---------------------------------------------------------------- persistence
    def snapshot(self) -> dict[str, Any]:
        """The whole state as one JSON-able document (the enforcer checksums and persists it)."""
        return {
            "version": SNAPSHOT_VERSION,
            "node": self.config.name,
            "topology": self.topology.to_document(),
            "config": self.config.to_kubelet(),
            "compatibility": self.config.compatibility,
            **_state_document(self._state),
        }

    def snapshot_of(self, uids: Collection[str], *, numa_nodes: Collection[int] | None = None) -> dict[str, Any]:
        """The parts of :meth:`snapshot` that belong to ``uids`` plus the node-wide values, without the rest.

        Every per-pod entry equals the one the full snapshot holds (the same serialisers run on the
        managers' states restricted to these pods): the journal appends this as one change's patch.
        ``numa_nodes``: only these NUMA nodes' memory tables (``memory.machineState``; all when ``None``).
        """
        s = self._state
        wanted = set(uids)
        return _state_document(
            EngineState(
                cpu=s.cpu.restricted_to(wanted),
                memory=s.memory.restricted_to(wanted, numa_nodes),
                pods={u: s.pods[u] for u in wanted if u in s.pods},
                pending_resizes={u: s.pending_resizes[u] for u in wanted if u in s.pending_resizes},
                infeasible_resizes={u: s.infeasible_resizes[u] for u in wanted if u in s.infeasible_resizes},
                counters=s.counters,
                sequence=s.sequence,
            )
        )

    def restore(self, doc: dict[str, Any], *, cpu_state: CPUState, memory_state: MemoryState) -> None:
        """Replace the state with a snapshot's (manager states already decoded by the builder)."""
        pods: dict[str, PodRecord] = {}
        for uid, raw in doc.get("pods", {}).items():
            hint_raw = raw.get("hint")
            hint = None if hint_raw is None else TopologyHint(hint_raw["mask"], bool(hint_raw["preferred"]))
            pod = podcodec.from_dict(raw["pod"])
            pods[uid] = PodRecord(pod, _stored_spec_hash(raw, pod), hint, int(raw["sequence"]))
        self._state = EngineState(
            cpu=cpu_state,
            memory=memory_state,
            pods=pods,
            pending_resizes=_pending_from_dict(doc.get("pendingResizes", {})),
            infeasible_resizes=_pending_from_dict(doc.get("infeasibleResizes", {})),
            counters=AllocationCounters.from_dict(doc.get("counters", {})),
            sequence=int(doc.get("sequence", 0)),
            used=self._sum_requests(pods),  # derived, never persisted
        )

    def check(self) -> list[str]:
        """Internal consistency: each manager's own checks plus cross-checks against the pod records."""
        problems: list[str] = []
        problems += [f"cpu: {p}" for p in self._state.cpu.check(self.topology)]
        problems += [f"memory: {p}" for p in self._state.memory.check(self.topology)]
        recomputed = self._sum_requests(self._state.pods)
        if self._state.used != recomputed:
            problems.append(f"running total of requests {self._state.used} != {recomputed} summed over the pods")
        known = set(self._state.pods)
        for uid in self.cpu_policy.pod_uids(self._state.cpu):
            if uid not in known:
                problems.append(f"cpu state holds CPUs for unknown pod {uid}")
        for uid in self.memory_policy.pod_uids(self._state.memory):
            if uid not in known:
                problems.append(f"memory state holds blocks for unknown pod {uid}")
        owners: dict[int, str] = {}
        for uid in self.pod_uids():
            view = self.view(uid)
            mine = CPUSet()
            for c in view.containers:
                if c.assignment in ("node_exclusive", "pod_exclusive"):
                    mine = mine | c.cpus
            if view.pod_cpus is not None:
                mine = mine | view.pod_cpus
            for cpu_id in mine:
                other = owners.setdefault(cpu_id, uid)
                if other != uid:
                    problems.append(f"cpu {cpu_id} is assigned to pods {other} and {uid}")
        return problems


def _same_request(record: PodRecord, pod: PodResources) -> bool:
    """Whether ``pod`` asks for what ``record`` was admitted with: the same resources (the contract's
    :func:`~shared.contract.spec_hash`) by the same pod (a UID never changes name or priority)."""
    admitted = record.pod
    return record.spec_hash == contract.spec_hash(pod) and (admitted.namespace, admitted.name, admitted.priority) == (
        pod.namespace,
        pod.name,
        pod.priority,
    )


_LEGACY_SPEC_HASH_PREFIX = "sha256:"


def _stored_spec_hash(raw: dict[str, Any], pod: PodResources) -> str:
    """The record's spec hash; states written before the engine used the contract's hash stored
    ``sha256:<32 hex>`` of another document, so those are recomputed from the stored pod."""
    stored = str(raw["specHash"])
    return contract.spec_hash(pod) if stored.startswith(_LEGACY_SPEC_HASH_PREFIX) else stored


def _with_qos(pod: PodResources, qos_class: QOSClass | None) -> PodResources:
    if pod.qos_class == qos_class:
        return pod
    return PodResources(
        uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        containers=pod.containers,
        pod=pod.pod,
        qos_class=qos_class,
        priority=pod.priority,
    )


def _state_document(s: EngineState) -> dict[str, Any]:
    """The state's part of a snapshot: the managers' checkpoints, the pods, the waiting resizes."""
    return {
        "cpu": s.cpu.to_dict(),
        "memory": s.memory.to_dict(),
        "pods": {uid: _pod_entry(r) for uid, r in s.pods.items()},
        "pendingResizes": {uid: _resize_entry(p) for uid, p in s.pending_resizes.items()},
        "infeasibleResizes": {uid: _resize_entry(p) for uid, p in s.infeasible_resizes.items()},
        "counters": s.counters.to_dict(),
        "sequence": s.sequence,
    }


def _pod_entry(record: PodRecord) -> dict[str, Any]:
    hint = record.hint
    return {
        "pod": podcodec.to_dict(record.pod),
        "specHash": record.spec_hash,
        "hint": None if hint is None else {"mask": hint.mask, "preferred": hint.preferred},
        "sequence": record.sequence,
    }


def _resize_entry(pending: PendingResize) -> dict[str, Any]:
    return {
        "desired": podcodec.to_dict(pending.desired),
        "reason": pending.reason,
        "message": pending.message,
        "sequence": pending.sequence,
    }


def _pending_from_dict(raw: dict[str, Any]) -> dict[str, PendingResize]:
    return {
        uid: PendingResize(podcodec.from_dict(p["desired"]), str(p["reason"]), str(p["message"]), int(p["sequence"]))
        for uid, p in raw.items()
    }
