"""Dispatch: which handler a review reaches, bugs answered as denials, and junk that never causes a 5xx."""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webhook_testkit import NODE, NODE_URL, FakeEnforcer, load_review

from webhook import admission, discovery, main, pod_cache, review
from webhook.settings import WebhookSettings


def request(**fields: Any) -> review.AdmissionRequest:
    base: dict[str, Any] = {
        "uid": "u",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
    }
    return review.AdmissionRequest.model_validate({**base, **fields})


@pytest.mark.parametrize(
    ("fields", "label"),
    [
        ({}, "create"),
        ({"operation": "UPDATE"}, "update"),
        ({"operation": "DELETE"}, "delete"),
        ({"operation": "CONNECT"}, "other"),
        ({"operation": "UPDATE", "subResource": "resize"}, "resize"),
        ({"subResource": "binding", "kind": {"group": "", "version": "v1", "kind": "Binding"}}, "binding"),
        ({"operation": "UPDATE", "subResource": "status"}, "other"),
        ({"operation": "UPDATE", "subResource": "ephemeralcontainers"}, "other"),
        ({"subResource": "eviction", "kind": {"group": "policy", "version": "v1", "kind": "Eviction"}}, "other"),
        ({"resource": {"group": "apps", "version": "v1", "resource": "pods"}}, "other"),
        ({"resource": {"group": "", "version": "v1", "resource": "configmaps"}}, "other"),
    ],
)
def test_each_request_reaches_its_handler(fields: dict[str, Any], label: str) -> None:
    assert admission.classify(request(**fields)) == label


class BrokenLookup:
    async def find(self, *, namespace: str, name: str, uid: str) -> pod_cache.SeenPod | None:
        raise KeyError("a bug")

    def is_ready(self) -> bool:
        return True


@pytest.mark.anyio
async def test_a_bug_in_a_handler_is_answered_as_a_500_denial_not_an_http_error() -> None:
    app = main.create_app(
        WebhookSettings(),
        components=main.Components(
            directory=discovery.StaticDirectory({NODE: NODE_URL}),
            enforcer_transport=FakeEnforcer().transport(),
            extra_pod_sources=[BrokenLookup()],
        ),
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as http:
        response = await http.post("/mutate", json=load_review("binding-unknown-pod"))
    assert response.status_code == 200
    assert response.json()["response"]["status"] == {
        "code": 500,
        "reason": "InternalError",
        "message": "internal error in the numaguard webhook: KeyError",
    }


# -- junk never produces a 5xx ------------------------------------------------------------------------


@functools.cache
def _app() -> FastAPI:
    components = main.Components(
        directory=discovery.StaticDirectory({NODE: NODE_URL}), enforcer_transport=FakeEnforcer().transport()
    )
    return main.create_app(WebhookSettings(max_body_bytes=64 * 1024), components=components)


async def _post(path: str, body: bytes) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app()), base_url="http://webhook") as http:
        return await http.post(path, content=body)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
_sub_resources = st.sampled_from([None, "", "binding", "resize", "status", 7])
_operations = st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "PATCH", None])


@st.composite
def _review_shaped(draw: st.DrawFn) -> bytes:
    """An envelope that is often valid, carrying junk objects where pods and bindings go."""
    base = load_review(
        draw(
            st.sampled_from(
                [
                    "create-mutate-tightly-coupled-database",
                    "binding-generate-name-train",
                    "resize-legal-burstable-web",
                    "update-resources-burstable-web",
                ]
            )
        )
    )
    req = base["request"]
    for key in draw(st.sets(st.sampled_from(["object", "oldObject", "subResource", "operation", "dryRun", "kind"]))):
        req[key] = {
            "subResource": draw(_sub_resources),
            "operation": draw(_operations),
            "dryRun": draw(st.sampled_from([True, False, None, "yes"])),
            "kind": draw(st.sampled_from([{"kind": "Pod"}, {"kind": "Binding"}, "Pod", None])),
        }.get(key, draw(_json))
    if draw(st.booleans()) and isinstance(req.get("object"), dict):
        req["object"]["spec"] = draw(_json)
    return json.dumps(base).encode()


_bodies = st.one_of(
    st.binary(max_size=512),
    _json.map(lambda v: json.dumps(v).encode()),
    _review_shaped(),
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_bodies, path=st.sampled_from(["/mutate", "/validate"]))
def test_random_junk_bodies_never_produce_a_server_error(body: bytes, path: str) -> None:
    response = asyncio.run(_post(path, body))
    assert response.status_code in (200, 400)
    if response.status_code == 200:
        answer = response.json()["response"]
        assert answer.get("status", {}).get("code") != 500, answer


@pytest.mark.anyio
async def test_every_review_logs_one_structured_line_carrying_the_request_uid(
    caplog: pytest.LogCaptureFixture,
) -> None:
    document = load_review("create-mutate-invalid-plr-aggregate")
    with caplog.at_level("INFO", logger="webhook.admission"):
        response = await _post("/mutate", json.dumps(document).encode())
    assert response.status_code == 200
    (record,) = [r for r in caplog.records if r.getMessage() == "admission reviewed"]
    assert record.uid == document["request"]["uid"]  # type: ignore[attr-defined]
    assert record.result == "denied"  # type: ignore[attr-defined]
    assert record.reason == "Invalid"  # type: ignore[attr-defined]
    assert "must be greater than or equal to aggregate" in record.status_message  # type: ignore[attr-defined]
