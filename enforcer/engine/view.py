"""What the engine reports about a pod: the plan contract's step shape.

The same view feeds ``numaguard plan`` (contracts/plan.md), the enforcer's
``/allocations`` API (shared.contract models) and the cgroup reconciler, so the
three can never disagree about which CPUs a container got.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from shared.cpuset import CPUSet

Assignment = Literal["node_exclusive", "pod_exclusive", "pod_shared", "node_shared"]
QuotaLevel = Literal["container", "pod", "none"]


@dataclass(frozen=True, slots=True)
class ContainerView:
    name: str
    kind: str
    assignment: Assignment
    memory_assignment: Assignment
    cpus: CPUSet
    memory_numa_nodes: tuple[int, ...] | None
    cfs_quota: QuotaLevel
    cpu_limit_millis: int | None
    memory_limit_bytes: int | None

    def to_plan(self) -> dict[str, Any]:
        return {
            "assignment": self.assignment,
            "memoryAssignment": self.memory_assignment,
            "cpus": str(self.cpus),
            "memoryNUMANodes": None if self.memory_numa_nodes is None else list(self.memory_numa_nodes),
            "cfsQuota": self.cfs_quota,
        }


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

    def has_pod_shared_pool(self) -> bool:
        return self.pod_shared_pool_cpus is not None

    def pod_shared_pool_plan(self) -> dict[str, Any] | None:
        if self.pod_shared_pool_cpus is None:
            return None
        nodes = self.pod_shared_pool_memory_numa_nodes
        return {"cpus": str(self.pod_shared_pool_cpus), "memoryNUMANodes": None if nodes is None else list(nodes)}

    def long_running(self) -> tuple[ContainerView, ...]:
        """Containers that run for the pod's lifetime (the plan contract's ``containers``)."""
        return tuple(c for c in self.containers if c.kind in ("app", "sidecar"))

    def containers_plan(self) -> dict[str, Any]:
        return {c.name: c.to_plan() for c in self.long_running()}
