"""``numaguard plan`` scenarios: run the engine over add / resize / remove steps.

Input and output follow ``../shared/contracts/plan.md``.  This module is pure:
the CLI reads files (the scenario, a ``topologyFile``) and hands documents in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.engine.node import Decision, NodeEngine, PodConflictError
from enforcer.engine.view import PodView
from enforcer.errors import ConfigError
from enforcer.topology import machine
from enforcer.topology.machine import CPUTopology
from shared import pod as pod_model
from shared.errors import DomainError
from shared.resources import PodResources


class ScenarioError(ConfigError):
    """The scenario document itself is invalid; the message names the field."""

    reason = "InvalidScenario"


@dataclass(frozen=True)
class Step:
    op: str
    index: int
    pod: PodResources | None = None
    target: str | None = None  # namespace/name for remove


def parse_node(node: object, topology_doc: object | None) -> NodeEngine:
    """Build the engine from a scenario's ``node`` section (topology already loaded when it was a file)."""
    if not isinstance(node, Mapping):
        raise ScenarioError("node: expected an object")
    topo_source = topology_doc if topology_doc is not None else node.get("topology")
    if topo_source is None:
        raise ScenarioError("node.topology: required (inline) unless node.topologyFile is given")
    try:
        topology: CPUTopology = machine.from_document(topo_source)
        config = from_kubelet(
            node.get("kubelet"),
            name=str(node.get("name") or "node"),
            compatibility=str(node.get("compatibility") or "extended"),
        )
        return builder.build(topology, config)
    except ConfigError as err:
        raise ScenarioError(f"node: {err.message}") from None


def parse_steps(raw_steps: object) -> list[Step]:
    if not isinstance(raw_steps, list):
        raise ScenarioError("steps: expected a list")
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps):
        path = f"steps[{i}]"
        if not isinstance(raw, Mapping) or len(raw) != 1:
            raise ScenarioError(f"{path}: expected exactly one of add, resize, remove")
        ((op, body),) = raw.items()
        if op in ("add", "resize"):
            steps.append(Step(op, i, pod=_pod(body, f"{path}.{op}")))
        elif op == "remove":
            if not isinstance(body, str) or not body:
                raise ScenarioError(f"{path}.remove: expected namespace/name")
            target = body if "/" in body else f"default/{body}"
            steps.append(Step(op, i, target=target))
        else:
            raise ScenarioError(f"{path}: unknown step {op!r} (expected add, resize or remove)")
    return steps


def _pod(raw: object, path: str) -> PodResources:
    try:
        parsed = pod_model.parse_pod(raw)
        resources = parsed.to_resources()
    except DomainError as err:
        raise ScenarioError(f"{path}: {err}") from None
    if not resources.name:
        raise ScenarioError(f"{path}.metadata.name: required")
    # contracts/plan.md: a pod's identity is metadata.uid when given, else namespace/name
    return resources if resources.uid else _with_uid(resources, resources.key)


def run(doc: object, *, topology_doc: object | None = None) -> dict[str, Any]:
    """Run a whole scenario; returns the plan contract's ``{"steps": [...]}``."""
    if not isinstance(doc, Mapping):
        raise ScenarioError("scenario: expected an object with node and steps")
    engine = parse_node(doc.get("node"), topology_doc)
    steps = parse_steps(doc.get("steps", []))
    return {"steps": [run_step(engine, step) for step in steps]}


def run_step(engine: NodeEngine, step: Step) -> dict[str, Any]:
    if step.op == "add":
        assert step.pod is not None
        return _add(engine, step.pod)
    if step.op == "resize":
        assert step.pod is not None
        return _resize(engine, step.pod)
    assert step.target is not None
    return _remove(engine, step.target)


def _base(op: str, key: str) -> dict[str, Any]:
    return {
        "op": op,
        "pod": key,
        "admitted": False,
        "reason": None,
        "message": None,
        "qosClass": None,
        "numaAffinity": None,
        "podSharedPool": None,
        "containers": {},
        "resizesApplied": [],
    }


def _fill(out: dict[str, Any], view: PodView) -> None:
    out["qosClass"] = view.qos_class
    out["numaAffinity"] = None if view.numa_affinity is None else list(view.numa_affinity)
    pool = view.pod_shared_pool()
    out["podSharedPool"] = None if pool is None else pool.model_dump(by_alias=True)
    out["containers"] = {name: c.model_dump(by_alias=True) for name, c in view.allocated_containers().items()}


def _add(engine: NodeEngine, pod: PodResources) -> dict[str, Any]:
    out = _base("add", pod.key)
    try:
        decision: Decision = engine.admit(pod)
    except PodConflictError as err:
        out.update(reason=err.reason, message=err.message)
        return out
    out.update(admitted=decision.admitted, reason=decision.reason, message=decision.message)
    out["qosClass"] = decision.qos_class
    if decision.view is not None:
        _fill(out, decision.view)
    return out


def _resize(engine: NodeEngine, pod: PodResources) -> dict[str, Any]:
    out = _base("resize", pod.key)
    uid = pod.uid if pod.uid in engine.state.pods else engine.find(pod.namespace, pod.name)
    if uid is None:
        out.update(reason="NotFound", message=f"pod {pod.key} is not on this node", resize="Infeasible")
        return out
    if uid != pod.uid:
        pod = _with_uid(pod, uid)
    result = engine.resize(pod)
    out.update(
        admitted=result.status != "Infeasible",
        reason=result.reason,
        message=result.message,
        resize=result.status,
        resizesApplied=list(result.resizes_applied),
    )
    if result.view is not None:
        _fill(out, result.view)
    return out


def _remove(engine: NodeEngine, key: str) -> dict[str, Any]:
    out = _base("remove", key)
    namespace, _, name = key.partition("/")
    uid = engine.find(namespace, name)
    if uid is None:
        out.update(reason="NotFound", message=f"pod {key} is not on this node")
        return out
    result = engine.remove(uid)
    out.update(admitted=result.known, resizesApplied=list(result.resizes_applied))
    return out


def _with_uid(pod: PodResources, uid: str) -> PodResources:
    return PodResources(
        uid=uid,
        namespace=pod.namespace,
        name=pod.name,
        containers=pod.containers,
        pod=pod.pod,
        qos_class=pod.qos_class,
        priority=pod.priority,
    )
