"""The optional ValidatingAdmissionPolicy and the Python rules give one verdict on every pod.

Every expression of ``manifests/optional/validating-admission-policy/policy.yaml`` is evaluated
(cel-python plus the Kubernetes CEL libraries of :mod:`cel_policy_harness`) against the stored form
of the real pod fixtures, table cases built from them (valid and invalid), and generated pods and
resizes.  For each validation the policy claims, the test holds CEL to the Python rule it restates:

* the verdict (denied or not) is the same;
* the findings name the same field paths as the Python violations (as a set for V2, whose Python
  rule reports one violation per resource at one path; as a multiset everywhere else; the first
  rule id for the KEP-5526 checks, whose Python reference stops at its first finding).

Python references: :func:`shared.validation.validate_pod_resources` (CREATE),
:func:`shared.resize.resize_violations` (pods/resize), and for pods asking for pod-level alignment
``compute_qos_class`` plus the enforcer's ``StaticPolicy.validate_pod_scope_resources`` and
``requests.empty_pool_violation`` (KEP-5526 §5) under the PodLevelResourceManagers gate.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cel_policy_harness import POLICY_DIR, Evaluation, binding_documents, compiled_policy, policy_documents, stored_pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enforcer.cpumanager.policy_static import StaticPolicy
from enforcer.features import FeatureGates
from enforcer.memorymanager import requests as memory_requests
from enforcer.topology import synthetic
from shared import qos, resize, validation
from shared.pod import parse_pod
from shared.validation import FieldViolation

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pods"
ALIGNMENT_LABEL = "numaguard.io/pod-level-alignment"
MIRROR = "kubernetes.io/config.mirror"

Pod = dict[str, Any]


def fixture(name: str) -> Pod:
    doc: Pod = json.loads((FIXTURES / f"{name}.json").read_text())
    return doc


FIXTURE_NAMES = sorted(p.stem for p in FIXTURES.glob("*.json"))


# -- what each validation restates ----------------------------------------------------------------------

RULE_OF_FINDINGS = {
    "v1": "V1", "v2": "V2", "v4": "V4", "v5": "V5", "v6": "V6", "v7": "V7", "v8": "V8",
    "l2": "L2", "l3": "L3", "l4": "L4", "l5": "L5", "l6": "L6", "l7": "L7", "l8": "L8", "l11": "L11",
}  # fmt: skip
FINDINGS_OF_RULE = {rule: findings for findings, rule in RULE_OF_FINDINGS.items()}
# Upstream reports these at a coarser path than the policy's messages, which name the container.
PYTHON_PATH = {"l2": "spec", "l4": "spec", "l5": "spec", "l8": "spec", "l11": "spec", "l7": ""}
FIRST_RULE_ONLY = ("alignment", "cpuPool", "memoryPool")
V2_RELATIONS = ("must be less than or equal to", "must be equal to", "Limit must be set")
FINDING = re.compile(r"(?P<path>[^:]*): .* \((?P<rule>[A-Za-z0-9.-]+)\)", re.DOTALL)


def python_findings_key(violation: FieldViolation) -> str | None:
    """The policy validation restating ``violation``, or None for a rule the policy leaves to the apiserver."""
    if violation.rule == "V2" and not violation.message.startswith(V2_RELATIONS):
        return None  # V2 value checks: not restated
    if violation.rule == "L11" and violation.message != "only cpu and memory resources are mutable":
        return None  # the gate-off variant: the gate is on in v1.36
    return FINDINGS_OF_RULE.get(violation.rule)


def reference_from(violations: list[FieldViolation]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in violations:
        key = python_findings_key(v)
        if key is not None:
            out.setdefault(key, []).append(v.path)
    return out


POOL_RULES = {
    "pod rejected, largest exclusive init container": "PLRM-V1",
    "pod rejected, pod has shared init containers": "PLRM-V2",
    "pod rejected, sum of exclusive container": "PLRM-V5",
}


def pool_rule(message: str) -> str:
    [rule] = [r for prefix, r in POOL_RULES.items() if message.startswith(prefix)]
    return rule


@functools.cache
def _cpu_policy() -> StaticPolicy:
    """The enforcer's static CPU policy with KEP-5526 on; its pod-scope checks read no machine state."""
    gates = FeatureGates(pod_level_resource_managers=True)
    return StaticPolicy.with_reservation(synthetic.regular(1), num_reserved_cpus=0, gates=gates)


def alignment_reference(stored: Pod) -> dict[str, list[str]]:
    """What a node in pod scope with the pod-level resource managers refuses or would not pin."""
    if stored["metadata"].get("labels", {}).get(ALIGNMENT_LABEL) != "required":
        return {}
    pod = parse_pod(stored).to_resources()
    if not (pod.pod_level_resources_set and qos.compute_qos_class(pod) == "Guaranteed"):
        return {"alignment": ["PLRM-R2.1"]}
    out: dict[str, list[str]] = {}
    policy = _cpu_policy()
    if policy.pod_guaranteed_cpus(pod) == 0:
        out["alignment"] = ["PLRM-R2.4"]
    else:
        rejection = policy.validate_pod_scope_resources(pod)
        if rejection is not None:
            out["cpuPool"] = [pool_rule(rejection)]
    memory = memory_requests.empty_pool_violation(pod, policy.gates)
    if memory is not None:
        out["memoryPool"] = [pool_rule(memory)]
    return out


def create_reference(stored: Pod) -> dict[str, list[str]]:
    reference = reference_from(validation.validate_pod_resources(parse_pod(stored)))
    reference.update(alignment_reference(stored))
    return reference


def resize_reference(old: Pod, new: Pod) -> dict[str, list[str]]:
    return reference_from(resize.resize_violations(parse_pod(old), parse_pod(new)))


# -- comparing ---------------------------------------------------------------------------------------------


def cel_paths(evaluation: Evaluation, key: str) -> list[str]:
    """The findings of one validation, as the field paths the Python rule prints."""
    paths: list[str] = []
    for finding in evaluation.findings(key):
        for part in finding.split("; ") if key == "v8" else [finding]:
            match = FINDING.fullmatch(part)
            assert match is not None, f"{key}: finding {part!r} is not '<path>: <what> (<rule>)'"
            assert match["rule"] == RULE_OF_FINDINGS[key], f"{key}: finding {part!r} names another rule"
            paths.append(PYTHON_PATH.get(key, match["path"]))
    return paths


def first_rule(evaluation: Evaluation, key: str) -> str:
    match = FINDING.fullmatch(evaluation.findings(key)[0])
    assert match is not None
    return match["rule"]


def assert_same_verdicts(evaluation: Evaluation, reference: dict[str, list[str]]) -> None:
    keys = [v.findings for v in compiled_policy().validations]
    assert set(reference) <= set(keys)
    for key in keys:
        expected = reference.get(key, [])
        denial = evaluation.denial(key)
        assert (denial is not None) == bool(expected), (
            f"{key}: CEL {'denies' if denial else 'admits'} ({evaluation.findings(key)}), Python: {expected}"
        )
        if denial is None:
            continue
        assert denial.message == "; ".join(evaluation.findings(key))
        if key in FIRST_RULE_ONLY:
            assert first_rule(evaluation, key) == expected[0], f"{key}: {evaluation.findings(key)} vs {expected}"
            assert f"({expected[0]})" in denial.message
        elif key == "v2":
            assert set(cel_paths(evaluation, key)) == set(expected), f"{key}: {evaluation.findings(key)} vs {expected}"
        else:
            assert Counter(cel_paths(evaluation, key)) == Counter(expected), (
                f"{key}: {evaluation.findings(key)} vs {expected}"
            )


def judge_create(raw: Pod) -> tuple[Evaluation, dict[str, list[str]]]:
    stored = stored_pod(raw)
    return compiled_policy().evaluate(stored), create_reference(stored)


def running_status(stored: Pod) -> dict[str, Any]:
    """The status the kubelet and apiserver give a running pod: its QoS class and applied resources."""
    pod = parse_pod(stored).to_resources()
    return {
        "qosClass": qos.compute_qos_class(pod),
        "containerStatuses": [
            {"name": c["name"], "state": {"running": {}}, "resources": c.get("resources", {})}
            for c in stored["spec"]["containers"]
        ],
    }


def judge_resize(
    old_raw: Pod, change: Callable[[Pod], object], old_change: Callable[[Pod], object] | None = None
) -> tuple[Evaluation, dict[str, list[str]]]:
    """``change`` applied to the stored, running ``old_raw`` (after ``old_change``), as a pods/resize."""
    old = stored_pod(old_raw)
    old.setdefault("status", running_status(old))
    if old_change is not None:
        old_change(old)
    new_raw = copy.deepcopy(old)
    change(new_raw)
    new = stored_pod(new_raw)
    evaluation = compiled_policy().evaluate(new, old=old, operation="UPDATE", sub_resource="resize")
    return evaluation, resize_reference(old, new)


# -- table cases -----------------------------------------------------------------------------------------


def app(doc: Pod, index: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = doc["spec"]["containers"][index]
    return container


def init(doc: Pod, index: int) -> dict[str, Any]:
    container: dict[str, Any] = doc["spec"]["initContainers"][index]
    return container


def res(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if requests is not None:
        out["requests"] = requests
    if limits is not None:
        out["limits"] = limits
    return out


def merge_resources(owner: dict[str, Any], part: str, values: dict[str, str]) -> None:
    """Merge ``values`` into ``owner``'s ``resources.<part>`` (a container, or the pod spec)."""
    owner["resources"].setdefault(part, {}).update(values)


def guaranteed(cpu: str, memory: str, **extra: str) -> dict[str, Any]:
    values = {"cpu": cpu, "memory": memory, **extra}
    return res(dict(values), dict(values))


def labelled(doc: Pod, value: str = "required") -> Pod:
    doc["metadata"].setdefault("labels", {})[ALIGNMENT_LABEL] = value
    return doc


def sidecar(name: str, resources: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "image": "sidecar:v1", "restartPolicy": "Always", "resources": resources or {}}


def regular_init(name: str, resources: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "image": "init:v1", "resources": resources or {}}


def edit(name: str, change: Callable[[Pod], object] | None = None) -> Callable[[], Pod]:
    def build() -> Pod:
        doc = fixture(name)
        if change is not None:
            change(doc)
        return doc

    return build


@dataclass(frozen=True)
class CreateCase:
    description: str
    build: Callable[[], Pod]
    denied_by: frozenset[str] = field(default_factory=frozenset)


def denies(*keys: str) -> frozenset[str]:
    return frozenset(keys)


def hugepages_budget_taken_whole(doc: Pod) -> None:
    """The router's 1Gi of 2Mi pages is the whole pod budget of that size, and the sidecar turns shared."""
    labelled(doc)
    init(doc, 1).update(resources={})
    for part in ("requests", "limits"):
        merge_resources(doc["spec"], part, {"hugepages-2Mi": "1Gi"})


FIXTURE_DENIALS = {"invalid-plr-aggregate": denies("v6"), "windows-plr": denies("v1")}

CREATE_CASES = [
    *[CreateCase(f"fixture {n}", edit(n), FIXTURE_DENIALS.get(n, denies())) for n in FIXTURE_NAMES],
    CreateCase(
        "request above its limit",
        edit("burstable-web", lambda d: app(d)["resources"]["requests"].update(cpu="2")),
        denies("v2"),
    ),
    CreateCase(
        "hugepages request differing from its limit",
        edit("init-sidecar-hugepages", lambda d: merge_resources(app(d), "requests", {"hugepages-2Mi": "2Gi"})),
        denies("v2", "v6"),
    ),
    CreateCase(
        "hugepages request without a limit",
        edit("burstable-web", lambda d: app(d)["resources"]["requests"].update({"hugepages-2Mi": "4Mi"})),
        denies("v2"),
    ),
    CreateCase(
        "extended resource request differing from its limit",
        edit(
            "burstable-web", lambda d: app(d).update(resources=res({"example.com/dev": "1"}, {"example.com/dev": "2"}))
        ),
        denies("v2"),
    ),
    CreateCase(
        "pod-level request above the pod-level limit",
        edit("tightly-coupled-database", lambda d: d["spec"]["resources"]["requests"].update(cpu="9")),
        denies("v2"),
    ),
    CreateCase(
        "ephemeral-storage and a device at pod level",
        edit(
            "tightly-coupled-database",
            lambda d: d["spec"]["resources"]["limits"].update({"ephemeral-storage": "1Gi", "nvidia.com/gpu": "1"}),
        ),
        denies("v4"),
    ),
    CreateCase(
        "a quota name at pod level",
        edit("ml-workload", lambda d: d["spec"]["resources"]["requests"].update({"requests.cpu": "1"})),
        denies("v4"),
    ),
    CreateCase(
        "names upstream calls invalid (V3), not unsupported",
        edit(
            "ml-workload",
            lambda d: d["spec"]["resources"]["requests"].update(
                {"foo_bar": "1", "Example.com/dev": "1", "a/b/c": "1", "x.io/" + "n" * 64: "1"}
            ),
        ),
        denies("v2"),
    ),  # requests of non-native names without a limit
    CreateCase(
        "claims at pod level",
        edit("ml-workload", lambda d: d["spec"]["resources"].update(claims=[{"name": "gpu"}])),
        denies("v5"),
    ),
    CreateCase(
        "a regular init container larger than the pod request",
        edit(
            "ml-workload", lambda d: d["spec"]["initContainers"].append(regular_init("migrate", guaranteed("5", "1Gi")))
        ),
        denies("v6"),
    ),
    CreateCase(
        "a sidecar counts for init containers declared after it",
        edit(
            "ml-workload",
            lambda d: d["spec"].update(
                initContainers=[
                    sidecar("mesh", guaranteed("1", "1Gi")),
                    regular_init("warm", guaranteed("3500m", "1Gi")),
                ]
            ),
        ),
        denies("v6"),
    ),
    CreateCase(
        "a sidecar does not count for init containers declared before it",
        edit(
            "ml-workload",
            lambda d: d["spec"].update(
                initContainers=[
                    regular_init("warm", guaranteed("3500m", "1Gi")),
                    sidecar("mesh", guaranteed("500m", "1Gi")),
                ]
            ),
        ),
    ),
    CreateCase(
        "a zero pod-level request is not checked against the containers",
        edit("invalid-plr-aggregate", lambda d: d["spec"].update(resources=res({"memory": "0"}))),
    ),
    CreateCase(
        "hugepages pod limit below the containers' hugepages limits",
        edit("init-sidecar-hugepages", lambda d: merge_resources(d["spec"], "limits", {"hugepages-2Mi": "512Mi"})),
        denies("v7", "v6", "v8"),
    ),
    CreateCase(
        "a container limit above the pod limit",
        edit("tightly-coupled-database", lambda d: app(d)["resources"]["limits"].update(cpu="9")),
        denies("v8"),
    ),
    CreateCase(
        "a container with two limits above the pod's",
        edit("tightly-coupled-database", lambda d: app(d)["resources"]["limits"].update(cpu="9", memory="20Gi")),
        denies("v8"),
    ),
    CreateCase(
        "container limits may sum above the pod limit (V9)",
        edit(
            "tightly-coupled-database",
            lambda d: d["spec"]["containers"].append(
                {"name": "replica", "image": "db:v1", "resources": res({"cpu": "1"}, {"cpu": "6"})}
            ),
        ),
    ),
    CreateCase("a Windows pod without pod-level resources", edit("windows-plr", lambda d: d["spec"].pop("resources"))),
    CreateCase("seed 1 asking for pod-level alignment", edit("tightly-coupled-database", labelled)),
    CreateCase("seed 2 asking for pod-level alignment", edit("ml-workload", labelled)),
    CreateCase(
        "init container, sidecar and hugepages asking for pod-level alignment", edit("init-sidecar-hugepages", labelled)
    ),
    CreateCase("a Burstable pod asking for pod-level alignment", edit("burstable-web", labelled), denies("alignment")),
    CreateCase(
        "a pod without pod-level resources asking for alignment",
        edit("generate-name-train", labelled),
        denies("alignment"),
    ),
    CreateCase("another label value asks for nothing", edit("burstable-web", lambda d: labelled(d, "preferred"))),
    CreateCase(
        "a fractional CPU budget",
        edit("tightly-coupled-database", lambda d: labelled(d)["spec"].update(resources=guaranteed("7500m", "16Gi"))),
        denies("alignment"),
    ),
    CreateCase(
        "exclusive CPUs take the whole budget while sidecars share",
        edit("tightly-coupled-database", lambda d: app(labelled(d)).update(resources=guaranteed("8", "12Gi"))),
        denies("cpuPool"),
    ),
    CreateCase(
        "exclusive memory takes the whole budget while sidecars share",
        edit("tightly-coupled-database", lambda d: app(labelled(d)).update(resources=guaranteed("6", "16Gi"))),
        denies("memoryPool"),
    ),
    CreateCase(
        "no shared container: leftover budget is legal (V6 of §5)",
        edit("ml-workload", lambda d: labelled(d)["spec"].pop("initContainers")),
    ),
    CreateCase(
        "an exclusive init container larger than what earlier sidecars leave",
        edit(
            "tightly-coupled-database",
            lambda d: labelled(d)["spec"].update(
                initContainers=[
                    sidecar("pinned", guaranteed("2", "1Gi")),
                    regular_init("migrate", guaranteed("7", "2Gi")),
                ]
            ),
        ),
        denies("cpuPool", "v6"),
    ),  # §5 V1 implies V6: the init container plus earlier sidecars exceed the pod
    CreateCase(
        "a shared init container after sidecars took the whole budget",
        edit(
            "tightly-coupled-database",
            lambda d: labelled(d)["spec"].update(
                initContainers=[sidecar("pinned", guaranteed("8", "16Gi")), regular_init("migrate")]
            ),
        ),
        denies("cpuPool", "memoryPool", "v6"),
    ),
    CreateCase(
        "a fractional Guaranteed container shares CPUs but owns memory",
        edit("tightly-coupled-database", lambda d: app(labelled(d)).update(resources=guaranteed("7500m", "16Gi"))),
        denies("memoryPool"),
    ),
    CreateCase(
        "hugepages budget taken whole by an exclusive container",
        edit("init-sidecar-hugepages", hugepages_budget_taken_whole),
        denies("memoryPool"),
    ),
]


@pytest.mark.parametrize("case", CREATE_CASES, ids=lambda c: c.description)
def test_policy_and_python_rules_agree_on_pod_creation(case: CreateCase) -> None:
    evaluation, reference = judge_create(case.build())
    assert_same_verdicts(evaluation, reference)
    assert {d.findings for d in evaluation.denials} == case.denied_by


def unchanged(doc: Pod) -> None:
    del doc


@dataclass(frozen=True)
class ResizeCase:
    description: str
    old: str
    change: Callable[[Pod], object]
    denied_by: frozenset[str] = field(default_factory=frozenset)
    # applied to the stored old pod, status included, before the resize
    old_change: Callable[[Pod], object] | None = None


def set_resources(doc: Pod, resources: dict[str, Any], index: int = 0) -> None:
    app(doc, index)["resources"] = resources


RESIZE_CASES = [
    ResizeCase(
        "raise a Burstable cpu request", "burstable-web", lambda d: app(d)["resources"]["requests"].update(cpu="800m")
    ),
    ResizeCase(
        "remove a memory limit", "burstable-web", lambda d: app(d)["resources"]["limits"].pop("memory"), denies("l3")
    ),
    ResizeCase(
        "make a Burstable pod Guaranteed",
        "burstable-web",
        lambda d: set_resources(d, guaranteed("1", "512Mi")),
        denies("l2"),
    ),
    ResizeCase(
        "give a BestEffort pod requests",
        "besteffort-batch",
        lambda d: set_resources(d, res({"cpu": "100m"})),
        denies("l2"),
    ),
    ResizeCase(
        "add ephemeral-storage",
        "burstable-web",
        lambda d: app(d)["resources"]["requests"].update({"ephemeral-storage": "1Gi"}),
        denies("l4"),
    ),
    ResizeCase(
        "change the resize policy",
        "burstable-web",
        lambda d: app(d)["resizePolicy"][1].update(restartPolicy="NotRequired"),
        denies("l4"),
    ),
    ResizeCase("rename a container", "burstable-web", lambda d: app(d).update(name="web2"), denies("l6")),
    ResizeCase(
        "add a container",
        "burstable-web",
        lambda d: d["spec"]["containers"].append({"name": "extra", "image": "x"}),
        denies("l6"),
    ),
    ResizeCase(
        "resize a regular init container",
        "init-sidecar-hugepages",
        lambda d: init(d, 0).update(resources=guaranteed("3", "1Gi")),
        denies("l5"),
    ),
    ResizeCase(
        "remove a regular init container's memory: L5, not L3",
        "init-sidecar-hugepages",
        lambda d: [init(d, 0)["resources"][part].pop("memory") for part in ("requests", "limits")],
        denies("l5"),
    ),
    ResizeCase(
        "resize a sidecar's cpu",
        "init-sidecar-hugepages",
        lambda d: init(d, 1).update(resources=guaranteed("500m", "256Mi")),
    ),
    ResizeCase(
        "give a sidecar ephemeral storage",
        "init-sidecar-hugepages",
        lambda d: init(d, 1)["resources"]["limits"].update({"ephemeral-storage": "1Gi"}),
        denies("l4"),
    ),
    ResizeCase(
        "raise the pod-level cpu",
        "init-sidecar-hugepages",
        lambda d: d["spec"].update(resources=guaranteed("5", "4Gi")),
    ),
    ResizeCase(
        "change pod-level hugepages",
        "init-sidecar-hugepages",
        lambda d: d["spec"]["resources"]["limits"].update({"hugepages-2Mi": "2Gi"}),
        denies("l11", "v2"),
    ),
    ResizeCase(
        "remove a pod-level limit",
        "tightly-coupled-database",
        lambda d: d["spec"]["resources"]["limits"].pop("memory"),
        denies("l2", "l3"),
    ),
    ResizeCase(
        "resize a Guaranteed container keeping requests equal to limits",
        "tightly-coupled-database",
        lambda d: set_resources(d, guaranteed("7", "12Gi")),
    ),
    ResizeCase(
        "raise only a Guaranteed container's request",
        "tightly-coupled-database",
        lambda d: app(d)["resources"]["requests"].update(cpu="7"),
        denies("v2"),
    ),
    ResizeCase(
        "shrink a Guaranteed container-level pod's request",
        "generate-name-train",
        lambda d: set_resources(d, res({"cpu": "1", "memory": "4Gi"}, {"cpu": "2", "memory": "4Gi"})),
        denies("l2"),
    ),
    ResizeCase(
        "a static pod",
        "burstable-web",
        lambda d: app(d)["resources"]["limits"].update(cpu="3"),
        denies("l7"),
        old_change=lambda d: d["metadata"].update(annotations={MIRROR: "x"}),
    ),
    ResizeCase(
        "a Windows pod", "windows-plr", lambda d: merge_resources(d["spec"], "limits", {"cpu": "3"}), denies("l7")
    ),
    ResizeCase(
        "a node that does not report container resources",
        "burstable-web",
        unchanged,
        denies("l8"),
        old_change=lambda d: d["status"]["containerStatuses"][0].pop("resources"),
    ),
    ResizeCase(
        "an aggregate above the pod request after a resize",
        "invalid-plr-aggregate",
        lambda d: d["spec"]["resources"].update(requests={"memory": "130Gi"}, limits={"memory": "130Gi"}),
    ),
]


@pytest.mark.parametrize("case", RESIZE_CASES, ids=lambda c: c.description)
def test_policy_and_python_rules_agree_on_resize(case: ResizeCase) -> None:
    evaluation, reference = judge_resize(fixture(case.old), case.change, case.old_change)
    assert_same_verdicts(evaluation, reference)
    assert {d.findings for d in evaluation.denials} == case.denied_by


def test_every_claimed_rule_denies_some_table_case() -> None:
    denied = {key for case in CREATE_CASES for key in case.denied_by}
    denied |= {key for case in RESIZE_CASES for key in case.denied_by}
    assert denied == {v.findings for v in compiled_policy().validations}


def test_denial_message_names_the_field_path_and_the_rule() -> None:
    evaluation, _ = judge_create(
        edit("tightly-coupled-database", lambda d: app(d)["resources"]["limits"].update(cpu="9"))()
    )
    [denial] = evaluation.denials
    assert denial.reason == "Invalid"
    assert denial.message == (
        "spec.resources.containers[0][cpu].limits: Invalid value: 9: must be less than or equal to pod limits of 8 (V8)"
    )


# -- generated pods ---------------------------------------------------------------------------------------

VALUES = {
    "cpu": ["0", "100m", "500m", "1", "1500m", "2", "3", "4"],
    "memory": ["0", "128Mi", "256Mi", "1Gi", "1536Mi", "2Gi", "4Gi"],
    "hugepages-2Mi": ["0", "2Mi", "4Mi", "1Gi"],
    "example.com/dev": ["1", "2"],
    "ephemeral-storage": ["1Gi"],
}
CONTAINER_NAMES = ["cpu", "memory", "hugepages-2Mi", "example.com/dev"]
POD_NAMES = ["cpu", "memory", "hugepages-2Mi", "ephemeral-storage"]


@st.composite
def resources(draw: st.DrawFn, names: list[str]) -> dict[str, Any]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    for name in draw(st.lists(st.sampled_from(names), unique=True, max_size=3)):
        shape = draw(st.sampled_from(["request", "limit", "equal", "both"]))
        value = draw(st.sampled_from(VALUES[name]))
        if shape in ("request", "equal", "both"):
            requests[name] = value
        if shape in ("limit", "equal"):
            limits[name] = value
        if shape == "both":
            limits[name] = draw(st.sampled_from(VALUES[name]))
    return res(requests or None, limits or None)


def container_resources() -> st.SearchStrategy[dict[str, Any]]:
    """Random stanzas, Guaranteed-equivalent ones (the shape KEP-5526 pins) and none at all."""
    exclusive = st.builds(guaranteed, st.sampled_from(["1", "2", "3", "1500m"]), st.sampled_from(["1Gi", "2Gi", "4Gi"]))
    return st.one_of(resources(CONTAINER_NAMES), exclusive, st.just({}))


@st.composite
def pods(draw: st.DrawFn) -> Pod:
    inits = [
        {
            "name": f"init-{i}",
            "image": "x",
            "resources": draw(container_resources()),
            **({"restartPolicy": "Always"} if draw(st.booleans()) else {}),
        }
        for i in range(draw(st.integers(0, 2)))
    ]
    apps = [
        {"name": f"app-{i}", "image": "x", "resources": draw(container_resources())}
        for i in range(draw(st.integers(1, 3)))
    ]
    spec: dict[str, Any] = {"containers": apps}
    if inits:
        spec["initContainers"] = inits
    shape = draw(st.sampled_from(["none", "random", "guaranteed"]))
    if shape == "random":
        spec["resources"] = draw(resources(POD_NAMES))
    elif shape == "guaranteed":
        spec["resources"] = guaranteed(
            draw(st.sampled_from(["2", "4", "6", "7500m"])), draw(st.sampled_from(["4Gi", "8Gi"]))
        )
    if draw(st.integers(0, 9)) == 0:
        spec["os"] = {"name": "windows"}
    metadata: dict[str, Any] = {"name": "generated", "namespace": "default"}
    if draw(st.booleans()):
        metadata["labels"] = {ALIGNMENT_LABEL: "required"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(pod=pods())
def test_policy_and_python_rules_agree_on_generated_pods(pod: Pod) -> None:
    evaluation, reference = judge_create(pod)
    assert_same_verdicts(evaluation, reference)


@st.composite
def resizes(draw: st.DrawFn) -> tuple[Pod, Callable[[Pod], None]]:
    old = draw(pods())
    old["metadata"].pop("labels", None)
    old["spec"].pop("os", None)
    edits = draw(
        st.lists(
            st.tuples(
                st.integers(0, 5),
                st.sampled_from(["cpu", "memory", "hugepages-2Mi"]),
                st.sampled_from(["requests", "limits"]),
                st.sampled_from(["set", "remove"]),
                st.integers(0, 6),
            ),
            max_size=3,
        )
    )

    def change(doc: Pod) -> None:
        stanzas = [c["resources"] for c in doc["spec"].get("initContainers", []) + doc["spec"]["containers"]]
        if "resources" in doc["spec"]:
            stanzas.append(doc["spec"]["resources"])
        for index, name, part, action, pick in edits:
            stanza = stanzas[index % len(stanzas)]
            if action == "remove":
                stanza.get(part, {}).pop(name, None)
            else:
                stanza.setdefault(part, {})[name] = VALUES[name][pick % len(VALUES[name])]

    return old, change


@FAST
@given(case=resizes())
def test_policy_and_python_rules_agree_on_generated_resizes(case: tuple[Pod, Callable[[Pod], None]]) -> None:
    old, change = case
    evaluation, reference = judge_resize(old, change)
    assert_same_verdicts(evaluation, reference)


# -- the manifests -----------------------------------------------------------------------------------------


def test_binding_denies_with_the_policy() -> None:
    [policy] = policy_documents()
    [binding] = binding_documents()
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert "paramKind" not in policy["spec"]


def test_policy_matches_pod_creation_and_resize_only() -> None:
    [policy] = policy_documents()
    rules = {
        (op, r)
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        for op in rule["operations"]
        for r in rule["resources"]
    }
    assert rules == {("CREATE", "pods"), ("UPDATE", "pods/resize")}


def test_every_variable_and_validation_compiles_and_every_findings_variable_is_validated() -> None:
    compiled = compiled_policy()
    names = [name for name, _ in compiled.variables]
    assert len(names) == len(set(names))
    findings = [v.findings for v in compiled.validations]
    assert len(findings) == len(set(findings)) and set(findings) <= set(names)
    assert set(findings) == set(RULE_OF_FINDINGS) | set(FIRST_RULE_ONLY)


def test_optional_kustomization_builds_the_policy_and_binding() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: kustomize builds are not checked here")
    built = subprocess.run([kubectl, "kustomize", str(POLICY_DIR)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    kinds = [doc["kind"] for doc in yaml.safe_load_all(built.stdout) if doc]
    assert sorted(kinds) == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
