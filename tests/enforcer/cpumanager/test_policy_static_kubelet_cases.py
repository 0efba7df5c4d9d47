"""The kubelet's own static-policy table rows (tests/fixtures/kubelet/static_policy_cases.json), replayed.

Each case id is ``<upstream Go test function>/<table row description>``; the ``rules`` field of a case
names the spec rules it exercises.  The expectations are what the kubelet's tests assert.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from enforcer.counters import AllocationCounters
from enforcer.cpumanager.options import StaticPolicyOptions
from enforcer.errors import AdmissionRejected, ConfigError
from enforcer.features import FeatureGates

from .cpu_policy_builders import (
    KUBELET_CASES,
    hint,
    hints_as_data,
    pod_from_data,
    policy_from_case,
    state_from_data,
)

CASES: list[dict[str, Any]] = json.loads(KUBELET_CASES.read_text())["cases"]


def cases_of(*ops: str) -> list[Any]:
    return [pytest.param(c, id=c["id"]) for c in CASES if c["op"] in ops]


def test_case_table_has_unique_ids_naming_upstream_tests_and_spec_rules() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))
    assert all(i.startswith("Test") and "/" in i for i in ids)
    assert all(c["rules"] for c in CASES)


def case_hint(case: Mapping[str, Any]) -> Any:
    raw = case.get("hint")
    return None if raw is None else hint(raw["mask"], raw["preferred"])


@pytest.mark.parametrize("case", cases_of("start"))
def test_static_policy_start_validates_or_initialises_the_state(case: dict[str, Any]) -> None:
    policy = policy_from_case(case)
    state = state_from_data(case["state"])
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(ConfigError) as err:
            policy.validate_state(state)
        assert err.value.message == expect["error"]
    else:
        policy.validate_state(state)
        assert str(state.default) == expect["defaultCpuSet"]


@pytest.mark.parametrize("case", cases_of("new"))
def test_static_policy_construction_fails_with_the_kubelet_message(case: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_case(case)
    assert err.value.message == case["expect"]["error"]


@pytest.mark.parametrize("case", cases_of("allocate"))
def test_static_policy_allocate_matches_the_kubelet(case: dict[str, Any]) -> None:
    policy = policy_from_case(case)
    state = state_from_data(case["state"])
    pod = pod_from_data(case["pod"])
    container = pod.containers[0]
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(AdmissionRejected) as err:
            policy.allocate(state, pod, container, case_hint(case), AllocationCounters())
        assert err.value.reason == expect["error"]["reason"]
        assert err.value.message == expect["error"]["message"]
    else:
        policy.allocate(state, pod, container, case_hint(case), AllocationCounters())
    cpus = state.container_cpus(pod.uid, container.name)
    if expect.get("noEntry"):
        assert cpus is None
    else:
        assert cpus is not None
        assert str(cpus) == expect["cpus"]
        assert not cpus & state.default


@pytest.mark.parametrize("case", cases_of("allocate_all"))
def test_static_policy_reuses_init_container_cpus_like_the_kubelet(case: dict[str, Any]) -> None:
    policy = policy_from_case(case)
    state = state_from_data(case["state"])
    pod = pod_from_data(case["pod"])
    for container in pod.containers:
        policy.allocate(state, pod, container, None, AllocationCounters())
    assert str(state.default) == case["expect"]["defaultCpuSetAfterAllocate"]
    if "remove" in case:
        policy.remove_container(state, pod.uid, case["remove"])
        assert str(state.default) == case["expect"]["defaultCpuSetAfterRemove"]
        assert state.container_cpus(pod.uid, case["remove"]) is None


@pytest.mark.parametrize("case", cases_of("remove"))
def test_static_policy_remove_returns_cpus_no_sibling_uses(case: dict[str, Any]) -> None:
    policy = policy_from_case(case)
    state = state_from_data(case["state"])
    policy.remove_container(state, case["podUID"], case["container"])
    assert str(state.default) == case["expect"]["defaultCpuSet"]
    assert state.container_cpus(case["podUID"], case["container"]) is None


@pytest.mark.parametrize("case", cases_of("options"))
def test_static_policy_options_parse_like_the_kubelet(case: dict[str, Any]) -> None:
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(ConfigError) as err:
            StaticPolicyOptions.from_map(case["options"], FeatureGates())
        assert err.value.message == expect["error"]
    else:
        assert StaticPolicyOptions.from_map(case["options"], FeatureGates()).to_map() == expect["options"]


@pytest.mark.parametrize("case", cases_of("allocate_pod"))
def test_static_policy_allocate_pod_partitions_the_bubble_like_the_kubelet(case: dict[str, Any]) -> None:
    policy = policy_from_case(case)
    state = state_from_data(case["state"])
    pod = pod_from_data(case["pod"])
    counters = AllocationCounters()
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(AdmissionRejected) as err:
            policy.allocate_pod(state, pod, case_hint(case), counters)
        assert err.value.reason == expect["error"]["reason"]
        assert err.value.message == expect["error"]["message"]
    else:
        policy.allocate_pod(state, pod, case_hint(case), counters)
        entries = {uid: {n: str(c) for n, c in cs.items()} for uid, cs in state.entries.items()}
        assert entries == expect["entries"]
        assert str(state.default) == expect["defaultCpuSet"]
    assert counters.to_dict() == expect["counters"]


@pytest.mark.parametrize("case", cases_of("validate_pod_scope"))
def test_pod_scope_validation_rejects_an_empty_pod_shared_pool(case: dict[str, Any]) -> None:
    policy = policy_from_case(case)
    assert policy.validate_pod_scope_resources(pod_from_data(case["pod"])) == case["expect"]["error"]


@pytest.mark.parametrize("case", cases_of("pod_guaranteed_cpus"))
def test_pod_guaranteed_cpus_aggregates_like_the_kubelet(case: dict[str, Any]) -> None:
    policy = policy_from_case(case)
    assert policy.pod_guaranteed_cpus(pod_from_data(case["pod"])) == case["expect"]["count"]


def sorted_hints(hints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The upstream tests compare after sorting with ``LessThan``; order here by mask then preference."""
    return sorted(hints, key=lambda h: (len(h["mask"]), h["mask"], not h["preferred"]))


@pytest.mark.parametrize("case", cases_of("hints", "pod_hints"))
def test_static_policy_hints_match_the_kubelet(case: dict[str, Any]) -> None:
    policy = policy_from_case(case)
    state = state_from_data(case["state"])
    pod = pod_from_data(case["pod"])
    if case["op"] == "hints":
        result = policy.get_topology_hints(state, pod, pod.containers[0])
    else:
        result = policy.get_pod_topology_hints(state, pod)
    assert result is not None
    got = result["cpu"]
    assert got is not None
    assert sorted_hints(hints_as_data(got)) == sorted_hints(case["expect"]["hints"])


def test_kubelet_rows_cover_every_row_kind() -> None:
    assert {c["op"] for c in CASES} == {
        "start",
        "new",
        "allocate",
        "allocate_all",
        "remove",
        "options",
        "allocate_pod",
        "validate_pod_scope",
        "pod_guaranteed_cpus",
        "hints",
        "pod_hints",
    }
