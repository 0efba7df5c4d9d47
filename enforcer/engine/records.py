"""The engine's state as plain values: the managers' states, the admitted pods and the waiting resizes.

One :class:`EngineState` is the whole node; a decision works on :meth:`EngineState.copy` and the copy
replaces the state only when the decision succeeded, so a refused pod or resize leaves no trace.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from enforcer.counters import AllocationCounters
from enforcer.cpumanager.state import CPUState
from enforcer.memorymanager.state import MemoryState
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

    def copy(self) -> EngineState:
        """The copy a decision works on: manager states and counters copied, pod and resize maps shallow.

        The counters are copied map by map (their keys and values are immutable): ``copy.deepcopy`` of
        them was half the cost of a copy, and every admission and release makes one.
        """
        counters = self.counters
        return EngineState(
            cpu=self.cpu.copy(),
            memory=self.memory.copy(),
            pods=dict(self.pods),
            pending_resizes=dict(self.pending_resizes),
            infeasible_resizes=dict(self.infeasible_resizes),
            counters=AllocationCounters(
                allocations=Counter(counters.allocations),
                errors=Counter(counters.errors),
                assignments=Counter(counters.assignments),
            ),
            sequence=self.sequence,
        )
