"""``podSharedPool`` names the pool whichever manager made it (plan contract item 5).

A KEP-5526 pod (pod budget 8 CPUs / 8 GiB, app container 6 CPUs / 7 GiB, a sidecar without resources)
under every combination of the CPU and memory policies, pod scope: the CPU Manager makes a pool from
its bubble, the Memory Manager from the pod's memory budget; the part a manager did not make is null.
"""

from __future__ import annotations

from typing import Any

import pytest

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.topology import synthetic
from shared.resources import ContainerResources, PodResources, Resources

GiB = 1 << 30


def _pod() -> PodResources:
    def guaranteed(cpus: int, gib: int) -> Resources:
        amounts = {"cpu": cpus * 1000, "memory": gib * GiB}
        return Resources(dict(amounts), dict(amounts))

    return PodResources(
        "ml",
        "team",
        "ml",
        (ContainerResources("sidecar", "sidecar"), ContainerResources("app", "app", guaranteed(6, 7))),
        pod=guaranteed(8, 8),
    )


def _node(cpu_policy: str, memory_policy: str) -> Any:
    raw: dict[str, Any] = {
        "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
        "cpuManagerPolicy": cpu_policy,
        "topologyManagerPolicy": "single-numa-node",
        "topologyManagerScope": "pod",
    }
    if cpu_policy == "static":
        raw["reservedSystemCPUs"] = "0"
    if memory_policy == "Static":
        raw["memoryManagerPolicy"] = "Static"
        raw["systemReserved"] = {"memory": "1Gi"}
        raw["reservedMemory"] = [{"numaNode": 0, "limits": {"memory": "1124Mi"}}]
    return builder.build(synthetic.regular(2), from_kubelet(raw))


@pytest.mark.parametrize(
    ("cpu_policy", "memory_policy", "pool", "sidecar"),
    [
        ("none", "Static", {"cpus": None, "memoryNUMANodes": [0]}, ("node_shared", "pod_shared")),
        ("static", "Static", {"cpus": "4,20", "memoryNUMANodes": [0]}, ("pod_shared", "pod_shared")),
        ("static", "None", {"cpus": "4,20", "memoryNUMANodes": None}, ("pod_shared", "node_shared")),
        ("none", "None", None, ("node_shared", "node_shared")),
    ],
)
def test_pod_shared_pool_is_reported_for_the_manager_that_made_it(
    cpu_policy: str, memory_policy: str, pool: dict[str, Any] | None, sidecar: tuple[str, str]
) -> None:
    node = _node(cpu_policy, memory_policy)
    decision = node.admit(_pod())
    assert decision.admitted, decision.message
    view = decision.view
    assert view is not None
    shared = view.pod_shared_pool()
    assert (None if shared is None else shared.model_dump(by_alias=True)) == pool
    by_name = {c.name: c for c in view.containers}
    assert (by_name["sidecar"].assignment, by_name["sidecar"].memory_assignment) == sidecar
