"""kubernetes#123816: CPUs an init container leaves for reuse on one NUMA node must not make the Topology
Manager refuse an app container that fits on another node (``extended``), while ``kubelet`` keeps the
kubelet's answer (hints must hold every reusable CPU).

Node: 2 NUMA nodes x 16 CPUs, CPU 0 reserved.  "first" (11 CPUs) leaves 4 free on NUMA node 0; the init
container of "second" (1 CPU) lands there; then its app container asks for ``app_cpus``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.topology import synthetic
from shared.cpuset import CPUSet
from shared.resources import ContainerResources, PodResources, Resources

GiB = 1 << 30
NUMA1 = CPUSet.parse("8-15,24-31")


def _resources(cpus: int) -> Resources:
    amounts = {"cpu": cpus * 1000, "memory": GiB}
    return Resources(dict(amounts), dict(amounts))


@dataclass(frozen=True)
class Case:
    policy: str
    compatibility: str
    app_cpus: int
    admitted: bool
    app_on_numa1: bool = False
    reuses_init_cpu: bool = False


CASES = [
    Case("single-numa-node", "kubelet", 12, admitted=False),
    Case("single-numa-node", "extended", 12, admitted=True, app_on_numa1=True),
    Case("restricted", "kubelet", 12, admitted=False),
    Case("restricted", "extended", 12, admitted=True, app_on_numa1=True),
    # best-effort admits either way; the kubelet spreads the app over both nodes around the init CPU
    Case("best-effort", "kubelet", 12, admitted=True, reuses_init_cpu=True),
    Case("best-effort", "extended", 12, admitted=True, app_on_numa1=True),
    # room beside the init CPU: both modes reuse it on NUMA node 0, as the kubelet does
    Case("single-numa-node", "kubelet", 3, admitted=True, reuses_init_cpu=True),
    Case("single-numa-node", "extended", 3, admitted=True, reuses_init_cpu=True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.policy}-{c.compatibility}-{c.app_cpus}cpus")
def test_init_container_cpus_on_another_numa_node(case: Case) -> None:
    config = from_kubelet(
        {
            "cpuManagerPolicy": "static",
            "reservedSystemCPUs": "0",
            "topologyManagerPolicy": case.policy,
            "topologyManagerScope": "container",
        },
        compatibility=case.compatibility,
    )
    node = builder.build(synthetic.regular(2), config)
    first = PodResources("first", "team", "first", (ContainerResources("app", "app", _resources(11)),))
    assert node.admit(first).admitted
    second = PodResources(
        "second",
        "team",
        "second",
        (
            ContainerResources("init", "init", _resources(1)),
            ContainerResources("app", "app", _resources(case.app_cpus)),
        ),
    )
    decision = node.admit(second)
    assert decision.admitted == case.admitted, decision.message
    if not case.admitted:
        assert decision.reason == "TopologyAffinityError"
        return
    init_cpus = node.cpu_policy.container_cpus(node.state.cpu, "second", "init")
    app_cpus = node.cpu_policy.container_cpus(node.state.cpu, "second", "app")
    assert init_cpus is not None and app_cpus is not None and len(app_cpus) == case.app_cpus
    assert (app_cpus <= NUMA1) == case.app_on_numa1
    assert bool(init_cpus & app_cpus) == case.reuses_init_cpu
    assert node.check() == []
