"""In-place resize feasibility and application (in-place-resize.md R4.2, KEP-5554, KEP-5419).

``decide`` answers Accepted / Deferred / Infeasible with the kubelet's meaning: Infeasible when the
request can never be met on this node (capacity, or a rule the node's policies cannot honour), Deferred
when it fits the node but not what is free now.

``compatibility: kubelet`` reproduces the v1.36 answers exactly (``guaranteedPodResourceResizeRequired``,
R4.2): a Guaranteed pod's resize is Infeasible under the static CPU policy when it changes the CPU request
of a container or restartable sidecar, and under the Static memory policy when it changes one's memory
request (container values only: a memory-only resize on a static-CPU node, or a pod-level-only change, is
decided by the normal fit); a pod the pod-level resource managers hold is never resized (R5.4).  The
managers' state never changes.
``extended`` (the default) lets the managers resize exclusive CPUs, KEP-5526 pod bubbles and memory
blocks (:mod:`enforcer.cpumanager.resize`, :mod:`enforcer.memorymanager.resize`).  The order is:

1. node capacity (Infeasible, never retried);
2. each manager's permanent rules (Infeasible with the manager's reason, e.g. ``prohibitedCPUAllocationError``);
3. the kubelet's resource fit against every other pod (Deferred);
4. the placement, on a copy of the engine state: what is not free now is Deferred.

Each manager plans the resize once (steps 2 and 4 share the plan); the trial placement of step 4 is
made on a copy of the engine state, and an Accepted verdict hands that copy back for the engine to
commit, so an Accepted resize changes every manager or none.  This module never changes the
committed state itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from enforcer.cpumanager.policy import CPUPolicy, CPUResizePlan, ResizeAlignment
from enforcer.engine import fit
from enforcer.engine.config import NodeConfig
from enforcer.engine.records import EngineState
from enforcer.errors import AdmissionRejected
from enforcer.memorymanager.policy import MemoryPolicy, MemoryResizePlan
from shared import pod_level
from shared.contract import ResizeOutcome
from shared.resources import CPU, MEMORY, PodResources

REASON_INFEASIBLE = "Infeasible"
REASON_DEFERRED = "Deferred"

CPU_STATIC_INFEASIBLE = 'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"'
MEMORY_STATIC_INFEASIBLE = 'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"'


@dataclass(frozen=True)
class Verdict:
    """The answer to a resize; when Accepted, ``work`` is the engine state with the resize applied."""

    status: ResizeOutcome
    reason: str | None = None
    message: str | None = None
    work: EngineState | None = None


class ResizeSubject(Protocol):
    """What a resize decision reads of the engine (the committed state is never changed here)."""

    @property
    def config(self) -> NodeConfig: ...

    @property
    def allocatable(self) -> Mapping[str, int]: ...

    @property
    def cpu_policy(self) -> CPUPolicy: ...

    @property
    def memory_policy(self) -> MemoryPolicy: ...

    def requests_of(self, pod: PodResources) -> dict[str, int]: ...

    def used_requests(self, *, excluding: str | None = None) -> dict[str, int]: ...


def _manages_exclusively(config: NodeConfig, pod: PodResources) -> tuple[bool, bool]:
    """Whether the static CPU / Static memory policies hold resources for this pod."""
    guaranteed = pod.qos_class == "Guaranteed"
    return (
        guaranteed and config.cpu_manager_policy == "static",
        guaranteed and config.memory_manager_policy == "Static",
    )


def alignment_of(config: NodeConfig) -> ResizeAlignment:
    return ResizeAlignment(config.topology_manager_policy, config.topology_manager_scope)


def container_request_changed(current: PodResources, desired: PodResources, resource: str) -> bool:
    """``guaranteedPodResourceResizeRequired``: a resizable container (app container or restartable sidecar)
    whose ``resource`` request differs from what it was allocated; pod-level values are not compared."""
    allocated = {c.name: c.resources.request(resource) for c in current.containers}
    return any(
        c.resources.request(resource) != allocated.get(c.name, 0) for c in desired.containers if c.kind != "init"
    )


def _kubelet_refusal(engine: ResizeSubject, current: PodResources, desired: PodResources) -> Verdict | None:
    """The v1.36 rules (R4.2, R5.4) wherever no manager resizes: ``kubelet`` mode, or a manager without resizer."""
    cpu_static, memory_static = _manages_exclusively(engine.config, current)
    extended = engine.config.compatibility == "extended"
    cpu_kubelet = cpu_static and (not extended or engine.cpu_policy.resizer is None)
    memory_kubelet = memory_static and (not extended or engine.memory_policy.resizer is None)
    if (cpu_kubelet or memory_kubelet) and pod_level.managers_apply(
        current, managers_enabled=engine.config.gates.pod_level_managers_enabled
    ):
        # R5.4: resizing pods the pod-level resource managers hold is out of scope for the kubelet
        return Verdict(
            "Infeasible", REASON_INFEASIBLE, CPU_STATIC_INFEASIBLE if cpu_kubelet else MEMORY_STATIC_INFEASIBLE
        )
    if cpu_kubelet and container_request_changed(current, desired, CPU):
        return Verdict("Infeasible", REASON_INFEASIBLE, CPU_STATIC_INFEASIBLE)
    if memory_kubelet and container_request_changed(current, desired, MEMORY):
        return Verdict("Infeasible", REASON_INFEASIBLE, MEMORY_STATIC_INFEASIBLE)
    return None


@dataclass(frozen=True)
class _Plans:
    cpu: CPUResizePlan | None = None
    memory: MemoryResizePlan | None = None


def _plan(engine: ResizeSubject, state: EngineState, current: PodResources, desired: PodResources) -> _Plans:
    """Each manager's plan (CPU manager first, the kubelet's provider order); raises when Infeasible."""
    if engine.config.compatibility != "extended":
        return _Plans()
    cpu_static, memory_static = _manages_exclusively(engine.config, current)
    cpu_plan: CPUResizePlan | None = None
    memory_plan: MemoryResizePlan | None = None
    cpu_resizer, memory_resizer = engine.cpu_policy.resizer, engine.memory_policy.resizer
    if cpu_static and cpu_resizer is not None:
        cpu_plan = cpu_resizer.plan_resize(state.cpu, current, desired, alignment_of(engine.config))
    if memory_static and memory_resizer is not None:
        memory_plan = memory_resizer.plan_resize(state.memory, current, desired)
    return _Plans(cpu_plan, memory_plan)


def decide(engine: ResizeSubject, state: EngineState, current: PodResources, desired: PodResources) -> Verdict:
    """Accepted (with the resized working copy of ``state``, the engine's committed state, which is never
    changed here), Deferred or Infeasible, in the order of the module docstring."""
    refusal = _kubelet_refusal(engine, current, desired)
    if refusal is not None:
        return refusal
    requested = engine.requests_of(desired)
    # capacity first: more than the node can ever offer is Infeasible and never retried
    for name in (MEMORY, CPU):
        amount = requested.get(name, 0)
        if amount > engine.allocatable.get(name, 0):
            short = fit.Shortfall(name, amount, 0, engine.allocatable.get(name, 0))
            return Verdict("Infeasible", REASON_INFEASIBLE, short.capacity_message())
    try:
        plans = _plan(engine, state, current, desired)
    except AdmissionRejected as err:
        return Verdict("Infeasible", err.reason, err.message)
    shortfalls = fit.shortfalls(requested, engine.used_requests(excluding=desired.uid), engine.allocatable)
    if shortfalls:
        return Verdict("Deferred", REASON_DEFERRED, shortfalls[0].message())
    work = state.copy()
    try:
        if plans.cpu is not None:
            plans.cpu.apply(work.cpu)
        if plans.memory is not None:
            plans.memory.apply(work.memory)
    except AdmissionRejected as err:
        status: ResizeOutcome = "Deferred" if err.reason == REASON_DEFERRED else "Infeasible"
        return Verdict(status, err.reason, err.message)
    return Verdict("Accepted", work=work)
