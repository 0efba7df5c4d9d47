"""Which of the kubelet's admission counters one admission decision moves, as the kubelet moves them.

The engine is pure and counts only the seed's ``resource_manager_*`` series; the kubelet's other
admission series are derived here, in the service, from what a decision exposes: whether it
admitted, the kubelet reason it refused with, the engine's per-resource error counters
(``resource_manager_allocation_errors_total``, which the kubelet increments in the very ``defer``
that increments the managers' pinning error counters) and the allocation the pod got.

Where the kubelet increments each (kubernetes/kubernetes, v1.36):

* ``topology_manager_admission_requests_total`` and ``_duration_ms``: ``manager.Admit``
  (``pkg/kubelet/cm/topologymanager/topology_manager.go``), once per pod the node decides on;
* ``topology_manager_admission_errors_total``: ``podScope.Admit`` / ``containerScope.Admit``
  (``scope_pod.go``, ``scope_container.go``) when the merge refuses (``TopologyAffinityError``) or a
  provider's allocation fails (``SMTAlignmentError``, ``UnexpectedAdmissionError``, the empty pod
  shared pool).  ``OutOf<resource>`` comes from the later predicate admit handler, not from here;
* ``cpu_manager_pinning_requests_total``: ``staticPolicy.Allocate`` per container with exclusive
  CPUs (``guaranteedCPUs > 0``), and in ``AllocatePod`` per container given an exclusive slice;
  ``_errors_total`` in the ``defer`` of both when they fail (``cpumanager/policy_static.go``);
* ``memory_manager_pinning_requests_total``: the Static policy's ``Allocate`` per container of a
  Guaranteed pod, and once per pod in ``AllocatePod``; ``_errors_total`` when they fail
  (``memorymanager/policy_static.go``);
* ``admission_rejections_total{reason}``: ``recordAdmissionRejection`` (``pkg/kubelet/allocation``):
  the reason when it is on the kubelet's allowlist, ``OutOfExtendedResources`` for other
  ``OutOf...`` reasons, ``Other`` for the rest (``SMTAlignmentError`` included).

On a refusal only the container (or pod) that failed is counted as a pinning request: the engine
decides on a copy and does not report how far it got before the failure.  The duration is observed in
fractional milliseconds (the kubelet truncates to whole ones, which would put every decision of this
engine, a fraction of a millisecond, in the first bucket); unit and buckets are the kubelet's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from enforcer.engine.config import NodeConfig
from enforcer.engine.view import PodView
from shared.resources import CPU, MEMORY, PodResources

# pkg/kubelet/allocation ``admissionRejectionReasons``: the entries a numaguard node can give (lifecycle.OutOfCPU,
# OutOfMemory, OutOfEphemeralStorage, OutOfPods, UnexpectedAdmissionError, topologymanager.ErrorTopologyAffinity);
# the allowlist's other entries (AppArmor, taints, eviction, sysctls, node shutdown) are other admit handlers'.
KUBELET_REJECTION_REASONS = frozenset(
    {
        "OutOfcpu",
        "OutOfmemory",
        "OutOfephemeral-storage",
        "OutOfpods",
        "UnexpectedAdmissionError",
        "TopologyAffinityError",
    }
)
INSUFFICIENT_RESOURCE_PREFIX = "OutOf"  # lifecycle.InsufficientResourcePrefix
_EXCLUSIVE = ("node_exclusive", "pod_exclusive")


def rejection_label(reason: str) -> str:
    """``recordAdmissionRejection``'s label for a refusal reason."""
    if reason in KUBELET_REJECTION_REASONS:
        return reason
    if reason.startswith(INSUFFICIENT_RESOURCE_PREFIX):
        return "OutOfExtendedResources"
    return "Other"


@dataclass(frozen=True, slots=True)
class AdmissionCounts:
    """What one decision adds to each kubelet series (zero where the kubelet would not count)."""

    topology_error: bool = False
    cpu_requests: int = 0
    cpu_errors: int = 0
    memory_requests: int = 0
    memory_errors: int = 0
    rejection: str | None = None  # the admission_rejections_total label, None when admitted


def count(
    config: NodeConfig,
    pod: PodResources,
    *,
    admitted: bool,
    reason: str | None,
    view: PodView | None,
    errors_before: Mapping[tuple[str, str], int],
    errors_after: Mapping[tuple[str, str], int],
) -> AdmissionCounts:
    """The increments for one new admission decision (not for an idempotent replay)."""
    pod_level = (
        config.topology_manager_scope == "pod"
        and pod.pod_level_resources_set
        and config.gates.pod_level_managers_enabled
    )
    cpu_static = config.cpu_manager_policy == "static"
    memory_static = config.memory_manager_policy == "Static"
    cpu_failed = _grew(errors_before, errors_after, CPU)
    memory_failed = _grew(errors_before, errors_after, MEMORY)
    if admitted:
        containers = view.containers if view is not None else ()
        cpu_requests = sum(1 for c in containers if c.assignment in _EXCLUSIVE) if cpu_static else 0
        memory_requests = 0
        if memory_static and pod.qos_class == "Guaranteed":
            # AllocatePod counts the pod once; Allocate counts each container it pins
            memory_requests = 1 if pod_level else sum(1 for c in containers if c.memory_assignment in _EXCLUSIVE)
        return AdmissionCounts(cpu_requests=cpu_requests, memory_requests=memory_requests)
    why = reason or "UnexpectedAdmissionError"
    return AdmissionCounts(
        topology_error=not why.startswith(INSUFFICIENT_RESOURCE_PREFIX),
        cpu_requests=cpu_failed if cpu_static and not pod_level else 0,
        cpu_errors=cpu_failed if cpu_static else 0,
        memory_requests=memory_failed if memory_static else 0,
        memory_errors=memory_failed if memory_static else 0,
        rejection=rejection_label(why),
    )


def _grew(before: Mapping[tuple[str, str], int], after: Mapping[tuple[str, str], int], resource: str) -> int:
    return sum(value - before.get(key, 0) for key, value in after.items() if key[0] == resource)
