"""The pod watch: releases what the cluster no longer runs here, learns container ids (a fake pod source)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable
from typing import Any

import pytest
from service_fixtures import pod

from enforcer.service import kube, requests
from enforcer.service.node_service import NodeService

GRACE = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakePodSource:
    """One list, then scripted watch windows; the last window sets ``stop`` (a fake, not a mock)."""

    def __init__(self, pods: list[dict[str, Any]], windows: list[list[tuple[str, dict[str, Any]]]]) -> None:
        self.pods = pods
        self.windows = windows
        self.stop = threading.Event()
        self.versions: list[str] = []

    def list_pods(self) -> tuple[list[Any], str]:
        return list(self.pods), "100"

    def watch_pods(self, resource_version: str, timeout_seconds: int) -> Iterable[tuple[str, Any]]:
        self.versions.append(resource_version)
        if not self.windows:
            self.stop.set()
            return []
        return self.windows.pop(0)


def allocate(service: NodeService, raw: dict[str, Any]) -> str:
    service.allocate(requests.pod_resources(raw, pod_level_resources=True))
    uid: str = raw["metadata"]["uid"]
    return uid


def running_pod(fixture: str, **container_ids: str) -> dict[str, Any]:
    raw = copy.deepcopy(pod(fixture))
    raw["spec"]["nodeName"] = "node-a"
    raw["status"] = {
        "phase": "Running",
        "containerStatuses": [{"name": name, "containerID": cid} for name, cid in container_ids.items()],
    }
    return raw


def watcher(service: NodeService, source: Any = None, clock: Clock | None = None) -> kube.PodWatcher:
    return kube.PodWatcher(service, source or FakePodSource([], []), grace_seconds=GRACE, clock=clock or Clock())


def test_a_deleted_pod_is_released(service: NodeService) -> None:
    raw = running_pod("ml-workload")
    uid = allocate(service, raw)
    watch = watcher(service)
    watch.handle("ADDED", raw)
    watch.handle("DELETED", raw)
    assert service.allocated_uids() == set()
    assert 'numaguard_enforcer_releases_total{cause="pod_deleted"} 1.0' in service.metrics_text().decode()
    assert uid not in service.allocated_uids()


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_is_released(service: NodeService, phase: str) -> None:
    raw = running_pod("ml-workload")
    allocate(service, raw)
    raw["status"]["phase"] = phase
    watcher(service).handle("MODIFIED", raw)
    assert service.allocated_uids() == set()


def test_container_ids_reach_the_reconciler(service: NodeService) -> None:
    raw = running_pod("ml-workload", **{"ml-training": "containerd://abc"})
    uid = allocate(service, raw)
    watcher(service).handle("MODIFIED", raw)
    desired = service.desired_state([uid]).pods[0]
    assert desired.container_ids == {"ml-training": "containerd://abc"}
    assert service.reconciler.run_requested() is not None  # the new id queued a reconcile of that pod


def test_an_allocation_whose_pod_never_appears_is_released_after_the_grace_period(service: NodeService) -> None:
    clock = Clock()
    uid = allocate(service, running_pod("ml-workload"))
    watch = watcher(service, clock=clock)
    watch.resync([])
    assert watch.sweep() == []
    clock.now += GRACE - 1
    assert watch.sweep() == []
    clock.now += 1
    assert watch.sweep() == [uid]
    assert service.allocated_uids() == set()


def test_a_pod_that_shows_up_within_the_grace_period_keeps_its_allocation(service: NodeService) -> None:
    clock = Clock()
    raw = running_pod("ml-workload")
    uid = allocate(service, raw)
    watch = watcher(service, clock=clock)
    watch.resync([])
    clock.now += GRACE / 2
    watch.handle("ADDED", raw)
    clock.now += GRACE
    assert watch.sweep() == []
    assert service.allocated_uids() == {uid}


def test_a_relist_releases_pods_deleted_while_the_watch_was_down(service: NodeService) -> None:
    raw = running_pod("ml-workload")
    allocate(service, raw)
    watch = watcher(service)
    watch.resync([raw])
    watch.resync([])
    assert service.allocated_uids() == set()


def test_the_loop_lists_then_follows_events_from_the_listed_version(service: NodeService) -> None:
    listed = running_pod("ml-workload")
    allocate(service, listed)
    gone = copy.deepcopy(listed)
    gone["metadata"]["resourceVersion"] = "101"
    source = FakePodSource([listed], [[("DELETED", gone)]])
    watch = watcher(service, source)
    watch.run(source.stop)
    assert source.versions == ["100", "101"]
    assert service.allocated_uids() == set()


def _bound_with_allocation(fixture: str) -> dict[str, Any]:
    raw = running_pod(fixture)
    raw["metadata"].setdefault("annotations", {})["numaguard.io/allocation"] = '{"node": "node-a"}'
    return raw


def test_pods_bound_here_with_an_allocation_the_state_does_not_hold_are_reported_once(
    service: NodeService, caplog: pytest.LogCaptureFixture
) -> None:
    """A wiped state directory (identity file too): the node starts empty while its pods still run pinned."""
    held = _bound_with_allocation("ml-workload")
    allocate(service, held)
    lost = _bound_with_allocation("tightly-coupled-database")
    lost["metadata"]["uid"] = "0f0e0d0c-0000-4000-8000-00000000beef"
    finished = _bound_with_allocation("tightly-coupled-database")
    finished["metadata"]["uid"] = "0f0e0d0c-0000-4000-8000-00000000dead"
    finished["status"]["phase"] = "Succeeded"
    never_numaguard = running_pod("tightly-coupled-database")
    never_numaguard["metadata"]["uid"] = "0f0e0d0c-0000-4000-8000-00000000f00d"
    reported: list[list[str]] = []
    watch = kube.PodWatcher(
        service, FakePodSource([], []), grace_seconds=GRACE, clock=Clock(), on_missing_allocations=reported.append
    )
    with caplog.at_level("WARNING", logger=kube.log.name):
        watch.resync([held, lost, finished, never_numaguard])
        watch.resync([held, lost, finished, never_numaguard])  # a relist does not report it again
    assert reported == [["0f0e0d0c-0000-4000-8000-00000000beef"]]
    assert sum("state was lost or wiped" in r.getMessage() for r in caplog.records) == 1
