"""The Topology Manager's scopes (kubelet ``scope_container.go`` / ``scope_pod.go``) over recording providers.

The providers here answer fixed hints and record every call, so the tests pin the order the kubelet
calls them in: container scope merges and allocates one container before asking about the next; pod
scope asks for pod hints once and gives every container the same hint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from enforcer.counters import AllocationCounters
from enforcer.engine.builder import new_topology_policy
from enforcer.errors import ConfigError, TopologyAffinityError
from enforcer.topology import options
from enforcer.topology.hints import ProviderHints, TopologyHint
from enforcer.topology.manager import TopologyManager
from shared.resources import ContainerResources, PodResources, Resources

NUMA0 = TopologyHint(0b01, True)
NUMA1 = TopologyHint(0b10, True)
BOTH = TopologyHint(0b11, False)


@dataclass
class RecordingProvider:
    """Offers ``offer`` for every question and records calls as (method, container or "pod", hint)."""

    resource: str
    offer: list[TopologyHint]
    calls: list[tuple[str, str, TopologyHint | None]] = field(default_factory=list)

    def get_topology_hints(self, pod: PodResources, container: ContainerResources) -> ProviderHints:
        self.calls.append(("hints", container.name, None))
        return {self.resource: list(self.offer)}

    def get_pod_topology_hints(self, pod: PodResources) -> ProviderHints:
        self.calls.append(("hints", "pod", None))
        return {self.resource: list(self.offer)}

    def allocate(
        self,
        pod: PodResources,
        container: ContainerResources,
        affinity: TopologyHint | None,
        counters: AllocationCounters,
    ) -> None:
        self.calls.append(("allocate", container.name, affinity))

    def allocate_pod(self, pod: PodResources, affinity: TopologyHint | None, counters: AllocationCounters) -> None:
        self.calls.append(("allocate_pod", "pod", affinity))


def two_container_pod(*, pod_level: bool = False) -> PodResources:
    containers = tuple(ContainerResources(name, "app", Resources()) for name in ("a", "b"))
    return PodResources(
        uid="default/p",
        namespace="default",
        name="p",
        containers=containers,
        pod=Resources(requests={"cpu": 2000}, limits={"cpu": 2000}) if pod_level else None,
    )


def manager(policy: str, scope: str, *, allocates_pod: bool = False) -> TopologyManager:
    return TopologyManager(new_topology_policy(policy, (0, 1)), scope, allocates_pod=lambda _pod: allocates_pod)


def test_container_scope_allocates_each_container_before_asking_about_the_next() -> None:
    cpu, memory = RecordingProvider("cpu", [NUMA0, BOTH]), RecordingProvider("memory", [NUMA0])
    affinities = manager("restricted", "container").admit(two_container_pod(), [cpu, memory], AllocationCounters())
    assert cpu.calls == [
        ("hints", "a", None),
        ("allocate", "a", NUMA0),
        ("hints", "b", None),
        ("allocate", "b", NUMA0),
    ]
    assert memory.calls == cpu.calls
    assert affinities.pod is None
    assert [(c.name, hint) for c, hint in affinities.containers] == [("a", NUMA0), ("b", NUMA0)]


@pytest.mark.parametrize(
    ("allocates_pod", "allocations"),
    [
        (False, [("allocate", "a", NUMA1), ("allocate", "b", NUMA1)]),
        (True, [("allocate_pod", "pod", NUMA1)]),  # KEP-5526 AllocatePod
    ],
)
def test_pod_scope_merges_once_and_gives_every_container_the_pod_hint(
    allocates_pod: bool, allocations: list[tuple[str, str, TopologyHint | None]]
) -> None:
    cpu = RecordingProvider("cpu", [NUMA1])
    pod = two_container_pod(pod_level=allocates_pod)
    scoped = manager("single-numa-node", "pod", allocates_pod=allocates_pod)
    affinities = scoped.admit(pod, [cpu], AllocationCounters())
    assert cpu.calls == [("hints", "pod", None), *allocations]
    assert affinities.pod == NUMA1
    assert {hint for _, hint in affinities.containers} == {NUMA1}


@pytest.mark.parametrize("scope", options.SCOPE_NAMES)
def test_a_refused_merge_allocates_nothing(scope: str) -> None:
    cpu, memory = RecordingProvider("cpu", [NUMA0]), RecordingProvider("memory", [NUMA1])
    with pytest.raises(TopologyAffinityError):
        manager("restricted", scope).admit(two_container_pod(), [cpu, memory], AllocationCounters())
    assert not [call for call in cpu.calls + memory.calls if call[0] != "hints"]


def test_the_none_policy_stores_no_alignment() -> None:
    cpu, memory = RecordingProvider("cpu", [NUMA0]), RecordingProvider("memory", [NUMA1])
    affinities = manager("none", "container").admit(two_container_pod(), [cpu, memory], AllocationCounters())
    assert [call for call in cpu.calls if call[0] == "allocate"] == [("allocate", "a", None), ("allocate", "b", None)]
    assert all(hint is None for _, hint in affinities.containers)


def test_an_unknown_scope_is_refused_with_the_kubelets_message() -> None:
    with pytest.raises(ConfigError, match=r'topologyManagerScope .* "node" must be one of'):
        manager("none", "node")
