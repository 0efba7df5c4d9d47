"""Random admission/removal sequences keep the static policy's invariants (hypothesis).

Admission is transactional, as the engine does it: work on ``state.copy()`` and keep the copy only
when the whole pod was admitted.  After every step no CPU belongs to two pods and ``check()`` is clean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enforcer.counters import AllocationCounters
from enforcer.cpumanager.policy_static import StaticPolicy
from enforcer.cpumanager.state import CPUState
from enforcer.errors import AdmissionRejected
from enforcer.features import FeatureGates
from shared.cpuset import CPUSet
from shared.resources import ContainerResources, PodResources

from .cpu_policy_builders import PLR_GATES, container, dual_socket_ht_32, guaranteed, hint, pod

OPTION_SETS: list[dict[str, str]] = [
    {},
    {"full-pcpus-only": "true"},
    {"strict-cpu-reservation": "true"},
    {"distribute-cpus-across-numa": "true"},
    {"prefer-align-cpus-by-uncorecache": "true", "strict-cpu-reservation": "true"},
]


@dataclass(frozen=True)
class Admit:
    pod: PodResources
    pod_scope: bool
    numa: int | None


@dataclass(frozen=True)
class Remove:
    pick: int


def container_spec(name: str, kind: Any) -> st.SearchStrategy[ContainerResources]:
    return st.one_of(
        st.integers(min_value=1, max_value=6).map(lambda n: guaranteed(name, str(n), kind=kind)),
        st.just(guaranteed(name, "1500m", kind=kind)),
        st.just(container(name, kind)),
    )


@st.composite
def pods(draw: Any, uid: str) -> PodResources:
    inits = [
        draw(container_spec(f"i{i}", draw(st.sampled_from(["init", "sidecar"]))))
        for i in range(draw(st.integers(0, 2)))
    ]
    apps = [draw(container_spec(f"a{i}", "app")) for i in range(draw(st.integers(1, 3)))]
    if draw(st.booleans()):
        return pod(uid, *inits, *apps, cpu=str(draw(st.integers(1, 12))), memory="8Gi")
    return pod(uid, *inits, *apps)


@st.composite
def scripts(draw: Any) -> list[Admit | Remove]:
    steps: list[Admit | Remove] = []
    for i in range(draw(st.integers(1, 10))):
        if draw(st.integers(0, 3)) == 0:
            steps.append(Remove(draw(st.integers(0, 1000))))
        else:
            numa = draw(st.sampled_from([None, 0, 1]))
            steps.append(Admit(draw(pods(f"pod-{i}")), draw(st.booleans()), numa))
    return steps


def admit(policy: StaticPolicy, state: CPUState, step: Admit) -> CPUState:
    trial = state.copy()
    counters = AllocationCounters()
    affinity = None if step.numa is None else hint([step.numa], preferred=False)
    try:
        if step.pod_scope and step.pod.pod_level_resources_set and policy.gates.pod_level_managers_enabled:
            policy.allocate_pod(trial, step.pod, affinity, counters)
        else:
            for c in step.pod.containers:
                policy.allocate(trial, step.pod, c, affinity, counters)
    except AdmissionRejected:
        return state
    return trial


def remove(policy: StaticPolicy, state: CPUState, step: Remove) -> None:
    refs = [(uid, name) for uid in sorted(state.entries) for name in sorted(state.entries[uid])]
    if refs:
        uid, name = refs[step.pick % len(refs)]
        policy.remove_container(state, uid, name)


def assert_invariants(policy: StaticPolicy, state: CPUState) -> None:
    owners: dict[int, str] = {}
    for uid in set(state.entries) | set(state.pod_entries):
        for cpu in state.pod_footprint(uid):
            assert owners.setdefault(cpu, uid) == uid, f"cpu {cpu} in pods {owners[cpu]} and {uid}"
    assert not (CPUSet(owners) & policy.reserved_cpus)
    assert (
        state.check(
            policy.topology, reserved=policy.reserved_cpus, strict_reservation=policy.options.strict_cpu_reservation
        )
        == []
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=scripts(),
    options=st.sampled_from(OPTION_SETS),
    gates=st.sampled_from([PLR_GATES, FeatureGates()]),
)
def test_random_admissions_and_removals_never_share_a_cpu_between_pods(
    script: list[Admit | Remove], options: dict[str, str], gates: FeatureGates
) -> None:
    policy = StaticPolicy(
        dual_socket_ht_32(),
        reserved_system_cpus=CPUSet.parse("0,16"),
        reserved_cpu_millis=0,
        options=options,
        gates=gates,
    )
    state = policy.new_state()
    for step in script:
        if isinstance(step, Admit):
            state = admit(policy, state, step)
        else:
            remove(policy, state, step)
        assert_invariants(policy, state)


@settings(max_examples=30, deadline=None)
@given(script=scripts())
def test_removing_every_container_gives_every_cpu_back(script: list[Admit | Remove]) -> None:
    policy = StaticPolicy(
        dual_socket_ht_32(), reserved_system_cpus=CPUSet.parse("0,16"), reserved_cpu_millis=0, gates=PLR_GATES
    )
    state = policy.new_state()
    for step in script:
        if isinstance(step, Admit):
            state = admit(policy, state, step)
    for uid in sorted(state.entries):
        for name in sorted(state.entries[uid]):
            policy.remove_container(state, uid, name)
    assert state == policy.new_state()
