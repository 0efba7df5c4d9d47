"""The engine's state as plain values: the managers' states, the admitted pods and the waiting resizes.

One :class:`EngineState` is the whole node; a decision works on :meth:`EngineState.copy` and the copy
replaces the state only when the decision succeeded, so a refused pod or resize leaves no trace.

A copy costs what one decision can change, not what the node holds (see :meth:`EngineState.copy`):
per-pod values are shared between copies and replaced, never mutated, once they are in a state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from enforcer.counters import AllocationCounters
from enforcer.cpumanager.state import CPUState, CPUStateView
from enforcer.memorymanager.state import MemoryState, MemoryStateView
from enforcer.topology.hints import TopologyHint
from shared.resources import PodResources


@dataclass
class PodRecord:
    """An admitted pod: what it asked for and which hint it was admitted with."""

    pod: PodResources
    spec_hash: str
    hint: TopologyHint | None
    sequence: int


@dataclass
class PendingResize:
    """A Deferred resize waiting for room (kubelet ``PodResizePending``/``Deferred``)."""

    desired: PodResources
    reason: str
    message: str
    sequence: int


class EngineStateView(Protocol):
    """The engine's state as every reader outside the engine sees it (``NodeEngine.state``).

    Only the engine changes its state, and only by replacing it with a decision's working copy; a
    reader that could write into the maps would change an allocation no decision made and no journal
    recorded. So the service, the NRT exporter, the replica export and persistence get this read-only
    shape (``Mapping`` maps, the managers' own views), and mypy refuses a write through it.
    The counters are the one mutable object handed out: readers copy them (``AllocationCounters`` is a
    bag of ``Counter`` maps the metrics exporter reads as a whole).
    """

    @property
    def cpu(self) -> CPUStateView: ...

    @property
    def memory(self) -> MemoryStateView: ...

    @property
    def pods(self) -> Mapping[str, PodRecord]: ...

    @property
    def pending_resizes(self) -> Mapping[str, PendingResize]: ...

    @property
    def infeasible_resizes(self) -> Mapping[str, PendingResize]: ...

    @property
    def counters(self) -> AllocationCounters: ...

    @property
    def sequence(self) -> int: ...

    @property
    def used(self) -> Mapping[str, int]: ...


@dataclass
class EngineState:
    """The whole engine state: one plain value, copied per decision and serialised as one document."""

    cpu: CPUState
    memory: MemoryState
    pods: dict[str, PodRecord] = field(default_factory=dict)
    pending_resizes: dict[str, PendingResize] = field(default_factory=dict)
    infeasible_resizes: dict[str, PendingResize] = field(default_factory=dict)
    counters: AllocationCounters = field(default_factory=AllocationCounters)
    sequence: int = 0
    used: dict[str, int] = field(default_factory=dict)
    """Derived, never persisted: the sum of every admitted pod's effective requests, kept as a running
    total by ``NodeEngine`` on admit, release and resize (so a fit check does not sum every pod held),
    rebuilt from the records on restore and compared with a fresh sum by ``NodeEngine.check``."""

    def copy(self) -> EngineState:
        """The copy a decision works on, costing what a decision can change rather than what the node holds.

        Why copy at all: a decision runs the policies on the copy and the copy replaces the state only
        when the whole pod (or resize) succeeded, so refusal is free and leaves no trace. An undo log
        would need every policy mutation instrumented, and persistent maps would slow every lookup.
        Instead the maps are copied one level deep: the outer maps (pod UID -> value) are shallow
        ``dict`` copies, a pointer copy in C that is a few microseconds at hundreds of pods, while the
        per-pod values are shared, which is safe because nothing mutates them in place:

        - a ``PodRecord`` is replaced whenever its pod changes (persistence finds the pods a change
          touched by record identity, so this is a rule it rests on, too); a ``PendingResize`` is
          updated only on the committed state, never through a decision's copy;
        - the managers' per-pod maps are copy-on-write (see :meth:`CPUState.copy` and
          :meth:`MemoryState.copy`): a write builds the pod's new map and leaves the shared one alone.

        The counters are copied map by map (:meth:`AllocationCounters.copy`; their keys and values are
        immutable, their size does not grow with pods held): ``copy.deepcopy`` of them was half the cost of a copy.
        """
        return EngineState(
            cpu=self.cpu.copy(),
            memory=self.memory.copy(),
            pods=dict(self.pods),
            pending_resizes=dict(self.pending_resizes),
            infeasible_resizes=dict(self.infeasible_resizes),
            counters=self.counters.copy(),
            sequence=self.sequence,
            used=dict(self.used),
        )
