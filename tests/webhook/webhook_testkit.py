"""Test helpers for the webhook: recorded reviews, a JSONPatch applier, and a fake enforcer.

The fake enforcer speaks the ``shared.contract`` API (``POST /allocations``,
``POST /allocations/{uid}/resize``) with scripted answers, so the webhook's
client, handlers and app are tested against the contract rather than against
mocks of our own functions.  It serves both as an ``httpx.MockTransport``
handler and (wrapped in FastAPI by the TLS integration test) over a socket.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from shared import contract, qos
from shared import pod as pod_model

AppFactory = Callable[..., FastAPI]

REVIEWS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "reviews"
PODS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "pods"
NODE = "node-a"
NODE_URL = "https://node-a.enforcers.test:8443"


def review_bytes(name: str) -> bytes:
    suffix = "" if "." in name else ".json"
    return (REVIEWS_DIR / f"{name}{suffix}").read_bytes()


def load_review(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(review_bytes(name))
    return document


def review_names(prefix: str) -> list[str]:
    return sorted(p.stem for p in REVIEWS_DIR.glob(f"{prefix}*.json"))


# -- JSONPatch (RFC 6902), enough for the operations the webhook emits ---------------------------------


def _tokens(path: str) -> list[str]:
    assert path.startswith("/"), path
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def apply_patch(document: Any, ops: list[dict[str, Any]]) -> Any:
    """A copy of ``document`` with ``ops`` applied; raises on a path the RFC forbids (e.g. a missing parent)."""
    doc = copy.deepcopy(document)
    for op in ops:
        *parents, last = _tokens(op["path"])
        target = doc
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        if op["op"] == "add":
            if isinstance(target, list):
                target.insert(len(target) if last == "-" else int(last), copy.deepcopy(op["value"]))
            else:
                assert isinstance(target, dict), f"add below a non-object at {op['path']}"
                target[last] = copy.deepcopy(op["value"])
        elif op["op"] == "replace":
            assert last in target, f"replace of a missing member {op['path']}"
            target[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del target[last]
        elif op["op"] == "test":
            assert target[last] == op["value"]
        else:
            raise AssertionError(f"unsupported op {op['op']}")
    return doc


def decoded_patch(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSONPatch of an AdmissionReview response (``[]`` when it carries none)."""
    body = response.get("response", response)
    if "patch" not in body:
        return []
    assert body["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(body["patch"], validate=True))
    return ops


# -- the fake enforcer -----------------------------------------------------------------------------------


@dataclass
class FakeEnforcer:
    """Scripted answers by pod name; records every request it receives.

    ``refuse``: pod name -> (reason, message) answered 403; ``conflict``: pod
    names answered 409; ``fail_first``: how many calls answer 503 before the
    real answer; ``resize_status``: the ResizeResult status for resizes;
    ``unknown_pods``: names whose resize is a 404.
    """

    node: str = NODE
    refuse: dict[str, tuple[str, str]] = field(default_factory=dict)
    conflict: set[str] = field(default_factory=set)
    unknown_pods: set[str] = field(default_factory=set)
    resize_status: contract.ResizeOutcome = "Accepted"
    resize_reason: str | None = None
    resize_message: str | None = None
    fail_first: int = 0
    requests: list[httpx.Request] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def allocation_for(self, pod: Mapping[str, Any], node: str) -> contract.Allocation:
        parsed = pod_model.parse_pod(pod)
        resources = parsed.to_resources()
        containers = {
            c.name: contract.ContainerAllocation(
                assignment="pod_exclusive" if c.is_guaranteed_equivalent() else "pod_shared",
                memory_assignment="pod_exclusive" if c.is_guaranteed_equivalent() else "pod_shared",
                cpus="1-3,17-19" if c.is_guaranteed_equivalent() else "4,20",
                memory_numa_nodes=[0],
                cfs_quota="none" if c.is_guaranteed_equivalent() else "pod",
            )
            for c in resources.containers
            if c.is_long_running
        }
        return contract.Allocation(
            uid=parsed.metadata.uid,
            namespace=parsed.namespace,
            name=parsed.metadata.name,
            node=node,
            qos_class=qos.qos_class(resources),
            numa_affinity=[0],
            pod_shared_pool=contract.PodSharedPool(cpus="4,20", memory_numa_nodes=[0]),
            containers=containers,
            spec_hash=contract.spec_hash(resources),
        )

    def answer(self, method: str, path: str, query: Mapping[str, str], body: Mapping[str, Any]) -> tuple[int, str]:
        """(status, JSON body) for one request: the logic shared by the mock transport and the served app."""
        self.bodies.append(dict(body))
        if self.fail_first > 0:
            self.fail_first -= 1
            return 503, contract.ErrorBody(reason="Unavailable", message="restarting").to_json()
        if method == "POST" and path == "/allocations":
            pod = body["pod"]
            name = pod["metadata"]["name"]
            if name in self.refuse:
                reason, message = self.refuse[name]
                return 403, contract.ErrorBody(reason=reason, message=message).to_json()
            if name in self.conflict:
                return 409, contract.ErrorBody(
                    reason="AllocationConflict", message="uid known with another spec"
                ).to_json()
            return 201, self.allocation_for(pod, body["nodeName"]).to_json()
        if method == "POST" and path.startswith("/allocations/") and path.endswith("/resize"):
            pod = body["pod"]
            if pod["metadata"]["name"] in self.unknown_pods:
                return 404, contract.ErrorBody(reason="NotFound", message="no such pod").to_json()
            result = contract.ResizeResult(
                status=self.resize_status,
                reason=self.resize_reason,
                message=self.resize_message,
                allocation=self.allocation_for(pod, self.node),
            )
            return 200, result.to_json()
        return 404, contract.ErrorBody(reason="NotFound", message=f"no route {method} {path}").to_json()

    def handle(self, request: httpx.Request) -> httpx.Response:
        """An ``httpx.MockTransport`` handler."""
        self.requests.append(request)
        body = json.loads(request.content) if request.content else {}
        status, text = self.answer(request.method, request.url.path, dict(request.url.params), body)
        return httpx.Response(status, content=text.encode(), headers={"Content-Type": "application/json"})

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)
