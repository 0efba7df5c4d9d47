"""``filter`` and ``prioritize``: per node, the enforcer's own admission run on the replica.

Per candidate node (``ExtenderArgs.NodeNames``), in this order:

========================================  ==================================================================
node                                       filter answer
========================================  ==================================================================
pod needs no alignment (not Guaranteed)    every node passes at once, no replica is read
not enforced (the directory names none)    passes: numaguard has no opinion
no replica yet (first poll pending)        passes: no opinion (the poll is started now)
pod can never be admitted there            ``FailedAndUnresolvableNodes`` with the kubelet's reason: the
(dry run on an empty twin refuses it)      machine is too small or the policy forbids it even on an
                                           empty node, so preemption must not try it; known from the
                                           machine and configuration alone, so also on a stale replica
replica fresh, dry run admits              passes
replica fresh, dry run refuses             ``FailedNodes`` with the kubelet's reason
                                           (``TopologyAffinityError: ...``): preemption may make room
replica stale (poller behind)              passes: no opinion
enforcer down (polls failing past the      ``enforcer_down="filter"`` (default, matching the webhook's
freshness bound)                           ``failureMode: deny``, which will deny the binding):
                                           ``FailedAndUnresolvableNodes`` ``EnforcerUnavailable: ...``
                                           (preemption cannot bring an enforcer back);
                                           ``"pass"`` (webhook ``failureMode: allow``): passes
========================================  ==================================================================

This is what ``ignorable: true`` implies, applied node by node: when the extender as a whole fails
(timeout, 4xx/5xx, ``Error`` set) the scheduler goes on without it (``findNodesThatPassExtenders``
skips an ignorable extender's error), so the extender must never be *needed*; it filters a node only
when it knows the binding would be refused there.  The binding webhook stays the final authority.

Messages name no node, so the scheduler's summary groups them (``0/8 nodes are available:
3 TopologyAffinityError: Resources cannot be allocated with Topology locality, ...``).

Dry-run answers are cached by ``(state_key, pod shape)``: the same pod shape on a node whose state
did not change (or on another node in the same state) is answered without running the engine again,
and ``prioritize`` after ``filter`` for the same pod runs nothing.  Decisions are serialised by one
lock (the engine is not thread-safe, and kube-scheduler calls an extender one pod at a time).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Literal

from enforcer.engine.node import NodeEngine
from extender import engine_adapter, wire
from extender.answer import NodeAnswer, known
from extender.directory import EnforcerDirectory
from extender.engine_adapter import DryRun
from extender.replica import NodeReplica, ReplicaStore, ReplicaView
from shared import qos
from shared.errors import DomainError
from shared.pod import Pod, parse_pod
from shared.resources import PodResources

EnforcerDownPolicy = Literal["filter", "pass"]
ENFORCER_UNAVAILABLE = "EnforcerUnavailable"
DEFAULT_CACHE_ENTRIES = 50_000
PREPARED_SHAPES = 8
"""How many recent pod shapes :meth:`Extender.prepare` answers on a new replica ahead of the scheduler."""


class _Cache:
    """A bounded LRU map of dry-run answers (as :func:`~extender.answer.known` builds them)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str], NodeAnswer] = OrderedDict()
        self._lock = threading.Lock()  # short sections only: computing happens outside
        self.hits = 0
        self.misses = 0

    def peek(self, key: tuple[str, str]) -> NodeAnswer | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                self.hits += 1
            return found

    def put(self, key: tuple[str, str], value: NodeAnswer) -> None:
        with self._lock:
            self._items[key] = value
            if len(self._items) > self.size:
                self._items.popitem(last=False)

    def get(self, key: tuple[str, str], compute: Callable[[], DryRun]) -> NodeAnswer:
        found = self.peek(key)
        if found is not None:
            return found
        with self._lock:
            self.misses += 1
        value = known(compute())
        self.put(key, value)
        return value


_NO_ALIGNMENT_NEEDED = NodeAnswer("no_alignment_needed")
_HOLDS = NodeAnswer("passed", "already allocated on this node", holds=True, score=wire.MAX_EXTENDER_PRIORITY)


def _settled(resources: PodResources | None) -> NodeAnswer:
    """The answer for a node whose reading of the pod needs no dry run: None (no alignment needed
    under its gate), or a pod whose uid the node already holds.

    The latter is a pod scheduled again after its binding failed past the allocation: the enforcer
    answers an allocation request for this uid idempotently, so this node admits it whatever is free
    now, and binding there returns the allocation it already holds (the best score)."""
    return _NO_ALIGNMENT_NEEDED if resources is None else _HOLDS


class Extender:
    """The decisions behind ``POST /filter`` and ``POST /prioritize``; framework-free."""

    def __init__(
        self,
        store: ReplicaStore,
        directory: EnforcerDirectory,
        *,
        enforcer_down: EnforcerDownPolicy = "filter",
        on_new_node: Callable[[str], None] | None = None,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
    ) -> None:
        self.store = store
        self.directory = directory
        self.enforcer_down = enforcer_down
        self.on_new_node = on_new_node
        self._lock = threading.Lock()
        self._cache = _Cache(cache_entries)
        self._twins: dict[str, NodeEngine] = {}  # config_key -> an empty engine of that machine and configuration
        self._seen: set[str] = set()
        # per PodLevelResources gate value, the pod shapes asked about lately (shape -> the pod as that
        # gate reads it, as its dry-run candidate), most recent last, for prepare()
        self._recent: dict[bool, OrderedDict[str, PodResources]] = {True: OrderedDict(), False: OrderedDict()}
        self._recent_lock = threading.Lock()
        store.prepare = self.prepare  # new replicas arrive with the recent shapes answered

    # ------------------------------------------------------------------ the two verbs
    def filter(self, body: object) -> dict[str, Any]:
        """An ``ExtenderFilterResult``; raises wire.MalformedArgs for a body that is not ``ExtenderArgs``."""
        args = wire.parse_args(body)
        answers = self.answers(args)
        passed = [n for n in args.node_names if answers[n].verdict not in ("failed", "unresolvable")]
        failed = {n: a.message or "" for n, a in answers.items() if a.verdict == "failed"}
        unresolvable = {n: a.message or "" for n, a in answers.items() if a.verdict == "unresolvable"}
        return wire.filter_result(args, passed, failed, unresolvable)

    def prioritize(self, body: object) -> list[dict[str, Any]]:
        """A ``HostPriorityList`` for every node of the request."""
        args = wire.parse_args(body)
        answers = self.answers(args)
        return wire.host_priority_list([(name, answers[name].score) for name in args.node_names])

    # ------------------------------------------------------------------ per node
    def answers(self, args: wire.ExtenderArgs) -> dict[str, NodeAnswer]:
        pod = _parse(args.pod)
        converted: dict[bool, PodResources | None] = {}
        for gate in (True, False):  # nodes may run with or without the PodLevelResources gate
            _needs_alignment(pod, converted, gate)
        if all(resources is None for resources in converted.values()):
            return {name: NodeAnswer("no_alignment_needed") for name in args.node_names}
        shapes = {gate: engine_adapter.pod_shape(r) for gate, r in converted.items() if r is not None}
        # one candidate object per gate, dry-run on every node: what the engine derives from the pod
        # alone is then computed once per call (PodResources.memo), not once per node
        candidates = {gate: engine_adapter.candidate(r) for gate, r in converted.items() if r is not None}
        self._remember(candidates, shapes)
        with self._lock:
            self._learn(args.node_names)
            result: dict[str, NodeAnswer] = {}
            for name, fresh in zip(args.node_names, self.store.fresh(args.node_names), strict=True):
                if name not in result:
                    result[name] = self._answer(name, fresh, converted, shapes, candidates)
            return result

    def _answer(
        self,
        name: str,
        replica: NodeReplica | None,
        converted: dict[bool, PodResources | None],
        shapes: dict[bool, str],
        candidates: dict[bool, PodResources],
    ) -> NodeAnswer:
        """The node's answer; ``replica`` is its replica when fresh (None: not fresh, or none)."""
        if self.directory.url_for(name) is None:
            return NodeAnswer("no_opinion", "node is not enforced by numaguard")
        if replica is None:
            return self._not_fresh(self.store.view(name), converted, shapes, candidates)
        # the common case, a fresh replica: the same checks as _not_fresh, freshness known
        resources = converted[replica.gate]
        if resources is None or resources.uid in replica.engine.state.pods:
            return _settled(resources)
        shape = shapes[replica.gate]
        found = replica.answers.get(shape)
        if found is None:
            pod = candidates[replica.gate]
            found = self._unresolvable(replica, pod, shape) or self._cache.get(
                (replica.state_key, shape), lambda: engine_adapter.dry_run(replica.engine, pod)
            )
            replica.remember(shape, found)
        return found

    def _not_fresh(
        self,
        view: ReplicaView,
        converted: dict[bool, PodResources | None],
        shapes: dict[bool, str],
        candidates: dict[bool, PodResources],
    ) -> NodeAnswer:
        replica = view.replica
        if replica is None:
            if view.freshness == "down" and self.enforcer_down == "filter":
                return NodeAnswer("unresolvable", _down_message(view))
            return NodeAnswer("no_opinion", "no replica of this node yet")
        resources = converted[replica.gate]
        if resources is None or resources.uid in replica.engine.state.pods:
            return _settled(resources)
        pod = candidates[replica.gate]
        never = self._unresolvable(replica, pod, shapes[replica.gate])
        if never is not None:
            return never
        if view.freshness == "down":
            if self.enforcer_down == "filter":
                return NodeAnswer("unresolvable", _down_message(view))
            return NodeAnswer("no_opinion", view.error)
        if view.freshness != "fresh":
            return NodeAnswer("no_opinion", "replica is stale")
        return self._cache.get(
            (replica.state_key, shapes[replica.gate]), lambda: engine_adapter.dry_run(replica.engine, pod)
        )

    def _unresolvable(self, replica: NodeReplica, resources: PodResources, shape: str) -> NodeAnswer | None:
        """The answer when no state of the node could admit the pod (its empty twin refuses it), else None.

        Known from the machine and configuration alone, so it holds on a stale replica too."""
        never = self._cache.get(("empty:" + replica.config_key, shape), lambda: self._twin_dry_run(replica, resources))
        return NodeAnswer("unresolvable", never.message) if never.verdict == "failed" else None

    # ------------------------------------------------------------------ ahead of the scheduler
    def prepare(self, replica: NodeReplica) -> None:
        """Answer the recent pod shapes on a replica before it is installed (the poller's thread calls this).

        Nobody else holds the new replica's engine yet, so this needs no decision lock: a burst of pods
        of a few shapes then finds its answers cached when ``filter`` asks, and only a shape never seen
        before costs a dry run per node on the request path."""
        gate = replica.engine.config.gates.pod_level_resources
        with self._recent_lock:
            recent = list(reversed(self._recent[gate].items()))
        for shape, pod in recent:
            key = (replica.state_key, shape)
            if self._cache.peek(key) is None:
                self._cache.put(key, known(engine_adapter.dry_run(replica.engine, pod)))

    def _remember(self, candidates: dict[bool, PodResources], shapes: dict[bool, str]) -> None:
        """Note the pod's shape under each gate value; each gate keeps its own :data:`PREPARED_SHAPES`.

        (One bound over both gates kept only the last 4 pods' shapes, as a pod has a shape per gate.)"""
        with self._recent_lock:
            for gate, shape in shapes.items():
                recent = self._recent[gate]
                recent[shape] = candidates[gate]  # the call's candidate: prepare() dry-runs it on every new replica
                recent.move_to_end(shape)
                while len(recent) > PREPARED_SHAPES:
                    recent.popitem(last=False)

    def _twin_dry_run(self, replica: NodeReplica, pod: PodResources) -> DryRun:
        twin = self._twins.get(replica.config_key)
        if twin is None:
            twin = self._twins[replica.config_key] = engine_adapter.empty_twin(replica.engine)
        return engine_adapter.dry_run(twin, pod)

    def _learn(self, names: tuple[str, ...]) -> None:
        if self.on_new_node is None:
            return
        for name in names:
            if name not in self._seen and self.directory.url_for(name) is not None:
                self._seen.add(name)
                self.on_new_node(name)

    @property
    def cache_stats(self) -> tuple[int, int]:
        return self._cache.hits, self._cache.misses


def _parse(raw: Any) -> Pod:
    try:
        return parse_pod(raw, copy_raw=False)
    except DomainError as err:
        where = f"Pod.{err.field}: " if err.field else "Pod: "
        raise wire.MalformedArgs(f"ExtenderArgs.{where}{err.message}") from None


def prepared_pod(pod: Pod, *, gate: bool) -> PodResources | None:
    """The engine's view of ``pod`` that a node with the PodLevelResources gate at ``gate`` dry-runs, or None
    when the pod needs no alignment there (raises wire.MalformedArgs for a pod that does not convert)."""
    return _needs_alignment(pod, {}, gate)


def _needs_alignment(pod: Pod, converted: dict[bool, PodResources | None], gate: bool) -> PodResources | None:
    """The engine's view of the pod when a node could pin anything for it (Guaranteed QoS), else None.

    Only Guaranteed pods get exclusive CPUs (static policy), pinned memory (Static policy) or a
    Topology Manager hint that can refuse them; everything else is admitted wherever it fits, which
    the scheduler's own NodeResourcesFit already checks."""
    if gate not in converted:
        try:
            resources = pod.to_resources(pod_level_resources=gate)
        except DomainError as err:
            raise wire.MalformedArgs(f"ExtenderArgs.Pod.{err.field or 'spec'}: {err.message}") from None
        pod_qos = qos.qos_class(resources, pod_level_resources_gate=gate)
        converted[gate] = None if pod_qos != "Guaranteed" else _with_qos(resources, pod_qos)
    return converted[gate]


def _with_qos(pod: PodResources, pod_qos: Any) -> PodResources:
    return PodResources(
        uid=pod.uid or engine_adapter.DRY_RUN_UID,
        namespace=pod.namespace,
        name=pod.name or "pod",
        containers=pod.containers,
        pod=pod.pod,
        qos_class=pod_qos,
        priority=pod.priority,
        overhead=pod.overhead,
    )


def _down_message(view: ReplicaView) -> str:
    del view  # the poll error stays in the logs and on /replicas: messages must not differ per node
    return (
        f"{ENFORCER_UNAVAILABLE}: the node's numaguard enforcer does not answer, so the binding webhook would "
        "refuse the binding"
    )
