"""The list+watch loop of ``webhook.kube`` driven by a fake list function and a fake watch (no API server)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from webhook_testkit import PODS_DIR

from webhook import discovery, kube, pod_cache


def pending_pod(name: str, uid: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((PODS_DIR / "tightly-coupled-database.json").read_text())
    document["metadata"].update(name=name, uid=uid)
    return document


@dataclass
class FakeListResponse:
    data: bytes


@dataclass
class FakeWatch:
    events: list[dict[str, Any]]
    calls: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False

    def stream(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.calls.append(kwargs)
        yield from self.events

    def stop(self) -> None:
        self.stopped = True


def lister(items: list[dict[str, Any]], calls: list[dict[str, Any]]) -> Callable[..., FakeListResponse]:
    def list_pods(**kwargs: Any) -> FakeListResponse:
        calls.append(kwargs)
        return FakeListResponse(json.dumps({"metadata": {"resourceVersion": "77"}, "items": items}).encode())

    return list_pods


def test_a_list_then_watch_fills_the_index_and_applies_each_event() -> None:
    index = pod_cache.PodIndex()
    list_calls: list[dict[str, Any]] = []
    watch = FakeWatch(
        events=[
            {"type": "ADDED", "raw_object": pending_pod("b", "u-b")},
            {"type": "BOOKMARK", "raw_object": {"metadata": {"resourceVersion": "80"}}},
            {"type": "DELETED", "raw_object": pending_pod("a", "u-a")},
        ]
    )
    loop = kube.ListWatch(
        "pending-pods",
        lister([pending_pod("a", "u-a")], list_calls),
        index,
        list_kwargs={"field_selector": "spec.nodeName="},
        watch_factory=lambda: watch,
    )
    loop.run_once()
    assert list_calls == [{"_preload_content": False, "_request_timeout": 60, "field_selector": "spec.nodeName="}]
    assert watch.calls[0]["resource_version"] == "77"
    assert watch.calls[0]["field_selector"] == "spec.nodeName="
    assert index.is_ready()
    assert len(index) == 1  # a listed and deleted, b added


def test_an_expired_watch_returns_so_the_loop_lists_again() -> None:
    directory = discovery.DaemonSetDirectory(8443)
    watch = FakeWatch(events=[{"type": "ERROR", "raw_object": {"code": 410}}, {"type": "ADDED", "raw_object": {}}])
    loop = kube.ListWatch("enforcers", lister([], []), directory, watch_factory=lambda: watch)
    loop.run_once()
    assert directory.is_ready()


def test_any_other_watch_error_is_raised_for_the_retry_loop() -> None:
    watch = FakeWatch(events=[{"type": "ERROR", "raw_object": {"code": 500, "message": "etcd"}}])
    loop = kube.ListWatch("enforcers", lister([], []), discovery.DaemonSetDirectory(8443), watch_factory=lambda: watch)
    with pytest.raises(RuntimeError, match="watch error event"):
        loop.run_once()


def test_the_loop_thread_stops_when_asked() -> None:
    watch = FakeWatch(events=[])
    loop = kube.ListWatch(
        "enforcers", lister([], []), discovery.DaemonSetDirectory(8443), watch_factory=lambda: watch, retry_seconds=60
    ).start()
    loop.stop(timeout=5)
    assert not loop._thread.is_alive()


def test_the_cluster_watches_are_built_without_contacting_a_cluster() -> None:
    from kubernetes import client

    api = client.ApiClient(client.Configuration())
    pending = kube.pending_pods_watch(api, pod_cache.PodIndex())
    enforcers = kube.enforcer_pods_watch(
        api, discovery.DaemonSetDirectory(8443), namespace="numaguard", selector="app=enforcer"
    )
    assert pending.name == "pending-pods" and enforcers.name == "enforcer-pods"
    assert kube.ApiPodReader(api).is_ready()


@pytest.mark.anyio
async def test_an_in_cluster_app_is_not_ready_until_its_watches_have_listed() -> None:
    import httpx
    from kubernetes import client

    from webhook import main
    from webhook.settings import WebhookSettings

    settings = WebhookSettings(enforcer_discovery="daemonset", pod_source="kubernetes")
    app = main.create_app(settings, components=main.Components(kube_api=client.ApiClient(client.Configuration())))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as http:
        ready = await http.get("/readyz")  # the lifespan (which starts the watches) never ran
    assert ready.status_code == 503
    assert ready.json()["checks"] == {"pods": False, "enforcers": False}
