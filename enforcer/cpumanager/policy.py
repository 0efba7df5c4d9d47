"""The contract between the engine and a CPU manager policy (kubelet ``cpumanager/policy.go``).

Policies hold no assignment state: the engine owns one :class:`~enforcer.cpumanager.state.CPUState`
and passes it to every call, copying it first when the call is part of a transactional admission.
A policy mutates only the state it is given and never keeps a reference to it.

This module declares the Protocol only; it must not import a policy implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from enforcer.counters import AllocationCounters
from enforcer.cpumanager.state import CPUState
from enforcer.topology.hints import ProviderHints, TopologyHint
from shared.contract import CFSQuota
from shared.cpuset import CPUSet
from shared.resources import ContainerResources, PodResources

IsolationLevel = Literal["container", "pod", "host"]
"""R9.1 of pod-level-resource-managers.md: exclusive CPUs, the pod shared pool, or the node shared pool."""


STRICT_TOPOLOGY_POLICIES = ("restricted", "single-numa-node")


@dataclass(frozen=True, slots=True)
class ResizeAlignment:
    """The Topology Manager settings a grow must honour (the node's policy and scope)."""

    policy: str = "none"
    scope: str = "container"

    @property
    def strict(self) -> bool:
        """Whether a grow must stay inside a preferred NUMA set (restricted, single-numa-node)."""
        return self.policy in STRICT_TOPOLOGY_POLICIES


class CPUResizePlan(Protocol):
    """A resize whose Infeasible rules all passed; applying it may still find the CPUs busy (Deferred)."""

    def apply(self, state: CPUState) -> None:
        """Resize in ``state`` (a copy of the planned-on state); raises AdmissionRejected (``Deferred``: not now)."""
        ...


class CPUResizer(Protocol):
    """In-place resize of exclusive CPUs (the ``extended`` engine; KEP-5554, KEP-5526 bubbles)."""

    def plan_resize(
        self, state: CPUState, old_pod: PodResources, new_pod: PodResources, alignment: ResizeAlignment
    ) -> CPUResizePlan | None:
        """Check the resize against every permanent rule (raising the AdmissionRejected that makes it
        Infeasible); None when the CPU manager has nothing to change."""
        ...


class CPUPolicy(Protocol):
    """What the engine calls; every method is deterministic for the same state and inputs."""

    @property
    def name(self) -> str:
        """``none`` or ``static``: the name recorded in (and checked against) the state."""
        ...

    @property
    def reserved_cpus(self) -> CPUSet:
        """CPUs never handed out exclusively (empty for ``none``)."""
        ...

    def new_state(self) -> CPUState:
        """A fresh state for this machine and configuration."""
        ...

    def validate_state(self, state: CPUState) -> None:
        """Restart checks (kubelet ``Start``); raises ConfigError when the node must be drained."""
        ...

    def state_from_dict(self, doc: object) -> CPUState:
        """Read a saved state back and run the restart checks on it."""
        ...

    def pod_uids(self, state: CPUState) -> list[str]:
        """Every pod the state holds CPUs for (container entries or a bubble), sorted."""
        ...

    def get_topology_hints(self, state: CPUState, pod: PodResources, container: ContainerResources) -> ProviderHints:
        """Container-scope hints; ``None`` means "don't care", ``{"cpu": []}`` means "cannot fit"."""
        ...

    def get_pod_topology_hints(self, state: CPUState, pod: PodResources) -> ProviderHints:
        """Pod-scope hints for the whole pod."""
        ...

    def allocate(
        self,
        state: CPUState,
        pod: PodResources,
        container: ContainerResources,
        affinity: TopologyHint | None,
        counters: AllocationCounters,
    ) -> None:
        """Pin the container if it qualifies.  Idempotent: an existing entry is kept."""
        ...

    def allocate_pod(
        self, state: CPUState, pod: PodResources, affinity: TopologyHint | None, counters: AllocationCounters
    ) -> None:
        """KEP-5526 ``AllocatePod``: the bubble and its partition, for pod scope with PLR and both gates."""
        ...

    def remove_container(self, state: CPUState, pod_uid: str, container_name: str) -> None:
        """Release what the container held (a bubble only with the pod's last container)."""
        ...

    def container_cpus(self, state: CPUState, pod_uid: str, container_name: str) -> CPUSet | None:
        """The container's exclusive or pod-shared-pool cpuset, or None (it runs in the default set)."""
        ...

    def pod_cpus(self, state: CPUState, pod_uid: str) -> CPUSet | None:
        """The KEP-5526 bubble of the pod, if it has one."""
        ...

    def default_cpus(self, state: CPUState) -> CPUSet:
        """The node shared pool."""
        ...

    def isolation_level(self, state: CPUState, pod: PodResources, container: ContainerResources) -> IsolationLevel:
        """R9.1: ``container`` (exclusive), ``pod`` (pod shared pool) or ``host`` (node shared pool)."""
        ...

    def cfs_quota_level(self, state: CPUState, pod: PodResources, container: ContainerResources) -> CFSQuota:
        """Where the container's CPU time is capped (the plan's ``cfsQuota``)."""
        ...

    @property
    def resizer(self) -> CPUResizer | None:
        """The policy's in-place resize of the CPUs it holds, or None when it holds none (``none``)."""
        ...
