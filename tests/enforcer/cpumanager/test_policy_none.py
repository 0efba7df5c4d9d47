"""The ``none`` policy (cpu-manager.md R1.1; kubelet ``policy_none_test.go``): nothing is ever pinned."""

from __future__ import annotations

import pytest

from enforcer.counters import AllocationCounters
from enforcer.cpumanager.policy_none import NonePolicy
from enforcer.cpumanager.state import CPUState
from enforcer.errors import ConfigError

from .cpu_policy_builders import dual_socket_ht_32, guaranteed, hint, pod


def test_none_policy_is_named_none_and_reserves_nothing() -> None:
    policy = NonePolicy(dual_socket_ht_32())
    assert policy.name == "none"
    assert not policy.reserved_cpus


def test_none_policy_rejects_any_option() -> None:
    """TestNonePolicyOptions: "None policy: received unsupported options=map[...]"."""
    with pytest.raises(ConfigError) as err:
        NonePolicy(dual_socket_ht_32(), {"full-pcpus-only": "true", "align-by-socket": "true"})
    assert err.value.message == (
        "None policy: received unsupported options=map[align-by-socket:true full-pcpus-only:true]"
    )


def test_none_policy_pins_nothing_and_gives_no_hints() -> None:
    policy = NonePolicy(dual_socket_ht_32())
    state = policy.new_state()
    c = guaranteed("c", "4")
    the_pod = pod("p", c, cpu="4", memory="4Gi")
    counters = AllocationCounters()
    assert policy.get_topology_hints(state, the_pod, c) is None
    assert policy.get_pod_topology_hints(state, the_pod) is None
    policy.allocate(state, the_pod, c, hint([0]), counters)
    policy.allocate_pod(state, the_pod, hint([0]), counters)
    policy.remove_container(state, "p", "c")
    assert state == policy.new_state()
    assert policy.container_cpus(state, "p", "c") is None
    assert policy.pod_cpus(state, "p") is None
    assert policy.default_cpus(state) == dual_socket_ht_32().all_cpus
    assert policy.isolation_level(state, the_pod, c) == "host"
    assert counters.to_dict() == AllocationCounters().to_dict()
    assert state.check(dual_socket_ht_32()) == []


def test_none_policy_refuses_a_static_checkpoint() -> None:
    """R1.1: switching policies needs drain + delete of the state."""
    policy = NonePolicy(dual_socket_ht_32())
    with pytest.raises(ConfigError) as err:
        policy.validate_state(CPUState(policy_name="static", default=dual_socket_ht_32().all_cpus))
    assert err.value.message == 'configured policy "none" differs from state checkpoint policy "static"'
    policy.validate_state(policy.new_state())


def test_none_policy_reads_its_own_state_back() -> None:
    policy = NonePolicy(dual_socket_ht_32())
    assert policy.state_from_dict(policy.new_state().to_dict()) == policy.new_state()
    assert policy.pod_uids(policy.new_state()) == []
