"""Which pods depend on numaguard: only those that need exclusive resources.

The kubelet's resource managers pin only QoS Guaranteed pods: exclusive CPUs
(static CPU manager, whole CPUs) and NUMA-pinned memory (Static memory
manager) are never given to a Burstable or BestEffort pod, which runs in the
shared pool.  So only a Guaranteed pod can lose anything when its node's
enforcer cannot be asked; every other pod is allowed through an enforcer
outage (:func:`webhook.decision.enforcer_unavailable`).  A pod whose resources
do not even parse counts as needing them: the node judges it when it answers.
Pure; evaluated only on the failure paths, never on a healthy binding.
"""

from __future__ import annotations

from shared import pod as pod_model
from shared import qos
from shared.errors import DomainError, PodModelError
from webhook import pod_cache


def needs_exclusive_resources(pod: pod_model.Pod) -> bool:
    try:
        return qos.qos_class(pod.to_resources()) == "Guaranteed"
    except DomainError:
        return True


def seen_pod_needs_exclusive_resources(seen: pod_cache.SeenPod) -> bool:
    try:
        return needs_exclusive_resources(pod_model.parse_pod(seen.obj, copy_raw=False))
    except PodModelError:
        return True
