"""Machines the kubelet cannot handle (more than 8 NUMA nodes) still admit and align pods correctly."""

from __future__ import annotations

import pytest

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.topology import synthetic
from shared.resources import ContainerResources, PodResources, Resources

GiB = 1 << 30


def engine(numa: int, policy: str) -> builder.NodeEngine:
    config = from_kubelet(
        {
            "featureGates": {"PodLevelResourceManagers": True},
            "cpuManagerPolicy": "static",
            "reservedSystemCPUs": "0",
            "systemReserved": {"memory": "1Gi"},
            "memoryManagerPolicy": "Static",
            "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}}],
            "topologyManagerPolicy": policy,
            "topologyManagerScope": "pod",
            "topologyManagerPolicyOptions": {"max-allowable-numa-nodes": str(numa)},
        }
    )
    return builder.build(synthetic.regular(numa), config)


def pod(uid: str, cpus: int) -> PodResources:
    budget = Resources({"cpu": cpus * 1000, "memory": 4 * GiB}, {"cpu": cpus * 1000, "memory": 4 * GiB})
    return PodResources(uid, "default", uid, (ContainerResources("app", "app"),), pod=budget)


@pytest.mark.parametrize("policy", ["single-numa-node", "best-effort", "restricted"])
def test_a_64_numa_machine_packs_pods_onto_single_numa_nodes(policy: str) -> None:
    node = engine(64, policy)
    numa_of = {}
    for i in range(20):
        decision = node.admit(pod(f"p{i}", 8))
        assert decision.admitted and decision.view is not None
        assert decision.view.numa_affinity is not None and len(decision.view.numa_affinity) == 1
        numa_of[f"p{i}"] = decision.view.numa_affinity[0]
    # 16 CPUs per NUMA node, CPU 0 reserved: node 0 holds one 8-CPU pod, every other node two
    assert sorted(numa_of.values())[:3] == [0, 1, 1]
    assert node.check() == []


def test_a_pod_wider_than_one_numa_node_gets_a_compact_pair_on_a_64_numa_machine() -> None:
    node = engine(64, "best-effort")
    decision = node.admit(pod("wide", 24))
    assert decision.admitted and decision.view is not None
    assert decision.view.numa_affinity is not None and len(decision.view.numa_affinity) == 2
    assert node.check() == []
