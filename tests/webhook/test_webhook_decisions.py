"""The pure decisions: a Binding's target, what an allocation records, refusals, failure modes, resize verdicts."""

from __future__ import annotations

from typing import Any

import pytest

from shared import contract
from shared.validation import FieldViolation
from webhook import binding, decision, errors, resize_decision, wording

TARGET = binding.BindingTarget(namespace="ml", name="train-x7k2p", uid="u-1", node="node-a")


def allocation(**overrides: Any) -> contract.Allocation:
    fields: dict[str, Any] = {
        "uid": "u-1",
        "namespace": "ml",
        "name": "train-x7k2p",
        "node": "node-a",
        "qos_class": "Guaranteed",
        "numa_affinity": [1],
        "containers": {
            "trainer": contract.ContainerAllocation(
                assignment="node_exclusive",
                memory_assignment="node_exclusive",
                cpus="8-9",
                memory_numa_nodes=[1],
                cfs_quota="none",
            )
        },
        "spec_hash": "abc",
    }
    return contract.Allocation(**{**fields, **overrides})


# -- the Binding object ------------------------------------------------------------------------------


def test_a_binding_names_its_pod_and_node() -> None:
    obj = {
        "metadata": {"name": "train-x7k2p", "namespace": "ml", "uid": "u-1"},
        "target": {"kind": "Node", "name": "node-a"},
    }
    assert binding.read_binding(obj, namespace="", name="") == TARGET


def test_the_request_namespace_and_name_win_over_the_object() -> None:
    obj = {"metadata": {"name": "other", "namespace": "x"}, "target": {"name": "node-a"}}
    target = binding.read_binding(obj, namespace="ml", name="train-x7k2p")
    assert (target.namespace, target.name, target.uid) == ("ml", "train-x7k2p", "")


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (None, "the Binding object is missing"),
        ({"metadata": {}}, "target.name: Required value"),
        ({"target": {"kind": "Node", "name": ""}}, "target.name: Required value"),
        ({"target": {"kind": "Pod", "name": "x"}}, 'target.kind: Unsupported value: "Pod"'),
    ],
)
def test_a_binding_without_a_node_target_is_a_bad_request(obj: object, message: str) -> None:
    with pytest.raises(errors.AdmissionDenied) as caught:
        binding.read_binding(obj, namespace="ml", name="p")
    assert caught.value.code == 400
    assert message in caught.value.message


# -- what a binding records -----------------------------------------------------------------------


def test_an_allocation_is_recorded_under_the_contract_keys() -> None:
    outcome = binding.allocated(allocation(), TARGET)
    assert outcome.allowed
    assert outcome.annotations == {
        "numaguard.io/node": "node-a",
        "numaguard.io/allocation": allocation().to_json(),
        "numaguard.io/spec-hash": "abc",
    }


def test_an_allocation_too_large_for_the_pod_is_recorded_without_its_details() -> None:
    containers = {
        f"c{i}-{'x' * 50}": contract.ContainerAllocation(
            assignment="pod_shared", memory_assignment="pod_shared", cpus="0-63", cfs_quota="pod"
        )
        for i in range(1000)
    }
    outcome = binding.allocated(allocation(containers=containers), TARGET)
    assert outcome.allowed
    assert set(outcome.annotations) == {"numaguard.io/node", "numaguard.io/spec-hash"}
    assert outcome.warnings == ("the allocation on node node-a is too large to record on the pod",)


@pytest.mark.parametrize("field", [{"uid": "someone-else"}, {"node": "node-b"}])
def test_an_allocation_for_another_pod_or_node_is_refused_as_outside_the_contract(field: dict[str, str]) -> None:
    outcome = binding.allocated(allocation(**field), TARGET)
    assert outcome.denial is not None
    assert outcome.denial.code == 503


def test_a_refusal_denies_with_the_nodes_reason_and_403() -> None:
    err = errors.EnforcerRefused("not enough free physical CPUs", node="node-a", reason="SMTAlignmentError")
    outcome = binding.refused(err, TARGET)
    assert outcome.denial is not None
    assert (outcome.denial.code, outcome.denial.reason) == (403, "SMTAlignmentError")
    assert outcome.denial.message == (
        "node node-a cannot admit pod ml/train-x7k2p: SMTAlignmentError: not enough free physical CPUs"
        "; the scheduler will retry the pod, on another node if one can align it"
    )


def test_an_invalid_pod_refusal_keeps_its_field_and_answers_422() -> None:
    err = errors.EnforcerRefused("bad", node="node-a", reason="InvalidPod", field="spec.containers", status_code=422)
    outcome = binding.refused(err, TARGET)
    assert outcome.denial is not None
    assert outcome.denial.code == 422
    assert outcome.denial.message.endswith("(spec.containers)")


def test_a_conflict_answers_409() -> None:
    err = errors.EnforcerConflict("spec differs", node="node-a", reason="AllocationConflict", status_code=409)
    outcome = binding.refused(err, TARGET)
    assert outcome.denial is not None and outcome.denial.code == 409


@pytest.mark.parametrize(("mode", "allowed"), [("deny", False), ("allow", True)])
def test_an_unknown_pod_follows_its_mode(mode: Any, allowed: bool) -> None:
    outcome = binding.unknown_pod(TARGET, mode=mode, detail="never seen")
    assert outcome.allowed is allowed
    assert not outcome.annotations


def test_a_dry_run_binding_is_allowed_with_a_warning_and_records_nothing() -> None:
    outcome = binding.dry_run(TARGET)
    assert outcome.allowed and not outcome.annotations
    assert outcome.warnings == ("dry run: node node-a was not asked to allocate pod ml/train-x7k2p",)


@pytest.mark.parametrize(("mode", "allowed"), [("deny", False), ("allow", True)])
def test_an_unavailable_enforcer_follows_the_failure_mode(mode: Any, allowed: bool) -> None:
    err = errors.EnforcerTimeout("the enforcer on node node-a did not answer within 3s", node="node-a")
    outcome = decision.enforcer_unavailable(err, failure_mode=mode, action="the binding of pod ml/p")
    assert outcome.allowed is allowed
    text = outcome.warnings[0] if allowed else outcome.denial.message  # type: ignore[union-attr]
    assert text.startswith("the enforcer on node node-a did not answer within 3s; the binding of pod ml/p")


# -- resize ----------------------------------------------------------------------------------------


def test_forbidden_resize_violations_answer_403_with_every_path_and_rule() -> None:
    violations = [
        FieldViolation("spec.containers[0].resources.limits", "Forbidden", "resource limits cannot be removed", "L3"),
        FieldViolation("spec", "Forbidden", "only cpu and memory resources are mutable", "L4"),
    ]
    outcome = resize_decision.illegal(violations, pod_key="shop/web")
    assert outcome.denial is not None
    assert (outcome.denial.code, outcome.denial.reason) == (403, "Forbidden")
    assert outcome.denial.message == (
        "resize of pod shop/web is not allowed: [spec.containers[0].resources.limits: Forbidden: resource limits "
        "cannot be removed, spec: Forbidden: only cpu and memory resources are mutable]"
    )


def test_a_resize_violation_without_a_path_reads_without_a_leading_colon() -> None:
    violations = [FieldViolation("", "Forbidden", "static pods cannot be resized", "L7")]
    outcome = resize_decision.illegal(violations, pod_key="kube-system/etcd")
    assert outcome.denial is not None
    assert outcome.denial.message.endswith("not allowed: Forbidden: static pods cannot be resized")


def test_an_invalid_resize_answers_422() -> None:
    violations = [
        FieldViolation("spec", "Invalid", "Pod QOS Class may not change as a result of resizing", "L2", "Guaranteed")
    ]
    outcome = resize_decision.illegal(violations, pod_key="shop/web")
    assert outcome.denial is not None
    assert (outcome.denial.code, outcome.denial.reason) == (422, "Invalid")


def _result(
    status: contract.ResizeOutcome, reason: str | None = None, message: str | None = None
) -> contract.ResizeResult:
    return contract.ResizeResult(status=status, reason=reason, message=message, allocation=allocation())


def test_an_accepted_resize_is_allowed_silently() -> None:
    assert resize_decision.judged(_result("Accepted"), node="node-a", pod_key="ml/p") == decision.Decision.allow()


def test_a_deferred_resize_is_allowed_with_the_nodes_reason_as_a_warning() -> None:
    outcome = resize_decision.judged(_result("Deferred", "Deferred", "no room"), node="node-a", pod_key="ml/p")
    assert outcome.allowed
    assert outcome.warnings == ("resize deferred: no room (node node-a)",)


@pytest.mark.parametrize("node", ["node-a", "ip-10-0-12-34.eu-west-1.compute.internal"])
def test_a_deferred_warning_keeps_its_key_facts_inside_the_apiservers_120_characters(node: str) -> None:
    """The engine's Deferred text for a grown exclusive pod, worst case: the cut spares what matters."""
    message = (
        "2 more exclusive CPUs needed, now on NUMA node(s) {0}, 2 free on the node, "
        "too few on an acceptable NUMA node set"
    )
    outcome = resize_decision.judged(_result("Deferred", "Deferred", message), node=node, pod_key="ml/p")
    (warning,) = outcome.warnings
    assert len(warning) <= wording.MAX_WARNING_LENGTH
    assert "now on NUMA node(s) {0}, 2 free on the node" in warning


def test_an_infeasible_resize_is_denied_with_the_nodes_reason() -> None:
    outcome = resize_decision.judged(_result("Infeasible"), node="node-a", pod_key="ml/p")
    assert outcome.denial is not None
    assert (outcome.denial.code, outcome.denial.reason) == (403, "Infeasible")
    assert outcome.denial.message == "node node-a cannot resize pod ml/p: the resize is infeasible"
