"""The NodeResourceTopology document and its publisher.

The builder runs on engines driven by the bundled seed scenarios (the kubelet configurations and
pods of ``numaguard_cli/scenarios``), so zone values are checked against what the seeds allocate.
The publisher runs against a fake ``CustomObjectsApi`` that stores objects and answers like the
API server (404 for a missing object, 409 for a stale resourceVersion).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from enforcer.engine import builder, scenario
from enforcer.engine.config import from_kubelet
from enforcer.engine.node import NodeEngine
from enforcer.service import nrt
from enforcer.service.nrt_publisher import NodeResourceTopologyPublisher
from enforcer.topology import machine
from shared import quantity

SCENARIOS = Path(__file__).resolve().parents[3] / "numaguard_cli" / "scenarios"
GiB = 1 << 30
MiB = 1 << 20


def scenario_doc(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    return doc


def topology_doc(doc: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCENARIOS / doc["node"]["topologyFile"]).read_text())
    return loaded


def engine_after(name: str, steps: int | None = None) -> tuple[NodeEngine, list[dict[str, Any]]]:
    """The engine of a bundled scenario after its first ``steps`` steps (all by default), and their results."""
    doc = scenario_doc(name)
    engine = scenario.parse_node(doc["node"], topology_doc(doc))
    results = [scenario.run_step(engine, step) for step in scenario.parse_steps(doc["steps"])[:steps]]
    return engine, results


def document(engine: NodeEngine) -> dict[str, Any]:
    return nrt.build_node_resource_topology("node-a", engine.topology, engine)


def zone_resources(doc: dict[str, Any], numa_id: int) -> dict[str, dict[str, int]]:
    """A zone's resources as integers (CPUs, bytes), by resource name."""
    [zone] = [z for z in doc["zones"] if z["name"] == f"node-{numa_id}"]
    return {
        r["name"]: {k: quantity.parse(r[k]).integer() for k in ("capacity", "allocatable", "available")}
        for r in zone["resources"]
    }


# -- the document ----------------------------------------------------------------------------------------


def test_seed_1_pod_bubble_and_memory_leave_numa_0_and_nothing_else() -> None:
    engine, [step] = engine_after("seed-1-tightly-coupled-database")
    assert step["admitted"] and step["numaAffinity"] == [0]
    doc = document(engine)
    node0, node1 = zone_resources(doc, 0), zone_resources(doc, 1)
    # 16 CPUs per NUMA node; reservedSystemCPUs 0,16 sit on NUMA 0; the 8-CPU bubble is taken whole
    assert node0["cpu"] == {"capacity": 16, "allocatable": 14, "available": 6}
    assert node1["cpu"] == {"capacity": 16, "allocatable": 16, "available": 16}
    # reservedMemory is 1124Mi on NUMA 0 only; the pod's 16Gi block is charged there once
    assert node0["memory"]["allocatable"] == node1["memory"]["allocatable"] - 1124 * MiB
    assert node0["memory"]["available"] == node0["memory"]["allocatable"] - 16 * GiB
    assert node1["memory"]["available"] == node1["memory"]["allocatable"]
    assert node0["memory"]["capacity"] == node1["memory"]["capacity"] == 64 * GiB
    assert node0["hugepages-1Gi"] == {"capacity": 8 * GiB, "allocatable": 8 * GiB, "available": 8 * GiB}


def test_seed_2_only_the_exclusive_container_leaves_its_numa_node() -> None:
    engine, [step] = engine_after("seed-2-ml-workload-container-scope")
    [numa_id] = step["containers"]["ml-training"]["memoryNUMANodes"]
    before = document(engine_after("seed-2-ml-workload-container-scope", steps=0)[0])
    doc = document(engine)
    for node in (0, 1):
        was, now = zone_resources(before, node), zone_resources(doc, node)
        taken_cpus, taken_memory = (3, 6 * GiB) if node == numa_id else (0, 0)
        assert now["cpu"]["available"] == was["cpu"]["available"] - taken_cpus
        assert now["memory"]["available"] == was["memory"]["available"] - taken_memory
        assert now["cpu"]["allocatable"] == was["cpu"]["allocatable"]


def test_releasing_the_pod_gives_every_resource_back() -> None:
    engine, _ = engine_after("seed-1-tightly-coupled-database")
    [uid] = engine.pod_uids()
    engine.remove(uid)
    assert document(engine) == document(engine_after("seed-1-tightly-coupled-database", steps=0)[0])


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS.glob("*.yaml")))
def test_available_cpus_are_the_allocatable_cpus_left_in_the_shared_pool(name: str) -> None:
    engine, _ = engine_after(name)
    amounts = nrt.cpu_amounts(engine.topology, engine)
    allocatable = engine.topology.all_cpus - engine.cpu_policy.reserved_cpus
    for numa_id, amount in amounts.items():
        numa_cpus = engine.topology.cpus_in_numa_nodes([numa_id])
        assert amount.available == len(numa_cpus & allocatable & engine.default_cpus())


def test_zones_carry_the_slit_distances_as_costs() -> None:
    engine, _ = engine_after("seed-1-tightly-coupled-database", steps=0)
    zones = {z["name"]: z for z in document(engine)["zones"]}
    assert [z["type"] for z in zones.values()] == ["Node", "Node"]
    assert zones["node-0"]["costs"] == [{"name": "node-0", "value": 10}, {"name": "node-1", "value": 21}]
    assert zones["node-1"]["costs"] == [{"name": "node-0", "value": 21}, {"name": "node-1", "value": 10}]


def engine_for(kubelet: dict[str, Any], *, distances: bool = True) -> NodeEngine:
    doc = scenario_doc("seed-1-tightly-coupled-database")
    topo = copy.deepcopy(topology_doc(doc))
    if not distances:
        topo.pop("distances")
    return builder.build(machine.from_document(topo), from_kubelet({**doc["node"]["kubelet"], **kubelet}))


def test_a_machine_without_distances_publishes_no_costs() -> None:
    zones = document(engine_for({}, distances=False))["zones"]
    assert all("costs" not in z for z in zones)


@pytest.mark.parametrize(
    ("policy", "scope", "legacy"),
    [
        ("single-numa-node", "pod", "SingleNUMANodePodLevel"),
        ("single-numa-node", "container", "SingleNUMANodeContainerLevel"),
        ("restricted", "pod", "RestrictedPodLevel"),
        ("best-effort", "container", "BestEffortContainerLevel"),
        ("none", "container", "None"),
    ],
)
def test_attributes_name_the_topology_manager_policy_and_scope(policy: str, scope: str, legacy: str) -> None:
    doc = document(engine_for({"topologyManagerPolicy": policy, "topologyManagerScope": scope}))
    assert doc["attributes"] == [
        {"name": "topologyManagerPolicy", "value": policy},
        {"name": "topologyManagerScope", "value": scope},
        {"name": "nodeTopologyPodsFingerprint", "value": "pfp0v001ef46db3751d8e999"},  # the empty pod set
        {"name": "nodeTopologyPodsFingerprintMethod", "value": "with-exclusive-resources"},
    ]
    assert doc["topologyPolicies"] == [legacy]


def test_without_the_memory_manager_each_numa_node_offers_its_whole_memory() -> None:
    engine = engine_for({"memoryManagerPolicy": "None", "reservedMemory": []})
    for numa_id in engine.topology.numa_ids:
        resources = zone_resources(document(engine), numa_id)
        for name, size in engine.topology.memory_capacity(numa_id).items():
            assert resources[name] == {"capacity": size, "allocatable": size, "available": size}


# The v1alpha2 schema of the NodeResourceTopology CRD (node-feature-discovery's
# deployment/base/noderesourcetopologies-crd), descriptions dropped.
QUANTITY = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": (
        r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
        r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
    ),
}
NAMED_STRING = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
    "required": ["name", "value"],
    "additionalProperties": False,
}
V1ALPHA2_SCHEMA = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "attributes": {"type": "array", "items": NAMED_STRING},
        "topologyPolicies": {"type": "array", "items": {"type": "string"}},
        "zones": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "type": {"type": "string"},
                    "parent": {"type": "string"},
                    "attributes": {"type": "array", "items": NAMED_STRING},
                    "costs": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"name": {"type": "string"}, "value": {"type": "integer"}},
                            "required": ["name", "value"],
                            "additionalProperties": False,
                        },
                    },
                    "resources": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "capacity": QUANTITY,
                                "allocatable": QUANTITY,
                                "available": QUANTITY,
                            },
                            "required": ["allocatable", "available", "capacity", "name"],
                            "additionalProperties": False,
                        },
                    },
                },
                "required": ["name", "type"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["zones"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS.glob("*.yaml")))
def test_document_validates_against_the_v1alpha2_crd_schema(name: str) -> None:
    doc = document(engine_after(name)[0])
    jsonschema.validate(doc, V1ALPHA2_SCHEMA)
    assert (doc["apiVersion"], doc["kind"]) == ("topology.node.k8s.io/v1alpha2", "NodeResourceTopology")
    assert doc["metadata"]["name"] == "node-a"


def test_schema_check_rejects_a_resource_without_available() -> None:
    doc = document(engine_after("seed-1-tightly-coupled-database", steps=0)[0])
    del doc["zones"][0]["resources"][0]["available"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, V1ALPHA2_SCHEMA)


# -- the publisher ---------------------------------------------------------------------------------------


class FakeApiError(Exception):
    """What ``kubernetes.client.ApiException`` looks like to the publisher: an HTTP status."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


@dataclass
class FakeCustomObjectsApi:
    """Cluster-scoped custom objects in a dict, with resourceVersions and optimistic concurrency."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    fail_next: list[int] = field(default_factory=list)  # statuses the next calls raise, in order
    races: int = 0  # replaces that someone else's update beats (each gets a 409)
    version: int = 0

    def _call(self, verb: str, group: str, version: str, plural: str) -> None:
        assert (group, version, plural) == ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")
        self.calls.append(verb)
        if self.fail_next:
            raise FakeApiError(self.fail_next.pop(0))

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str) -> Any:
        self._call("get", group, version, plural)
        if name not in self.objects:
            raise FakeApiError(404)
        return copy.deepcopy(self.objects[name])

    def create_cluster_custom_object(self, group: str, version: str, plural: str, body: Any) -> Any:
        self._call("create", group, version, plural)
        name = body["metadata"]["name"]
        if name in self.objects:
            raise FakeApiError(409)
        return self._store(name, body)

    def replace_cluster_custom_object(self, group: str, version: str, plural: str, name: str, body: Any) -> Any:
        self._call("replace", group, version, plural)
        if name not in self.objects:
            raise FakeApiError(404)
        if self.races:
            self.races -= 1
            self.touch(name)
        if body["metadata"].get("resourceVersion") != self.objects[name]["metadata"]["resourceVersion"]:
            raise FakeApiError(409)
        return self._store(name, body)

    def _store(self, name: str, body: Any) -> Any:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[name] = stored
        return copy.deepcopy(stored)

    def touch(self, name: str) -> None:
        """Someone else updates the object (a new resourceVersion)."""
        self._store(name, self.objects[name])


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api() -> FakeCustomObjectsApi:
    return FakeCustomObjectsApi()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def publisher(api: FakeCustomObjectsApi, clock: FakeClock) -> NodeResourceTopologyPublisher:
    return NodeResourceTopologyPublisher(api, "node-a", min_interval=5.0, clock=clock)


def idle_engine() -> NodeEngine:
    return engine_after("seed-1-tightly-coupled-database", steps=0)[0]


def busy_engine() -> NodeEngine:
    return engine_after("seed-1-tightly-coupled-database")[0]


def without_version(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].pop("resourceVersion", None)
    return out


def test_first_publish_creates_the_object(publisher: NodeResourceTopologyPublisher, api: FakeCustomObjectsApi) -> None:
    engine = idle_engine()
    assert publisher.publish(engine) == "created"
    assert api.calls == ["get", "create"]
    assert without_version(api.objects["node-a"]) == document(engine)


def test_an_unchanged_node_costs_no_api_call(
    publisher: NodeResourceTopologyPublisher, api: FakeCustomObjectsApi, clock: FakeClock
) -> None:
    engine = idle_engine()
    publisher.publish(engine)
    clock.now += 60
    assert publisher.publish(engine) == "unchanged"
    assert api.calls == ["get", "create"]


def test_a_change_inside_the_interval_waits_for_the_next_call_after_it(
    publisher: NodeResourceTopologyPublisher, api: FakeCustomObjectsApi, clock: FakeClock
) -> None:
    publisher.publish(idle_engine())
    clock.now += 1
    busy = busy_engine()
    assert publisher.publish(busy) == "deferred"
    assert publisher.pending and api.calls == ["get", "create"]
    clock.now += 5
    assert publisher.publish(busy) == "updated"
    assert not publisher.pending
    assert without_version(api.objects["node-a"]) == document(busy)


def test_update_carries_the_stored_resource_version_and_keeps_foreign_metadata(
    publisher: NodeResourceTopologyPublisher, api: FakeCustomObjectsApi, clock: FakeClock
) -> None:
    publisher.publish(idle_engine())
    api.objects["node-a"]["metadata"]["labels"]["team"] = "hpc"
    api.objects["node-a"]["metadata"]["annotations"] = {"note": "kept"}
    clock.now += 10
    assert publisher.publish(busy_engine()) == "updated"
    metadata = api.objects["node-a"]["metadata"]
    assert metadata["labels"] == {"team": "hpc", "app.kubernetes.io/managed-by": "numaguard"}
    fingerprint = nrt.pod_set_fingerprint(busy_engine())
    assert metadata["annotations"] == {"note": "kept", "topology.node.k8s.io/fingerprint": fingerprint}
    assert api.calls == ["get", "create", "get", "replace"]


def test_a_conflicting_update_is_read_again_and_retried_once(
    publisher: NodeResourceTopologyPublisher, api: FakeCustomObjectsApi, clock: FakeClock
) -> None:
    publisher.publish(idle_engine())
    clock.now += 10
    api.races = 1
    assert publisher.publish(busy_engine()) == "updated"
    assert api.calls[2:] == ["get", "replace", "get", "replace"]
    assert without_version(api.objects["node-a"]) == document(busy_engine())


def test_a_failed_write_is_reported_kept_and_retried_after_the_interval(
    publisher: NodeResourceTopologyPublisher,
    api: FakeCustomObjectsApi,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    api.fail_next = [500]
    engine = idle_engine()
    assert publisher.publish(engine) == "failed"
    assert publisher.pending
    assert "node resource topology not published" in caplog.text
    assert publisher.publish(engine) == "deferred"  # a failure backs off like a write
    clock.now += 5
    assert publisher.publish(engine) == "created"
    assert api.calls == ["get", "get", "create"]


def test_after_a_restart_an_identical_stored_object_is_not_rewritten(
    api: FakeCustomObjectsApi, clock: FakeClock
) -> None:
    engine = busy_engine()
    NodeResourceTopologyPublisher(api, "node-a", clock=clock).publish(engine)
    restarted = NodeResourceTopologyPublisher(api, "node-a", clock=clock)
    assert restarted.publish(engine) == "unchanged"
    assert api.calls == ["get", "create", "get"]


def test_a_stale_resource_version_twice_in_a_row_fails_without_raising(
    publisher: NodeResourceTopologyPublisher, api: FakeCustomObjectsApi, clock: FakeClock
) -> None:
    publisher.publish(idle_engine())
    clock.now += 10
    api.races = 2
    assert publisher.publish(busy_engine()) == "failed"
    assert publisher.pending


RBAC = Path(__file__).resolve().parents[3] / "manifests" / "optional" / "node-resource-topology" / "rbac.yaml"
VERB_OF_CALL = {"get": "get", "create": "create", "replace": "update"}


def test_the_optional_rbac_grants_exactly_the_verbs_the_publisher_uses(
    publisher: NodeResourceTopologyPublisher, api: FakeCustomObjectsApi, clock: FakeClock
) -> None:
    publisher.publish(idle_engine())
    clock.now += 10
    publisher.publish(busy_engine())
    [role] = [d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] == "ClusterRole"]
    [rule] = role["rules"]
    assert (rule["apiGroups"], rule["resources"]) == ([nrt.GROUP], [nrt.PLURAL])
    assert set(rule["verbs"]) == {VERB_OF_CALL[call] for call in api.calls}


def test_the_publisher_imports_without_loading_the_kubernetes_client() -> None:
    probe = "import sys, enforcer.service.nrt_publisher; print('kubernetes' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"
