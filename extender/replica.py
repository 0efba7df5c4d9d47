"""The extender's replicas of the enforcers' engines, with their generation and freshness.

A replica is replaced, never changed: :meth:`ReplicaStore.update` decodes a new export into a new
engine (through :mod:`extender.engine_adapter`) and swaps it in, so a decision running on the old one
is never disturbed.  Exports are ordered by ``(incarnation, generation)``: an older generation of the
same incarnation is ignored (a poll answered out of order); a new incarnation (the enforcer
restarted) always replaces.

Freshness: a replica is *fresh* while the last confirmation from its enforcer (a new export, or a
``304 Not Modified``) is at most ``freshness`` seconds old.  Past that it is *stale*; when the polls
since have failed the enforcer counts as *down*.  What each state means for ``filter`` is decided in
:mod:`extender.decide`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from enforcer.engine.node import NodeEngine
from extender import engine_adapter
from extender.answer import NodeAnswer

EXPORT_VERSION = 1
Freshness = Literal["fresh", "stale", "down", "unknown"]


REMEMBERED_SHAPES = 64
"""Answers a replica keeps (pod shapes asked about while it is installed); forgotten all at once past that."""


@dataclass(frozen=True, slots=True)
class NodeReplica:
    node: str
    engine: NodeEngine
    incarnation: str
    generation: int
    state_key: str  # engine_adapter.state_digest: equal keys, equal answers
    config_key: str  # engine_adapter.config_digest: equal keys, equal answers on an empty node
    etag: str | None
    gate: bool  # the engine's PodLevelResources gate: which reading of a pod it dry-runs
    # pod shape -> the answer while this replica is fresh.  Why: a call answered from the shared cache
    # still built a key, took a lock and touched the LRU twice per node (its empty twin and its state);
    # the replica's own answers cost one dict lookup.  Written under the decisions' lock only; a new
    # replica starts empty, so what a state changed never outlives the replica it was computed on.
    answers: dict[str, NodeAnswer] = field(default_factory=dict, compare=False, repr=False)

    def remember(self, shape: str, answer: NodeAnswer) -> None:
        if len(self.answers) >= REMEMBERED_SHAPES:
            self.answers.clear()
        self.answers[shape] = answer


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One node as a decision sees it."""

    freshness: Freshness
    replica: NodeReplica | None
    age: float | None  # seconds since the enforcer last confirmed the replica
    error: str | None  # the last poll's failure, if it failed


@dataclass
class _Entry:
    replica: NodeReplica | None = None
    confirmed_at: float | None = None
    error: str | None = None
    error_at: float | None = None


class ReplicaStore:
    """Thread-safe map of node name -> replica; the poller writes, decisions read."""

    def __init__(self, *, freshness: float, clock: Callable[[], float] = time.monotonic) -> None:
        if freshness <= 0:
            raise ValueError("freshness must be positive")
        self.freshness = freshness
        self.clock = clock
        self.prepare: Callable[[NodeReplica], None] | None = None  # runs on a new replica before it is installed
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def update(self, node: str, export: object, *, etag: str | None = None) -> bool:
        """Install an export document (``GET /replica``'s body); False when it was older than the replica.

        Raises engine_adapter.SnapshotError when the document cannot be decoded (the old replica stays)."""
        doc = _export_fields(node, export)
        incarnation, generation, snapshot = doc
        with self._lock:
            entry = self._entries.setdefault(node, _Entry())
            current = entry.replica
            if current is not None and current.incarnation == incarnation and generation <= current.generation:
                entry.confirmed_at, entry.error = self.clock(), None
                return False
        engine = engine_adapter.engine_from_snapshot(snapshot)  # outside the lock: it takes milliseconds
        replica = NodeReplica(
            node=node,
            engine=engine,
            incarnation=incarnation,
            generation=generation,
            state_key=engine_adapter.state_digest(engine, snapshot),
            config_key=engine_adapter.config_digest(engine),
            etag=etag,
            gate=engine.config.gates.pod_level_resources,
        )
        if self.prepare is not None:
            self.prepare(replica)
        with self._lock:
            entry = self._entries.setdefault(node, _Entry())
            current = entry.replica
            if current is not None and current.incarnation == incarnation and generation <= current.generation:
                return False
            entry.replica, entry.confirmed_at, entry.error = replica, self.clock(), None
            return True

    def confirm(self, node: str) -> None:
        """The enforcer said nothing changed (304): the replica is fresh again."""
        with self._lock:
            entry = self._entries.setdefault(node, _Entry())
            entry.confirmed_at, entry.error = self.clock(), None

    def failed(self, node: str, message: str) -> None:
        """A poll failed (unreachable, refused, 5xx, undecodable): the replica ages from its last confirmation."""
        with self._lock:
            entry = self._entries.setdefault(node, _Entry())
            entry.error, entry.error_at = message, self.clock()

    def etag(self, node: str) -> str | None:
        with self._lock:
            entry = self._entries.get(node)
            return None if entry is None or entry.replica is None else entry.replica.etag

    def fresh(self, nodes: Sequence[str]) -> list[NodeReplica | None]:
        """Per node, its replica when it is fresh, else None (then :meth:`view` says why): a decision's
        common case, for all of a call's nodes under one lock and one clock reading, without building views."""
        now = self.clock()
        result: list[NodeReplica | None] = []
        with self._lock:
            entries = self._entries
            for node in nodes:
                entry = entries.get(node)
                if entry is None or entry.confirmed_at is None or now - entry.confirmed_at > self.freshness:
                    result.append(None)
                else:
                    result.append(entry.replica)
        return result

    def view(self, node: str) -> ReplicaView:
        now = self.clock()
        with self._lock:
            entry = self._entries.get(node)
            if entry is None:
                return ReplicaView("unknown", None, None, None)
            age = None if entry.confirmed_at is None else now - entry.confirmed_at
            if age is not None and age <= self.freshness:
                return ReplicaView("fresh", entry.replica, age, None)
            if entry.error is not None:
                # the polls since the last confirmation failed: the enforcer is unreachable or has no state
                return ReplicaView("down", entry.replica, age, entry.error)
            return ReplicaView("stale" if entry.replica is not None else "unknown", entry.replica, age, None)

    def nodes(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(sorted(self._entries))

    def status(self) -> list[dict[str, Any]]:
        """What an operator sees on ``GET /replicas``."""
        result = []
        for node in self.nodes():
            view = self.view(node)
            replica = view.replica
            result.append(
                {
                    "node": node,
                    "freshness": view.freshness,
                    "ageSeconds": None if view.age is None else round(view.age, 3),
                    "incarnation": None if replica is None else replica.incarnation,
                    "generation": None if replica is None else replica.generation,
                    "pods": None if replica is None else len(replica.engine.state.pods),
                    "error": view.error,
                }
            )
        return result


def _export_fields(node: str, export: object) -> tuple[str, int, dict[str, Any]]:
    if not isinstance(export, dict):
        raise engine_adapter.SnapshotError("the replica export must be a JSON object")
    if export.get("version") != EXPORT_VERSION:
        raise engine_adapter.SnapshotError(f"replica export version {export.get('version')!r} is not supported")
    if export.get("node") != node:
        raise engine_adapter.SnapshotError(f"the enforcer serves node {export.get('node')!r}, not {node!r}")
    incarnation, generation, snapshot = export.get("incarnation"), export.get("generation"), export.get("snapshot")
    if not isinstance(incarnation, str) or not isinstance(generation, int) or not isinstance(snapshot, dict):
        raise engine_adapter.SnapshotError("the replica export lacks incarnation, generation or snapshot")
    return incarnation, generation, snapshot
