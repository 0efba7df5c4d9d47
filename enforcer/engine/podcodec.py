"""PodResources <-> plain JSON, for the engine's snapshots.

The engine persists the integer view it admitted (not the raw Pod), so a
restart restores exactly what was decided even if quantity parsing ever
changes.
"""

from __future__ import annotations

from typing import Any

from shared.resources import ContainerResources, PodResources, Resources


def _res(r: Resources) -> dict[str, Any]:
    return {"requests": dict(sorted(r.requests.items())), "limits": dict(sorted(r.limits.items()))}


def _unres(d: dict[str, Any]) -> Resources:
    return Resources(
        requests={str(k): int(v) for k, v in d.get("requests", {}).items()},
        limits={str(k): int(v) for k, v in d.get("limits", {}).items()},
    )


def to_dict(pod: PodResources) -> dict[str, Any]:
    return {
        "uid": pod.uid,
        "namespace": pod.namespace,
        "name": pod.name,
        "qosClass": pod.qos_class,
        "priority": pod.priority,
        "pod": None if pod.pod is None else _res(pod.pod),
        "containers": [{"name": c.name, "kind": c.kind, "resources": _res(c.resources)} for c in pod.containers],
    }


def from_dict(d: dict[str, Any]) -> PodResources:
    return PodResources(
        uid=str(d["uid"]),
        namespace=str(d["namespace"]),
        name=str(d["name"]),
        qos_class=d.get("qosClass"),
        priority=int(d.get("priority", 0)),
        pod=None if d.get("pod") is None else _unres(d["pod"]),
        containers=tuple(
            ContainerResources(name=str(c["name"]), kind=c["kind"], resources=_unres(c["resources"]))
            for c in d["containers"]
        ),
    )
