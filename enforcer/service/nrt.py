"""The node's free resources per NUMA node, as a NodeResourceTopology object (topology.node.k8s.io/v1alpha2).

Topology-aware schedulers (the scheduler-plugins ``NodeResourceTopologyMatch`` filter and score) read
one cluster-scoped ``NodeResourceTopology`` per node, named after the node: a ``zones`` list with one
zone of type ``Node`` per NUMA node (``node-<id>``), each listing its resources as
``{name, capacity, allocatable, available}`` quantities, its SLIT distances as ``costs``, and the
top-level ``attributes`` ``topologyManagerPolicy`` / ``topologyManagerScope`` that tell the plugin how
the node aligns (the deprecated ``topologyPolicies`` is filled too, for plugins that predate attributes).

What each number means here, per NUMA node:

* ``cpu`` (whole CPUs): capacity = the NUMA node's CPUs; allocatable = those minus the reserved set
  (what the static policy can hand out exclusively); available = allocatable minus every CPU a
  container holds exclusively or a KEP-5526 pod bubble holds.  Shared-pool use is not subtracted:
  the scheduler's question is whether an exclusive request still fits.
* ``memory`` and ``hugepages-<size>`` (bytes): the Static memory manager's tables: capacity = total,
  allocatable = total minus the system reservation, available = free.  With the ``None`` memory policy
  the node does not pin memory to NUMA nodes, so no NUMA node can run out of it: the machine's
  per-NUMA capacity is published as allocatable and available, which keeps the plugin from refusing
  Guaranteed pods for a constraint the node does not have.

Pod-set fingerprint: the ``nodeTopologyPodsFingerprint`` attribute (and the legacy
``topology.node.k8s.io/fingerprint`` annotation) over the pods the engine holds that the scheduler counts
as having exclusive resources (``nodeTopologyPodsFingerprintMethod: with-exclusive-resources``), computed
as :mod:`enforcer.service.podfingerprint` says; NodeResourceTopologyMatch's overreserve cache needs it to
resync a node.  Pod-level budgets: a KEP-5526 pod's whole bubble (``spec.resources``, not the sum of its
containers) is subtracted from ``available`` on the NUMA node it got, which is as much of the budget as
the object can carry: the plugin itself still sizes the incoming pod from its container requests.

Pure: reads an engine the caller holds still (the service's lock) and returns a plain dict; no client,
no I/O.  Publishing it is :mod:`enforcer.service.nrt_publisher`'s job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from enforcer.engine.node import NodeEngine
from enforcer.service import podfingerprint
from enforcer.topology.machine import CPUTopology
from shared import quantity
from shared.cpuset import CPUSet
from shared.resources import CPU

GROUP = "topology.node.k8s.io"
VERSION = "v1alpha2"
PLURAL = "noderesourcetopologies"
KIND = "NodeResourceTopology"
ZONE_TYPE = "Node"
MANAGED_BY = "numaguard"

# noderesourcetopology-api v1alpha2 ``TopologyManagerPolicy`` values (deprecated, still read by older
# plugins), as the node-feature-discovery topology updater derives them from policy and scope.
_LEGACY_POLICY = {
    ("single-numa-node", "container"): "SingleNUMANodeContainerLevel",
    ("single-numa-node", "pod"): "SingleNUMANodePodLevel",
    ("restricted", "container"): "RestrictedContainerLevel",
    ("restricted", "pod"): "RestrictedPodLevel",
    ("best-effort", "container"): "BestEffortContainerLevel",
    ("best-effort", "pod"): "BestEffortPodLevel",
}


@dataclass(frozen=True, slots=True)
class ResourceAmounts:
    """One resource of one NUMA node in its integer unit (CPUs, bytes)."""

    capacity: int
    allocatable: int
    available: int


def zone_name(numa_id: int) -> str:
    return f"node-{numa_id}"


def cpu_amounts(topology: CPUTopology, engine: NodeEngine) -> dict[int, ResourceAmounts]:
    """Whole CPUs per NUMA node: all, not reserved, and not held by an exclusive container or a bubble."""
    reserved: CPUSet = engine.cpu_policy.reserved_cpus
    held = engine.held_cpus()
    amounts: dict[int, ResourceAmounts] = {}
    for numa_id in topology.numa_ids:
        cpus = topology.cpus_in_numa_nodes([numa_id])
        allocatable = cpus - reserved
        amounts[numa_id] = ResourceAmounts(len(cpus), len(allocatable), len(allocatable - held))
    return amounts


def memory_amounts(topology: CPUTopology, engine: NodeEngine) -> dict[int, dict[str, ResourceAmounts]]:
    """Bytes of memory and of each hugepages size per NUMA node (see the module docstring for ``None``)."""
    tables = engine.numa_memory()
    amounts: dict[int, dict[str, ResourceAmounts]] = {}
    for numa_id in topology.numa_ids:
        if tables:
            node_tables = tables.get(numa_id, {})
            amounts[numa_id] = {
                name: ResourceAmounts(t.total, t.allocatable, t.free) for name, t in node_tables.items()
            }
        else:
            amounts[numa_id] = {
                name: ResourceAmounts(size, size, size) for name, size in topology.memory_capacity(numa_id).items()
            }
    return amounts


def build_node_resource_topology(node_name: str, topology: CPUTopology, engine: NodeEngine) -> dict[str, Any]:
    """The node's NodeResourceTopology object (no resourceVersion: the publisher adds it)."""
    cpus = cpu_amounts(topology, engine)
    memory = memory_amounts(topology, engine)
    zones = []
    for numa_id in topology.numa_ids:
        resources = [_resource(CPU, cpus[numa_id], str)]
        resources += [
            _resource(name, memory[numa_id][name], quantity.format_bytes)
            for name in sorted(memory[numa_id], key=lambda n: (n != "memory", n))
        ]
        zone: dict[str, Any] = {"name": zone_name(numa_id), "type": ZONE_TYPE, "resources": resources}
        if topology.distances is not None:
            # without a SLIT the kernel reports no distances; invented ones would mislead the score plugin
            zone["costs"] = [
                {"name": zone_name(other), "value": topology.distance(numa_id, other)} for other in topology.numa_ids
            ]
        zones.append(zone)
    policy = engine.config.topology_manager_policy
    scope = engine.config.topology_manager_scope
    fingerprint = pod_set_fingerprint(engine)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": node_name,
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
            "annotations": {podfingerprint.ANNOTATION: fingerprint},
        },
        "topologyPolicies": [_LEGACY_POLICY.get((policy, scope), "None")],
        "attributes": [
            {"name": "topologyManagerPolicy", "value": policy},
            {"name": "topologyManagerScope", "value": scope},
            {"name": podfingerprint.ATTRIBUTE, "value": fingerprint},
            {"name": podfingerprint.ATTRIBUTE_METHOD, "value": podfingerprint.METHOD_WITH_EXCLUSIVE_RESOURCES},
        ],
        "zones": zones,
    }


def pod_set_fingerprint(engine: NodeEngine) -> str:
    """The podfingerprint of the admitted pods with exclusive resources (the scheduler's own selection)."""
    pods = [r.pod for r in engine.state.pods.values()]
    return podfingerprint.sign((p.namespace, p.name) for p in pods if podfingerprint.has_exclusive_resources(p))


def _resource(name: str, amounts: ResourceAmounts, text: Callable[[int], str]) -> dict[str, str]:
    return {
        "name": name,
        "capacity": text(amounts.capacity),
        "allocatable": text(amounts.allocatable),
        "available": text(amounts.available),
    }
