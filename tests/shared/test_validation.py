"""API-server validation of pod resources (V1-V13), with upstream's exact paths and messages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from pod_dicts import container, load_pod_json, pod, resources

from shared.pod import Pod, parse_pod
from shared.validation import (
    FieldViolation,
    aggregate_message,
    format_violation,
    invalid_message,
    qualified_name_errors,
    validate_pod_resources,
)

NAME_PART_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
QUANTITY_MESSAGE = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


@dataclass(frozen=True)
class Case:
    description: str
    raw: dict[str, Any]
    expected: list[tuple[str, str]]  # (rule, formatted violation)
    gate: bool = True


CASES = [
    Case(
        "V1 a windows pod may not set pod-level resources",
        load_pod_json("windows-plr"),
        [("V1", "spec.resources: Forbidden: may not be set for a windows pod")],
    ),
    Case(
        "V2 pod-level quantities must be non-negative",
        pod([container("a")], pod_resources=resources({"cpu": "-1"})),
        [("V2", 'spec.resources.requests[cpu]: Invalid value: "-1": must be greater than or equal to 0')],
    ),
    Case(
        "V2 a pod-level request may not exceed its limit",
        pod([container("a")], pod_resources=resources({"cpu": "4"}, {"cpu": "2"})),
        [("V2", 'spec.resources.requests: Invalid value: "4": must be less than or equal to cpu limit of 2')],
    ),
    Case(
        "V2 a container request may not exceed its limit, printed as stored (milli-rounded)",
        pod([container("a", {"cpu": "1.0001"}, {"cpu": "1"})]),
        [
            (
                "V2",
                'spec.containers[0].resources.requests: Invalid value: "1001m": '
                "must be less than or equal to cpu limit of 1",
            )
        ],
    ),
    Case(
        "V2 a hugepages request must equal its limit",
        pod([container("a", {"cpu": "1", "hugepages-2Mi": "2Mi"}, {"cpu": "1", "hugepages-2Mi": "4Mi"})]),
        [
            (
                "V2",
                'spec.containers[0].resources.requests: Invalid value: "2Mi": '
                "must be equal to hugepages-2Mi limit of 4Mi",
            )
        ],
    ),
    Case(
        "V2 a hugepages request needs a limit",
        pod([container("a", {"cpu": "1", "hugepages-2Mi": "2Mi"})]),
        [
            (
                "V2",
                "spec.containers[0].resources.limits: Required value: "
                "Limit must be set for non overcommitable resources",
            )
        ],
    ),
    Case(
        "V2 hugepages must be whole pages",
        pod([container("a", limits={"memory": "1Gi", "hugepages-2Mi": "3Mi"})]),
        [
            (
                "V2",
                'spec.containers[0].resources.limits[hugepages-2Mi]: Invalid value: "3Mi": '
                "3Mi is not positive integer multiple of hugepages-2Mi",
            ),
            (
                "V2",
                'spec.containers[0].resources.requests[hugepages-2Mi]: Invalid value: "3Mi": '
                "3Mi is not positive integer multiple of hugepages-2Mi",
            ),
        ],
    ),
    Case(
        "V2 container hugepages require cpu or memory",
        pod([container("a", limits={"hugepages-2Mi": "2Mi"})]),
        [("V2", "spec.containers[0].resources: Forbidden: HugePages require cpu or memory")],
    ),
    Case(
        "V2 pod-level hugepages require cpu or memory",
        pod([container("a")], pod_resources=resources(limits={"hugepages-1Gi": "1Gi"})),
        [("V2", "spec.resources: Forbidden: HugePages require cpu or memory")],
    ),
    Case(
        "V2 extended resources must be integers",
        pod([container("a", limits={"cpu": "1", "example.com/gpu": "500m"})]),
        [
            ("V2", "spec.containers[0].resources.limits[example.com/gpu]: Invalid value: 500m: must be an integer"),
            ("V2", "spec.containers[0].resources.requests[example.com/gpu]: Invalid value: 500m: must be an integer"),
        ],
    ),
    Case(
        "V3 an unknown unprefixed container resource is rejected twice, as upstream does",
        pod([container("a", {"foo": "1"})]),
        [
            (
                "V3",
                "spec.containers[0].resources.requests[foo]: Invalid value: foo: "
                "must be a standard resource type or fully qualified",
            ),
            (
                "V3",
                "spec.containers[0].resources.requests[foo]: Invalid value: foo: "
                "must be a standard resource for containers",
            ),
        ],
    ),
    Case(
        "V3 a non-extended prefixed container resource is rejected",
        pod([container("a", {"requests.example.com/gpu": "1"})]),
        [
            (
                "V3",
                "spec.containers[0].resources.requests[requests.example.com/gpu]: Invalid value: "
                "requests.example.com/gpu: doesn't follow extended resource name standard",
            ),
            (
                "V2",
                "spec.containers[0].resources.limits: Required value: "
                "Limit must be set for non overcommitable resources",
            ),
        ],
    ),
    Case(
        "V3 a pod-level resource name must be a qualified name",
        pod([container("a")], pod_resources=resources({"Bad_Name!": "1"})),
        [("V3", f"spec.resources.requests[Bad_Name!]: Invalid value: Bad_Name!: {NAME_PART_MESSAGE}")],
    ),
    Case(
        "V4 ephemeral-storage is not supported at pod level",
        pod([container("a")], pod_resources=resources({"ephemeral-storage": "1Gi"})),
        [
            (
                "V4",
                "spec.resources.requests[ephemeral-storage]: Unsupported value: ephemeral-storage: "
                'supported values: "cpu", "hugepages-", "memory"',
            )
        ],
    ),
    Case(
        "V4 extended resources are not supported at pod level",
        pod([container("a")], pod_resources=resources(limits={"cpu": "1", "nvidia.com/gpu": "1"})),
        [
            (
                "V4",
                "spec.resources.limits[nvidia.com/gpu]: Unsupported value: nvidia.com/gpu: "
                'supported values: "cpu", "hugepages-", "memory"',
            )
        ],
    ),
    Case(
        "V5 pod-level claims are forbidden",
        pod([container("a")], pod_resources={"limits": {"cpu": "1"}, "claims": [{"name": "gpu"}]}),
        [("V5", "spec.resources.claims: Forbidden: claims cannot be set for Resources at pod-level")],
    ),
    Case(
        "V6 worked example D: defaulted container requests exceed the pod request",
        load_pod_json("invalid-plr-aggregate"),
        [
            (
                "V6",
                'spec.resources.requests[memory]: Invalid value: "100Gi": '
                "must be greater than or equal to aggregate container requests of 120Gi",
            )
        ],
    ),
    Case(
        "V6 sidecars count through the R3 formula",
        pod(
            [container("app", {"cpu": "1.5"})],
            init=[container("setup", {"cpu": "2"}), container("proxy", {"cpu": "1"}, sidecar=True)],
            pod_resources=resources({"cpu": "2"}),
        ),
        [
            (
                "V6",
                'spec.resources.requests[cpu]: Invalid value: "2": '
                "must be greater than or equal to aggregate container requests of 2500m",
            )
        ],
    ),
    Case(
        "V6 a resource without a pod-level request is not compared (worked example B)",
        pod(
            [container("a", {"memory": "1Gi"}), container("b", {"memory": "2Gi"})],
            pod_resources=resources({"cpu": "4"}),
        ),
        [],
    ),
    Case(
        "V6 container ephemeral-storage is not compared with pod-level resources",
        pod([container("a", {"cpu": "1", "ephemeral-storage": "10Gi"})], pod_resources=resources({"cpu": "2"})),
        [],
    ),
    Case(
        "V7 aggregate container hugepages limits may not exceed the pod limit",
        pod(
            [
                container("a", limits={"cpu": "1", "hugepages-2Mi": "2Mi"}),
                container("b", limits={"cpu": "1", "hugepages-2Mi": "2Mi"}),
            ],
            pod_resources=resources(limits={"cpu": "2", "hugepages-2Mi": "2Mi"}),
        ),
        [
            (
                "V6",
                'spec.resources.requests[hugepages-2Mi]: Invalid value: "2Mi": '
                "must be greater than or equal to aggregate container requests of 4Mi",
            ),
            (
                "V7",
                'spec.resources.limits[hugepages-2Mi]: Invalid value: "2Mi": '
                "must be greater than or equal to aggregate container limits of 4Mi",
            ),
        ],
    ),
    Case(
        "V8 worked example E: one container's limit may not exceed the pod limit (upstream's odd path)",
        pod(
            [container("a", {"cpu": "1"}), container("b", {"cpu": "1"}, {"cpu": "5"})],
            pod_resources=resources(limits={"cpu": "4"}),
        ),
        [
            (
                "V8",
                'spec.resources.containers[1][cpu].limits: Invalid value: "5": '
                "must be less than or equal to pod limits of 4",
            )
        ],
    ),
    Case(
        "V8 init container limits are not capped individually",
        pod(
            [container("a", {"cpu": "1"})],
            init=[container("i", {"cpu": "1"}, {"cpu": "5"})],
            pod_resources=resources(limits={"cpu": "4"}),
        ),
        [],
    ),
    Case(
        "V9 container limits may sum past the pod limit when requests fit",
        pod(
            [container("a", {"cpu": "1"}, {"cpu": "3"}), container("b", {"cpu": "1"}, {"cpu": "3"})],
            pod_resources=resources(limits={"cpu": "4"}),
        ),
        [],
    ),
    Case(
        "V10 aggregate requests are compared with the pod request, never the pod limit",
        pod([container("a", {"cpu": "2"})], pod_resources=resources({"cpu": "1"}, {"cpu": "1"})),
        [
            (
                "V6",
                'spec.resources.requests[cpu]: Invalid value: "1": '
                "must be greater than or equal to aggregate container requests of 2",
            )
        ],
    ),
    Case(
        "V11 with the PodLevelResources gate off spec.resources is dropped, not validated",
        pod([container("a")], pod_resources=resources({"ephemeral-storage": "1Gi"})),
        [],
        gate=False,
    ),
    Case(
        "V12 the cgroup v1 rejection of pod-level resources is the node's, not the API server's",
        load_pod_json("ml-workload"),
        [],
    ),
    Case(
        "V13 ephemeral containers may not set resources",
        pod(
            [container("a")],
            ephemeralContainers=[{"name": "debug", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}],
        ),
        [("V13", "spec.ephemeralContainers[0].resources: Forbidden: cannot be set for an Ephemeral Container")],
    ),
    Case(
        "L10 restartPolicy Never needs NotRequired resize policies",
        pod([container("a", resize_policy={"cpu": "RestartContainer"})], restart_policy="Never"),
        [
            (
                "L10",
                'spec.containers[0].resizePolicy: Invalid value: "RestartContainer": '
                "must be 'NotRequired' when `restartPolicy` is 'Never'",
            )
        ],
    ),
    Case(
        "R3.1 resize policies name cpu or memory",
        pod([container("a", resize_policy={"ephemeral-storage": "NotRequired"})]),
        [
            (
                "R3.1",
                "spec.containers[0].resizePolicy: Unsupported value: ephemeral-storage: supported values: "
                '"cpu", "memory"',
            )
        ],
    ),
    Case(
        "V2 an unparsable quantity is reported alone, as a decoding failure",
        pod([container("a", {"cpu": "1x"}, {"cpu": "1"})], pod_resources=resources({"memory": "-"})),
        [
            ("V2", f'spec.containers[0].resources.requests[cpu]: Invalid value: "1x": {QUANTITY_MESSAGE}'),
            ("V2", f'spec.resources.requests[memory]: Invalid value: "-": {QUANTITY_MESSAGE}'),
        ],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.description)
def test_validation_reports_upstream_path_and_message(case: Case) -> None:
    violations = validate_pod_resources(parse_pod(case.raw), pod_level_resources=case.gate)
    assert [(v.rule, str(v)) for v in violations] == case.expected


@pytest.mark.parametrize(
    "name",
    [
        "tightly-coupled-database",
        "ml-workload",
        "burstable-web",
        "besteffort-batch",
        "generate-name-train",
        "init-sidecar-hugepages",
    ],
)
def test_valid_fixtures_have_no_violations(name: str, fixture_pod: Callable[[str], Pod]) -> None:
    assert validate_pod_resources(fixture_pod(name)) == []


def test_indivisible_hugepages_can_be_allowed_for_old_objects() -> None:
    raw = pod([container("a", limits={"memory": "1Gi", "hugepages-2Mi": "3Mi"})])
    assert validate_pod_resources(parse_pod(raw), allow_indivisible_hugepages=True) == []


def test_seed_pods_validate_and_print_nothing(fixture_pod: Callable[[str], Pod]) -> None:
    for name in ("tightly-coupled-database", "ml-workload"):
        assert validate_pod_resources(fixture_pod(name)) == []


def test_violation_formatting_follows_field_error() -> None:
    assert format_violation(FieldViolation("spec", "Forbidden", "no", "L4")) == "spec: Forbidden: no"
    assert format_violation(FieldViolation("x", "Required", "", "V2")) == "x: Required value"
    assert format_violation(FieldViolation("x", "Invalid", "bad", "V2", value=None)) == "x: Invalid value: null: bad"
    assert (
        format_violation(FieldViolation("x", "Duplicate", "", "R3.1", value="cpu", quoted=False))
        == "x: Duplicate value: cpu"
    )
    assert format_violation(FieldViolation("x", "Invalid", "m", "V2", value='a"b')) == 'x: Invalid value: "a\\"b": m'


def test_aggregate_and_client_messages() -> None:
    first = FieldViolation("spec", "Forbidden", "one", "L4")
    second = FieldViolation("spec", "Forbidden", "two", "L5")
    assert aggregate_message([first]) == "spec: Forbidden: one"
    assert aggregate_message([first, second, first]) == "[spec: Forbidden: one, spec: Forbidden: two]"
    assert invalid_message("db", [first]) == 'Pod "db" is invalid: spec: Forbidden: one'


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("cpu", True),
        ("example.com/gpu", True),
        ("hugepages-2Mi", True),
        ("a/b/c", False),
        ("/gpu", False),
        ("Example.com/gpu", False),
        ("example.com/", False),
        ("x" * 64, False),
        ("-cpu", False),
    ],
)
def test_qualified_names(value: str, valid: bool) -> None:
    assert (qualified_name_errors(value) == []) is valid
