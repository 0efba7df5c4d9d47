"""What the engine reports about a pod: the plan contract's step shape.

The same view feeds ``numaguard plan`` (contracts/plan.md), the enforcer's
``/allocations`` API (shared.contract models) and the cgroup reconciler, so the
three can never disagree about which CPUs a container got. The view is turned
into the contract's models here, once: the plan's step and the API body are the
same models dumped (:meth:`PodView.allocated_containers`, :meth:`PodView.pod_shared_pool`).

The models are built without re-validation: a CPUSet prints the canonical list
syntax and NUMA ids come sorted from the managers, so parsing them back (what a
validating constructor does with every string) would only repeat work.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared import contract
from shared.contract import Assignment, CFSQuota
from shared.cpuset import CPUSet


@dataclass(frozen=True, slots=True)
class ContainerView:
    name: str
    kind: str
    assignment: Assignment
    memory_assignment: Assignment
    cpus: CPUSet
    memory_numa_nodes: tuple[int, ...] | None
    cfs_quota: CFSQuota
    cpu_limit_millis: int | None
    memory_limit_bytes: int | None

    def to_contract(self) -> contract.ContainerAllocation:
        """The container's entry of a plan step / an allocation (contracts/plan.md)."""
        return contract.ContainerAllocation.model_construct(
            assignment=self.assignment,
            memory_assignment=self.memory_assignment,
            cpus=str(self.cpus),
            memory_numa_nodes=_numa_list(self.memory_numa_nodes),
            cfs_quota=self.cfs_quota,
        )


@dataclass(frozen=True, slots=True)
class PodView:
    uid: str
    namespace: str
    name: str
    qos_class: str
    numa_affinity: tuple[int, ...] | None
    pod_shared_pool_cpus: CPUSet | None
    pod_shared_pool_memory_numa_nodes: tuple[int, ...] | None
    pod_cpus: CPUSet | None
    containers: tuple[ContainerView, ...] = field(default_factory=tuple)
    spec_hash: str = ""
    pod_cpu_limit_millis: int | None = None
    pod_memory_limit_bytes: int | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def pod_shared_pool(self) -> contract.PodSharedPool | None:
        """The KEP-5526 pod shared pool: made by the CPU Manager (a bubble), the Memory Manager (a pod memory
        budget) or both; None when neither made one.  The part a manager did not make is None."""
        cpus, nodes = self.pod_shared_pool_cpus, self.pod_shared_pool_memory_numa_nodes
        if cpus is None and nodes is None:
            return None
        return contract.PodSharedPool.model_construct(
            cpus=None if cpus is None else str(cpus), memory_numa_nodes=_numa_list(nodes)
        )

    def long_running(self) -> tuple[ContainerView, ...]:
        """Containers that run for the pod's lifetime (the plan contract's ``containers``)."""
        return tuple(c for c in self.containers if c.kind in ("app", "sidecar"))

    def allocated_containers(self) -> dict[str, contract.ContainerAllocation]:
        """The plan contract's ``containers``: every long-running container by name."""
        return {c.name: c.to_contract() for c in self.long_running()}


def _numa_list(nodes: tuple[int, ...] | None) -> list[int] | None:
    return None if nodes is None else list(nodes)
