"""The API's answers, in process (httpx ASGITransport, the real lifespan; callers authenticated by override)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_fixtures import (
    NODE,
    allocation_request,
    exclusive_cpus,
    guaranteed_pod,
    make_settings,
    pod,
    uid_of,
    with_container_resources,
)
from starlette.routing import Route

from enforcer.cgroups import recording
from enforcer.service import auth, deps, main, requests
from enforcer.service import errors as service_errors
from shared import contract

pytestmark = pytest.mark.anyio


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = main.create_app(
        make_settings(tmp_path / "state"), cgroup_driver=recording.RecordingCgroupDriver(auto_create=True)
    )
    app.dependency_overrides[deps.require_writer] = lambda: auth.Caller("certificate", "test-writer")
    app.dependency_overrides[deps.require_reader] = lambda: auth.Caller("certificate", "test-reader")
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://enforcer") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


def without_cgroups(allocation: dict[str, Any]) -> dict[str, Any]:
    """The allocation minus its cgroup status, which the reconciler's worker updates on its own schedule."""
    return {k: v for k, v in allocation.items() if k != "cgroups"}


def state_file(tmp_path: Path) -> bytes:
    return (tmp_path / "state" / "numaguard_state.json").read_bytes()


async def test_a_new_pod_is_allocated_with_201_and_the_kubelets_cpus(api: httpx.AsyncClient) -> None:
    response = await api.post("/allocations", json=allocation_request(pod("tightly-coupled-database")))
    assert response.status_code == 201
    body = response.json()
    assert body["node"] == NODE
    assert body["numaAffinity"] == [0]
    assert body["podSharedPool"] == {"cpus": "4,20", "memoryNUMANodes": [0]}
    assert body["containers"]["database"]["cpus"] == "1-3,17-19"
    assert body["containers"]["database"]["assignment"] == "pod_exclusive"


async def test_the_same_request_again_is_200_with_the_same_allocation(api: httpx.AsyncClient) -> None:
    first = await api.post("/allocations", json=allocation_request(pod("ml-workload")))
    again = await api.post("/allocations", json=allocation_request(pod("ml-workload")))
    assert (first.status_code, again.status_code) == (201, 200)
    assert without_cgroups(first.json()) == without_cgroups(again.json())


def server_timing(response: httpx.Response) -> dict[str, float]:
    phases = [entry.strip().split(";dur=") for entry in response.headers["server-timing"].split(",")]
    return {name: float(ms) for name, ms in phases}


async def test_an_allocation_answer_says_where_its_time_went_in_server_timing(api: httpx.AsyncClient) -> None:
    started = time.perf_counter()
    first = await api.post("/allocations", json=allocation_request(pod("ml-workload")))
    again = await api.post("/allocations", json=allocation_request(pod("ml-workload")))
    round_trips_ms = (time.perf_counter() - started) * 1000
    for response in (first, again):  # a new pod and an idempotent retry (which waits for durability too)
        phases = server_timing(response)
        assert list(phases) == ["read", "decide", "durable", "followup", "answer"]
        assert all(ms >= 0 for ms in phases.values())
    # the phases are consecutive parts of each request, so together they fit in the two round trips
    assert sum(server_timing(first).values()) + sum(server_timing(again).values()) <= round_trips_ms


async def test_a_known_uid_with_another_spec_is_409_allocation_conflict(api: httpx.AsyncClient) -> None:
    original = pod("ml-workload")
    await api.post("/allocations", json=allocation_request(original))
    changed = with_container_resources(original, "ml-training", "2", "6Gi")
    response = await api.post("/allocations", json=allocation_request(changed))
    assert response.status_code == 409
    assert response.json()["reason"] == "AllocationConflict"


async def test_a_pod_no_numa_node_can_hold_is_403_with_the_kubelet_reason(api: httpx.AsyncClient) -> None:
    response = await api.post("/allocations", json=allocation_request(guaranteed_pod("too-wide", 20)))
    assert response.status_code == 403
    assert response.json()["reason"] == "TopologyAffinityError"


async def test_a_pod_needing_a_resource_the_node_lacks_is_403_out_of_it(api: httpx.AsyncClient) -> None:
    response = await api.post("/allocations", json=allocation_request(pod("init-sidecar-hugepages")))
    assert response.status_code == 403
    assert response.json()["reason"] == "OutOfhugepages-2Mi"


async def test_a_refused_pod_changes_nothing_in_memory_or_on_disk(api: httpx.AsyncClient, tmp_path: Path) -> None:
    await api.post("/allocations", json=allocation_request(pod("burstable-web")))
    before_disk = state_file(tmp_path)
    before = (await api.get("/allocations")).json()
    await api.post("/allocations", json=allocation_request(guaranteed_pod("too-wide", 20)))
    await api.post("/allocations", json=allocation_request(pod("init-sidecar-hugepages")))
    assert state_file(tmp_path) == before_disk
    after = (await api.get("/allocations")).json()
    assert [without_cgroups(i) for i in after["items"]] == [without_cgroups(i) for i in before["items"]]


async def test_malformed_json_is_422_with_an_error_body(api: httpx.AsyncClient) -> None:
    response = await api.post("/allocations", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["reason"] == "InvalidRequest"
    assert response.json()["field"] is None


async def test_a_request_without_node_name_is_422_naming_the_field(api: httpx.AsyncClient) -> None:
    response = await api.post("/allocations", json={"pod": pod("burstable-web")})
    assert response.status_code == 422
    assert response.json()["field"] == "nodeName"


async def test_an_unreadable_quantity_is_422_naming_its_path_in_the_body(api: httpx.AsyncClient) -> None:
    raw = pod("burstable-web")
    raw["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "lots"
    response = await api.post("/allocations", json=allocation_request(raw))
    assert response.status_code == 422
    assert response.json()["reason"] == "InvalidPod"
    assert response.json()["field"] == "pod.spec.containers[0].resources.limits[cpu]"


async def test_a_pod_the_api_server_would_reject_is_422_with_its_message(api: httpx.AsyncClient) -> None:
    response = await api.post("/allocations", json=allocation_request(pod("invalid-plr-aggregate")))
    assert response.status_code == 422
    body = response.json()
    assert body["reason"] == "InvalidPod"
    assert body["field"].startswith("pod.spec.resources")


async def test_a_pod_without_uid_is_422_on_metadata_uid(api: httpx.AsyncClient) -> None:
    raw = pod("burstable-web")
    del raw["metadata"]["uid"]
    response = await api.post("/allocations", json=allocation_request(raw))
    assert response.status_code == 422
    assert response.json()["field"] == "pod.metadata.uid"


async def test_a_request_for_another_node_is_422_wrong_node(api: httpx.AsyncClient) -> None:
    response = await api.post("/allocations", json=allocation_request(pod("burstable-web"), node="node-b"))
    assert response.status_code == 422
    assert response.json()["reason"] == "WrongNode"


async def test_an_unknown_uid_is_404_for_get_and_resize(api: httpx.AsyncClient) -> None:
    missing = uid_of("nobody")
    assert (await api.get(f"/allocations/{missing}")).status_code == 404
    resize = await api.post(f"/allocations/{missing}/resize", json={"pod": pod("burstable-web", uid=missing)})
    assert resize.status_code == 404
    assert resize.json()["reason"] == "NotFound"


async def test_release_is_idempotent(api: httpx.AsyncClient) -> None:
    raw = pod("ml-workload")
    await api.post("/allocations", json=allocation_request(raw))
    uid = raw["metadata"]["uid"]
    first = await api.delete(f"/allocations/{uid}")
    second = await api.delete(f"/allocations/{uid}")
    assert first.json()["released"] is True
    assert second.json()["released"] is False
    assert (await api.get(f"/allocations/{uid}")).status_code == 404


async def test_released_cpus_can_be_allocated_again(api: httpx.AsyncClient) -> None:
    first = (await api.post("/allocations", json=allocation_request(guaranteed_pod("a", 14)))).json()
    await api.delete(f"/allocations/{first['uid']}")
    again = await api.post("/allocations", json=allocation_request(guaranteed_pod("b", 14)))
    assert again.status_code == 201
    assert exclusive_cpus(again.json()) == exclusive_cpus(first)


async def test_list_filters_by_namespace(api: httpx.AsyncClient) -> None:
    for name in ("burstable-web", "besteffort-batch", "ml-workload"):
        await api.post("/allocations", json=allocation_request(pod(name)))
    shop = (await api.get("/allocations", params={"namespace": "shop"})).json()
    assert [item["name"] for item in shop["items"]] == ["burstable-web"]
    assert len((await api.get("/allocations")).json()["items"]) == 3


async def test_a_legal_resize_of_a_burstable_pod_is_accepted_and_listed(api: httpx.AsyncClient) -> None:
    raw = pod("burstable-web")
    await api.post("/allocations", json=allocation_request(raw))
    bigger = with_container_resources(raw, "web", "2", "1Gi")
    bigger["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "512Mi"}
    response = await api.post(f"/allocations/{raw['metadata']['uid']}/resize", json={"pod": bigger})
    assert response.status_code == 200
    assert response.json()["status"] == "Accepted"


async def test_a_dry_run_resize_changes_nothing(api: httpx.AsyncClient, tmp_path: Path) -> None:
    raw = pod("burstable-web")
    await api.post("/allocations", json=allocation_request(raw))
    before = state_file(tmp_path)
    bigger = with_container_resources(raw, "web", "2", "1Gi")
    bigger["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "512Mi"}
    uid = raw["metadata"]["uid"]
    response = await api.post(f"/allocations/{uid}/resize", params={"dryRun": "true"}, json={"pod": bigger})
    assert response.json()["status"] == "Accepted"
    assert state_file(tmp_path) == before
    again = await api.post(f"/allocations/{uid}/resize", params={"dryRun": "true"}, json={"pod": raw})
    assert again.json()["status"] == "Accepted"


async def test_a_resize_changing_the_qos_class_is_422_illegal(api: httpx.AsyncClient) -> None:
    raw = pod("burstable-web")
    await api.post("/allocations", json=allocation_request(raw))
    guaranteed = with_container_resources(raw, "web", "1", "512Mi")
    response = await api.post(f"/allocations/{raw['metadata']['uid']}/resize", json={"pod": guaranteed})
    assert response.status_code == 422
    assert response.json()["reason"] == "IllegalResize"


async def test_a_resize_whose_body_names_another_uid_is_422(api: httpx.AsyncClient) -> None:
    raw = pod("burstable-web")
    await api.post("/allocations", json=allocation_request(raw))
    other = pod("burstable-web", uid=uid_of("someone-else"))
    response = await api.post(f"/allocations/{raw['metadata']['uid']}/resize", json={"pod": other})
    assert response.status_code == 422
    assert response.json()["field"] == "pod.metadata.uid"


async def test_a_resize_that_does_not_fit_now_is_deferred_and_shown_pending(api: httpx.AsyncClient) -> None:
    filler = (await api.post("/allocations", json=allocation_request(guaranteed_pod("filler-a", 12)))).json()
    await api.post("/allocations", json=allocation_request(guaranteed_pod("filler-b", 12)))
    raw = pod("burstable-web")
    await api.post("/allocations", json=allocation_request(raw))
    huge = with_container_resources(raw, "web", "8", "4Gi")
    huge["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "7", "memory": "1Gi"}
    uid = raw["metadata"]["uid"]
    response = await api.post(f"/allocations/{uid}/resize", json={"pod": huge})
    assert response.json()["status"] == "Deferred"
    listed = (await api.get(f"/allocations/{uid}")).json()
    assert listed["resize"]["state"] == "Deferred"
    assert listed["resize"]["requested"]["web"]["requests"] == {"cpu": "7", "memory": "1Gi"}
    released = await api.delete(f"/allocations/{filler['uid']}")
    assert released.json()["resizesApplied"] == ["shop/burstable-web"]


async def test_topology_reports_free_and_exclusive_cpus_per_numa_node(api: httpx.AsyncClient) -> None:
    await api.post("/allocations", json=allocation_request(pod("tightly-coupled-database")))
    view = (await api.get("/topology")).json()
    node0 = view["numaNodes"][0]["cpus"]
    assert (node0["total"], node0["reserved"], node0["exclusive"]) == (16, 2, 8)
    assert node0["free"] == 6
    assert view["reservedCPUs"] == "0,16"
    assert view["numaNodes"][0]["memory"]["memory"]["reserved"] == 16 * 1024**3


async def test_metrics_expose_the_kubelet_counter_names_exactly(api: httpx.AsyncClient) -> None:
    await api.post("/allocations", json=allocation_request(pod("tightly-coupled-database")))
    text = (await api.get("/metrics")).text
    assert 'resource_manager_allocations_total{resource_name="cpu",source="pod"} 3.0' in text
    assert 'resource_manager_container_assignments{assignment_type="pod_exclusive",resource_name="cpu"} 1.0' in text
    assert "# TYPE resource_manager_allocation_errors_total counter" in text
    assert 'numaguard_enforcer_free_cpus{numa_node="0"} 6.0' in text


async def test_the_openapi_document_uses_the_contract_models(api: httpx.AsyncClient) -> None:
    app: Any = api.app  # type: ignore[attr-defined]
    document = app.openapi()
    body = document["paths"]["/allocations"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/AllocationRequest"}
    schemas = document["components"]["schemas"]
    assert {"AllocationRequest", "ResizeRequest", "ResizeResult", "ErrorBody", "TopologyView"} <= schemas.keys()
    assert "409" in document["paths"]["/allocations"]["post"]["responses"]


async def test_probes_answer_without_credentials(api: httpx.AsyncClient) -> None:
    app: Any = api.app  # type: ignore[attr-defined]
    app.dependency_overrides.clear()
    assert (await api.get("/healthz")).status_code == 200
    ready = await api.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["ready"] is True
    assert (await api.get("/allocations")).status_code == 401
    for docs in ("/openapi.json", "/docs", "/redoc"):  # finding 6: the API description is not public
        assert (await api.get(docs)).status_code == 404


async def test_a_change_that_cannot_be_saved_is_rolled_back_and_answered_503(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    kept = pod("ml-workload")
    await api.post("/allocations", json=allocation_request(kept))
    state_dir = tmp_path / "state"
    state_dir.rename(tmp_path / "state-away")
    state_dir.write_text("a file where the state directory should be: every save fails")
    try:
        failed = await api.post("/allocations", json=allocation_request(pod("burstable-web")))
        assert failed.status_code == 503
        assert failed.json()["reason"] == "StateWriteFailed"
        listed = (await api.get("/allocations")).json()
        assert [item["uid"] for item in listed["items"]] == [kept["metadata"]["uid"]]
    finally:
        state_dir.unlink()
        (tmp_path / "state-away").rename(state_dir)
    assert (await api.post("/allocations", json=allocation_request(pod("burstable-web")))).status_code == 201


async def test_an_allocation_alone_is_written_on_the_event_loop_and_one_beside_others_on_the_executor(
    api: httpx.AsyncClient,
) -> None:
    """Alone, a change skips the executor's two thread hand-offs; with others in flight the loop keeps deciding."""
    service = api.app.state.service  # type: ignore[attr-defined]

    def writes(thread: str) -> float:
        value = service.metrics.registry.get_sample_value("numaguard_enforcer_state_writes_total", {"thread": thread})
        return value or 0.0

    before = {thread: writes(thread) for thread in ("event_loop", "executor")}
    alone = await api.post("/allocations", json=allocation_request(pod("tightly-coupled-database")))
    assert alone.status_code == 201
    assert writes("event_loop") == before["event_loop"] + 1 and writes("executor") == before["executor"]
    with service.in_flight.track():  # another request being decided or made durable
        beside = await api.post("/allocations", json=allocation_request(pod("burstable-web")))
    assert beside.status_code == 201
    assert writes("executor") == before["executor"] + 1 and writes("event_loop") == before["event_loop"] + 1
    released = await api.delete(f"/allocations/{pod('burstable-web')['metadata']['uid']}")
    assert released.status_code == 200 and writes("event_loop") == before["event_loop"] + 2


async def test_a_new_pod_alone_in_flight_is_programmed_by_the_event_loop_once_answered(
    api: httpx.AsyncClient,
) -> None:
    """Alone, the new pod's cgroup pass runs on the loop after the answer (no worker thread beside the loop);
    beside another request it is left to the worker, which steps aside for requests in flight."""
    service = api.app.state.service  # type: ignore[attr-defined]
    driver = service.reconciler.driver

    def loop_passes() -> float:
        labels = {"trigger": "change", "thread": "event_loop"}
        return service.metrics.registry.get_sample_value("numaguard_enforcer_reconcile_runs_total", labels) or 0.0

    # a shared pod: the default set does not change, so nothing wakes the worker (it could take the pod first)
    web = pod("burstable-web")
    alone = await api.post("/allocations", json=allocation_request(web))
    assert alone.status_code == 201
    await asyncio.sleep(0)  # one turn of the loop: the callback queued while answering
    assert loop_passes() == 1
    assert any(web["metadata"]["uid"].replace("-", "_") in w.path for w in driver.writes)
    with service.in_flight.track():  # another request being decided or made durable
        beside = await api.post("/allocations", json=allocation_request(pod("burstable-web", uid="web-2")))
    assert beside.status_code == 201
    await asyncio.sleep(0)
    assert loop_passes() == 1


async def test_a_new_pod_whose_callers_budget_ran_out_is_not_allocated(api: httpx.AsyncClient) -> None:
    """A webhook that gave up on a binding must not leave CPUs held: past its deadline nothing is decided."""
    raw = pod("tightly-coupled-database")
    service = api.app.state.service  # type: ignore[attr-defined]
    resources = requests.pod_resources(raw, pod_level_resources=True)
    with pytest.raises(service_errors.DeadlineExceededError):
        await service.allocate_async(resources, deadline=time.monotonic() - 1)
    assert service.allocations().items == []
    on_time = await api.post("/allocations", json=allocation_request(raw), headers={contract.BUDGET_HEADER: "3000"})
    assert on_time.status_code == 201
    # a retry of a pod the node already holds is answered even when late: nothing new is decided
    again = await service.allocate_async(resources, deadline=time.monotonic() - 1)
    assert again.created is False


async def test_a_budget_header_that_is_not_a_positive_number_is_a_422(api: httpx.AsyncClient) -> None:
    raw = pod("tightly-coupled-database")
    response = await api.post("/allocations", json=allocation_request(raw), headers={contract.BUDGET_HEADER: "0"})
    assert response.status_code == 422


# The allocation routes are plain Starlette routes (routes.add_allocation_routes), matched before FastAPI's and
# only for their own method: every other method on their paths gets the answer (and Allow header) of the route
# that answered it before, and request metrics still carry the route templates (values recorded from FastAPI's).


async def test_the_allocation_routes_come_first(api: httpx.AsyncClient) -> None:
    first, second = api.app.router.routes[:2]  # type: ignore[attr-defined]
    assert [(isinstance(r, Route), r.path, r.methods) for r in (first, second)] == [
        (True, "/allocations", {"POST"}),
        (True, "/allocations/{uid}", {"DELETE"}),
    ]


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/allocations", "POST"),
        ("DELETE", "/allocations", "POST"),
        ("HEAD", "/allocations", "POST"),
        ("PUT", "/allocations/x", "GET"),  # the GET route of the path came first, and still does
        ("POST", "/allocations/x", "GET"),
    ],
)
async def test_other_methods_get_the_answer_they_got_before(
    api: httpx.AsyncClient, method: str, path: str, allow: str
) -> None:
    answer = await api.request(method, path)
    assert (answer.status_code, answer.headers["allow"]) == (405, allow)
    if method != "HEAD":
        assert answer.json()["reason"] == "MethodNotAllowed"


async def test_a_trailing_slash_is_still_redirected(api: httpx.AsyncClient) -> None:
    answer = await api.delete("/allocations/x/")
    assert (answer.status_code, answer.headers["location"]) == (307, "http://enforcer/allocations/x")


async def test_request_metrics_still_name_the_route_templates(api: httpx.AsyncClient) -> None:
    request = allocation_request(guaranteed_pod("p", 1))
    assert (await api.post("/allocations", json=request)).status_code == 201
    assert (await api.delete(f"/allocations/{uid_of('p')}")).status_code == 200
    text = (await api.get("/metrics")).text
    assert 'method="POST",route="/allocations",status="201"' in text
    assert 'method="DELETE",route="/allocations/{uid}",status="200"' in text


async def test_an_unauthenticated_caller_is_refused_before_the_body_is_read(tmp_path: Path) -> None:
    app = main.create_app(
        make_settings(tmp_path / "state"), cgroup_driver=recording.RecordingCgroupDriver(auto_create=True)
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://enforcer") as client:
            answer = await client.post("/allocations", content=b"{not json")
            released = await client.delete("/allocations/x")
    assert (answer.status_code, answer.json()["reason"]) == (401, "Unauthorized")
    assert released.status_code == 401
