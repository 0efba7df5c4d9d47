"""In a cluster the node publishes NodeResourceTopology and each pending resize as a pod annotation."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from service_fixtures import guaranteed_pod, make_settings, with_container_resources

from enforcer.cgroups import recording
from enforcer.service import requests, runtime
from enforcer.service.cluster_status import ClusterStatus
from enforcer.service.metrics import EnforcerMetrics
from shared import contract


class Sink:
    def __init__(self) -> None:
        self.documents: list[Mapping[str, Any]] = []

    def submit(self, document: Mapping[str, Any]) -> None:
        self.documents.append(document)


class Annotator:
    def __init__(self, *, fail: bool = False) -> None:
        self.calls: list[tuple[str, str, str, str | None]] = []
        self.fail = fail

    def annotate(self, namespace: str, name: str, key: str, value: str | None) -> None:
        if self.fail:
            raise RuntimeError("the API server is away")
        self.calls.append((namespace, name, key, value))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[runtime.RunningNode]:
    running = runtime.start(
        make_settings(tmp_path / "state"), EnforcerMetrics(), driver=recording.RecordingCgroupDriver(auto_create=True)
    )
    try:
        yield running
    finally:
        running.stop()


def _resources(raw: dict[str, Any]) -> Any:
    return requests.pod_resources(raw, pod_level_resources=True)


def test_free_resources_are_published_per_numa_node_after_an_allocation(node: runtime.RunningNode) -> None:
    sink = Sink()
    status = ClusterStatus(node.service, documents=sink, annotator=None)
    node.service.allocate(_resources(guaranteed_pod("db", 4)))
    status.publish_once()
    zones = {z["name"]: z for z in sink.documents[-1]["zones"]}
    cpu = {r["name"]: r for r in zones["node-0"]["resources"]}["cpu"]
    assert int(cpu["available"]) == int(cpu["allocatable"]) - 4


def test_a_deferred_resize_is_annotated_on_the_pod_and_the_annotation_removed_when_done(
    node: runtime.RunningNode,
) -> None:
    annotator = Annotator()
    status = ClusterStatus(node.service, documents=None, annotator=annotator)
    big = guaranteed_pod("big", 12)  # NUMA node 0: 14 assignable CPUs (0 and 16 are reserved)
    small = guaranteed_pod("small", 2)  # takes NUMA node 0's last 2
    node.service.allocate(_resources(big))
    node.service.allocate(_resources(small))
    grown = _resources(with_container_resources(big, "main", "14", "1Gi"))
    result = node.service.resize(grown.uid, grown)
    assert result.status == "Deferred"  # fits NUMA node 0, not with what is free there now
    status.publish_once()
    namespace, name, key, value = annotator.calls[-1]
    assert (namespace, name, key) == ("default", "big", contract.RESIZE_ANNOTATION)
    assert value is not None and '"Deferred"' in value
    status.publish_once()
    assert len(annotator.calls) == 1  # unchanged: not patched again
    node.service.release(_resources(small).uid)  # room frees up: the queued resize is applied
    status.publish_once()
    assert annotator.calls[-1] == ("default", "big", contract.RESIZE_ANNOTATION, None)


def test_an_unreachable_api_is_retried_next_round_and_never_raises(node: runtime.RunningNode) -> None:
    annotator = Annotator(fail=True)
    status = ClusterStatus(node.service, documents=None, annotator=annotator)
    node.service.allocate(_resources(guaranteed_pod("big", 12)))
    node.service.allocate(_resources(guaranteed_pod("small", 2)))
    grown = _resources(with_container_resources(guaranteed_pod("big", 12), "main", "14", "1Gi"))
    node.service.resize(grown.uid, grown)
    status.publish_once()  # the patch fails: logged, not raised
    annotator.fail = False
    status.publish_once()  # and is made on the next round
    assert [c[1] for c in annotator.calls] == ["big"]
