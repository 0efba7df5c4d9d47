"""``GET /replica`` on a real enforcer over TLS, and the extender's poller reading it.

Real parts: the enforcer app under uvicorn on a loopback port with its TLS context, the bearer token and
client certificates from ``servicekit.certs``, the extender's httpx client with the CA.  The enforcer is
stopped to show what the extender answers for a node whose enforcer is down.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from extender_kit import args, guaranteed
from service_fixtures import (
    NODE,
    TOKEN,
    bundle_files,
    clients,
    make_settings,
    pod,
    running_enforcer,
)

from extender import poller as extender_poller
from extender.decide import Extender
from extender.directory import EnforcerDirectory
from extender.replica import ReplicaStore
from servicekit import certs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> certs.Bundle:
    return certs.issue_bundle(tmp_path_factory.mktemp("certs"), namespace="numaguard")


def test_replica_export_is_numbered_conditional_and_authenticated(tmp_path: Path, bundle: certs.Bundle) -> None:
    config = make_settings(tmp_path / "state", **bundle_files(bundle, tmp_path))
    with running_enforcer(config) as running, clients(bundle, running.base_url) as c:
        assert c.anonymous.get("/replica").status_code == 401
        assert c.wrong_token.get("/replica").status_code == 403
        first = c.reader.get("/replica")
        assert first.status_code == 200
        body = first.json()
        assert body["version"] == 1 and body["node"] == NODE and body["generation"] == 1
        assert set(body["snapshot"]) >= {"topology", "config", "cpu", "memory", "pods"}
        etag = first.headers["ETag"]
        assert c.reader.get("/replica", headers={"If-None-Match": etag}).status_code == 304
        database = {"pod": pod("tightly-coupled-database"), "nodeName": NODE}
        assert c.writer.post("/allocations", json=database).status_code == 201
        second = c.reader.get("/replica", headers={"If-None-Match": etag})
        assert second.status_code == 200
        assert second.json()["generation"] == 2 and second.json()["incarnation"] == body["incarnation"]
        assert len(second.json()["snapshot"]["pods"]) == 1


def test_the_poller_keeps_a_replica_and_a_down_enforcer_is_filtered(tmp_path: Path, bundle: certs.Bundle) -> None:
    config = make_settings(tmp_path / "state", **bundle_files(bundle, tmp_path))
    clock = Clock()
    store = ReplicaStore(freshness=5.0, clock=clock)
    with running_enforcer(config) as running, clients(bundle, running.base_url) as c:
        directory = EnforcerDirectory({NODE: running.base_url})
        client = extender_poller.client_factory(
            ca=str(bundle.cert("ca")), cert=None, key=None, token=lambda: TOKEN, timeout=2.0
        )
        poll = extender_poller.Poller(store, directory, client, interval=1.0)
        extender = Extender(store, directory)
        poll.refresh(NODE)
        assert store.view(NODE).freshness == "fresh"
        assert store.view(NODE).replica is not None and store.view(NODE).replica.generation == 1  # type: ignore[union-attr]
        # fill NUMA node 1 (15 of its 16 CPUs; the seed node reserves CPUs 0 and 16), then poll again
        c.writer.post("/allocations", json={"pod": pod("tightly-coupled-database"), "nodeName": NODE})
        big = guaranteed("big", "12", "2Gi")
        assert c.writer.post("/allocations", json={"pod": big, "nodeName": NODE}).status_code == 201
        poll.refresh(NODE)
        view = store.view(NODE)
        # two changes, one export in between: the generation counts exports that differ, not changes
        assert view.replica is not None and view.replica.generation == 2
        assert len(view.replica.engine.state.pods) == 2
        result = extender.filter(args(guaranteed("nine", "9"), [NODE]))
        refusal = "TopologyAffinityError: Resources cannot be allocated with Topology locality"
        assert result["FailedNodes"] == {NODE: refusal}
        # the very answer the enforcer gives at binding
        refused = c.writer.post("/allocations", json={"pod": guaranteed("nine", "9"), "nodeName": NODE})
        assert refused.status_code == 403 and refused.json()["reason"] == "TopologyAffinityError"
        poll.refresh(NODE)  # unchanged: 304, the replica is confirmed, not decoded again
        assert store.view(NODE).replica is view.replica
        client.close()  # drop the keep-alive connection, or the server's graceful stop waits for it
        poll.client = extender_poller.client_factory(
            ca=str(bundle.cert("ca")), cert=None, key=None, token=lambda: TOKEN, timeout=2.0
        )
    # the enforcer is gone: polls fail; fresh for the freshness bound, then down
    poll.refresh(NODE)
    assert store.view(NODE).freshness == "fresh"
    clock.now += 6.0
    assert store.view(NODE).freshness == "down"
    result = extender.filter(args(guaranteed("two", "2"), [NODE]))
    assert result["NodeNames"] == []
    assert result["FailedAndUnresolvableNodes"][NODE].startswith("EnforcerUnavailable: ")
    lenient = Extender(store, directory, enforcer_down="pass")
    assert lenient.filter(args(guaranteed("two", "2"), [NODE]))["NodeNames"] == [NODE]
    # a pod that needs no alignment is not affected by any of this
    web = {"metadata": {"name": "web", "namespace": "default"}, "spec": {"containers": [{"name": "w", "image": "x"}]}}
    assert extender.filter(args(web, [NODE]))["NodeNames"] == [NODE]
    poll.stop()


def test_a_node_never_reached_passes_until_its_polls_fail(tmp_path: Path) -> None:
    clock = Clock()
    store = ReplicaStore(freshness=5.0, clock=clock)
    directory = EnforcerDirectory({"*": "https://127.0.0.1:9/{node}"})  # port 9 (discard): nothing listens
    poll = extender_poller.Poller(store, directory, httpx.Client(timeout=1.0), interval=1.0)
    extender = Extender(store, directory)
    assert extender.filter(args(guaranteed("db", "2"), ["nowhere"]))["NodeNames"] == ["nowhere"]
    poll.refresh("nowhere")
    assert store.view("nowhere").freshness == "down"
    assert "nowhere" in extender.filter(args(guaranteed("db", "2"), ["nowhere"]))["FailedAndUnresolvableNodes"]
    poll.stop()
