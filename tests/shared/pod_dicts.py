"""Builders of raw Pod objects (plain dicts, as the API server sends them) for table-driven tests."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

Quantities = Mapping[str, object]

PODS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "pods"


def load_pod_json(name: str) -> dict[str, Any]:
    """A recorded fixture: what kubectl printed for ``tests/fixtures/pods/src/<name>.yaml``."""
    with (PODS_DIR / f"{name}.json").open() as f:
        data: dict[str, Any] = json.load(f)
    return data


def resources(requests: Quantities | None = None, limits: Quantities | None = None) -> dict[str, Any]:
    stanza: dict[str, Any] = {}
    if requests is not None:
        stanza["requests"] = dict(requests)
    if limits is not None:
        stanza["limits"] = dict(limits)
    return stanza


def container(
    name: str,
    requests: Quantities | None = None,
    limits: Quantities | None = None,
    *,
    sidecar: bool = False,
    resize_policy: Mapping[str, str] | None = None,
    image: str = "app:v1",
    **extra: Any,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": image, **extra}
    if requests is not None or limits is not None:
        c["resources"] = resources(requests, limits)
    if sidecar:
        c["restartPolicy"] = "Always"
    if resize_policy is not None:
        c["resizePolicy"] = [{"resourceName": k, "restartPolicy": v} for k, v in resize_policy.items()]
    return c


def guaranteed(name: str, cpu: object, memory: object, **kw: Any) -> dict[str, Any]:
    return container(name, {"cpu": cpu, "memory": memory}, {"cpu": cpu, "memory": memory}, **kw)


def pod(
    containers: Iterable[dict[str, Any]],
    *,
    init: Iterable[dict[str, Any]] = (),
    pod_resources: dict[str, Any] | None = None,
    name: str = "p",
    namespace: str = "default",
    annotations: Mapping[str, str] | None = None,
    os: str | None = None,
    restart_policy: str | None = None,
    status: dict[str, Any] | None = None,
    **spec_extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers), **spec_extra}
    init_list = list(init)
    if init_list:
        spec["initContainers"] = init_list
    if pod_resources is not None:
        spec["resources"] = pod_resources
    if os is not None:
        spec["os"] = {"name": os}
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if status is not None:
        obj["status"] = status
    return obj


def running_status(
    raw_pod: Mapping[str, Any], *, qos_class: str | None = None, report_resources: bool = True
) -> dict[str, Any]:
    """A kubelet-written status: every app container running, reporting its resources unless told not to."""
    statuses = []
    for c in raw_pod["spec"]["containers"]:
        status: dict[str, Any] = {"name": c["name"], "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
        if report_resources:
            status["resources"] = c.get("resources", {})
            status["allocatedResources"] = c.get("resources", {}).get("requests", {})
        statuses.append(status)
    out: dict[str, Any] = {"phase": "Running", "containerStatuses": statuses}
    if qos_class is not None:
        out["qosClass"] = qos_class
    return out
