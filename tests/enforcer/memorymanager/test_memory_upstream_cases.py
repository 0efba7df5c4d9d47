"""Upstream ``policy_static_test.go`` tables, run against the Static memory policy.

The cases are data (``tests/fixtures/kubelet/memory_policy_cases.json``), each
naming the upstream test function it comes from (TestStaticPolicyStart,
TestStaticPolicyAllocate, TestStaticPolicyAllocateWithInitContainers,
TestStaticPolicyRemoveContainer, TestStaticPolicyGetTopologyHints).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from memory_builders import numa_machine

from enforcer.counters import AllocationCounters
from enforcer.errors import ConfigError, UnexpectedAdmissionError
from enforcer.memorymanager.policy_static import StaticMemoryPolicy
from enforcer.memorymanager.state import Block, MemoryState
from enforcer.topology.hints import TopologyHint, mask_of
from shared import quantity
from shared.resources import ContainerResources, PodResources, resources_from_maps

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "kubelet" / "memory_policy_cases.json"
CASES: list[dict[str, Any]] = json.loads(FIXTURE.read_text())["cases"]
TABLE_KEYS = ("total", "systemReserved", "allocatable", "reserved", "free")


def _bytes(value: object) -> int:
    return quantity.to_bytes(value)


def _machine_state_doc(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {
        node: {
            "numberOfAssignments": data.get("numberOfAssignments", 0),
            "cells": data.get("cells", []),
            "memoryMap": {kind: {k: _bytes(table[k]) for k in TABLE_KEYS} for kind, table in data["memoryMap"].items()},
        }
        for node, data in raw.items()
    }


def _blocks_doc(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {
        uid: {name: [{**b, "size": _bytes(b["size"])} for b in blocks] for name, blocks in ctrs.items()}
        for uid, ctrs in raw.items()
    }


def _state(case: Mapping[str, Any]) -> MemoryState:
    reusable: dict[str, dict[str, Any]] = {uid: {} for uid in case.get("reusable", {})}
    return MemoryState.from_dict(
        {
            "policyName": "Static",
            "machineState": _machine_state_doc(case.get("machineState", {})),
            "entries": _blocks_doc(case.get("assignments", {})),
            "initContainersReusableMemory": reusable,
        }
    )


def _policy(case: Mapping[str, Any]) -> StaticMemoryPolicy:
    """The machine named by the case, or one derived from its tables when upstream passes no machine info."""
    if "machine" in case:
        nodes = {int(n): {k: _bytes(v) for k, v in mem.items()} for n, mem in case["machine"].items()}
    else:
        # tables in these cases need not add up to a real machine; memory capacity alone suffices
        nodes = {
            int(n): {"memory": _bytes(data["memoryMap"].get("memory", {}).get("total", "2Gi"))}
            for n, data in case.get("machineState", {}).items()
        } or {0: {"memory": 2 * 1024**3}}
    reserved = {int(n): {k: _bytes(v) for k, v in r.items()} for n, r in case["systemReserved"].items()}
    return StaticMemoryPolicy(numa_machine(nodes), reserved_memory=reserved)


def _pod(raw: Mapping[str, Any]) -> PodResources:
    containers = tuple(
        ContainerResources(
            c["name"], c["kind"], resources_from_maps(c.get("requests"), c.get("limits"), field=c["name"])
        )
        for c in raw["containers"]
    )
    return PodResources(uid=raw["uid"], namespace="default", name=raw["uid"], containers=containers, pod=None)


def _hint(raw: Mapping[str, Any] | None) -> TopologyHint | None:
    if raw is None:
        return None
    return TopologyHint(None if raw["mask"] is None else mask_of(raw["mask"]), raw["preferred"])


def _sorted_blocks(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {
        uid: {name: sorted(blocks, key=lambda b: (b["type"], b["numaAffinity"])) for name, blocks in ctrs.items()}
        for uid, ctrs in doc.items()
    }


def _run(case: Mapping[str, Any], policy: StaticMemoryPolicy, state: MemoryState) -> Any:
    op = case["op"]
    if op == "start":
        policy.validate_state(state)
        return None
    if op == "remove":
        policy.remove_container(state, "pod1", "container1")
        return None
    pod = _pod(case["pod"])
    if op == "hints":
        return policy.get_topology_hints(state, pod, pod.app_containers()[0])
    targets = pod.containers if op == "allocateAll" else pod.app_containers()[:1]
    for container in targets:
        policy.allocate(state, pod, container, _hint(case.get("hint")), AllocationCounters())
    return None


@pytest.mark.parametrize("case", CASES, ids=[f"{c['upstream']}: {c['description']}" for c in CASES])
def test_upstream_policy_static_case(case: dict[str, Any]) -> None:
    policy = _policy(case)
    state = _state(case)
    expected_error = case.get("expectedError")
    if expected_error is not None:
        wrapped = case["op"] != "start"
        error_type: type[Exception] = UnexpectedAdmissionError if wrapped else ConfigError
        with pytest.raises(error_type) as raised:
            _run(case, policy, state)
        want = UnexpectedAdmissionError.allocate_failed(expected_error).message if wrapped else expected_error
        assert str(raised.value) == want
        return
    hints = _run(case, policy, state)
    if case["op"] == "hints":
        want_hints = case["expectedHints"]
        expected = None if want_hints is None else {name: [_hint(h) for h in hs] for name, hs in want_hints.items()}
        assert hints == expected
        return
    actual = state.to_dict()
    assert _sorted_blocks(actual["entries"]) == _sorted_blocks(_blocks_doc(case["expectedAssignments"]))
    assert actual["machineState"] == _machine_state_doc(case["expectedMachineState"])


def test_every_upstream_function_is_represented() -> None:
    names = {c["upstream"] for c in CASES}
    assert names == {
        "TestStaticPolicyStart",
        "TestStaticPolicyAllocate",
        "TestStaticPolicyAllocateWithInitContainers",
        "TestStaticPolicyRemoveContainer",
        "TestStaticPolicyGetTopologyHints",
    }


def test_upstream_blocks_parse_into_memory_blocks() -> None:
    state = _state(next(c for c in CASES if c["description"].startswith("should validate cross NUMA")))
    assert state.container_blocks("pod1", "container1") == [
        Block((0, 1), "memory", 768 * 1024**2),
        Block((0, 1), "hugepages-1Gi", 1024**3),
    ]
