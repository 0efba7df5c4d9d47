"""The ``none`` CPU manager policy: no pinning, every container runs in the default set.

Kubelet ``policy_none.go``: it rejects any policy option, generates no hints, allocates nothing and
has no assignable CPUs.  Its state only records the policy name (so a switch to ``static`` is
detected at restart, R1.1) and the whole machine as the default set.
"""

from __future__ import annotations

from collections.abc import Mapping

from enforcer.counters import AllocationCounters
from enforcer.cpumanager.policy import CPUPolicy, CPUResizer, IsolationLevel
from enforcer.cpumanager.state import CPUState
from enforcer.errors import ConfigError
from enforcer.topology.hints import ProviderHints, TopologyHint
from enforcer.topology.machine import CPUTopology
from shared.contract import CFSQuota
from shared.cpuset import EMPTY, CPUSet
from shared.resources import CPU, ContainerResources, PodResources

POLICY_NONE = "none"


def check_state_policy_name(state: CPUState, configured: str) -> None:
    """The checkpoint's policy must be the configured one (R1.1); a switch needs drain + delete."""
    if state.policy_name != configured:
        raise ConfigError(
            f'configured policy "{configured}" differs from state checkpoint policy "{state.policy_name}"'
        )


class NonePolicy:
    """Does nothing, by design: the kubelet default."""

    name: str = POLICY_NONE

    def __init__(self, topology: CPUTopology, options: Mapping[str, object] | None = None) -> None:
        if options:
            # Go prints a map as map[k:v ...] with sorted keys.
            body = " ".join(f"{k}:{v}" for k, v in sorted((str(k), str(v)) for k, v in options.items()))
            raise ConfigError(f"None policy: received unsupported options=map[{body}]")
        self._topology = topology

    @property
    def reserved_cpus(self) -> CPUSet:
        return EMPTY

    def new_state(self) -> CPUState:
        return CPUState(policy_name=POLICY_NONE, default=self._topology.all_cpus)

    def validate_state(self, state: CPUState) -> None:
        check_state_policy_name(state, POLICY_NONE)

    def get_topology_hints(self, state: CPUState, pod: PodResources, container: ContainerResources) -> ProviderHints:
        return None

    def get_pod_topology_hints(self, state: CPUState, pod: PodResources) -> ProviderHints:
        return None

    def allocate(
        self,
        state: CPUState,
        pod: PodResources,
        container: ContainerResources,
        affinity: TopologyHint | None,
        counters: AllocationCounters,
    ) -> None:
        return None

    def allocate_pod(
        self, state: CPUState, pod: PodResources, affinity: TopologyHint | None, counters: AllocationCounters
    ) -> None:
        return None

    def remove_container(self, state: CPUState, pod_uid: str, container_name: str) -> None:
        return None

    def state_from_dict(self, doc: object) -> CPUState:
        """Read a saved state back and run the restart checks on it (kubelet checkpoint restore + ``Start``)."""
        state = CPUState.from_dict(doc)
        self.validate_state(state)
        return state

    def pod_uids(self, state: CPUState) -> list[str]:
        return state.pod_uids()

    def container_cpus(self, state: CPUState, pod_uid: str, container_name: str) -> CPUSet | None:
        return None

    def pod_cpus(self, state: CPUState, pod_uid: str) -> CPUSet | None:
        return None

    def default_cpus(self, state: CPUState) -> CPUSet:
        return state.default

    def cfs_quota_level(self, state: CPUState, pod: PodResources, container: ContainerResources) -> CFSQuota:
        """Nothing is exclusive: the container's own cpu limit, else the pod-level limit, else nothing."""
        if container.resources.limit(CPU) > 0:
            return "container"
        if pod.pod is not None and pod.pod.limit(CPU) > 0:
            return "pod"
        return "none"

    def pod_cfs_quota_disabled(self, state: CPUState, pod: PodResources) -> bool:
        return False

    def isolation_level(self, state: CPUState, pod: PodResources, container: ContainerResources) -> IsolationLevel:
        return "host"

    @property
    def resizer(self) -> CPUResizer | None:
        """Nothing is pinned, so a resize never concerns the CPU manager."""
        return None


_check: type[CPUPolicy] = NonePolicy
