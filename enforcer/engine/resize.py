"""In-place resize feasibility and application (in-place-resize.md R4.2, KEP-5554, KEP-5419).

``decide`` answers Accepted / Deferred / Infeasible with the kubelet's meaning:
Infeasible when the request can never be met on this node (capacity, or a rule
the node's policies cannot honour), Deferred when it fits the node but not what
is free now.  ``compatibility: kubelet`` reproduces the v1.36 answers exactly
(every resize of a Guaranteed pod under the static CPU or Static memory policy
is Infeasible); ``extended`` (the default) lets the managers resize exclusive
CPUs and memory when they implement ``resize`` for that pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from enforcer.engine import fit
from shared.resources import CPU, MEMORY, PodResources

if TYPE_CHECKING:
    from enforcer.engine.node import EngineState, NodeEngine, PodRecord

REASON_INFEASIBLE = "Infeasible"
REASON_DEFERRED = "Deferred"


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


def decide(engine: NodeEngine, record: PodRecord, desired: PodResources) -> Verdict:
    cpu_static, memory_static = _manages_exclusively(engine, record.pod)
    extended = engine.config.compatibility == "extended"
    if not extended or not hasattr(engine.cpu_policy, "resize"):
        if cpu_static:
            return Verdict(
                "Infeasible",
                REASON_INFEASIBLE,
                'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"',
            )
    if not extended or not hasattr(engine.memory_policy, "resize"):
        if memory_static:
            return Verdict(
                "Infeasible",
                REASON_INFEASIBLE,
                'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"',
            )
    requested = engine.requests_of(desired)
    # capacity first: more than the node can ever offer is Infeasible and never retried
    for name in (MEMORY, CPU):
        amount = requested.get(name, 0)
        if amount > engine.allocatable.get(name, 0):
            short = fit.Shortfall(name, amount, 0, engine.allocatable.get(name, 0))
            return Verdict("Infeasible", REASON_INFEASIBLE, short.capacity_message())
    if extended and (cpu_static or memory_static):
        for policy, managed in ((engine.cpu_policy, cpu_static), (engine.memory_policy, memory_static)):
            if managed:
                problem = policy.resize_infeasibility(engine.state_of(policy), record.pod, desired)
                if problem is not None:
                    return Verdict("Infeasible", problem[0], problem[1])
    shortfalls = fit.shortfalls(requested, engine.used_requests(excluding=desired.uid), engine.allocatable)
    if shortfalls:
        return Verdict("Deferred", REASON_DEFERRED, shortfalls[0].message())
    return Verdict("Accepted")


def apply(engine: NodeEngine, work: EngineState, record: PodRecord, desired: PodResources) -> None:
    """Change the managers' state for an Accepted resize; raises AdmissionRejected when the
    node cannot place it after all (the caller turns that into Deferred or Infeasible)."""
    cpu_static, memory_static = _manages_exclusively(engine, record.pod)
    if engine.config.compatibility != "extended":
        return
    policies: list[tuple[Any, Any]] = []
    if cpu_static:
        policies.append((engine.cpu_policy, work.cpu))
    if memory_static:
        policies.append((engine.memory_policy, work.memory))
    for policy, state in policies:
        policy.resize(state, record.pod, desired, record.hint)
