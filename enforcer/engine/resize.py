"""In-place resize feasibility and application (in-place-resize.md R4.2, KEP-5554, KEP-5419).

``decide`` answers Accepted / Deferred / Infeasible with the kubelet's meaning: Infeasible when the
request can never be met on this node (capacity, or a rule the node's policies cannot honour), Deferred
when it fits the node but not what is free now.

``compatibility: kubelet`` reproduces the v1.36 answers exactly: every resize of a Guaranteed pod under
the static CPU or Static memory policy is Infeasible, and the managers' state never changes.
``extended`` (the default) lets the managers resize exclusive CPUs, KEP-5526 pod bubbles and memory
blocks (:mod:`enforcer.cpumanager.resize`, :mod:`enforcer.memorymanager.resize`).  The order is:

1. node capacity (Infeasible, never retried);
2. each manager's permanent rules (Infeasible with the manager's reason, e.g. ``prohibitedCPUAllocationError``);
3. the kubelet's resource fit against every other pod (Deferred);
4. a trial placement on copies of the managers' states: what is not free now is Deferred.

``apply`` repeats the placement on the engine's working copy, so an Accepted resize changes every
manager or none (the engine swaps the copy in only on success).  This module never changes the
committed state itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from enforcer.cpumanager.resize import ResizeAlignment
from enforcer.engine import fit
from enforcer.errors import AdmissionRejected
from shared.resources import CPU, MEMORY, PodResources

if TYPE_CHECKING:
    from enforcer.engine.node import EngineState, NodeEngine, PodRecord

REASON_INFEASIBLE = "Infeasible"
REASON_DEFERRED = "Deferred"

CPU_STATIC_INFEASIBLE = 'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"'
MEMORY_STATIC_INFEASIBLE = 'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"'


@dataclass(frozen=True)
class Verdict:
    status: Literal["Accepted", "Deferred", "Infeasible"]
    reason: str | None = None
    message: str | None = None


def _manages_exclusively(engine: NodeEngine, pod: PodResources) -> tuple[bool, bool]:
    """Whether the static CPU / Static memory policies hold resources for this pod."""
    guaranteed = pod.qos_class == "Guaranteed"
    return (
        guaranteed and engine.config.cpu_manager_policy == "static",
        guaranteed and engine.config.memory_manager_policy == "Static",
    )


def alignment_of(engine: NodeEngine) -> ResizeAlignment:
    return ResizeAlignment(engine.config.topology_manager_policy, engine.config.topology_manager_scope)


def _kubelet_refusal(engine: NodeEngine, record: PodRecord) -> Verdict | None:
    """The v1.36 rule (R4.2): Guaranteed pods under the static managers are never resized."""
    cpu_static, memory_static = _manages_exclusively(engine, record.pod)
    extended = engine.config.compatibility == "extended"
    if cpu_static and (not extended or not hasattr(engine.cpu_policy, "resize")):
        return Verdict("Infeasible", REASON_INFEASIBLE, CPU_STATIC_INFEASIBLE)
    if memory_static and (not extended or not hasattr(engine.memory_policy, "resize")):
        return Verdict("Infeasible", REASON_INFEASIBLE, MEMORY_STATIC_INFEASIBLE)
    return None


def decide(engine: NodeEngine, record: PodRecord, desired: PodResources) -> Verdict:
    refusal = _kubelet_refusal(engine, record)
    if refusal is not None:
        return refusal
    requested = engine.requests_of(desired)
    # capacity first: more than the node can ever offer is Infeasible and never retried
    for name in (MEMORY, CPU):
        amount = requested.get(name, 0)
        if amount > engine.allocatable.get(name, 0):
            short = fit.Shortfall(name, amount, 0, engine.allocatable.get(name, 0))
            return Verdict("Infeasible", REASON_INFEASIBLE, short.capacity_message())
    cpu_static, memory_static = _manages_exclusively(engine, record.pod)
    alignment = alignment_of(engine)
    if engine.config.compatibility == "extended":
        if cpu_static:
            problem = engine.cpu_policy.resize_infeasibility(engine.state.cpu, record.pod, desired, alignment)
            if problem is not None:
                return Verdict("Infeasible", problem[0], problem[1])
        if memory_static:
            problem = engine.memory_policy.resize_infeasibility(engine.state.memory, record.pod, desired)
            if problem is not None:
                return Verdict("Infeasible", problem[0], problem[1])
    shortfalls = fit.shortfalls(requested, engine.used_requests(excluding=desired.uid), engine.allocatable)
    if shortfalls:
        return Verdict("Deferred", REASON_DEFERRED, shortfalls[0].message())
    if engine.config.compatibility == "extended" and (cpu_static or memory_static):
        try:
            _resize_managers(engine, engine.state.cpu.copy(), engine.state.memory.copy(), record, desired)
        except AdmissionRejected as err:
            status: Literal["Deferred", "Infeasible"] = "Deferred" if err.reason == REASON_DEFERRED else "Infeasible"
            return Verdict(status, err.reason, err.message)
    return Verdict("Accepted")


def _resize_managers(
    engine: NodeEngine, cpu_state: Any, memory_state: Any, record: PodRecord, desired: PodResources
) -> None:
    """CPU manager first, then memory manager (the kubelet's provider order)."""
    cpu_static, memory_static = _manages_exclusively(engine, record.pod)
    if cpu_static:
        engine.cpu_policy.resize(cpu_state, record.pod, desired, alignment_of(engine))
    if memory_static:
        engine.memory_policy.resize(memory_state, record.pod, desired)


def apply(engine: NodeEngine, work: EngineState, record: PodRecord, desired: PodResources) -> None:
    """Change the managers' state in ``work`` for an Accepted resize.

    ``decide`` placed the same resize on copies of the same state, so this succeeds; should it not, the
    AdmissionRejected it raises leaves ``work`` uncommitted (the caller answers Infeasible).
    """
    if engine.config.compatibility != "extended":
        return
    _resize_managers(engine, work.cpu, work.memory, record, desired)
