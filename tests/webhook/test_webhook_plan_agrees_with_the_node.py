"""The plan's "nodes will refuse the pod" warning and the node's empty-pool rejection are one decision.

Both come from :mod:`shared.pod_level`; this pins that the webhook words exactly the pods the node's
static CPU policy and Static memory policy refuse (KEP-5526 pod scope, §5 V1-V5), for random pods.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.features import FeatureGates
from enforcer.memorymanager import requests as memory_requests
from enforcer.topology import machine
from shared.resources import ContainerKind, ContainerResources, PodResources, Resources
from webhook import plan

GiB = 1 << 30
TOPOLOGY = machine.load(Path(__file__).resolve().parents[1] / "scenarios" / "dual-socket-ht-32.json")
GATES = {"PodLevelResources": True, "PodLevelResourceManagers": True}
ENGINE = builder.build(
    TOPOLOGY,
    from_kubelet(
        {
            "cpuManagerPolicy": "static",
            "reservedSystemCPUs": "0,16",
            "topologyManagerScope": "pod",
            "featureGates": GATES,
        }
    ),
)
REFUSED = "nodes will refuse the pod"


def exact(cpus: int, memory_gib: int) -> Resources:
    values = {"cpu": cpus * 1000, "memory": memory_gib * GiB}
    return Resources(requests=values, limits=dict(values))


@st.composite
def plr_pods(draw: st.DrawFn) -> PodResources:
    """Guaranteed pods with a whole pod budget; containers exclusive (whole CPUs) or sharing the pool."""
    kinds: list[ContainerKind] = [
        *draw(st.lists(st.sampled_from(["init", "sidecar"]), max_size=3)),
        *["app"] * draw(st.integers(1, 3)),
    ]
    containers = []
    for i, kind in enumerate(kinds):
        shared = draw(st.booleans())
        resources = Resources() if shared else exact(draw(st.integers(1, 4)), draw(st.integers(1, 4)))
        containers.append(ContainerResources(f"c{i}", kind, resources))
    budget = exact(draw(st.integers(1, 8)), draw(st.integers(1, 8)))
    return PodResources(uid="default/p", namespace="default", name="p", containers=tuple(containers), pod=budget)


@given(plr_pods())
def test_the_plan_warns_of_exactly_the_pods_the_node_refuses(pod: PodResources) -> None:
    warnings = plan.plan_pod(pod, plan.PlanPolicy(scope="pod")).warnings
    cpu_refused = ENGINE.cpu_policy.validate_pod_scope_resources(pod) is not None  # type: ignore[attr-defined]
    memory_refused = memory_requests.empty_pool_violation(pod, FeatureGates.from_map(GATES)) is not None
    warned_cpu = any(REFUSED in w and ("CPUs" in w or "cpus" in w) for w in warnings)
    warned_memory = any(REFUSED in w and "memory" in w for w in warnings)
    assert (warned_cpu, warned_memory) == (cpu_refused, memory_refused)
