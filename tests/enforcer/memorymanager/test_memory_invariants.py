"""Random admissions and removals keep the memory tables consistent.

Pods of every kind (container scope, classic pod scope, KEP-5526 pod scope)
are admitted on a copy of the state, as the engine does, with hints the policy
itself offered; rejected pods are dropped.  After every step: ``check()`` is
clean (free + reserved == allocatable, charges match blocks, groups hold), the
state survives ``to_dict``/``from_dict`` exactly and passes the restart
validation; once every pod is gone the tables are back to empty.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from memory_builders import HP1G, PLR_GATES, GiB, MiB, counters, ctr, pod, static_policy, uniform_machine

from enforcer.errors import AdmissionRejected
from enforcer.memorymanager.policy_static import StaticMemoryPolicy
from enforcer.memorymanager.state import MemoryState
from enforcer.topology.hints import ProviderHints, TopologyHint
from enforcer.topology.machine import CPUTopology
from shared.resources import ContainerKind, ContainerResources, PodResources

HALF = 512 * MiB
sizes = st.integers(min_value=1, max_value=12).map(lambda n: n * HALF)


@st.composite
def containers(draw: st.DrawFn, prefix: str, kind: ContainerKind, hugepages: bool) -> ContainerResources:
    if kind != "app" and draw(st.booleans()):
        return ctr(f"{prefix}", kind=kind)  # shared (only meaningful under pod-level resources)
    extra = {HP1G: draw(st.sampled_from([GiB, 2 * GiB]))} if hugepages and draw(st.booleans()) else None
    return ctr(prefix, draw(sizes), kind=kind, hugepages=extra)


@dataclass(frozen=True)
class PodPlan:
    pod: PodResources
    mode: str  # "container", "pod" or "plr"
    choices: tuple[int, ...]  # which offered hint to take, per decision


@st.composite
def pod_plans(draw: st.DrawFn, uid: str) -> PodPlan:
    mode = draw(st.sampled_from(["container", "pod", "plr"]))
    hugepages = draw(st.booleans())
    inits = [
        draw(containers(f"i{n}", draw(st.sampled_from(["init", "sidecar"])), hugepages))
        for n in range(draw(st.integers(0, 2)))
    ]
    if mode != "plr":
        inits = [c if c.resources.requests else ctr(c.name, HALF, kind=c.kind) for c in inits]
    apps = [draw(containers(f"a{n}", "app", hugepages)) for n in range(draw(st.integers(1, 3)))]
    if mode == "plr":
        apps += [ctr("shared")] if draw(st.booleans()) else []
        long_running = sum(c.resources.request("memory") for c in inits + apps if c.kind != "init")
        budget = long_running + draw(sizes)
        p = pod(uid, *inits, *apps, plr_memory=budget)
    else:
        p = pod(uid, *inits, *apps)
    choices = tuple(draw(st.lists(st.integers(0, 6), min_size=len(p.containers), max_size=len(p.containers))))
    return PodPlan(p, mode, choices)


def pick(hints: ProviderHints, choice: int) -> TopologyHint | None:
    """What a Topology Manager could hand back: nil for "don't care", else one of the offered hints."""
    if not hints:
        return None
    offered = list(hints.get("memory") or [])
    if not offered:
        raise AdmissionRejected("no memory hint")  # the merge would refuse the pod
    return offered[choice % len(offered)]


def admit(policy: StaticMemoryPolicy, state: MemoryState, plan: PodPlan) -> MemoryState:
    work = state.copy()
    p = plan.pod
    if plan.mode == "container":
        for container, choice in zip(p.containers, plan.choices, strict=True):
            affinity = pick(policy.get_topology_hints(work, p, container), choice)
            policy.allocate(work, p, container, affinity, counters())
    elif plan.mode == "pod":
        affinity = pick(policy.get_pod_topology_hints(work, p), plan.choices[0])
        for container in p.containers:
            policy.allocate(work, p, container, affinity, counters())
    else:
        policy.allocate_pod(work, p, pick(policy.get_pod_topology_hints(work, p), plan.choices[0]), counters())
    return work


def assert_consistent(policy: StaticMemoryPolicy, topology: CPUTopology, state: MemoryState) -> None:
    assert state.check(topology) == []
    for node in state.machine_state.values():
        for t in node.memory_map.values():
            assert t.free + t.reserved == t.allocatable
    again = MemoryState.from_dict(state.to_dict())
    assert again == state
    policy.validate_state(again)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(min_value=2, max_value=3),
    st.lists(st.tuples(st.booleans(), st.integers(0, 5)), min_size=1, max_size=8),
    st.data(),
)
def test_random_admissions_and_removals_keep_tables_consistent(
    numa_nodes: int, steps: list[tuple[bool, int]], data: st.DataObject
) -> None:
    topology = uniform_machine(numa_nodes, 8 * GiB, hugepages_1g=2 * GiB)
    policy = static_policy(topology, {0: {"memory": HALF}}, PLR_GATES)
    state = policy.new_state()
    admitted: list[PodResources] = []
    for n, (add, which) in enumerate(steps):
        if add or not admitted:
            plan = data.draw(pod_plans(f"pod{n}"))
            before = state.to_dict()
            try:
                state = admit(policy, state, plan)
                admitted.append(plan.pod)
                event(f"admitted {plan.mode}")
            except AdmissionRejected:
                event(f"rejected {plan.mode}")
                assert state.to_dict() == before
        else:
            gone = admitted.pop(which % len(admitted))
            order = data.draw(st.permutations([c.name for c in gone.containers]))
            for name in order:
                policy.remove_container(state, gone.uid, name)
            assert gone.uid not in state.entries and gone.uid not in state.pod_entries
        assert_consistent(policy, topology, state)
    for p in admitted:
        for c in p.containers:
            policy.remove_container(state, p.uid, c.name)
    assert state.machine_state == policy.new_state().machine_state
    assert state.entries == {} and state.pod_entries == {}
