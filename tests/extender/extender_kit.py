"""Building blocks for the extender tests: engines of several sizes, their exports, pods, ExtenderArgs.

Pods are plain v1.Pod JSON as kube-scheduler sends them in ``ExtenderArgs.Pod`` (upstream field names);
the seed pods are the recorded ``kubectl create --dry-run=client -o json`` fixtures in tests/fixtures/pods.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.engine.node import NodeEngine
from enforcer.topology import synthetic
from extender.decide import Extender
from extender.directory import EnforcerDirectory
from extender.replica import ReplicaStore

PODS = Path(__file__).resolve().parents[1] / "fixtures" / "pods"
GiB = 1 << 30


def kubelet(numa_nodes: int, *, policy: str = "single-numa-node", scope: str = "pod", **extra: Any) -> dict[str, Any]:
    return {
        "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
        "cpuManagerPolicy": "static",
        "reservedSystemCPUs": "0",
        "systemReserved": {"memory": "1Gi"},
        "memoryManagerPolicy": "Static",
        "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}}],
        "topologyManagerPolicy": policy,
        "topologyManagerScope": scope,
        "topologyManagerPolicyOptions": {"max-allowable-numa-nodes": str(max(8, numa_nodes))},
        **extra,
    }


def engine(numa_nodes: int = 2, cores_per_numa: int = 8, *, name: str = "node", **kubelet_extra: Any) -> NodeEngine:
    """``numa_nodes`` x ``cores_per_numa`` cores x 2 threads, 16 GiB per NUMA node."""
    config = from_kubelet(kubelet(numa_nodes, **kubelet_extra), name=name)
    return builder.build(synthetic.regular(numa_nodes, cores_per_numa=cores_per_numa, memory=16 * GiB), config)


def export(node: str, eng: NodeEngine, *, incarnation: str = "incarnation-1", generation: int = 1) -> dict[str, Any]:
    """What ``GET /replica`` answers (enforcer/service/replica_export.py), made from an engine directly."""
    snapshot = json.loads(json.dumps(eng.snapshot()))
    return {"version": 1, "node": node, "incarnation": incarnation, "generation": generation, "snapshot": snapshot}


def guaranteed(name: str, cpu: str, memory: str = "1Gi", *, uid: str | None = None) -> dict[str, Any]:
    resources = {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid or str(uuid.uuid4())},
        "spec": {
            "schedulerName": "numaguard-scheduler",
            "containers": [{"name": "main", "image": "app:v1", "resources": resources}],
        },
    }


def fixture_pod(name: str) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((PODS / f"{name}.json").read_text())
    raw = copy.deepcopy(raw)
    raw["metadata"].setdefault("name", raw["metadata"].get("generateName", "pod-") + "x7k2")
    raw["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"numaguard-test/{name}"))
    return raw


def args(pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    """``ExtenderArgs`` as kube-scheduler marshals it with nodeCacheCapable: true (``"Nodes": null``)."""
    return {"Pod": pod, "Nodes": None, "NodeNames": nodes}


def extender_over(
    engines: dict[str, NodeEngine], *, freshness: float = 60.0, clock: Any = None, **kwargs: Any
) -> Extender:
    """An extender whose replicas are the engines' current states, every node in the directory."""
    store = ReplicaStore(freshness=freshness, **({} if clock is None else {"clock": clock}))
    for name, eng in engines.items():
        store.update(name, export(name, eng))
    directory = EnforcerDirectory({name: f"https://{name}:8443" for name in engines})
    return Extender(store, directory, **kwargs)
