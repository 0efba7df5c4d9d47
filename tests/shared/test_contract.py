"""The webhook <-> enforcer wire models: camelCase JSON, canonical values, annotation helpers."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pod_dicts import container, load_pod_json, pod
from pydantic import ValidationError

from shared import contract
from shared.errors import QuantityError
from shared.pod import parse_pod

# The expected step of seed scenario 1 (plan.md), as the enforcer would report it.
SEED_ONE_ALLOCATION: dict[str, Any] = {
    "uid": "0b7c",
    "namespace": "default",
    "name": "tightly-coupled-database",
    "node": "node-a",
    "qosClass": "Guaranteed",
    "numaAffinity": [0],
    "podSharedPool": {"cpus": "4,20", "memoryNUMANodes": [0]},
    "containers": {
        "database": {
            "assignment": "pod_exclusive",
            "memoryAssignment": "pod_exclusive",
            "cpus": "1-3,17-19",
            "memoryNUMANodes": [0],
            "cfsQuota": "none",
        },
        "metrics-exporter": {
            "assignment": "pod_shared",
            "memoryAssignment": "pod_shared",
            "cpus": "4,20",
            "memoryNUMANodes": [0],
            "cfsQuota": "pod",
        },
    },
    "resize": None,
    "specHash": "abc",
}


def test_allocation_round_trips_through_camel_case_json() -> None:
    allocation = contract.Allocation.model_validate(SEED_ONE_ALLOCATION)
    body = json.loads(allocation.to_json())
    assert body == SEED_ONE_ALLOCATION
    assert contract.Allocation.model_validate_json(allocation.to_json()) == allocation


def test_models_accept_python_names_too() -> None:
    c = contract.ContainerAllocation(
        assignment="node_shared",
        memory_assignment="node_shared",
        cpus=None,
        memory_numa_nodes=None,
        cfs_quota="container",
    )
    assert json.loads(c.to_json()) == {
        "assignment": "node_shared",
        "memoryAssignment": "node_shared",
        "cpus": None,
        "memoryNUMANodes": None,
        "cfsQuota": "container",
    }
    request = contract.AllocationRequest(pod={"spec": {}}, node_name="node-a")
    assert json.loads(request.to_json()) == {"pod": {"spec": {}}, "nodeName": "node-a"}


def test_cpu_lists_and_numa_ids_are_canonical() -> None:
    pool = contract.PodSharedPool(cpus="20,4", memory_numa_nodes=[1, 0, 1])
    assert (pool.cpus, pool.memory_numa_nodes) == ("4,20", [0, 1])


@pytest.mark.parametrize(
    "bad",
    [
        {"cpus": "4-"},
        {"cpus": "a"},
        {"cpus": "1", "memoryNUMANodes": [-1]},
    ],
)
def test_malformed_cpus_or_numa_ids_are_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        contract.PodSharedPool.model_validate(bad)


def test_unknown_literal_values_are_rejected() -> None:
    with pytest.raises(ValidationError):
        contract.ContainerAllocation.model_validate(
            {"assignment": "exclusive", "memoryAssignment": "pod_shared", "cfsQuota": "pod"}
        )
    allocation = contract.Allocation.model_validate(SEED_ONE_ALLOCATION)
    with pytest.raises(ValidationError):
        contract.ResizeResult(status="InProgress", allocation=allocation)  # type: ignore[arg-type]


def test_fields_added_by_a_newer_peer_are_ignored() -> None:
    body = {**SEED_ONE_ALLOCATION, "hintsConsidered": 12}
    assert contract.Allocation.model_validate(body) == contract.Allocation.model_validate(SEED_ONE_ALLOCATION)


def test_resize_status_keeps_canonical_requested_quantities() -> None:
    status = contract.ResizeStatus.model_validate(
        {
            "state": "Deferred",
            "reason": "Deferred",
            "message": "Node didn't have enough capacity: cpu, requested: 1500, capacity: 4000",
            "requested": {"web": {"requests": {"cpu": "1.5", "memory": "0.25Gi"}, "limits": {"cpu": "2"}}},
            "since": "2026-05-01T10:00:00Z",
        }
    )
    assert status.requested["web"].requests == {"cpu": "1500m", "memory": "256Mi"}
    assert status.since == datetime(2026, 5, 1, 10, tzinfo=UTC)
    with pytest.raises(ValidationError):
        contract.RequestedResources(requests={"cpu": "lots"})


def test_error_body_carries_the_domain_error_reason_and_field() -> None:
    error = QuantityError("1x", field="spec.containers[0].resources.requests[cpu]")
    body = contract.ErrorBody.from_error(error)
    assert body.reason == "InvalidQuantity"
    assert body.field == "spec.containers[0].resources.requests[cpu]"
    assert "'1x'" in body.message


def test_topology_view_reports_usage_per_numa_node() -> None:
    view = contract.TopologyView(
        node="node-a",
        topology={"sockets": []},
        numa_nodes=[
            contract.NUMANodeUsage(
                id=0,
                cpus=contract.CPUUsage(
                    total=16,
                    reserved=2,
                    exclusive=6,
                    free=8,
                    cpus="0-7,16-23",
                    reserved_cpus="0,16",
                    exclusive_cpus="1-3,17-19",
                    free_cpus="4-7,20-23",
                ),
                memory={"memory": contract.MemoryUsage(allocatable=10, reserved=2, free=3)},
            )
        ],
        shared_pool="0,4-15,16,20-31",
        reserved_cpus="0,16",
    )
    body = json.loads(view.to_json())
    assert body["reservedCPUs"] == "0,16"
    assert body["sharedPool"] == "0,4-16,20-31"
    assert body["numaNodes"][0]["cpus"]["exclusiveCPUs"] == "1-3,17-19"
    with pytest.raises(ValidationError):
        contract.MemoryUsage(allocatable=-1, reserved=0, free=0)


def test_annotation_keys_use_our_prefix_and_escape_for_json_patch() -> None:
    keys = [
        contract.ALLOCATION_ANNOTATION,
        contract.NODE_ANNOTATION,
        contract.SPEC_HASH_ANNOTATION,
        contract.RESIZE_ANNOTATION,
    ]
    assert all(k.startswith("numaguard.io/") for k in keys)
    assert len(set(keys)) == len(keys)
    assert contract.annotation_patch_path("numaguard.io/allocation") == "/metadata/annotations/numaguard.io~1allocation"
    assert contract.annotation_patch_path("a~b/c") == "/metadata/annotations/a~0b~1c"


def test_spec_hash_depends_on_resources_only() -> None:
    seed = parse_pod(load_pod_json("tightly-coupled-database")).to_resources()
    renamed = load_pod_json("tightly-coupled-database")
    renamed["metadata"]["name"] = "other"
    renamed["spec"]["containers"][0]["image"] = "database:v2"
    resized = load_pod_json("tightly-coupled-database")
    resized["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "5"
    assert contract.spec_hash(seed) == contract.spec_hash(parse_pod(renamed).to_resources())
    assert contract.spec_hash(seed) != contract.spec_hash(parse_pod(resized).to_resources())
    assert len(contract.spec_hash(seed)) == 16


def test_spec_hash_sees_defaulted_values_not_their_spelling() -> None:
    explicit = parse_pod(pod([container("a", {"cpu": "1000m"}, {"cpu": "1"})])).to_resources()
    defaulted = parse_pod(pod([container("a", limits={"cpu": 1})])).to_resources()
    assert contract.spec_hash(explicit) == contract.spec_hash(defaulted)
