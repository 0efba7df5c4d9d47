"""The enforcer client against scripted HTTP answers: parsing, typed errors, retries, the deadline."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from webhook_testkit import PODS_DIR, FakeEnforcer

from shared import contract
from webhook import enforcer_client, errors
from webhook.metrics import WebhookMetrics

pytestmark = pytest.mark.anyio

URL = "https://node-a.enforcers.test:8443"


def pod() -> dict[str, Any]:
    document: dict[str, Any] = json.loads((PODS_DIR / "tightly-coupled-database.json").read_text())
    document["metadata"]["uid"] = "u-1"
    return document


def allocation_request() -> contract.AllocationRequest:
    return contract.AllocationRequest(pod=pod(), node_name="node-a")


def client_for(
    handler: Callable[[httpx.Request], Any], *, retries: int = 1, metrics: WebhookMetrics | None = None
) -> enforcer_client.EnforcerClient:
    return enforcer_client.EnforcerClient(
        transport=httpx.MockTransport(handler),
        retries=retries,
        metrics=metrics,
        server_name="numaguard-enforcer.numaguard.svc",
        backoff_seconds=0,
    )


def answering(status: int, body: str | bytes, calls: list[httpx.Request]) -> Callable[[httpx.Request], httpx.Response]:
    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(status, content=body if isinstance(body, bytes) else body.encode())

    return handle


async def test_an_allocation_is_parsed_from_a_201() -> None:
    fake = FakeEnforcer()
    client = client_for(fake.handle)
    allocation = await client.allocate(URL, allocation_request(), node="node-a", budget=3, request_id="r-1")
    assert allocation.uid == "u-1"
    assert allocation.containers["database"].assignment == "pod_exclusive"
    (request,) = fake.requests
    assert request.headers["X-Request-Id"] == "r-1"
    assert request.extensions["sni_hostname"] == "numaguard-enforcer.numaguard.svc"
    assert json.loads(request.content)["nodeName"] == "node-a"


@pytest.mark.parametrize(
    ("status", "body", "error", "reason"),
    [
        (
            403,
            contract.ErrorBody(reason="TopologyAffinityError", message="no").to_json(),
            errors.EnforcerRefused,
            "TopologyAffinityError",
        ),
        (
            422,
            contract.ErrorBody(reason="InvalidPod", message="bad", field="spec").to_json(),
            errors.EnforcerRefused,
            "InvalidPod",
        ),
        (
            409,
            contract.ErrorBody(reason="AllocationConflict", message="differs").to_json(),
            errors.EnforcerConflict,
            "AllocationConflict",
        ),
        (409, "", errors.EnforcerConflict, "AllocationConflict"),
        (404, "", errors.EnforcerPodUnknown, None),
        (
            401,
            contract.ErrorBody(reason="Unauthorized", message="no certificate").to_json(),
            errors.EnforcerProtocolError,
            None,
        ),
        (
            403,
            contract.ErrorBody(reason="Forbidden", message="tokens may only read").to_json(),
            errors.EnforcerProtocolError,
            None,
        ),
        (403, "<html>forbidden</html>", errors.EnforcerProtocolError, None),
        (201, '{"uid": 1}', errors.EnforcerProtocolError, None),
        (302, "", errors.EnforcerProtocolError, None),
        (500, contract.ErrorBody(reason="CheckpointCorrupt", message="x").to_json(), errors.EnforcerUnavailable, None),
    ],
)
async def test_each_answer_outside_success_becomes_its_typed_error(
    status: int, body: str, error: type[errors.EnforcerError], reason: str | None
) -> None:
    client = client_for(answering(status, body, []), retries=0)
    with pytest.raises(error) as caught:
        await client.allocate(URL, allocation_request(), node="node-a", budget=3)
    assert type(caught.value) is error
    assert caught.value.node == "node-a"
    if reason is not None:
        assert caught.value.reason == reason  # type: ignore[attr-defined]


async def test_an_allocation_is_retried_after_a_503_and_then_succeeds() -> None:
    fake = FakeEnforcer(fail_first=1)
    allocation = await client_for(fake.handle).allocate(URL, allocation_request(), node="node-a", budget=3)
    assert allocation.uid == "u-1"
    assert len(fake.requests) == 2


async def test_retries_end_with_the_last_failure() -> None:
    fake = FakeEnforcer(fail_first=5)
    with pytest.raises(errors.EnforcerUnavailable, match="answered HTTP 503"):
        await client_for(fake.handle, retries=2).allocate(URL, allocation_request(), node="node-a", budget=3)
    assert len(fake.requests) == 3


async def test_a_connection_failure_is_unavailable_and_retried_for_allocations() -> None:
    calls: list[httpx.Request] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(errors.EnforcerUnavailable, match="unreachable: ConnectError: connection refused"):
        await client_for(refuse).allocate(URL, allocation_request(), node="node-a", budget=3)
    assert len(calls) == 2


async def test_a_real_resize_is_sent_once_even_when_it_fails() -> None:
    calls: list[httpx.Request] = []
    client = client_for(answering(503, "", calls), retries=3)
    with pytest.raises(errors.EnforcerUnavailable):
        await client.resize(URL, "u-1", contract.ResizeRequest(pod=pod()), node="node-a", dry_run=False, budget=3)
    assert len(calls) == 1


async def test_a_dry_run_resize_is_retried_and_says_dry_run() -> None:
    fake = FakeEnforcer(fail_first=1, resize_status="Deferred")
    result = await client_for(fake.handle).resize(
        URL, "u/1", contract.ResizeRequest(pod=pod()), node="node-a", dry_run=True, budget=3
    )
    assert result.status == "Deferred"
    assert len(fake.requests) == 2
    assert fake.requests[-1].url.params["dryRun"] == "true"
    assert fake.requests[-1].url.raw_path == b"/allocations/u%2F1/resize?dryRun=true"


async def test_a_call_that_outlives_its_budget_times_out() -> None:
    never = asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        await never.wait()
        raise AssertionError("unreachable")

    metrics = WebhookMetrics()
    client = client_for(hang, metrics=metrics)
    with pytest.raises(errors.EnforcerTimeout, match="did not answer within 0.05s"):
        await client.allocate(URL, allocation_request(), node="node-a", budget=0.05)
    assert metrics.enforcer_errors.labels(call="allocate", kind="timeout")._value.get() == 1


async def test_metrics_record_call_outcomes_and_refusals() -> None:
    metrics = WebhookMetrics()
    fake = FakeEnforcer(refuse={"tightly-coupled-database": ("SMTAlignmentError", "odd")})
    with pytest.raises(errors.EnforcerRefused):
        await client_for(fake.handle, metrics=metrics).allocate(URL, allocation_request(), node="node-a", budget=3)
    text = metrics.render().decode()
    assert 'numaguard_webhook_enforcer_request_duration_seconds_count{call="allocate",outcome="4xx"} 1.0' in text
    assert 'numaguard_webhook_enforcer_errors_total{call="allocate",kind="refused"} 1.0' in text


def test_two_metrics_instances_never_share_a_registry() -> None:
    first, second = WebhookMetrics(), WebhookMetrics()
    first.observe_admission("create", "denied", 0.01, mode="mutate", reason="Invalid")
    assert b'reason="Invalid"' in first.render()
    assert b'reason="Invalid"' not in second.render()


async def test_calls_to_one_node_are_bounded_and_a_call_without_a_slot_in_its_budget_sends_nothing() -> None:
    """Issue 12 (the binding burst): at most ``concurrency`` calls in flight per node; the rest wait in budget."""
    fake = FakeEnforcer()
    gate = asyncio.Event()
    both_slots_taken = asyncio.Event()
    in_flight = 0
    peak = 0
    sent: list[str] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        sent.append(request.headers["X-Request-Id"])
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == 2:
            both_slots_taken.set()
        await gate.wait()
        in_flight -= 1
        return fake.handle(request)

    client = enforcer_client.EnforcerClient(transport=httpx.MockTransport(handle), retries=0, concurrency=2)
    calls = [
        asyncio.ensure_future(client.allocate(URL, allocation_request(), node="node-a", budget=30, request_id=f"r{n}"))
        for n in range(5)
    ]
    await both_slots_taken.wait()
    late = client.allocate(URL, allocation_request(), node="node-a", budget=0.05, request_id="late")
    with pytest.raises(errors.EnforcerTimeout):
        await late  # both slots are taken for longer than its budget: it gives up
    assert "late" not in sent and len(sent) == 2 and peak == 2
    gate.set()
    allocations = await asyncio.gather(*calls)
    assert [a.uid for a in allocations] == ["u-1"] * 5
    assert peak == 2
    other = await client.allocate(
        "https://node-b.enforcers.test:8443", allocation_request(), node="node-b", budget=3, request_id="b"
    )
    assert other.uid == "u-1"  # another node has slots of its own
