"""Builders shared by the CPU policy tests: fixture topologies, pods, states and hints from plain data.

Test code only; product code never imports it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from enforcer.cpumanager.policy_static import StaticPolicy
from enforcer.cpumanager.state import CPUState
from enforcer.features import FeatureGates
from enforcer.topology import machine
from enforcer.topology.hints import TopologyHint, mask_of
from shared.cpuset import CPUSet
from shared.resources import ContainerKind, ContainerResources, PodResources, resources_from_maps

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
KUBELET_CASES = FIXTURES / "kubelet" / "static_policy_cases.json"
KUBELET_TOPOLOGIES = FIXTURES / "kubelet" / "static_policy_topologies.json"
DUAL_SOCKET_HT_32 = FIXTURES / "cpumanager" / "dual-socket-ht-32.json"

PLR_GATES = FeatureGates(pod_level_resources=True, pod_level_resource_managers=True)


@functools.cache
def kubelet_topology(name: str) -> machine.CPUTopology:
    """A kubelet unit-test machine (``topoDualSocketHT``...) by its upstream fixture name."""
    docs = json.loads(KUBELET_TOPOLOGIES.read_text())
    return machine.from_document(docs[name])


@functools.cache
def dual_socket_ht_32() -> machine.CPUTopology:
    """The seed scenarios' node: 2 sockets x 8 cores x 2 threads, NUMA = socket, siblings c and c+16."""
    return machine.load(DUAL_SOCKET_HT_32)


def synthetic_topology(*, numa_nodes: int, cores_per_numa: int, threads: int = 1) -> machine.CPUTopology:
    """NUMA = socket; CPU ids numbered core-major on the first thread, siblings offset by the core count."""
    cores = numa_nodes * cores_per_numa
    cpus = []
    for thread in range(threads):
        for core in range(cores):
            numa = core // cores_per_numa
            cpus.append(machine.CPUInfo(id=thread * cores + core, core=core, socket=numa, numa=numa, uncore=numa))
    return machine.CPUTopology(cpus, [machine.NUMANode(n) for n in range(numa_nodes)])


def container(
    name: str,
    kind: ContainerKind = "app",
    *,
    cpu: str | None = None,
    memory: str | None = None,
    cpu_limit: str | None = None,
    memory_limit: str | None = None,
) -> ContainerResources:
    """A container; limits default to the requests (what API defaulting does for Guaranteed shapes)."""
    requests: dict[str, object] = {}
    limits: dict[str, object] = {}
    if cpu is not None:
        requests["cpu"] = cpu
        limits["cpu"] = cpu if cpu_limit is None else cpu_limit
    elif cpu_limit is not None:
        limits["cpu"] = cpu_limit
    if memory is not None:
        requests["memory"] = memory
        limits["memory"] = memory if memory_limit is None else memory_limit
    elif memory_limit is not None:
        limits["memory"] = memory_limit
    return ContainerResources(name, kind, resources_from_maps(requests, limits, field=name))


def pod(
    uid: str,
    *containers: ContainerResources,
    cpu: str | None = None,
    memory: str | None = None,
    cpu_limit: str | None = None,
) -> PodResources:
    """A pod; ``cpu``/``memory`` set ``spec.resources`` (pod-level resources, requests == limits by default)."""
    pod_resources = None
    if cpu is not None or memory is not None:
        requests: dict[str, object] = {}
        limits: dict[str, object] = {}
        if cpu is not None:
            requests["cpu"] = cpu
            limits["cpu"] = cpu if cpu_limit is None else cpu_limit
        if memory is not None:
            requests["memory"] = memory
            limits["memory"] = memory
        pod_resources = resources_from_maps(requests, limits, field="spec.resources")
    ordered = tuple(c for c in containers if c.is_init) + tuple(c for c in containers if not c.is_init)
    return PodResources(uid=uid, namespace="default", name=uid, containers=ordered, pod=pod_resources)


def guaranteed(name: str, cpus: str, kind: ContainerKind = "app", memory: str = "1Gi") -> ContainerResources:
    """A Guaranteed(-equivalent) container: cpu and memory requests equal their limits."""
    return container(name, kind, cpu=cpus, memory=memory)


def pod_from_data(doc: Mapping[str, Any]) -> PodResources:
    containers = tuple(
        ContainerResources(
            c["name"],
            c.get("kind", "app"),
            resources_from_maps(c.get("requests"), c.get("limits"), field=c["name"]),
        )
        for c in doc["containers"]
    )
    pod_resources = None
    if "resources" in doc:
        res = doc["resources"]
        pod_resources = resources_from_maps(res.get("requests"), res.get("limits"), field="spec.resources")
    return PodResources(uid=doc["uid"], namespace="default", name=doc["uid"], containers=containers, pod=pod_resources)


def state_from_data(doc: Mapping[str, Any] | None, policy_name: str = "static") -> CPUState:
    return CPUState.from_dict({"policyName": policy_name, **(doc or {})})


def hint(numa_ids: Sequence[int] | None, preferred: bool = True) -> TopologyHint:
    return TopologyHint(None if numa_ids is None else mask_of(numa_ids), preferred)


def hints_as_data(hints: Sequence[TopologyHint]) -> list[dict[str, Any]]:
    return [{"mask": h.numa_ids(), "preferred": h.preferred} for h in hints]


def policy_from_case(case: Mapping[str, Any]) -> StaticPolicy:
    """``NewStaticPolicy(topo, numReservedCPUs, reservedCPUs, ..., options)`` as the upstream table builds it."""
    gates = FeatureGates.from_map(case.get("gates"))
    return StaticPolicy.with_reservation(
        kubelet_topology(case["topology"]),
        num_reserved_cpus=case.get("numReservedCPUs", 0),
        reserved_cpus=CPUSet.parse(case.get("reservedCPUs", "")),
        options=case.get("options") or {},
        gates=gates,
        topology_manager_policy=case.get("topologyManagerPolicy", "none"),
    )


def seed_policy(*, gates: FeatureGates = PLR_GATES, topology_manager_policy: str = "single-numa-node") -> StaticPolicy:
    """The seeds' kubelet: reservedSystemCPUs "0,16", systemReserved cpu 1."""
    return StaticPolicy(
        dual_socket_ht_32(),
        reserved_system_cpus=CPUSet.parse("0,16"),
        reserved_cpu_millis=1000,
        gates=gates,
        topology_manager_policy=topology_manager_policy,
    )
