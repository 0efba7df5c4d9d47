"""CPU manager state: the plain value the engine owns (cpu-manager.md §7, pod-level R12.1, KEP-5554 originals)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from enforcer.cpumanager.state import CPUState
from enforcer.errors import ConfigError
from shared.cpuset import CPUSet

from .cpu_policy_builders import kubelet_topology

TOPO = kubelet_topology("topoDualSocketHT")  # CPUs 0-11


def cs(text: str) -> CPUSet:
    return CPUSet.parse(text)


def consistent_state() -> CPUState:
    state = CPUState(policy_name="static", default=cs("0,3-5,9-11"))
    state.set_container_cpus("pod-a", "app", cs("1,7"))
    state.set_pod_cpus("pod-b", cs("2,6,8"))
    state.set_container_cpus("pod-b", "main", cs("2"))
    state.set_container_cpus("pod-b", "side", cs("6,8"))
    state.record_original("pod-a", "app", cs("1,7"))
    return state


# -- serialisation (R7.1, R7.4, PLR R12.1) -----------------------------------------------------
def test_state_serialises_with_the_checkpoint_key_names() -> None:
    assert consistent_state().to_dict() == {
        "policyName": "static",
        "defaultCpuSet": "0,3-5,9-11",
        "entries": {"pod-a": {"app": "1,7"}, "pod-b": {"main": "2", "side": "6,8"}},
        "podEntries": {"pod-b": {"cpuSet": "2,6,8"}},
        "originals": {"pod-a": {"app": {"original": "1,7"}}},
    }


def test_empty_maps_are_omitted_like_go_omitempty() -> None:
    assert CPUState(policy_name="none", default=cs("0-11")).to_dict() == {
        "policyName": "none",
        "defaultCpuSet": "0-11",
    }


def test_state_round_trips_through_its_dict() -> None:
    state = consistent_state()
    assert CPUState.from_dict(state.to_dict()) == state


cpusets = st.integers(min_value=0, max_value=(1 << 24) - 1).map(CPUSet.from_mask)
names = st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=6)


@st.composite
def states(draw: Any) -> CPUState:
    return CPUState(
        policy_name=draw(st.sampled_from(["static", "none"])),
        default=draw(cpusets),
        entries=draw(st.dictionaries(names, st.dictionaries(names, cpusets, min_size=1, max_size=3), max_size=3)),
        pod_entries=draw(st.dictionaries(names, cpusets, max_size=3)),
        originals=draw(st.dictionaries(names, st.dictionaries(names, cpusets, min_size=1, max_size=2), max_size=2)),
    )


@given(states())
def test_any_state_round_trips_exactly_and_is_json_able(state: CPUState) -> None:
    import json

    doc = state.to_dict()
    assert json.loads(json.dumps(doc)) == doc
    restored = CPUState.from_dict(doc)
    assert restored == state
    assert restored.to_dict() == doc


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "cpu manager state: expected an object"),
        ({"defaultCpuSet": "0"}, "cpu manager state.policyName: expected a non-empty string"),
        ({"policyName": "static", "defaultCpuSet": "3-1"}, "cpu manager state.defaultCpuSet: "),
        ({"policyName": "static", "entries": {"p": "0-1"}}, "cpu manager state.entries.p: expected an object"),
        ({"policyName": "static", "entries": {"p": {"c": 3}}}, "cpu manager state.entries.p.c: expected a cpuset"),
        ({"policyName": "static", "podEntries": {"p": {}}}, "cpu manager state.podEntries.p.cpuSet: expected a"),
        ({"policyName": "static", "originals": {"p": {"c": "1"}}}, "cpu manager state.originals.p.c: expected an"),
    ],
    ids=[
        "not-an-object",
        "no-policy",
        "bad-default",
        "entries-not-map",
        "entry-not-cpuset",
        "pod-entry-no-cpuset",
        "original-not-object",
    ],
)
def test_malformed_documents_are_config_errors_with_a_path(doc: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        CPUState.from_dict(doc)
    assert err.value.message.startswith(message)


def test_reuse_scratch_is_neither_persisted_nor_compared() -> None:
    """The kubelet never checkpoints cpusToReuse (§5 R5.1)."""
    state = consistent_state()
    other = state.copy()
    other.reusable["pod-a"] = cs("3")
    assert other == state
    assert "reusable" not in str(other.to_dict())


# -- mutation -----------------------------------------------------------------------------------
def test_copy_is_independent_of_the_original() -> None:
    state = consistent_state()
    clone = state.copy()
    clone.set_container_cpus("pod-a", "sidecar", cs("3"))
    clone.record_original("pod-b", "main", cs("2"))
    clone.pod_entries["pod-c"] = cs("4")
    clone.default = cs("0")
    assert state == consistent_state()


def test_deleting_the_last_container_forgets_the_pod_and_its_originals() -> None:
    state = consistent_state()
    state.delete_container("pod-a", "app")
    assert "pod-a" not in state.entries
    assert "pod-a" not in state.originals


def test_deleting_an_unknown_container_is_a_no_op() -> None:
    state = consistent_state()
    state.delete_container("nope", "app")
    state.delete_container("pod-a", "nope")
    assert state == consistent_state()


def test_originals_keep_the_first_promise() -> None:
    """KEP-5554: the original set is the first exclusive set; later writes do not move it."""
    state = consistent_state()
    state.record_original("pod-a", "app", cs("1,3,7,9"))
    assert state.original_cpus("pod-a", "app") == cs("1,7")
    assert state.original_cpus("pod-a", "other") is None


def test_delete_pod_removes_every_trace() -> None:
    state = consistent_state()
    state.reusable["pod-b"] = cs("2")
    state.delete_pod("pod-b")
    assert state.pod_cpus("pod-b") is None
    assert "pod-b" not in state.entries and "pod-b" not in state.reusable


def test_containers_without_an_entry_read_the_default_set() -> None:
    """R1.9/R1.10: shared and ephemeral containers follow whatever the default set is now."""
    state = consistent_state()
    assert state.cpus_or_default("pod-a", "debugger") == state.default
    state.default = cs("0")
    assert state.cpus_or_default("pod-a", "debugger") == cs("0")
    assert state.cpus_or_default("pod-a", "app") == cs("1,7")


# -- consistency check (R7.3) -----------------------------------------------------------------
def test_a_consistent_state_has_no_problems() -> None:
    assert consistent_state().check(TOPO, reserved=cs("0")) == []


def test_the_same_cpu_in_two_pods_is_reported() -> None:
    state = consistent_state()
    state.set_container_cpus("pod-c", "app", cs("7"))
    assert "cpu 7 is exclusive to both pod pod-a and pod pod-c" in state.check(TOPO)


def test_overlap_inside_one_pod_is_allowed() -> None:
    """§5 Example 3: an init container's entry may overlap the app containers that reuse it."""
    state = consistent_state()
    state.set_container_cpus("pod-a", "init", cs("1,7"))
    assert state.check(TOPO) == []


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda s: setattr(s, "default", s.default | cs("1")), "pod pod-a: cpus 1 are also in the default cpuset"),
        (lambda s: s.set_container_cpus("pod-a", "x", cs("12")), "pod pod-a: cpus 12 are not on this machine"),
        (lambda s: setattr(s, "default", s.default - cs("11")), "default cpuset and assignments cover"),
        (lambda s: s.set_container_cpus("pod-b", "x", cs("3")), "pod pod-b, container x: cpuset 3 is outside"),
        (lambda s: s.record_original("pod-z", "c", cs("3")), "pod pod-z, container c: original cpuset recorded"),
        (lambda s: setattr(s, "default", s.default | cs("13")), "default cpuset holds cpus 13"),
    ],
    ids=["assigned-in-default", "unknown-cpu", "cpu-lost", "outside-bubble", "orphan-original", "default-unknown"],
)
def test_broken_invariants_are_reported(mutate: Any, problem: str) -> None:
    state = consistent_state()
    mutate(state)
    assert any(p.startswith(problem) for p in state.check(TOPO)), state.check(TOPO)


def test_reserved_cpus_must_stay_shared_unless_strict() -> None:
    state = consistent_state()
    assert state.check(TOPO, reserved=cs("1")) == [
        "reserved cpus 1 are missing from the default cpuset",
        "reserved cpus 1 are assigned exclusively",
    ]


def test_strict_reservation_keeps_reserved_cpus_out_of_every_set() -> None:
    """§4.5: the default set never holds reserved CPUs, and the rest covers the machine minus them."""
    state = consistent_state()
    state.default = state.default - cs("0")
    assert state.check(TOPO, reserved=cs("0"), strict_reservation=True) == []
    state.default = state.default | cs("0")
    assert state.check(TOPO, reserved=cs("0"), strict_reservation=True) == [
        "strictly reserved cpus 0 are in the default cpuset",
        "default cpuset and assignments cover 0-11, expected 1-11",
    ]
