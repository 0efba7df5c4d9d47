"""The engine's per-decision shortcuts give the answers a from-scratch engine gives.

A decision reads the node's used requests from a running total (``EngineState.used``) and works on
a copy whose per-pod maps are shared copy-on-write with the committed state (``EngineState.copy``,
``CPUState.copy``, ``MemoryState.copy``). Both are only correct if every write keeps them up to date
and nothing writes through a shared map. The property below runs random admission / release / resize
walks and, before every step, restores a twin engine from the snapshot (its total summed afresh, no
map shared with anything): the two must give the same decision and end in the same snapshot, the
engine's own consistency check (which recomputes the total) must stay empty, and the state the step
started from must be untouched by the step's working copy.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from enforcer.cpumanager.state import CPUState
from enforcer.engine import builder, podcodec
from enforcer.engine.config import from_kubelet
from enforcer.engine.node import NodeEngine
from enforcer.engine.records import EngineStateView
from enforcer.memorymanager.state import Block, MemoryState
from enforcer.topology import synthetic
from shared.cpuset import CPUSet
from shared.resources import ContainerResources, PodResources, Resources

GiB = 1 << 30
KUBELET: dict[str, Any] = {
    "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
    "cpuManagerPolicy": "static",
    "reservedSystemCPUs": "0",
    "systemReserved": {"memory": "1Gi"},
    "memoryManagerPolicy": "Static",
    "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}}],
}
SHAPES = ("guaranteed", "wide", "pod-level", "init-and-main", "burstable", "best-effort")


def _engine(scope: str, policy: str) -> NodeEngine:
    config = from_kubelet({**KUBELET, "topologyManagerScope": scope, "topologyManagerPolicy": policy})
    # 2 NUMA nodes x 4 cores x 2 threads, 8 GiB each: small enough that walks run out of room often
    return builder.build(synthetic.regular(2, cores_per_numa=4, memory=8 * GiB), config)


def _resources(cpu_millis: int, memory: int, *, guaranteed: bool = True) -> Resources:
    requests = {"cpu": cpu_millis, "memory": memory}
    return Resources(requests, dict(requests) if guaranteed else {})


def _pod(uid: str, shape: str, cpus: int) -> PodResources:
    def make(*containers: ContainerResources, pod: Resources | None = None) -> PodResources:
        return PodResources(uid=uid, namespace="walk", name=uid, containers=containers, pod=pod)

    if shape == "guaranteed":
        return make(ContainerResources("main", "app", _resources(cpus * 1000, cpus * GiB // 2)))
    if shape == "wide":  # more memory than one NUMA node: spans both, or is refused under single-numa-node
        return make(ContainerResources("main", "app", _resources(cpus * 1000, 9 * GiB)))
    if shape == "pod-level":
        main = ContainerResources("main", "app", _resources(cpus * 1000, GiB // 2))
        return make(ContainerResources("sidecar", "sidecar"), main, pod=_resources((cpus + 1) * 1000, GiB))
    if shape == "init-and-main":
        init = ContainerResources("setup", "init", _resources(cpus * 1000, GiB // 2))
        return make(init, ContainerResources("main", "app", _resources(cpus * 1000, GiB // 2)))
    if shape == "burstable":
        return make(ContainerResources("main", "app", _resources(500 * cpus, GiB // 4, guaranteed=False)))
    return make(ContainerResources("main", "app"))


def _resized(pod: PodResources, cpus: int) -> PodResources:
    main = pod.containers[-1]
    guaranteed = bool(main.resources.limits)
    grown = ContainerResources(main.name, main.kind, _resources(cpus * 1000, GiB // 2, guaranteed=guaranteed))
    return PodResources(
        uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        containers=(*pod.containers[:-1], grown),
        pod=None if pod.pod is None else _resources((cpus + 1) * 1000, GiB),
        qos_class=pod.qos_class,
    )


def _managers_and_pods(state: EngineStateView) -> dict[str, Any]:
    """What a working copy could corrupt through a shared map: the managers' tables, the pods, the total."""
    pods = {uid: (podcodec.to_dict(r.pod), r.spec_hash, r.hint, r.sequence) for uid, r in state.pods.items()}
    return {"cpu": state.cpu.to_dict(), "memory": state.memory.to_dict(), "pods": pods, "used": dict(state.used)}


def _apply(engine: NodeEngine, op: tuple[str, int, str, int], step: int) -> object:
    """One step of the walk on ``engine``; the decision it returned."""
    kind, pick, shape, cpus = op
    held = engine.pod_uids()
    if kind == "admit" or not held:
        return engine.admit(_pod(f"pod-{step}", shape, cpus))
    uid = held[pick % len(held)]
    if kind == "remove":
        return engine.remove(uid)
    return engine.resize(_resized(engine.record(uid).pod, cpus), dry_run=kind == "dry-run")


OPS = st.lists(
    st.tuples(
        st.sampled_from(["admit", "admit", "remove", "resize", "dry-run"]),
        st.integers(0, 15),
        st.sampled_from(SHAPES),
        st.integers(1, 6),
    ),
    min_size=1,
    max_size=25,
)


@pytest.mark.parametrize(("scope", "policy"), [("pod", "best-effort"), ("container", "single-numa-node")])
@given(ops=OPS)
def test_incremental_engine_decides_as_one_restored_from_scratch(scope: str, policy: str, ops: list[Any]) -> None:
    engine = _engine(scope, policy)
    for step, op in enumerate(ops):
        twin = builder.restore(engine.topology, engine.config, engine.snapshot())
        before_state = engine.state
        before = _managers_and_pods(before_state)

        decision = _apply(engine, op, step)

        assert decision == _apply(twin, op, step), f"step {step}: {op}"
        assert engine.snapshot() == twin.snapshot(), f"step {step}: {op}"
        assert (
            engine.state.used
            == twin.state.used
            == builder.restore(engine.topology, engine.config, engine.snapshot()).state.used
        )
        assert engine.check() == [], f"step {step}: {op}"
        if engine.state is not before_state and op[0] in ("admit", "remove"):
            # the step committed a copy: the state it started from must not show the copy's writes
            assert _managers_and_pods(before_state) == before, f"step {step}: {op}"


def test_a_refused_admission_leaves_the_running_total_and_the_maps_as_they_were() -> None:
    engine = _engine("pod", "single-numa-node")
    for index in range(3):
        assert engine.admit(_pod(f"fit-{index}", "guaranteed", 2)).admitted
    before = _managers_and_pods(engine.state)
    refused = engine.admit(_pod("too-big", "guaranteed", 9))  # fits the node, not one NUMA node
    assert not refused.admitted and refused.reason == "TopologyAffinityError"
    assert _managers_and_pods(engine.state) == before
    assert engine.check() == []


def test_the_running_total_follows_admit_resize_and_release() -> None:
    engine = _engine("container", "best-effort")
    assert engine.admit(_pod("a", "guaranteed", 2)).admitted
    assert engine.admit(_pod("b", "burstable", 1)).admitted
    assert engine.used_requests() == {"cpu": 2500, "memory": GiB + GiB // 4}
    assert engine.used_requests(excluding="a") == {"cpu": 500, "memory": GiB // 4}
    assert engine.resize(_resized(engine.record("b").pod, 2)).status == "Accepted"
    assert engine.used_requests() == {"cpu": 4000, "memory": GiB + GiB // 2}
    engine.remove("a")
    engine.remove("b")
    assert engine.used_requests() == {} and engine.state.used == {}


def test_the_running_total_is_derived_never_persisted() -> None:
    engine = _engine("pod", "best-effort")
    assert engine.admit(_pod("a", "pod-level", 2)).admitted
    snapshot = engine.snapshot()
    assert "used" not in snapshot and set(snapshot) == {
        "version", "node", "topology", "config", "compatibility", "cpu", "memory", "pods",
        "pendingResizes", "infeasibleResizes", "counters", "sequence",
    }  # fmt: skip
    assert builder.restore(engine.topology, engine.config, snapshot).state.used == engine.state.used


def test_check_reports_a_running_total_that_drifted_from_the_pods() -> None:
    engine = _engine("pod", "best-effort")
    assert engine.admit(_pod("a", "guaranteed", 1)).admitted
    engine._state.used["cpu"] += 1000  # the corruption under test: only a bug inside the engine could do this
    problems = engine.check()
    assert len(problems) == 1 and problems[0].startswith("running total of requests {'cpu': 2000")


def test_cpu_state_copies_share_per_pod_maps_copy_on_write() -> None:
    original = CPUState("static", default=CPUSet.parse("4-7"))
    original.set_container_cpus("p", "a", CPUSet.parse("0"))
    original.set_container_cpus("p", "b", CPUSet.parse("1"))
    original.record_original("p", "a", CPUSet.parse("0"))
    before = original.to_dict()
    for change in (
        lambda s: s.set_container_cpus("p", "c", CPUSet.parse("2")),
        lambda s: s.set_container_cpus("p", "a", CPUSet.parse("3")),
        lambda s: s.delete_container("p", "a"),
        lambda s: s.record_original("p", "b", CPUSet.parse("1")),
        lambda s: s.delete_pod("p"),
    ):
        work = original.copy()
        change(work)
        assert work.to_dict() != before
        assert original.to_dict() == before


def test_cpu_state_delete_container_keeps_the_kubelet_semantics() -> None:
    state = CPUState("static", entries={"p": {"a": CPUSet.parse("0")}, "empty": {}})
    state.delete_container("p", "missing")
    assert state.entries == {"p": {"a": CPUSet.parse("0")}, "empty": {}}
    state.delete_container("empty", "a")  # a pod map left empty disappears, as before
    state.delete_container("p", "a")
    assert state.entries == {}


def test_memory_state_copies_share_per_pod_maps_copy_on_write() -> None:
    block = Block((0,), "memory", GiB)
    original = MemoryState("Static")
    original.set_container_blocks("p", "a", [block])
    original.set_container_blocks("p", "b", [block])
    original.set_pod_blocks("p", [block])
    before = original.to_dict()
    for change in (
        lambda s: s.set_container_blocks("p", "c", [block]),
        lambda s: s.set_container_blocks("p", "a", []),
        lambda s: s.delete_container("p", "a"),
        lambda s: s.set_pod_blocks("p", []),
        lambda s: s.delete_pod("p"),
    ):
        work = original.copy()
        change(work)
        assert work.to_dict() != before
        assert original.to_dict() == before
    handed_out = original.container_blocks("p", "a")
    assert handed_out is not None
    handed_out.append(block)  # a reader's list is its own
    assert original.to_dict() == before


@pytest.mark.parametrize(("scope", "policy"), [("pod", "best-effort"), ("container", "single-numa-node")])
@given(ops=OPS, shape=st.sampled_from(SHAPES), cpus=st.integers(1, 9))
def test_a_trial_decides_as_admit_and_commits_nothing(
    scope: str, policy: str, ops: list[Any], shape: str, cpus: int
) -> None:
    """``trial`` (the scheduler extender's dry run) gives admit's decision and the state admit leaves,
    while the engine keeps its committed state, refusal counters included."""
    engine = _engine(scope, policy)
    for step, op in enumerate(ops):
        _apply(engine, op, step)
    candidate = _pod("candidate", shape, cpus)
    before = engine.snapshot()
    committed = engine.state

    trial = engine.trial(candidate)

    assert engine.snapshot() == before and engine.state is committed
    twin = builder.restore(engine.topology, engine.config, before)
    assert trial.decision == twin.admit(candidate)
    if trial.decision.admitted:
        assert _managers_and_pods(trial.state) == _managers_and_pods(twin.state)
    else:
        assert trial.state is committed
        assert twin.snapshot()["cpu"] == before["cpu"] and twin.snapshot()["memory"] == before["memory"]
