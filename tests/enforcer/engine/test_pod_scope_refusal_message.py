"""A refused merge says what the kubelet says: ``PodLevelTopologyAffinityError`` for a KEP-5526 pod in pod scope.

The kubelet's pod scope admits a pod with pod-level resources through ``admitUsingPodResources`` when
PodLevelResourceManagers is on; a refused merge there returns ``PodLevelTopologyAffinityError("pod with
pod-level resources failed admission under pod-scope topology manager")`` (reason
``TopologyAffinityError``, message prefixed ``Pod Scope``; the kubelet's e2e test checks that sentence).
Every other refused merge keeps the generic ``TopologyAffinityError`` sentence.

Node: 2 NUMA nodes x 16 CPUs (CPU 0 reserved), single-numa-node; the pod needs 20 CPUs, wider than a node.
"""

from __future__ import annotations

from typing import Any

import pytest

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.topology import synthetic
from shared.resources import ContainerResources, PodResources, Resources

GiB = 1 << 30
POD_LEVEL = "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"
GENERIC = "Resources cannot be allocated with Topology locality"


def _guaranteed(cpus: int) -> Resources:
    amounts = {"cpu": cpus * 1000, "memory": GiB}
    return Resources(dict(amounts), dict(amounts))


def _pod(pod_level: bool) -> PodResources:
    app = ContainerResources("app", "app", _guaranteed(20))
    return PodResources("wide", "team", "wide", (app,), pod=_guaranteed(20) if pod_level else None)


@pytest.mark.parametrize(
    ("scope", "managers", "pod_level", "message"),
    [
        ("pod", True, True, POD_LEVEL),  # admitUsingPodResources
        ("pod", True, False, GENERIC),  # no pod-level resources: admitUsingContainerResources
        ("pod", False, True, None),  # PodLevelResourceManagers off: such a pod is never pinned (admitted)
        ("container", True, True, GENERIC),
        ("container", True, False, GENERIC),
    ],
)
def test_a_refused_merge_uses_the_kubelets_message(
    scope: str, managers: bool, pod_level: bool, message: str | None
) -> None:
    gates: dict[str, Any] = {"PodLevelResources": True, "PodLevelResourceManagers": managers}
    config = from_kubelet(
        {
            "featureGates": gates,
            "cpuManagerPolicy": "static",
            "reservedSystemCPUs": "0",
            "topologyManagerPolicy": "single-numa-node",
            "topologyManagerScope": scope,
        }
    )
    node = builder.build(synthetic.regular(2), config)
    decision = node.admit(_pod(pod_level))
    if message is None:
        assert decision.admitted
        return
    assert (decision.admitted, decision.reason, decision.message) == (False, "TopologyAffinityError", message)
