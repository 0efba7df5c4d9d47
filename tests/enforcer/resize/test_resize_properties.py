"""Invariants of random add / resize / remove sequences in extended mode.

After every step: the engine's own checks hold, no CPU is exclusive to two pods, the shared pool and the
assignments partition the machine, every exclusive container holds its promised CPUs and exactly as
many CPUs as it asks for.  A resize that is not Accepted changes nothing but the pending queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from resize_builders import assert_consistent, bare, container, engine, pod

from enforcer.engine.node import NodeEngine
from shared.resources import PodResources

NAMES = ("p0", "p1", "p2", "p3")


@dataclass(frozen=True)
class Op:
    kind: str  # add | resize | remove
    name: str
    shape: str  # exclusive | shared | burstable | budget
    size: int
    memory_gi: int
    twist: bool = False  # resize: exclusive <-> shared CPUs; budget pods: no room left for the sidecar


def build(op: Op, shape: str) -> PodResources:
    memory = f"{op.memory_gi}Gi"
    if op.twist and shape in ("exclusive", "shared"):
        shape = "shared" if shape == "exclusive" else "exclusive"
    if shape == "exclusive":
        return pod(op.name, container("c", str(op.size), memory))
    if shape == "shared":
        return pod(op.name, container("c", f"{op.size}500m", memory))
    if shape == "burstable":
        return pod(op.name, container("c", str(op.size), memory, cpu_limit=str(op.size + 2), memory_limit="8Gi"))
    # a KEP-5526 pod: exclusive slice of ``size`` inside a budget one CPU / 1Gi larger, and a shared sidecar
    return pod(
        op.name,
        bare("sidecar", kind="sidecar"),
        container("app", str(op.size), memory),
        pod_cpu=str(op.size if op.twist else op.size + 1 + op.size % 2),
        pod_memory=f"{op.memory_gi + 1}Gi",
    )


ops = st.builds(
    Op,
    kind=st.sampled_from(["add", "add", "add", "resize", "resize", "resize", "resize", "remove"]),
    name=st.sampled_from(NAMES),
    shape=st.sampled_from(["exclusive", "exclusive", "shared", "burstable", "budget"]),
    size=st.integers(min_value=1, max_value=16),
    memory_gi=st.integers(min_value=1, max_value=60),
    twist=st.sampled_from([False, False, False, False, True]),
)


adds = st.builds(
    Op,
    kind=st.just("add"),
    name=st.sampled_from(NAMES),
    shape=st.sampled_from(["exclusive", "exclusive", "shared", "burstable", "budget"]),
    size=st.integers(min_value=1, max_value=6),
    memory_gi=st.integers(min_value=1, max_value=16),
)
sequences = st.builds(
    lambda first, rest: first + rest,
    st.lists(adds, min_size=2, max_size=4),
    st.lists(ops, min_size=4, max_size=16),
)


def without_queues(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("pendingResizes", "infeasibleResizes", "sequence")}


def check_exclusive_sizes(node: NodeEngine) -> None:
    state = node.state.cpu
    for uid, record in node.state.pods.items():
        for c in record.pod.containers:
            if c.kind == "init":
                continue
            count = node.cpu_policy.guaranteed_cpus(record.pod, c)
            held = state.container_cpus(uid, c.name)
            original = state.original_cpus(uid, c.name)
            if count and held is not None:
                assert len(held) == count, (uid, c.name, held, count)
                assert original is not None and original.is_subset_of(held)


def run(node: NodeEngine, sequence: list[Op]) -> None:
    shapes: dict[str, str] = {}
    for op in sequence:
        if op.kind == "add":
            if op.name in shapes:
                continue
            if op.shape == "budget" and node.config.topology_manager_scope != "pod":
                continue
            if node.admit(build(op, op.shape)).admitted:
                shapes[op.name] = op.shape
        elif op.kind == "resize":
            if op.name not in shapes:
                continue
            before = node.snapshot()
            result = node.resize(build(op, shapes[op.name]))
            if result.status != "Accepted":
                assert without_queues(node.snapshot()) == without_queues(before)
        else:
            if node.remove(f"default/{op.name}").known:
                del shapes[op.name]
        assert_consistent(node)
        check_exclusive_sizes(node)


SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(sequences)
def test_container_scope_single_numa_node_with_static_memory(sequence: list[Op]) -> None:
    run(engine(memory=True), sequence)


@SETTINGS
@given(sequences)
def test_pod_scope_with_pod_level_resource_managers(sequence: list[Op]) -> None:
    run(engine(scope="pod", plr=True, memory=True), sequence)


@SETTINGS
@given(sequences, st.sampled_from(["best-effort", "none", "restricted"]))
def test_other_topology_policies(sequence: list[Op], policy: str) -> None:
    run(engine(topology_policy=policy), sequence)


@SETTINGS
@given(sequences)
def test_full_pcpus_only(sequence: list[Op]) -> None:
    run(engine(options={"full-pcpus-only": "true"}, topology_policy="best-effort", scope="pod", plr=True), sequence)
