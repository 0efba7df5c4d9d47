"""Restart: state saved by one policy instance, restored and validated by the next (kubelet
``policy_static_restore_test.go``, cpu-manager.md R7.3/R7.4, pod-level-resource-managers.md R3.3/R12.1)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from enforcer.counters import AllocationCounters
from enforcer.cpumanager.policy_static import StaticPolicy
from enforcer.cpumanager.state import CPUState
from enforcer.errors import ConfigError
from enforcer.features import FeatureGates
from shared.cpuset import CPUSet
from shared.resources import PodResources

from .cpu_policy_builders import PLR_GATES, guaranteed, hint, pod, synthetic_topology


def restore_test_policy(num_cpus: int, gates: FeatureGates) -> StaticPolicy:
    """``newRestoreTestManager``: one socket, ``num_cpus`` cores without SMT, kube-reserved cpu 1."""
    return StaticPolicy(
        synthetic_topology(numa_nodes=1, cores_per_numa=num_cpus),
        reserved_system_cpus=None,
        reserved_cpu_millis=1000,
        gates=gates,
    )


def restart(policy_factory: object, state: CPUState) -> tuple[StaticPolicy, CPUState]:
    """A new policy instance reading the state back from its serialised form, then Start."""
    assert callable(policy_factory)
    policy: StaticPolicy = policy_factory()
    restored = CPUState.from_dict(state.to_dict())
    policy.validate_state(restored)
    return policy, restored


def admit(policy: StaticPolicy, state: CPUState, the_pod: PodResources, pod_scope: bool) -> None:
    counters = AllocationCounters()
    if pod_scope:
        policy.allocate_pod(state, the_pod, None, counters)
    else:
        for c in the_pod.containers:
            policy.allocate(state, the_pod, c, None, counters)


@dataclass(frozen=True)
class RestoreCase:
    description: str
    gates: FeatureGates
    pod_cpu: str | None
    containers: int
    expect_pod_cpuset: bool
    expect_container_entries: bool


RESTORE_CASES = [
    RestoreCase("Pod-level resources and managers enabled", PLR_GATES, "2", 1, True, True),
    RestoreCase("Pod-level resources enabled, managers disabled", FeatureGates(), "2", 1, False, False),
    RestoreCase("Container-level pod, features enabled", PLR_GATES, None, 2, False, True),
    RestoreCase(
        "Container-level pod, features disabled",
        FeatureGates(pod_level_resources=False, pod_level_resource_managers=False),
        None,
        2,
        False,
        True,
    ),
]


@pytest.mark.parametrize("case", RESTORE_CASES, ids=lambda c: f"TestCPUManagerRestoreState/{c.description}")
def test_cpu_manager_restores_pod_and_container_cpusets(case: RestoreCase) -> None:
    containers = [guaranteed(f"container{i + 1}", "1") for i in range(case.containers)]
    the_pod = pod("pod1", *containers, cpu=case.pod_cpu, memory="4Gi" if case.pod_cpu else None)
    policy = restore_test_policy(4, case.gates)
    state = policy.new_state()
    admit(policy, state, the_pod, pod_scope=case.gates.pod_level_managers_enabled and case.pod_cpu is not None)
    assert (state.pod_cpus("pod1") is not None) == case.expect_pod_cpuset

    _, restored = restart(lambda: restore_test_policy(4, case.gates), state)
    assert restored.pod_cpus("pod1") == state.pod_cpus("pod1")
    for c in containers:
        cpus = restored.container_cpus("pod1", c.name)
        assert (cpus is not None and len(cpus) > 0) == case.expect_container_entries


@pytest.mark.parametrize(
    ("num_cpus", "pod_cpu", "container_cpus"),
    [(4, "2", ["2"]), (6, "2", ["2"]), (6, "4", ["2", "2"])],
    ids=[
        "TestPodLevelResourcesReallocationAfterRestart/4 CPU node, pod requesting 2 CPUs",
        "TestPodLevelResourcesReallocationAfterRestart/6 CPU node, pod requesting 2 CPUs",
        "TestPodLevelResourcesReallocationAfterRestart/6 CPU node, pod requesting 4 CPUs split between two containers",
    ],
)
def test_re_admission_after_restart_keeps_the_checkpointed_bubble(
    num_cpus: int, pod_cpu: str, container_cpus: list[str]
) -> None:
    """kubernetes/kubernetes#140989: re-admitting must neither fail nor move (and leak) the bubble."""
    containers = [guaranteed(f"container{i + 1}", n) for i, n in enumerate(container_cpus)]
    the_pod = pod("test-pod", *containers, cpu=pod_cpu, memory="4Gi")
    policy = restore_test_policy(num_cpus, PLR_GATES)
    state = policy.new_state()
    policy.allocate_pod(state, the_pod, None, AllocationCounters())
    before = state.to_dict()

    policy2, restored = restart(lambda: restore_test_policy(num_cpus, PLR_GATES), state)
    policy2.allocate_pod(restored, the_pod, None, AllocationCounters())

    assert restored.to_dict() == before
    bubble = restored.pod_cpus("test-pod")
    assert bubble is not None
    assert bubble | restored.default == policy2.topology.all_cpus
    assert all(cpus.is_subset_of(bubble) for cpus in restored.entries["test-pod"].values())


def test_restored_containers_regenerate_their_hints_and_keep_their_cpus() -> None:
    """R6.2 + R2.3: after a restart the same container asks for, and keeps, the same CPUs."""
    topology = synthetic_topology(numa_nodes=2, cores_per_numa=4)

    def make() -> StaticPolicy:
        return StaticPolicy(topology, reserved_system_cpus=CPUSet.parse("0"), reserved_cpu_millis=0)

    c = guaranteed("c", "2")
    the_pod = pod("p", c)
    policy = make()
    state = policy.new_state()
    policy.allocate(state, the_pod, c, hint([1]), AllocationCounters())
    policy2, restored = restart(make, state)
    result = policy2.get_topology_hints(restored, the_pod, c)
    assert result is not None and result["cpu"] is not None
    assert [(h.numa_ids(), h.preferred) for h in result["cpu"]] == [([1], True), ([0, 1], False)]
    policy2.allocate(restored, the_pod, c, hint([0]), AllocationCounters())
    assert restored.container_cpus("p", "c") == CPUSet.parse("4-5")


def test_the_reuse_scratch_does_not_survive_a_restart() -> None:
    """Like the kubelet's cpusToReuse, which is never checkpointed."""
    policy = restore_test_policy(4, FeatureGates())
    state = policy.new_state()
    init = guaranteed("init", "1", kind="init")
    the_pod = pod("p", init, guaranteed("app", "1"))
    policy.allocate(state, the_pod, init, None, AllocationCounters())
    assert state.reusable
    _, restored = restart(lambda: restore_test_policy(4, FeatureGates()), state)
    assert restored.reusable == {}


def test_pod_level_state_is_unreadable_with_the_gate_off() -> None:
    """R7.4 / PLR R12.1: bubbles are only counted with PodLevelResourceManagers on; otherwise the CPUs
    look lost and the node must be drained."""
    the_pod = pod("p", guaranteed("a", "1"), cpu="2", memory="2Gi")
    policy = restore_test_policy(4, PLR_GATES)
    state = policy.new_state()
    policy.allocate_pod(state, the_pod, None, AllocationCounters())
    with pytest.raises(ConfigError) as err:
        restart(lambda: restore_test_policy(4, FeatureGates()), state)
    assert err.value.message == 'current set of available CPUs "0-3" doesn\'t match with CPUs in state "0-1,3"'


def test_a_larger_reservation_after_restart_is_refused() -> None:
    """R7.3: reserved CPUs must still be in the default set (kube/system-reserved grew)."""
    topology = synthetic_topology(numa_nodes=1, cores_per_numa=4)
    policy = StaticPolicy(topology, reserved_system_cpus=None, reserved_cpu_millis=1000)
    state = policy.new_state()
    c = guaranteed("c", "1")
    policy.allocate(state, pod("p", c), c, None, AllocationCounters())
    with pytest.raises(ConfigError) as err:
        restart(lambda: StaticPolicy(topology, reserved_system_cpus=None, reserved_cpu_millis=2000), state)
    assert err.value.message == 'not all reserved cpus: "0-1" are present in defaultCpuSet: "0,2-3"'


def test_an_empty_default_set_with_assignments_is_refused() -> None:
    policy = restore_test_policy(4, FeatureGates())
    state = CPUState(policy_name="static")
    state.set_container_cpus("p", "c", CPUSet.parse("1"))
    with pytest.raises(ConfigError) as err:
        policy.validate_state(state)
    assert err.value.message == "default cpuset cannot be empty"


def test_an_empty_state_is_initialised_on_start() -> None:
    policy = restore_test_policy(4, FeatureGates())
    state = CPUState(policy_name="static")
    policy.validate_state(state)
    assert state == policy.new_state()


def test_state_from_dict_reads_and_validates_in_one_step() -> None:
    policy = restore_test_policy(4, PLR_GATES)
    state = policy.new_state()
    the_pod = pod("p", guaranteed("a", "1"), cpu="2", memory="2Gi")
    policy.allocate_pod(state, the_pod, None, AllocationCounters())
    assert policy.state_from_dict(state.to_dict()) == state
    assert policy.pod_uids(state) == ["p"]
    broken = state.to_dict() | {"defaultCpuSet": "0-3"}
    with pytest.raises(ConfigError, match="overlaps with default cpuset"):
        policy.state_from_dict(broken)
