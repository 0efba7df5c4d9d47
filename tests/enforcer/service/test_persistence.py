"""Per-change patches rebuild exactly the engine's snapshot: after every admission, release and resize, on disk.

The patches are written from the pods a change touched (``enforcer.service.persistence``);
if the engine ever changed a part of its document the patches miss, the state
on disk would drift from memory.  These walks compare the two after every step,
reloading from the files as a restart would.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.engine.node import NodeEngine
from enforcer.service import persistence
from enforcer.state import journal
from enforcer.topology import synthetic
from shared.resources import ContainerResources, PodResources, Resources

GiB = 1 << 30
KUBELET: dict[str, Any] = {
    "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
    "cpuManagerPolicy": "static",
    "reservedSystemCPUs": "0",
    "systemReserved": {"memory": "1Gi"},
    "memoryManagerPolicy": "Static",
    "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}}],
    "topologyManagerPolicy": "best-effort",
}


def _engine(scope: str) -> NodeEngine:
    config = from_kubelet({**KUBELET, "topologyManagerScope": scope})
    return builder.build(synthetic.regular(2, cores_per_numa=4, memory=8 * GiB), config)


def _resources(cpu_millis: int, memory: int, *, guaranteed: bool = True) -> Resources:
    requests = {"cpu": cpu_millis, "memory": memory}
    return Resources(requests, dict(requests) if guaranteed else {})


def _pod(rng: random.Random, uid: str) -> PodResources:
    shape = rng.choice(["guaranteed", "pod-level", "burstable", "best-effort"])
    cpus = rng.randint(1, 3)
    if shape == "guaranteed":
        containers = (ContainerResources("main", "app", _resources(cpus * 1000, cpus * GiB // 2)),)
        return PodResources(uid=uid, namespace="walk", name=uid, containers=containers)
    if shape == "pod-level":
        containers = (
            ContainerResources("sidecar", "sidecar"),
            ContainerResources("main", "app", _resources(cpus * 1000, GiB // 2)),
        )
        budget = _resources((cpus + 1) * 1000, GiB)
        return PodResources(uid=uid, namespace="walk", name=uid, containers=containers, pod=budget)
    if shape == "burstable":
        containers = (ContainerResources("main", "app", _resources(500, GiB // 4, guaranteed=False)),)
        return PodResources(uid=uid, namespace="walk", name=uid, containers=containers)
    return PodResources(uid=uid, namespace="walk", name=uid, containers=(ContainerResources("main", "app"),))


def _resized(rng: random.Random, pod: PodResources) -> PodResources:
    cpus = rng.randint(1, 4)
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


def _walk_step(rng: random.Random, engine: NodeEngine, step: int) -> str:
    """One random admission, release or resize; returns the uid it was about."""
    held = engine.pod_uids()
    roll = rng.random()
    if held and roll < 0.3:
        uid = rng.choice(held)
        engine.remove(uid)
        return uid
    if held and roll < 0.55:
        uid = rng.choice(held)
        engine.resize(_resized(rng, engine.record(uid).pod))
        return uid
    uid = f"pod-{step}"
    engine.admit(_pod(rng, uid))
    return uid


@pytest.mark.parametrize("scope", ["pod", "container"])
@pytest.mark.parametrize("seed", range(6))
def test_the_journal_replays_to_the_engines_snapshot_after_every_change(tmp_path: Path, seed: int, scope: str) -> None:
    rng = random.Random(seed)
    engine = _engine(scope)
    store = journal.JournaledStore(tmp_path / "state.json")
    assert store.load() is None
    durable = persistence.EnginePersistence(store, None, engine)
    appended = 0

    for step in range(60):
        uid = _walk_step(rng, engine, step) if step else ""
        write = durable.prepare(engine, {uid} if uid else ())
        appended += write.document is None
        durable.write(write)
        durable.settle(engine, write, failed=False)

        reloaded = journal.JournaledStore(store.path).load()
        assert reloaded is not None
        assert persistence.normalised(reloaded) == persistence.normalised(engine.snapshot()), f"step {step}"
    assert appended == 59  # every change after the first save was a patch, not a whole document
    assert durable.drift == 0
    restored = builder.restore(engine.topology, engine.config, journal.JournaledStore(store.path).load() or {})
    assert restored.check() == [] and restored.snapshot() == engine.snapshot()


def test_a_change_without_a_named_pod_is_still_found_by_its_records(tmp_path: Path) -> None:
    """The caller's uid is a hint: a record the engine replaced is found even when nobody named it."""
    rng = random.Random(1)
    engine = _engine("pod")
    store = journal.JournaledStore(tmp_path / "state.json")
    store.load()
    durable = persistence.EnginePersistence(store, None, engine)
    for step in range(30):
        if step:
            _walk_step(rng, engine, step)
        write = durable.prepare(engine)
        durable.write(write)
        durable.settle(engine, write, failed=False)
    assert persistence.normalised(journal.JournaledStore(store.path).load() or {}) == persistence.normalised(
        engine.snapshot()
    )


def test_a_patch_touches_only_the_changed_pod_and_the_node_wide_values(tmp_path: Path) -> None:
    engine = _engine("pod")
    store = journal.JournaledStore(tmp_path / "state.json")
    store.load()
    durable = persistence.EnginePersistence(store, None, engine)
    rng = random.Random(3)
    for step in range(3):
        engine.admit(_pod(rng, f"held-{step}"))
    first = durable.prepare(engine)
    durable.write(first)
    durable.settle(engine, first, failed=False)

    new = PodResources(
        uid="new", namespace="walk", name="new", containers=(ContainerResources("main", "app", _resources(1000, GiB)),)
    )
    assert engine.admit(new).admitted
    write = durable.prepare(engine, {"new"})

    paths = [tuple(op.get("set") or op["del"]) for op in write.ops]
    for path in paths:
        pod_keyed = path[:-1] in persistence.POD_KEYED
        node_wide = path[:2] == ("memory", "machineState") or path in {("cpu", "defaultCpuSet"), ("counters",)}
        assert (pod_keyed and path[-1] == "new") or node_wide or path == ("sequence",), path
    assert ("pods", "new") in paths and ("cpu", "defaultCpuSet") in paths


def test_a_compaction_is_due_once_the_journal_outgrows_its_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(persistence, "COMPACT_MIN_BYTES", 0)
    engine = _engine("pod")
    store = journal.JournaledStore(tmp_path / "state.json")
    store.load()
    durable = persistence.EnginePersistence(store, None, engine)
    rng = random.Random(5)
    whole = 0
    for step in range(40):
        if step:
            _walk_step(rng, engine, step)
        write = durable.prepare(engine)
        whole += write.document is not None
        durable.write(write)
        durable.settle(engine, write, failed=False)
    assert 1 < whole < 40
    assert store.journal_bytes <= persistence.COMPACT_RATIO * store.base_bytes + 64 * 1024
    assert durable.drift == 0


@pytest.mark.parametrize("scope", ["pod", "container"])
@pytest.mark.parametrize("seed", range(4))
def test_the_nodes_compared_as_objects_give_the_patches_of_serialising_every_node(
    tmp_path: Path, seed: int, scope: str
) -> None:
    """Only the NUMA nodes unequal to their copy as written are serialised: the ops are those of serialising all."""
    rng = random.Random(seed)
    engine = _engine(scope)
    store = journal.JournaledStore(tmp_path / "state.json")
    store.load()
    durable = persistence.EnginePersistence(store, None, engine)
    numa_ops = 0
    for step in range(60):
        uid = _walk_step(rng, engine, step) if step else ""
        every_node = copy.copy(durable)  # the same disk, without the copies: every node serialised and compared
        every_node._numa = None
        write = durable.prepare(engine, {uid} if uid else ())
        if write.document is None:
            assert write.ops == every_node.prepare(engine, {uid} if uid else ()).ops, f"step {step}"
        numa_ops += sum(tuple(op.get("set") or op["del"])[:2] == persistence.MACHINE_STATE for op in write.ops)
        durable.write(write)
        durable.settle(engine, write, failed=rng.random() < 0.1)  # a failed write forgets the copies
    assert numa_ops > 10  # the walk did change the tables
