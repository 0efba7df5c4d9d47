"""The first pod of a new shape, answered through the shared candidate (one pod object dry-run on every
node, what it derives from itself kept in ``PodResources.memo``) == a dry run of a fresh copy of the pod
per node, with nothing derived ahead (the answers before the memo existed).

Random node states (mixed machines, policies, scopes, options and PodLevelResources gates, filled by
random admissions) and random pod shapes (exclusive, fractional, pod-level budgets with sidecars and
init containers, hugepages-free memory sizes); each shape is asked once, as the first pod of its
workload, in a random order over all nodes.  Compared: the filter result, the prioritize scores, and
per node the full :class:`~extender.engine_adapter.DryRun` (placement and usage after, not only the verdict).
The default run tries a few clusters; ``-m slow`` many more.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import pytest
from extender_kit import export

from enforcer.engine import builder, podcodec
from enforcer.engine.config import from_kubelet
from enforcer.engine.node import NodeEngine
from enforcer.topology import synthetic
from extender import engine_adapter
from extender.answer import known
from extender.decide import Extender, prepared_pod
from extender.directory import EnforcerDirectory
from extender.replica import ReplicaStore
from shared import qos
from shared.pod import parse_pod
from shared.resources import PodResources

GiB = 1 << 30


def _kubelet(rng: random.Random, numa: int) -> dict[str, Any]:
    plr = rng.random() < 0.75
    return {
        "featureGates": {"PodLevelResources": plr, "PodLevelResourceManagers": plr and rng.random() < 0.8},
        "cpuManagerPolicy": "static",
        "cpuManagerPolicyOptions": rng.choice(({}, {}, {"full-pcpus-only": "true"})),
        "reservedSystemCPUs": "0",
        "systemReserved": {"memory": "1Gi"},
        "memoryManagerPolicy": "Static",
        "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}}],
        "topologyManagerPolicy": rng.choice(("single-numa-node", "single-numa-node", "restricted", "best-effort")),
        "topologyManagerScope": rng.choice(("pod", "pod", "container")),
        "topologyManagerPolicyOptions": {"max-allowable-numa-nodes": str(max(8, numa))},
    }


def _engine(rng: random.Random, name: str) -> NodeEngine:
    numa = rng.choice((1, 2, 2, 4))
    cores = rng.choice((2, 4, 6))
    config = from_kubelet(_kubelet(rng, numa), name=name)
    return builder.build(synthetic.regular(numa, cores_per_numa=cores, memory=16 * GiB), config)


def _res(cpu: str, memory: str) -> dict[str, Any]:
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}


def _pod(rng: random.Random, index: int) -> dict[str, Any]:
    roll = rng.random()
    spec: dict[str, Any]
    if roll < 0.45:
        cpu = rng.choice(("1", "2", "3", "4", "6", "500m", "1500m"))
        spec = {"containers": [{"name": "app", "image": "a", "resources": _res(cpu, f"{rng.choice((1, 2, 4))}Gi")}]}
    elif roll < 0.6:
        spec = {
            "containers": [
                {"name": "a", "image": "a", "resources": _res(rng.choice(("1", "2")), "1Gi")},
                {"name": "b", "image": "b", "resources": _res(rng.choice(("1", "2", "250m")), "2Gi")},
            ],
            "initContainers": [{"name": "init", "image": "i", "resources": _res(rng.choice(("1", "4")), "1Gi")}],
        }
    else:
        budget = rng.choice((2, 4, 6, 8))
        app = rng.choice((0, budget // 2, budget - 1))
        app_res: dict[str, Any] = _res(str(app), "1Gi") if app else {}
        spec = {
            "resources": _res(str(budget), f"{rng.choice((2, 4, 8))}Gi"),
            "initContainers": [{"name": "side", "image": "s", "restartPolicy": "Always"}],
            "containers": [{"name": "db", "image": "d", "resources": app_res}],
        }
    meta = {"name": f"p-{index}", "namespace": "ns", "uid": str(uuid.UUID(int=rng.getrandbits(128)))}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _cluster(seed: int, nodes: int, fill: int) -> tuple[dict[str, NodeEngine], random.Random]:
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(nodes)]
    engines = {name: _engine(rng, name) for name in names}
    for index in range(fill):
        raw = _pod(rng, 10_000 + index)
        eng = engines[rng.choice(names)]
        eng.admit(parse_pod(raw).to_resources(pod_level_resources=eng.config.gates.pod_level_resources))
    return engines, rng


class _Forgetful(dict[object, Any]):
    """A memo that keeps nothing: every derived value is computed from scratch, as before the memo."""

    def __setitem__(self, key: object, value: Any) -> None:
        del key, value


def _fresh(pod: PodResources) -> PodResources:
    """An equal pod object that shares nothing with ``pod`` and remembers nothing (no memo at all)."""
    copy = podcodec.from_dict(json.loads(json.dumps(podcodec.to_dict(pod))))
    object.__setattr__(copy, "memo", _Forgetful())
    assert copy == pod
    return copy


def _reference(engines: dict[str, NodeEngine], raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """Per node: the filter verdict and message and the score, each from dry runs of fresh pod objects."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    scores: dict[str, int] = {}
    parsed = parse_pod(raw)
    for name, eng in engines.items():
        gate = eng.config.gates.pod_level_resources
        pod = prepared_pod(parsed, gate=gate)
        if pod is None:
            passed.append(name)
            scores[name] = 0
            continue
        never = engine_adapter.dry_run(engine_adapter.empty_twin(eng), _fresh(pod))
        if not never.admitted:
            unresolvable[name] = known(never).message or ""
            continue
        answer = known(engine_adapter.dry_run(eng, _fresh(pod)))
        if answer.verdict == "failed":
            failed[name] = answer.message or ""
        else:
            passed.append(name)
            scores[name] = answer.score
    return {"NodeNames": passed, "FailedNodes": failed, "FailedAndUnresolvableNodes": unresolvable}, scores


def _check(seed: int, *, nodes: int, fill: int, shapes: int) -> None:
    engines, rng = _cluster(seed, nodes, fill)
    store = ReplicaStore(freshness=1e9, clock=lambda: 0.0)
    extender = Extender(store, EnforcerDirectory({n: f"https://{n}:8443" for n in engines}))
    for name, eng in engines.items():
        store.update(name, export(name, eng))
    names = list(engines)
    for index in range(shapes):
        raw = _pod(rng, index)
        rng.shuffle(names)
        body = {"Pod": raw, "Nodes": None, "NodeNames": list(names)}
        result = extender.filter(json.loads(json.dumps(body)))
        want, want_scores = _reference({n: engines[n] for n in names}, raw)
        assert result["NodeNames"] == want["NodeNames"], raw
        assert result["FailedNodes"] == want["FailedNodes"], raw
        assert result["FailedAndUnresolvableNodes"] == want["FailedAndUnresolvableNodes"], raw
        if result["NodeNames"]:
            scores = extender.prioritize({**body, "NodeNames": result["NodeNames"]})
            assert {s["Host"]: s["Score"] for s in scores} == {n: want_scores[n] for n in result["NodeNames"]}, raw
        # the whole dry run, one shared candidate over every node against a fresh pod per node
        for gate in (True, False):
            pod = prepared_pod(parse_pod(raw), gate=gate)
            if pod is None:
                continue
            shared = engine_adapter.candidate(pod)
            for name in names:
                eng = engines[name]
                if eng.config.gates.pod_level_resources == gate:
                    assert engine_adapter.dry_run(eng, shared) == engine_adapter.dry_run(eng, _fresh(pod)), (name, raw)
                    # and the engine's whole trial: decision, view, the managers' states it would leave
                    mine, theirs = eng.trial(shared), eng.trial(_fresh(shared))
                    assert mine.decision == theirs.decision, (name, raw)
                    assert mine.state.cpu.to_dict() == theirs.state.cpu.to_dict(), (name, raw)
                    assert mine.state.memory.to_dict() == theirs.state.memory.to_dict(), (name, raw)
            # what the memo kept is what the pod's functions compute from scratch
            fresh = _fresh(pod)
            for either, overhead in ((True, False), (False, False), (True, True), (False, True)):
                assert qos.effective_pod_requests(
                    shared, pod_level_resources_gate=either, include_overhead=overhead
                ) == qos.effective_pod_requests(_fresh(pod), pod_level_resources_gate=either, include_overhead=overhead)
                assert qos.effective_pod_limits(
                    shared, pod_level_resources_gate=either, include_overhead=overhead
                ) == qos.effective_pod_limits(_fresh(pod), pod_level_resources_gate=either, include_overhead=overhead)
            assert shared.pod_level_resources_set == fresh.pod_level_resources_set


@pytest.mark.parametrize("seed", range(3))
def test_first_pod_answers_equal_fresh_dry_runs(seed: int) -> None:
    _check(seed, nodes=12, fill=30, shapes=10)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 140))
def test_first_pod_answers_equal_fresh_dry_runs_long(seed: int) -> None:
    _check(seed, nodes=30, fill=90, shapes=30)
