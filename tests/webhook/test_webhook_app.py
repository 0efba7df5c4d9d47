"""The webhook app end to end through httpx's ASGI transport, fed the recorded AdmissionReviews.

The enforcer is the contract-speaking fake of ``webhook_testkit`` behind an
``httpx.MockTransport``; everything else is the production wiring of
``webhook.main.create_app``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import httpx
import pytest
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from webhook_testkit import (
    NODE,
    AppFactory,
    FakeEnforcer,
    apply_patch,
    decoded_patch,
    load_review,
    review_bytes,
    review_names,
)

from shared import contract
from webhook import errors, routes

pytestmark = pytest.mark.anyio

VALID_PODS = [
    "besteffort-batch",
    "burstable-web",
    "generate-name-train",
    "init-sidecar-hugepages",
    "ml-workload",
    "tightly-coupled-database",
]
PLAN_KEY = "numaguard.io/plan"


async def post(client: httpx.AsyncClient, path: str, review: str | dict[str, Any]) -> dict[str, Any]:
    body = review_bytes(review) if isinstance(review, str) else json.dumps(review).encode()
    response = await client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    document: dict[str, Any] = response.json()
    assert document["apiVersion"] == "admission.k8s.io/v1"
    assert document["kind"] == "AdmissionReview"
    return document["response"]  # type: ignore[no-any-return]


async def serve_once(app: Any, path: str, review: str | dict[str, Any]) -> dict[str, Any]:
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as http,
    ):
        return await post(http, path, review)


# -- Pod CREATE, mutating ------------------------------------------------------------------------------


@pytest.mark.parametrize("pod", VALID_PODS)
async def test_mutate_create_allows_every_valid_pod_and_echoes_the_uid(client: httpx.AsyncClient, pod: str) -> None:
    response = await post(client, "/mutate", f"create-mutate-{pod}")
    assert response["uid"] == load_review(f"create-mutate-{pod}")["request"]["uid"]
    assert response["allowed"] is True


async def test_mutate_create_creates_the_annotation_map_when_the_pod_has_none(client: httpx.AsyncClient) -> None:
    response = await post(client, "/mutate", "create-mutate-tightly-coupled-database")
    ops = decoded_patch(response)
    assert [(op["op"], op["path"]) for op in ops] == [("add", "/metadata/annotations")]
    plan = json.loads(ops[0]["value"][PLAN_KEY])
    assert plan["containers"]["database"] == {
        "kind": "app",
        "cpu": "pod_exclusive",
        "exclusiveCPUs": 6,
        "memory": "pod_exclusive",
        "exclusiveMemory": "12Gi",
    }
    assert plan["podSharedPool"] == {"cpus": 2, "memory": "4Gi"}


async def test_mutate_create_adds_only_its_key_when_the_pod_has_annotations(client: httpx.AsyncClient) -> None:
    response = await post(client, "/mutate", "create-mutate-generate-name-train")
    ops = decoded_patch(response)
    assert [(op["op"], op["path"]) for op in ops] == [("add", "/metadata/annotations/numaguard.io~1plan")]


@pytest.mark.parametrize("pod", VALID_PODS)
async def test_mutate_create_patches_nothing_when_reinvoked_on_its_own_result(
    client: httpx.AsyncClient, pod: str
) -> None:
    review = load_review(f"create-mutate-{pod}")
    first = await post(client, "/mutate", review)
    review["request"]["object"] = apply_patch(review["request"]["object"], decoded_patch(first))
    second = await post(client, "/mutate", review)
    assert second["allowed"] is True
    assert "patch" not in second


async def test_mutate_create_clears_allocation_annotations_copied_from_another_pod(client: httpx.AsyncClient) -> None:
    review = load_review("create-mutate-copied-allocation-annotations")
    response = await post(client, "/mutate", review)
    patched = apply_patch(review["request"]["object"], decoded_patch(response))
    annotations = patched["metadata"]["annotations"]
    assert set(annotations) == {"team", PLAN_KEY}


async def test_mutate_create_warns_that_a_fractional_cpu_is_never_exclusive(client: httpx.AsyncClient) -> None:
    response = await post(client, "/mutate", "create-mutate-init-sidecar-hugepages")
    assert "only whole CPUs are exclusive: telemetry (500m) will run in the pod shared pool" in response["warnings"]


async def test_mutate_create_denies_resources_the_apiserver_rejects_naming_path_and_rule(
    client: httpx.AsyncClient,
) -> None:
    response = await post(client, "/mutate", "create-mutate-invalid-plr-aggregate")
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert response["status"]["reason"] == "Invalid"
    message = response["status"]["message"]
    assert "spec.resources.requests[memory]" in message
    assert "must be greater than or equal to aggregate container requests of 120Gi" in message
    assert "(rule" not in message  # rule ids stay in code and logs, not in what users read


async def test_mutate_create_denies_pod_level_resources_on_windows(client: httpx.AsyncClient) -> None:
    response = await post(client, "/mutate", "create-mutate-windows-plr")
    assert response["allowed"] is False
    assert "spec.resources: Forbidden: may not be set for a windows pod" in response["status"]["message"]


@pytest.mark.parametrize(
    ("review", "code", "fragment"),
    [
        ("create-mutate-malformed-pod", 400, "spec.containers"),
        ("create-mutate-object-not-a-map", 400, "a pod must be a JSON object"),
        ("create-mutate-bad-quantity", 422, "spec.containers[0].resources.limits[cpu]"),
    ],
)
async def test_mutate_create_denies_a_malformed_pod_inside_a_valid_review(
    client: httpx.AsyncClient, review: str, code: int, fragment: str
) -> None:
    response = await post(client, "/mutate", review)
    assert response["allowed"] is False
    assert response["status"]["code"] == code
    assert fragment in response["status"]["message"]


# -- Pod CREATE, validating ----------------------------------------------------------------------------


@pytest.mark.parametrize("pod", VALID_PODS)
async def test_validate_create_allows_without_a_patch(client: httpx.AsyncClient, pod: str) -> None:
    response = await post(client, "/validate", f"create-validate-{pod}")
    assert response["allowed"] is True
    assert "patch" not in response


async def test_validate_create_warns_when_the_plan_annotation_is_out_of_date(client: httpx.AsyncClient) -> None:
    review = load_review("create-validate-tightly-coupled-database")
    review["request"]["object"]["metadata"]["annotations"] = {PLAN_KEY: "{}"}
    response = await post(client, "/validate", review)
    assert response["allowed"] is True
    assert response["warnings"] == [
        f"{PLAN_KEY} is out of date: the pod's resources changed after numaguard planned them"
    ]


async def test_validate_create_repeats_plan_warnings_when_the_mutating_webhook_did_not_run(
    client: httpx.AsyncClient,
) -> None:
    response = await post(client, "/validate", "create-validate-init-sidecar-hugepages")
    assert "only whole CPUs are exclusive: telemetry (500m) will run in the pod shared pool" in response["warnings"]


async def test_validate_create_denies_invalid_resources(client: httpx.AsyncClient) -> None:
    response = await post(client, "/validate", "create-validate-invalid-plr-aggregate")
    assert response["allowed"] is False
    assert response["status"]["code"] == 422


# -- pods/binding --------------------------------------------------------------------------------------


async def test_binding_records_the_nodes_allocation_on_the_binding(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    await post(client, "/validate", "create-validate-tightly-coupled-database")
    review = load_review("binding-tightly-coupled-database")
    response = await post(client, "/mutate", review)
    assert response["allowed"] is True
    patched = apply_patch(review["request"]["object"], decoded_patch(response))
    annotations = patched["metadata"]["annotations"]
    allocation = contract.Allocation.model_validate_json(annotations[contract.ALLOCATION_ANNOTATION])
    assert annotations[contract.NODE_ANNOTATION] == NODE
    assert allocation.uid == review["request"]["object"]["metadata"]["uid"]
    assert allocation.containers["database"].cpus == "1-3,17-19"
    assert annotations[contract.SPEC_HASH_ANNOTATION] == allocation.spec_hash


async def test_binding_sends_the_admitted_pod_to_the_target_nodes_enforcer(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    await post(client, "/validate", "create-validate-tightly-coupled-database")
    review = load_review("binding-tightly-coupled-database")
    await post(client, "/mutate", review)
    (request,) = enforcer.requests
    body = json.loads(request.content)
    assert request.url.path == "/allocations"
    assert request.headers["X-Request-Id"] == review["request"]["uid"]
    assert body["nodeName"] == NODE
    assert body["pod"]["metadata"]["uid"] == review["request"]["object"]["metadata"]["uid"]
    assert body["pod"]["spec"]["resources"] == {
        "requests": {"cpu": "8", "memory": "16Gi"},
        "limits": {"cpu": "8", "memory": "16Gi"},
    }


async def test_binding_finds_a_generate_name_pod_seen_only_at_mutation(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    await post(client, "/mutate", "create-mutate-generate-name-train")
    review = load_review("binding-generate-name-train")
    response = await post(client, "/mutate", review)
    assert response["allowed"] is True
    sent = json.loads(enforcer.requests[0].content)["pod"]["metadata"]
    assert sent["name"] == "train-x7k2p"
    assert sent["uid"] == review["request"]["object"]["metadata"]["uid"]
    assert sent["namespace"] == "ml"


async def test_binding_is_denied_with_the_nodes_reason_when_the_node_refuses(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    enforcer.refuse["tightly-coupled-database"] = (
        "TopologyAffinityError",
        "Resources cannot be allocated with Topology locality",
    )
    await post(client, "/validate", "create-validate-tightly-coupled-database")
    response = await post(client, "/mutate", "binding-tightly-coupled-database")
    assert response["allowed"] is False
    assert response["status"] == {
        "code": 403,
        "reason": "TopologyAffinityError",
        "message": "node node-a cannot admit pod default/tightly-coupled-database: TopologyAffinityError: "
        "Resources cannot be allocated with Topology locality"
        "; the scheduler will retry the pod, on another node if one can align it",
    }


async def test_binding_is_denied_with_409_when_the_node_holds_the_uid_with_another_spec(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    enforcer.conflict.add("tightly-coupled-database")
    await post(client, "/validate", "create-validate-tightly-coupled-database")
    response = await post(client, "/mutate", "binding-tightly-coupled-database")
    assert response["status"]["code"] == 409
    assert response["status"]["reason"] == "AllocationConflict"


async def test_binding_in_validating_mode_allocates_but_never_patches(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    await post(client, "/validate", "create-validate-tightly-coupled-database")
    response = await post(client, "/validate", "binding-tightly-coupled-database")
    assert response["allowed"] is True
    assert "patch" not in response
    assert len(enforcer.requests) == 1


async def test_dry_run_binding_asks_the_node_nothing(client: httpx.AsyncClient, enforcer: FakeEnforcer) -> None:
    await post(client, "/validate", "create-validate-tightly-coupled-database")
    response = await post(client, "/mutate", "binding-dry-run-tightly-coupled-database")
    assert response["allowed"] is True
    assert "patch" not in response
    assert response["warnings"] == [
        "dry run: node node-a was not asked to allocate pod default/tightly-coupled-database"
    ]
    assert enforcer.requests == []


async def test_binding_of_an_unknown_pod_is_denied_with_a_clear_message_when_configured(
    make_app: AppFactory, enforcer: FakeEnforcer
) -> None:
    response = await serve_once(make_app(unknown_pod_mode="deny"), "/mutate", "binding-unknown-pod")
    assert response["allowed"] is False
    assert response["status"]["reason"] == "PodUnknown"
    assert "pod default/never-admitted" in response["status"]["message"]
    assert "unknown to the numaguard webhook" in response["status"]["message"]
    assert enforcer.requests == []


@pytest.mark.parametrize("overrides", [{"unknown_pod_mode": "allow"}, {}], ids=["configured", "podSource-seen-default"])
async def test_binding_of_an_unknown_pod_is_allowed_with_a_warning(
    make_app: AppFactory, overrides: dict[str, str]
) -> None:
    # Finding 2: with podSource seen, pods created before a webhook restart are unknown; they bind (with a warning)
    response = await serve_once(make_app(**overrides), "/mutate", "binding-unknown-pod")
    assert response["allowed"] is True
    assert "without a NUMA allocation" in response["warnings"][0]


async def test_binding_without_a_target_node_is_denied_as_a_bad_request(client: httpx.AsyncClient) -> None:
    response = await post(client, "/mutate", "binding-without-target")
    assert response["allowed"] is False
    assert response["status"]["code"] == 400


async def test_binding_to_a_node_numaguard_does_not_enforce_is_allowed_without_asking(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    # Finding 1: an unlabelled node (no enforcer) accepts every pod; numaguard has no say there
    await post(client, "/validate", "create-validate-tightly-coupled-database")
    review = load_review("binding-tightly-coupled-database")
    review["request"]["object"]["target"]["name"] = "node-b"
    response = await post(client, "/mutate", review)
    assert response["allowed"] is True
    assert "node node-b is not enforced by numaguard" in response["warnings"][0]
    assert enforcer.requests == []


def _unreachable_app(make_app: AppFactory, enforcer: FakeEnforcer, **overrides: Any) -> Any:
    def refuse_connection(request: httpx.Request) -> httpx.Response:
        enforcer.requests.append(request)
        raise httpx.ConnectError("connection refused", request=request)

    from webhook import discovery, main
    from webhook.settings import WebhookSettings

    settings = WebhookSettings(enforcer_retries=1, **overrides)
    components = main.Components(
        enforcer_transport=httpx.MockTransport(refuse_connection),
        directory=discovery.StaticDirectory({NODE: "https://node-a.enforcers.test:8443"}),
    )
    return main.create_app(settings, components=components)


async def _bind_unreachable(app: Any) -> dict[str, Any]:
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as http,
    ):
        await post(http, "/validate", "create-validate-tightly-coupled-database")
        return await post(http, "/mutate", "binding-tightly-coupled-database")


async def test_binding_is_denied_saying_the_enforcer_is_unreachable(
    make_app: AppFactory, enforcer: FakeEnforcer
) -> None:
    response = await _bind_unreachable(_unreachable_app(make_app, enforcer))
    assert response["allowed"] is False
    assert response["status"]["code"] == 503
    assert response["status"]["message"].startswith("the enforcer on node node-a is unreachable")
    assert len(enforcer.requests) == 2  # the allocation is idempotent: retried once


async def test_binding_is_allowed_with_a_warning_when_unreachable_enforcers_are_configured_to_allow(
    make_app: AppFactory, enforcer: FakeEnforcer
) -> None:
    response = await _bind_unreachable(_unreachable_app(make_app, enforcer, failure_mode="allow"))
    assert response["allowed"] is True
    assert "patch" not in response
    assert "unreachable" in response["warnings"][0]


async def test_a_binding_that_timed_out_is_denied_and_its_allocation_released_afterwards(
    make_app: AppFactory, enforcer: FakeEnforcer
) -> None:
    """The node may decide after the webhook gave up; the denied binding must not leave CPUs held there."""
    seen: list[httpx.Request] = []

    async def slow_then_release(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "POST":
            assert int(request.headers[contract.BUDGET_HEADER]) > 0  # the node learns how long we wait
            raise httpx.ReadTimeout("no answer in time", request=request)
        return httpx.Response(200, json={"released": True})

    from webhook import discovery, main
    from webhook.handlers import pod_binding
    from webhook.settings import WebhookSettings

    components = main.Components(
        enforcer_transport=httpx.MockTransport(slow_then_release),
        directory=discovery.StaticDirectory({NODE: "https://node-a.enforcers.test:8443"}),
    )
    app = main.create_app(WebhookSettings(enforcer_retries=0), components=components)
    response = await _bind_unreachable(app)  # the app's shutdown waits for the release
    assert not pod_binding._PENDING_RELEASES
    assert response["allowed"] is False
    assert response["status"]["reason"] == "EnforcerUnavailable"
    assert [r.method for r in seen] == ["POST", "DELETE"]
    assert seen[1].url.path.startswith("/allocations/")


# -- pods/resize and UPDATE ----------------------------------------------------------------------------


async def test_legal_resize_of_a_bound_pod_is_judged_by_its_node(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    review = load_review("resize-legal-burstable-web")
    response = await post(client, "/validate", review)
    assert response["allowed"] is True
    assert "patch" not in response  # K5: never a patch on a resize
    (request,) = enforcer.requests
    uid = review["request"]["oldObject"]["metadata"]["uid"]
    assert request.url.path == f"/allocations/{uid}/resize"
    assert "dryRun" not in request.url.params


async def test_a_resize_is_decided_by_the_validating_hook_alone(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    # Finding 4: every resize reached the node twice (mutating and validating hook); the node is asked once
    review = load_review("resize-legal-burstable-web")
    mutated = await post(client, "/mutate", review)
    assert mutated["allowed"] is True
    assert enforcer.requests == []
    validated = await post(client, "/validate", review)
    assert validated["allowed"] is True
    assert len(enforcer.requests) == 1


async def test_dry_run_resize_asks_the_node_for_feasibility_only(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    await post(client, "/validate", "resize-dry-run-burstable-web")
    assert enforcer.requests[0].url.params["dryRun"] == "true"


async def test_resize_that_changes_qos_is_denied_naming_the_rule(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    response = await post(client, "/mutate", "resize-illegal-qos-burstable-web")
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert "spec: Invalid value" in response["status"]["message"]
    assert "Pod QOS Class may not change as a result of resizing" in response["status"]["message"]
    assert enforcer.requests == []


async def test_resize_that_removes_a_limit_is_forbidden(client: httpx.AsyncClient) -> None:
    response = await post(client, "/validate", "resize-illegal-remove-limit-burstable-web")
    assert response["status"]["code"] == 403
    assert response["status"]["reason"] == "Forbidden"
    assert (
        "spec.containers[0].resources.limits: Forbidden: resource limits cannot be removed"
        in response["status"]["message"]
    )


async def test_deferred_resize_is_allowed_with_a_warning(client: httpx.AsyncClient, enforcer: FakeEnforcer) -> None:
    enforcer.resize_status = "Deferred"
    enforcer.resize_message = "2 more exclusive CPUs needed, now on NUMA node(s) {0}, 2 free on the node"
    response = await post(client, "/validate", "resize-legal-burstable-web")
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert warning.startswith(
        "resize deferred: 2 more exclusive CPUs needed, now on NUMA node(s) {0}, 2 free on the node"
    )
    assert len(warning) <= 120


async def test_infeasible_resize_is_denied_with_the_nodes_reason(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    enforcer.resize_status = "Infeasible"
    enforcer.resize_reason = "prohibitedCPUAllocationError"
    enforcer.resize_message = "cannot shrink below the promised CPUs 1-3,17-19"
    response = await post(client, "/validate", "resize-tightly-coupled-database")
    assert response["allowed"] is False
    assert response["status"] == {
        "code": 403,
        "reason": "prohibitedCPUAllocationError",
        "message": "node node-a cannot resize pod default/tightly-coupled-database: prohibitedCPUAllocationError: "
        "cannot shrink below the promised CPUs 1-3,17-19",
    }


async def test_resize_of_an_unbound_pod_asks_no_node(client: httpx.AsyncClient, enforcer: FakeEnforcer) -> None:
    response = await post(client, "/mutate", "resize-unbound-burstable-web")
    assert response["allowed"] is True
    assert enforcer.requests == []


async def test_resize_of_a_pod_the_node_does_not_hold_is_allowed_with_a_warning(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    enforcer.unknown_pods.add("burstable-web")
    response = await post(client, "/validate", "resize-legal-burstable-web")
    assert response["allowed"] is True
    assert "holds no numaguard allocation" in response["warnings"][0]


async def test_update_that_leaves_resources_alone_is_allowed_without_asking_the_node(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    response = await post(client, "/mutate", "update-labels-burstable-web")
    assert response == {"uid": load_review("update-labels-burstable-web")["request"]["uid"], "allowed": True}
    assert enforcer.requests == []


async def test_update_of_resources_asks_the_node_for_feasibility_only(
    client: httpx.AsyncClient, enforcer: FakeEnforcer
) -> None:
    response = await post(client, "/validate", "update-resources-burstable-web")
    assert response["allowed"] is True
    assert enforcer.requests[0].url.params["dryRun"] == "true"


async def test_delete_forgets_the_pod(make_app: AppFactory, enforcer: FakeEnforcer) -> None:
    app = make_app(unknown_pod_mode="deny")
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client,
    ):
        await post(client, "/validate", "create-validate-burstable-web")
        response = await post(client, "/validate", "delete-burstable-web")
        assert response["allowed"] is True
        binding = await post(client, "/mutate", "binding-burstable-web")
    assert binding["status"]["reason"] == "PodUnknown"


# -- requests that are not AdmissionReviews ------------------------------------------------------------


@pytest.mark.parametrize("name", [*review_names("body-"), "body-not-json.txt"])
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
async def test_a_body_that_is_not_an_admission_review_is_a_400_with_a_message(
    client: httpx.AsyncClient, name: str, path: str
) -> None:
    response = await client.post(path, content=review_bytes(name))
    assert response.status_code == 400
    assert response.json()["message"]


async def test_an_oversized_body_is_refused_with_400(make_app: AppFactory) -> None:
    app = make_app(max_body_bytes=1024)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as http:
        response = await http.post("/mutate", content=b" " * 2048)
    assert response.status_code == 400
    assert response.json()["message"] == "request body exceeds the limit of 1024 bytes"


async def test_an_oversized_body_without_a_declared_length_is_refused_while_streaming(make_app: AppFactory) -> None:
    app = make_app(max_body_bytes=1024)

    async def chunks() -> Any:
        for _ in range(4):
            yield b" " * 512

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as http:
        response = await http.post("/mutate", content=chunks())
    assert response.status_code == 400


# The review routes read the body from the ASGI messages themselves (no Request): the same bytes Starlette's
# Request.body() assembles, the same ClientDisconnect where Request.stream() raises it.
_CHUNKINGS = [
    [(b'{"a": 1}', False)],
    [(b"", False)],
    [(b"{", True), (b"", True), (b'"a"', True), (b": 1}", False)],
    [(b"", True), (b"xy", True), (b"", False)],
    [(b"x" * 1000, True), (b"y" * 24, False)],
]


def _receiver(messages: list[dict[str, Any]]) -> Any:
    pending = list(messages)

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    return receive


def _messages(chunks: list[tuple[bytes, bool]], *, cut: bool = False) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = [{"type": "http.request", "body": body, "more_body": more} for body, more in chunks]
    if cut:  # the client goes away before the last chunk
        found[-1]["more_body"] = True
    return found


def _scope(headers: list[tuple[bytes, bytes]] = []) -> dict[str, Any]:  # noqa: B006 - never mutated
    return {"type": "http", "method": "POST", "path": "/mutate", "headers": headers, "query_string": b""}


@pytest.mark.parametrize("chunks", _CHUNKINGS)
async def test_the_review_routes_read_the_body_starlette_reads(chunks: list[tuple[bytes, bool]]) -> None:
    expected = await Request(_scope(), _receiver(_messages(chunks))).body()
    assert await routes._read_body(_scope(), _receiver(_messages(chunks)), 1024) == expected


@pytest.mark.parametrize("chunks", [c for c in _CHUNKINGS if len(c) > 1])
async def test_a_disconnect_before_the_last_chunk_raises_as_starlette_does(chunks: list[tuple[bytes, bool]]) -> None:
    with pytest.raises(ClientDisconnect):
        await Request(_scope(), _receiver(_messages(chunks, cut=True))).body()
    with pytest.raises(ClientDisconnect):
        await routes._read_body(_scope(), _receiver(_messages(chunks, cut=True)), 1024)


async def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    async def receive() -> dict[str, Any]:
        raise AssertionError("the body was read")

    headers = [(b"content-type", b"application/json"), (b"content-length", b"1025")]
    with pytest.raises(errors.BodyTooLarge):
        await routes._read_body(_scope(headers), receive, 1024)
    # the first content-length counts, as Request.headers.get answers; a length that is not digits is not trusted
    for first in (b"10", b"abc"):
        body = b"x" * 10
        scope = _scope([(b"content-length", first), (b"content-length", b"99999")])
        assert await routes._read_body(scope, _receiver(_messages([(body, False)])), 1024) == body


async def test_streamed_bytes_over_the_limit_are_refused() -> None:
    chunks = [(b"x" * 1000, True), (b"y" * 25, False)]
    with pytest.raises(errors.BodyTooLarge):
        await routes._read_body(_scope(), _receiver(_messages(chunks)), 1024)
    assert len(await routes._read_body(_scope(), _receiver(_messages(chunks)), 1025)) == 1025


async def test_a_bad_review_is_logged_and_counted_by_the_apps_handler(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("INFO", logger="webhook.main"):
        response = await client.post("/validate", content=b"[1]")
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    (record,) = [r for r in caplog.records if r.getMessage() == "bad admission request"]
    assert record.__dict__["path"] == "/validate"
    assert record.__dict__["error"] == response.json()["message"] == "request body must be a JSON object, got list"
    assert "numaguard_webhook_bad_requests_total 1.0" in (await client.get("/metrics")).text


@pytest.mark.parametrize("body", [b"", b'{"a":1}', '{"\u00e9"}'.encode(), b"x" * 70000])
async def test_the_review_routes_send_what_a_json_response_sends(body: bytes) -> None:
    def collector() -> tuple[list[dict[str, Any]], Any]:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        return sent, send

    expected, send = collector()
    await Response(body, media_type=JSONResponse.media_type)(_scope(), _receiver([]), send)
    got, send = collector()
    await routes.send_json(send, body)
    assert got == expected


# -- probes and metrics --------------------------------------------------------------------------------


async def test_health_and_readiness_probes_answer_ok(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"ready": True, "checks": {"pods": True, "enforcers": True}}


async def test_metrics_count_reviews_denials_and_bad_requests(client: httpx.AsyncClient) -> None:
    await post(client, "/mutate", "create-mutate-invalid-plr-aggregate")
    await client.post("/mutate", content=b"nope")
    text = (await client.get("/metrics")).text
    hook = 'webhook="pods-create.mutate.numaguard.io"'
    assert f'numaguard_webhook_denials_total{{operation="create",reason="Invalid",{hook}}} 1.0' in text
    assert "numaguard_webhook_bad_requests_total 1.0" in text
    duration = "numaguard_webhook_admission_duration_seconds_count"
    assert f'{duration}{{operation="create",result="denied",{hook}}} 1.0' in text


async def test_readiness_fails_until_every_pod_source_has_synced(enforcer: FakeEnforcer) -> None:
    from webhook import discovery, main, pod_cache
    from webhook.settings import WebhookSettings

    index = pod_cache.PodIndex()
    components = main.Components(
        enforcer_transport=enforcer.transport(),
        directory=discovery.StaticDirectory({NODE: "https://node-a.enforcers.test:8443"}),
        extra_pod_sources=[index],
    )
    app = main.create_app(WebhookSettings(), components=components)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as http:
        assert (await http.get("/readyz")).status_code == 503
        index.replace_all([])
        assert (await http.get("/readyz")).status_code == 200


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
async def test_the_review_routes_answer_only_post(client: httpx.AsyncClient, path: str) -> None:
    # Served as plain Starlette routes (routes.py) for speed; the answer to another method is FastAPI's as before.
    response = await client.get(path)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json() == {"detail": "Method Not Allowed"}


async def test_the_review_routes_come_first_and_the_probes_honour_dependency_overrides(
    make_app: AppFactory,
) -> None:
    # /mutate and /validate are the app's own routes (matched once); /readyz is an APIRoute whose Services
    # dependency a test (or an embedding) may replace through app.dependency_overrides
    from starlette.routing import Route

    from webhook import deps
    from webhook.services import Services

    app = make_app()
    first, second = app.router.routes[:2]
    assert [(type(r), getattr(r, "path", None)) for r in (first, second)] == [(Route, "/mutate"), (Route, "/validate")]

    class NeverSynced:
        def is_ready(self) -> bool:
            return False

    services = dataclasses.replace(app.state.services, pods=NeverSynced())

    async def override() -> Services:
        return services

    app.dependency_overrides[deps.get_services] = override
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as http:
        ready = await http.get("/readyz")
    assert (ready.status_code, ready.json()["checks"]["pods"]) == (503, False)
