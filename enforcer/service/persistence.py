"""What one change writes: the engine's document as a base, then per-change patches of the pods it touched.

The durable form of the engine is its snapshot document (``NodeEngine.snapshot``;
``node``, ``topology`` and ``config`` at its top level, which start-up checks).
Writing that whole document per change made a change cost as much as every pod
held.  Here a change costs what it touched:

* **Dirty pods.**  The engine replaces a pod's ``PodRecord`` whenever it changes
  the pod (admission, Accepted resize, restore) and drops it on release, so
  comparing record identities with those last written finds every pod a change
  touched, including the pods whose Deferred resizes a release applied.  Pods
  with a pending or infeasible resize, before or after, count as dirty too
  (their reasons are updated in place).  The caller's own uid is always dirty.
* **Per-pod fragments.**  For the dirty pods only, the entries of every map of
  the document keyed by pod uid (:data:`POD_KEYED`) are rebuilt with the
  managers' own serialisers (``CPUState.to_dict``/``MemoryState.to_dict`` on a
  copy holding just those pods; the pod and resize entries as
  ``NodeEngine.snapshot`` writes them), and become ``set``/``del`` ops.
* **Node-wide values** (the default CPU set, each NUMA node's memory table,
  counters, sequence) are compared with what was written and patched when they
  differ: their size depends on the machine, not on the pods.  The NUMA nodes'
  tables are compared as objects first: a copy of each node's
  ``NUMANodeState`` as last written is kept, and only the nodes that differ
  from their copy (by value) are serialised and compared as JSON (a change
  touches the one or two nodes its pod's memory lives on).  A node equal to
  its copy serialises to the entry written from that copy, so it would get no
  op either way; after a failed write or a rollback the copies are dropped and
  every node is serialised again.

A periodic compaction writes the whole document again (a new base; see
``enforcer.state.journal``) once the journal outgrows ``max(COMPACT_MIN_BYTES,
COMPACT_RATIO x base)``, so start-up replays a bounded journal and the amortised
cost of a change stays flat.  Each compaction also checks that the document the
patches built equals the engine's full snapshot, and logs a mismatch as an error
(counted in :attr:`EnginePersistence.drift`) before the full snapshot replaces
it: a future engine field that the patches miss is repaired at the next
compaction and is visible in the log, and the test suite
(``tests/enforcer/service/test_persistence.py``) compares the two after every
admission, release and resize.

Must not: take the service's lock (the caller holds it for :meth:`prepare` and
:meth:`settle`), or write anything but through the store.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

from enforcer.engine.node import NodeEngine
from enforcer.engine.records import PodRecord
from enforcer.memorymanager.state import NUMANodeState
from enforcer.state import journal

log = logging.getLogger(__name__)

COMPACT_MIN_BYTES: Final = 4 << 20
COMPACT_RATIO: Final = 4

POD_KEYED: Final[tuple[tuple[str, ...], ...]] = (
    ("pods",),
    ("pendingResizes",),
    ("infeasibleResizes",),
    ("cpu", "entries"),
    ("cpu", "podEntries"),
    ("cpu", "originals"),
    ("memory", "entries"),
    ("memory", "podEntries"),
    ("memory", "initContainersReusableMemory"),
)
"""Maps of the engine document keyed by pod uid: only the dirty pods' entries are rewritten."""

MACHINE_STATE: Final = ("memory", "machineState")
NUMA_KEYED: Final[tuple[tuple[str, ...], ...]] = (MACHINE_STATE,)
"""Maps keyed by NUMA node: each entry is compared and rewritten when it changed."""

FIXED: Final = frozenset({"version", "node", "topology", "config", "compatibility"})
"""Top-level fields an engine never changes while it runs (start-up checks them against the machine)."""

_SECTIONS: Final = ("cpu", "memory")


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """A change prepared under the lock, written without it: patches, or the whole document (a compaction)."""

    ops: tuple[dict[str, Any], ...]  # the change as patches (with a whole document: to check it against)
    document: dict[str, Any] | None  # set: write the whole document as a new base
    records: dict[str, PodRecord]  # the pod records as written, for the next change's comparison
    patched: bool = True  # ``ops`` is the change since the document on disk (False: a write after a failure)
    numa: Mapping[int, NUMANodeState] | None = None  # copies of the NUMA nodes as the write leaves them on disk


class EnginePersistence:
    """The durable copy of one engine's document, advanced by patches; see the module docstring."""

    def __init__(self, store: journal.JournaledStore, document: dict[str, Any] | None, engine: NodeEngine | None):
        self.store = store
        self._document = document  # what is on disk (the rollback point)
        self._records: dict[str, PodRecord] = {} if engine is None else dict(engine.state.pods)
        self._pending: frozenset[str] = frozenset() if engine is None else _resizing(engine)
        self._full_next = document is None or store.needs_save
        self._numa: Mapping[int, NUMANodeState] | None = None  # the disk's NUMA nodes as objects (None: unknown)
        self.drift = 0  # compactions whose patched document differed from the full snapshot

    @property
    def document(self) -> dict[str, Any] | None:
        """The document on disk; the engine is rebuilt from it when a write fails."""
        return self._document

    # -- lock held ----------------------------------------------------------------------
    def prepare(self, engine: NodeEngine, touched: Collection[str] = (), *, whole: bool = False) -> PendingWrite:
        """What to write so the disk holds ``engine``'s state (lock held; nothing is written here).

        ``whole``: a compaction whatever the journal's size (start-up)."""
        records = dict(engine.state.pods)
        if self._full_next or self._document is None:
            return PendingWrite((), engine.snapshot(), records, patched=False)
        ops, numa = self._ops(engine, records, touched)
        if whole or self._compaction_due():  # the patch comes along to check the snapshot against (see settle)
            return PendingWrite(tuple(ops), engine.snapshot(), records, numa=numa)
        return PendingWrite(tuple(ops), None, records, numa=numa)

    def settle(self, engine: NodeEngine | None, write: PendingWrite, *, failed: bool) -> None:
        """Record what a finished write made durable (lock held).  After a failure the next write is whole."""
        if failed:
            self._full_next = True
            self._numa = None
            return
        if write.document is not None:
            if self._document is not None and write.patched:
                journal.apply_ops(self._document, write.ops)
                self._check_drift(write.document)
            self._document = write.document
            self._full_next = False
        else:
            assert self._document is not None
            journal.apply_ops(self._document, write.ops)
        self._records = write.records
        self._numa = write.numa
        self._pending = frozenset() if engine is None else _resizing(engine)

    def rolled_back(self, engine: NodeEngine) -> None:
        """The engine was rebuilt from :attr:`document`: compare the next change with it."""
        self._records = dict(engine.state.pods)
        self._numa = None
        self._pending = _resizing(engine)

    # -- writing (lock NOT held) ----------------------------------------------------------
    def write(self, write: PendingWrite) -> None:
        """Raises CheckpointError (CheckpointWriteError on a disk failure)."""
        if write.document is not None:
            self.store.save(write.document)
        else:
            self.store.append(write.ops)

    # -- internals ------------------------------------------------------------------------
    def _compaction_due(self) -> bool:
        return self.store.journal_bytes > max(COMPACT_MIN_BYTES, COMPACT_RATIO * self.store.base_bytes)

    def _ops(
        self, engine: NodeEngine, records: Mapping[str, PodRecord], touched: Collection[str]
    ) -> tuple[list[dict[str, Any]], dict[int, NUMANodeState]]:
        """The change's patches, and copies of the NUMA nodes as they leave the disk (for the next change)."""
        assert self._document is not None
        dirty = set(touched) | self._pending | _resizing(engine)
        dirty.update(uid for uid, record in records.items() if self._records.get(uid) is not record)
        dirty.update(uid for uid in self._records if uid not in records)
        machine = engine.state.memory.machine_state
        known = self._numa
        numa: dict[int, NUMANodeState] = {}
        changed: list[int] | None = None  # None: every node (the disk's nodes as objects are unknown)
        gone: list[str] = []  # nodes on disk the engine no longer has
        if known is None:
            numa = {n: node.copy() for n, node in machine.items()}
        else:
            changed = []
            for n, node in machine.items():
                copy = known.get(n)
                if copy is not None and copy == node:
                    numa[n] = copy
                else:
                    changed.append(n)
                    numa[n] = node.copy()
            gone = [str(n) for n in known if n not in machine]
        fragment = engine.snapshot_of(dirty, numa_nodes=changed)
        ops: list[dict[str, Any]] = []
        order = sorted(dirty)
        for path in POD_KEYED:
            written = _at(self._document, path)
            fresh = _at(fragment, path)
            if not written and not fresh:
                continue  # nothing to set or delete (most maps are empty on most nodes: resizes, bubbles)
            for uid in order:
                value = fresh.get(uid)
                if value is None:
                    if uid in written:
                        ops.append(journal.del_op((*path, uid)))
                elif written.get(uid) != value:
                    ops.append(journal.set_op((*path, uid), value))
        written, fresh = _at(self._document, MACHINE_STATE), _at(fragment, MACHINE_STATE)
        # with the copies known, the nodes not in ``fresh`` are equal to their copy (no op) or gone
        for key in sorted(fresh.keys() | (written.keys() if changed is None else gone)):
            if key not in fresh:
                ops.append(journal.del_op((*MACHINE_STATE, key)))
            elif written.get(key) != fresh[key]:
                ops.append(journal.set_op((*MACHINE_STATE, key), fresh[key]))
        keyed = {p[1] for p in (*POD_KEYED, *NUMA_KEYED) if len(p) == 2}
        for section in _SECTIONS:
            written_section = self._document.get(section, {})
            for key, value in fragment[section].items():
                if key not in keyed and written_section.get(key) != value:
                    ops.append(journal.set_op((section, key), value))
        for key in ("counters", "sequence"):
            if self._document.get(key) != fragment[key]:
                ops.append(journal.set_op((key,), fragment[key]))
        return ops, numa

    def _check_drift(self, snapshot: dict[str, Any]) -> None:
        """Compaction: the patched document must equal the full snapshot (both as ``builder.restore`` reads them)."""
        assert self._document is not None
        if normalised(self._document) != normalised(snapshot):
            self.drift += 1
            written = self._document
            differing = sorted(k for k in snapshot.keys() | written.keys() if snapshot.get(k) != written.get(k))
            log.error(
                "journal drift: the patched state differed from the engine's snapshot; the compaction repaired it",
                extra={"fields": differing[:10]},
            )


def normalised(document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` without empty per-pod maps (the CPU state omits them, patches may leave them empty)."""
    result = dict(document)
    for section in _SECTIONS:
        if isinstance(result.get(section), Mapping):
            result[section] = {k: v for k, v in result[section].items() if v != {} or (section, k) not in _OMITTED}
    return result


_OMITTED: Final = frozenset({("cpu", "entries"), ("cpu", "podEntries"), ("cpu", "originals")})


def _at(document: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any]:
    """The map at ``path`` (empty when a step is missing or not a map).

    The documents are plain ``dict`` values (JSON), so ``type(...) is dict`` is tried before the
    ``Mapping`` check: an ABC ``isinstance`` is a Python-level call, and this runs twenty times per change.
    """
    node: Any = document
    for key in path:
        node = node.get(key) if type(node) is dict or isinstance(node, Mapping) else None
        if node is None:
            return {}
    return node if type(node) is dict or isinstance(node, Mapping) else {}


def _resizing(engine: NodeEngine) -> frozenset[str]:
    state = engine.state
    return frozenset(state.pending_resizes) | frozenset(state.infeasible_resizes)
