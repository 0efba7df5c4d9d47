"""Builders shared by the resize tests: machines, engines from kubelet fields, pods from plain values.

Test code only; product code never imports it.  Pods are built as the engine receives them (limits
default to requests, so ``cpu="2"`` alone is a Guaranteed-shaped container).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.engine.node import NodeEngine
from enforcer.topology import machine
from shared.cpuset import CPUSet
from shared.resources import ContainerKind, ContainerResources, PodResources, Resources, resources_from_maps

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
GiB = 1024**3

PLR_GATES = {"PodLevelResources": True, "PodLevelResourceManagers": True}


@functools.cache
def dual_socket_ht_32() -> machine.CPUTopology:
    """2 sockets = 2 NUMA nodes x 8 cores x 2 threads; NUMA 0 = CPUs 0-7,16-23; siblings c and c+16."""
    return machine.load(SCENARIOS / "dual-socket-ht-32.json")


@functools.cache
def four_numa_16() -> machine.CPUTopology:
    """4 NUMA nodes (one socket each) x 4 single-thread cores, 8Gi memory per node."""
    cpus = [machine.CPUInfo(id=i, core=i, socket=i // 4, numa=i // 4, uncore=i // 4) for i in range(16)]
    return machine.CPUTopology(cpus, [machine.NUMANode(n, {"memory": 8 * GiB}) for n in range(4)])


def kubelet(
    *,
    topology_policy: str = "single-numa-node",
    scope: str = "container",
    memory: bool = False,
    plr: bool = False,
    reserved: str = "0,16",
    options: Mapping[str, str] | None = None,
    cpu_policy: str = "static",
) -> dict[str, Any]:
    """KubeletConfiguration fields for a static CPU manager node (and Static memory when ``memory``)."""
    raw: dict[str, Any] = {
        "cpuManagerPolicy": cpu_policy,
        "reservedSystemCPUs": reserved,
        "topologyManagerPolicy": topology_policy,
        "topologyManagerScope": scope,
    }
    if options:
        raw["cpuManagerPolicyOptions"] = dict(options)
        if "align-by-socket" in options or "distribute-cpus-across-cores" in options:
            raw["featureGates"] = {"CPUManagerPolicyAlphaOptions": True}
    if memory:
        raw["memoryManagerPolicy"] = "Static"
        raw["systemReserved"] = {"memory": "1Gi"}
        raw["reservedMemory"] = [{"numaNode": 0, "limits": {"memory": "1124Mi"}}]
    if plr:
        raw["featureGates"] = {**raw.get("featureGates", {}), **PLR_GATES}
    return raw


def engine(
    topology: machine.CPUTopology | None = None, *, compatibility: str = "extended", **fields: Any
) -> NodeEngine:
    config = from_kubelet(kubelet(**fields), compatibility=compatibility)
    return builder.build(topology or dual_socket_ht_32(), config)


def container(
    name: str,
    cpu: str | None = None,
    memory: str | None = "1Gi",
    *,
    kind: ContainerKind = "app",
    cpu_limit: str | None = None,
    memory_limit: str | None = None,
) -> ContainerResources:
    requests: dict[str, object] = {}
    limits: dict[str, object] = {}
    if cpu is not None:
        requests["cpu"] = cpu
        limits["cpu"] = cpu_limit or cpu
    if memory is not None:
        requests["memory"] = memory
        limits["memory"] = memory_limit or memory
    return ContainerResources(name, kind, resources_from_maps(requests, limits, field=name))


def bare(name: str, *, kind: ContainerKind = "app") -> ContainerResources:
    """A container without resources (a pod shared pool member under pod-level resources)."""
    return ContainerResources(name, kind, Resources())


def pod(
    name: str,
    *containers: ContainerResources,
    pod_cpu: str | None = None,
    pod_memory: str | None = None,
    priority: int = 0,
    namespace: str = "default",
) -> PodResources:
    level = None
    if pod_cpu is not None or pod_memory is not None:
        values: dict[str, object] = {}
        if pod_cpu is not None:
            values["cpu"] = pod_cpu
        if pod_memory is not None:
            values["memory"] = pod_memory
        level = resources_from_maps(values, values, field="pod")
    return PodResources(
        uid=f"{namespace}/{name}",
        namespace=namespace,
        name=name,
        containers=tuple(containers),
        pod=level,
        priority=priority,
    )


def single(name: str, cpu: str, memory: str = "1Gi", **kw: Any) -> PodResources:
    """A one-container pod named ``name`` whose container is ``c``."""
    return pod(name, container("c", cpu, memory), **kw)


def cpus_of(engine: NodeEngine, pod_name: str, container_name: str = "c") -> CPUSet:
    cpus = engine.state.cpu.container_cpus(f"default/{pod_name}", container_name)
    assert cpus is not None
    return cpus


def exclusive_owners(engine: NodeEngine) -> dict[int, set[str]]:
    """CPU -> pods holding it outside the shared pool (entries and bubbles)."""
    owners: dict[int, set[str]] = {}
    state = engine.state.cpu
    for uid in state.pod_uids():
        for cpu in state.pod_footprint(uid):
            owners.setdefault(cpu, set()).add(uid)
    return owners


def assert_consistent(engine: NodeEngine) -> None:
    """The engine's own checks, plus: no CPU in two pods, and the pools partition the machine."""
    assert engine.check() == []
    shared_twice = {cpu: uids for cpu, uids in exclusive_owners(engine).items() if len(uids) > 1}
    assert shared_twice == {}
    state = engine.state.cpu
    assigned = state.assigned_cpus()
    assert not assigned & state.default
    assert (assigned | state.default) == engine.topology.all_cpus
