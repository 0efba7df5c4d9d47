"""Engine values as ``shared.contract`` bodies: allocations, resize status, the node's usage.

One translation, used by every endpoint, so the API, the annotations the
webhook writes from it and the plan simulator describe a pod the same way
(the engine's :class:`~enforcer.engine.view.PodView` is the single source).
Pure: no locks, no I/O; callers pass values read under the service's lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from enforcer.engine.view import PodView
from enforcer.service import models
from enforcer.topology.machine import CPUTopology
from shared import contract, quantity
from shared.cpuset import CPUSet
from shared.resources import CPU, PodResources


class MemoryTableLike(Protocol):
    """The three numbers of a memory manager table the API reports (bytes)."""

    allocatable: int
    reserved: int
    free: int


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """What is handed out on the node right now, read from the engine under the service's lock."""

    default_cpus: CPUSet
    reserved_cpus: CPUSet
    memory: Mapping[int, Mapping[str, MemoryTableLike]]


def allocation(
    view: PodView,
    *,
    node: str,
    spec_hash: str,
    resize: contract.ResizeStatus | None = None,
    cgroups: models.CgroupStatus | None = None,
) -> models.AllocationStatus:
    """The allocation of one pod as the API reports it (long-running containers only, as the plan contract)."""
    return models.AllocationStatus(
        uid=view.uid,
        namespace=view.namespace,
        name=view.name,
        node=node,
        qos_class=view.qos_class,
        numa_affinity=None if view.numa_affinity is None else list(view.numa_affinity),
        pod_shared_pool=view.pod_shared_pool(),
        containers=view.allocated_containers(),
        resize=resize,
        spec_hash=spec_hash,
        cgroups=cgroups,
    )


def requested_resources(pod: PodResources) -> dict[str, contract.RequestedResources]:
    """Desired requests/limits by container name, as canonical quantities (a resize status's ``requested``)."""

    def text(values: Mapping[str, int]) -> dict[str, str]:
        return {
            name: quantity.format_millicores(v) if name == CPU else quantity.format_bytes(v)
            for name, v in sorted(values.items())
        }

    return {
        c.name: contract.RequestedResources(requests=text(c.resources.requests), limits=text(c.resources.limits))
        for c in pod.containers
    }


def resize_status(
    state: contract.ResizeState, *, reason: str | None, message: str | None, desired: PodResources, since: datetime
) -> contract.ResizeStatus:
    return contract.ResizeStatus(
        state=state, reason=reason, message=message, requested=requested_resources(desired), since=since
    )


def topology_view(topology: CPUTopology, *, node: str, usage: NodeUsage) -> contract.TopologyView:
    """The machine and, per NUMA node, how many CPUs and bytes are reserved, exclusive and free."""
    # under strict-cpu-reservation the reserved CPUs are outside the default set too; they are not exclusive
    assigned = topology.all_cpus - usage.default_cpus - usage.reserved_cpus
    numa_nodes = []
    for numa_id in topology.numa_ids:
        cpus = topology.cpus_in_numa_nodes([numa_id])
        reserved = cpus & usage.reserved_cpus
        exclusive = cpus & assigned
        free = cpus - reserved - exclusive
        memory = {
            name: contract.MemoryUsage(allocatable=table.allocatable, reserved=table.reserved, free=table.free)
            for name, table in sorted(usage.memory.get(numa_id, {}).items())
        }
        numa_nodes.append(
            contract.NUMANodeUsage(
                id=numa_id,
                cpus=contract.CPUUsage(
                    total=len(cpus),
                    reserved=len(reserved),
                    exclusive=len(exclusive),
                    free=len(free),
                    cpus=str(cpus),
                    reserved_cpus=str(reserved),
                    exclusive_cpus=str(exclusive),
                    free_cpus=str(free),
                ),
                memory=memory,
            )
        )
    document: dict[str, Any] = topology.to_document()
    return contract.TopologyView(
        node=node,
        topology=document,
        numa_nodes=numa_nodes,
        shared_pool=str(usage.default_cpus),
        reserved_cpus=str(usage.reserved_cpus),
    )
