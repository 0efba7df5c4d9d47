"""Resize legality (L1-L11, in-place-resize.md worked example 1) and what a resize changes."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from pod_dicts import container, guaranteed, load_pod_json, pod, running_status

from shared.pod import parse_pod
from shared.resize import ResourceChange, increases_requests, resize_violations, resource_changes

MI = 1 << 20
Mutation = Callable[[dict[str, Any]], None]


def web_pod(*, resize_policy: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    """Worked example 1: one Burstable container, 500m/256Mi requests, 1/512Mi limits, running."""
    web = container(
        "web", {"cpu": "500m", "memory": "256Mi"}, {"cpu": "1", "memory": "512Mi"}, resize_policy=resize_policy
    )
    return with_status(pod([web], **kw), "Burstable")


def with_status(raw: dict[str, Any], qos_class: str | None) -> dict[str, Any]:
    raw["status"] = running_status(raw, qos_class=qos_class)
    return raw


def seed(name: str) -> dict[str, Any]:
    return with_status(load_pod_json(name), "Guaranteed")


def web(raw: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = raw["spec"]["containers"][0]
    return spec


def web_resources(raw: dict[str, Any]) -> dict[str, Any]:
    res: dict[str, Any] = web(raw)["resources"]
    return res


@dataclass(frozen=True)
class Case:
    description: str
    old: dict[str, Any]
    change: Mutation
    expected: list[tuple[str, str]]
    pod_level_resize: bool = True


def set_in(*path: str | int, value: Any) -> Mutation:
    def mutate(raw: dict[str, Any]) -> None:
        node: Any = raw
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return mutate


def delete_in(*path: str | int) -> Mutation:
    def mutate(raw: dict[str, Any]) -> None:
        node: Any = raw
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]

    return mutate


def nothing(raw: dict[str, Any]) -> None:
    """A no-op resize: the same resources again."""


QOS = 'spec: Invalid value: "{}": Pod QOS Class may not change as a result of resizing'
ONLY_CPU_MEMORY = "spec: Forbidden: only cpu and memory resources are mutable"
WEB = ("spec", "containers", 0, "resources")

CASES = [
    Case(
        "worked example 1: raising requests.cpu to 800m is legal",
        web_pod(),
        set_in(*WEB, "requests", "cpu", value="800m"),
        [],
    ),
    Case(
        "worked example 1 / L3: removing limits.memory is forbidden",
        web_pod(),
        delete_in(*WEB, "limits", "memory"),
        [("L3", "spec.containers[0].resources.limits: Forbidden: resource limits cannot be removed")],
    ),
    Case(
        "worked example 1 / L2: requests equal to limits would make the pod Guaranteed",
        web_pod(),
        set_in(*WEB, "requests", value={"cpu": "1", "memory": "512Mi"}),
        [("L2", QOS.format("Burstable"))],
    ),
    Case(
        "worked example 1 / L4: ephemeral-storage is not resizable",
        web_pod(),
        set_in(*WEB, "limits", "ephemeral-storage", value="1Gi"),
        [("L4", ONLY_CPU_MEMORY)],
    ),
    Case(
        "L1 the resized pod must still pass create-time validation",
        web_pod(),
        set_in(*WEB, "requests", "cpu", value="2"),
        [
            (
                "V2",
                'spec.containers[0].resources.requests: Invalid value: "2": '
                "must be less than or equal to cpu limit of 1",
            )
        ],
    ),
    Case(
        "L1 an unparsable new quantity is reported and nothing else is judged",
        web_pod(),
        set_in(*WEB, "requests", "cpu", value="fast"),
        [
            (
                "V2",
                'spec.containers[0].resources.requests[cpu]: Invalid value: "fast": quantities must match the '
                "regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            )
        ],
    ),
    Case(
        "L2 a BestEffort pod cannot add requests",
        with_status(pod([container("job")]), "BestEffort"),
        set_in("spec", "containers", 0, "resources", value={"requests": {"cpu": "100m"}}),
        [("L2", QOS.format("BestEffort"))],
    ),
    Case(
        "L2 a Guaranteed pod must keep requests equal to limits (admission example 2)",
        with_status(pod([guaranteed("db", "6", "12Gi")]), "Guaranteed"),
        set_in(*WEB, "limits", "cpu", value="7"),
        [("L2", QOS.format("Guaranteed"))],
    ),
    Case(
        "L2 a Guaranteed pod may scale cpu and memory together",
        with_status(pod([guaranteed("db", "6", "12Gi")]), "Guaranteed"),
        set_in(*WEB, value={"requests": {"cpu": "8", "memory": "16Gi"}, "limits": {"cpu": "8", "memory": "16Gi"}}),
        [],
    ),
    Case(
        "L2 without status.qosClass the old class is computed",
        with_status(pod([container("a", {"cpu": "1"})]), None),
        set_in("spec", "containers", 0, "resources", value={"limits": {"cpu": "1", "memory": "1Gi"}}),
        [("L2", QOS.format(""))],
    ),
    Case(
        "L3 a request without a limit cannot be removed",
        with_status(pod([container("a", {"cpu": "500m", "memory": "256Mi"}, {"cpu": "1"})]), "Burstable"),
        delete_in("spec", "containers", 0, "resources", "requests", "memory"),
        [("L3", "spec.containers[0].resources.requests: Forbidden: resource requests cannot be removed")],
    ),
    Case(
        "L3 dropping a request that has a limit is no removal: defaulting restores it from the limit",
        web_pod(),
        delete_in(*WEB, "requests", "memory"),
        [],
    ),
    Case(
        "L3 adding a cpu limit to a Burstable container is allowed",
        with_status(pod([container("a", {"cpu": "500m"})]), "Burstable"),
        set_in("spec", "containers", 0, "resources", "limits", value={"cpu": "2"}),
        [],
    ),
    Case(
        "L4 changing the image is forbidden",
        web_pod(),
        set_in("spec", "containers", 0, "image", value="app:v2"),
        [("L4", ONLY_CPU_MEMORY)],
    ),
    Case(
        "L4 a sidecar may change cpu and memory",
        web_pod(init=[container("proxy", {"cpu": "100m"}, sidecar=True)]),
        set_in("spec", "initContainers", 0, "resources", "requests", "cpu", value="200m"),
        [],
    ),
    Case(
        "L4 a sidecar may not change other resources",
        web_pod(init=[container("proxy", {"cpu": "100m"}, sidecar=True)]),
        set_in("spec", "initContainers", 0, "resources", "requests", "ephemeral-storage", value="1Gi"),
        [("L4", "spec: Forbidden: only cpu and memory resources for sidecar containers are mutable")],
    ),
    Case(
        "L5 a regular init container's resources are immutable",
        web_pod(init=[container("setup", {"cpu": "100m"})]),
        set_in("spec", "initContainers", 0, "resources", "requests", "cpu", value="200m"),
        [("L5", "spec: Forbidden: resources for non-sidecar init containers are immutable")],
    ),
    Case(
        "L6 containers cannot be added",
        web_pod(),
        lambda raw: raw["spec"]["containers"].append(container("extra", {"cpu": "100m"})),
        [("L6", "spec.containers: Forbidden: containers may not be added or removed on resize")],
    ),
    Case(
        "L6 containers cannot be removed",
        with_status(pod([container("a", {"cpu": "1"}), container("b", {"cpu": "1"})]), "Burstable"),
        lambda raw: raw["spec"]["containers"].pop(),
        [("L6", "spec.containers: Forbidden: containers may not be added or removed on resize")],
    ),
    Case(
        "L6 containers cannot be renamed",
        web_pod(),
        set_in("spec", "containers", 0, "name", value="www"),
        [("L6", "spec.containers[0].name: Forbidden: containers may not be renamed or reordered on resize")],
    ),
    Case(
        "L6 a reorder names both positions (the e2e pod_resize.go text)",
        with_status(pod([container("c1", {"cpu": "1"}), container("c2", {"cpu": "1"})]), "Burstable"),
        lambda raw: raw["spec"]["containers"].reverse(),
        [
            ("L6", "spec.containers[0].name: Forbidden: containers may not be renamed or reordered on resize"),
            ("L6", "spec.containers[1].name: Forbidden: containers may not be renamed or reordered on resize"),
        ],
    ),
    Case(
        "L6 init containers are named as such",
        web_pod(init=[container("setup", {"cpu": "100m"})]),
        lambda raw: raw["spec"]["initContainers"].clear(),
        [("L6", "spec.initContainers: Forbidden: initContainers may not be added or removed on resize")],
    ),
    Case(
        "L6 stops the validation: a renamed container's other changes are not judged",
        web_pod(),
        lambda raw: (set_in("spec", "containers", 0, "name", value="www")(raw), web(raw).update(image="app:v2")),
        [("L6", "spec.containers[0].name: Forbidden: containers may not be renamed or reordered on resize")],
    ),
    Case(
        "L7 static (mirror) pods cannot be resized",
        web_pod(annotations={"kubernetes.io/config.mirror": "8d2a"}),
        set_in(*WEB, "requests", "cpu", value="800m"),
        [("L7", ": Forbidden: static pods cannot be resized")],
    ),
    Case(
        "L7 windows pods cannot be resized",
        web_pod(os="windows"),
        set_in(*WEB, "requests", "cpu", value="800m"),
        [("L7", ": Forbidden: windows pods cannot be resized")],
    ),
    Case(
        "L8 a running pod whose kubelet does not report resources cannot be resized",
        pod(
            [container("a", {"cpu": "1"})],
            status=running_status(pod([container("a")]), qos_class="Burstable", report_resources=False),
        ),
        set_in("spec", "containers", 0, "resources", "requests", "cpu", value="2"),
        [("L8", "spec: Forbidden: Pod running on node without support for resize")],
    ),
    Case(
        "L8 with nothing running the node is assumed to support resize",
        pod([container("a", {"cpu": "1"})], status={"qosClass": "Burstable", "phase": "Pending"}),
        set_in("spec", "containers", 0, "resources", "requests", "cpu", value="2"),
        [],
    ),
    Case(
        "L9 a memory limit decrease is left to the kubelet in v1.36",
        web_pod(),
        set_in(*WEB, "limits", "memory", value="384Mi"),
        [],
    ),
    Case(
        "L10 restartPolicy Never pods keep NotRequired resize policies",
        # an object stored before the rule: the resize is judged on the whole new pod (L1)
        web_pod(restart_policy="Never", resize_policy={"memory": "RestartContainer"}),
        set_in(*WEB, "requests", "cpu", value="800m"),
        [
            (
                "L10",
                'spec.containers[0].resizePolicy: Invalid value: "RestartContainer": '
                "must be 'NotRequired' when `restartPolicy` is 'Never'",
            )
        ],
    ),
    Case(
        "L11 pod-level cpu may be resized with InPlacePodLevelResourcesVerticalScaling",
        seed("ml-workload"),
        set_in(
            "spec",
            "resources",
            value={"requests": {"cpu": "5", "memory": "8Gi"}, "limits": {"cpu": "5", "memory": "8Gi"}},
        ),
        [],
    ),
    Case(
        "L11 without the gate pods with pod-level resources cannot be resized",
        seed("ml-workload"),
        set_in(
            "spec",
            "containers",
            0,
            "resources",
            value={"requests": {"cpu": "2", "memory": "6Gi"}, "limits": {"cpu": "2", "memory": "6Gi"}},
        ),
        [("L11", ": Forbidden: pods with pod-level resources cannot be resized")],
        pod_level_resize=False,
    ),
    Case(
        "L11 pod-level hugepages cannot be resized",
        seed("init-sidecar-hugepages"),
        set_in("spec", "resources", "limits", "hugepages-2Mi", value="2Gi"),
        [("L11", ONLY_CPU_MEMORY)],
    ),
    Case(
        "L11 a pod-level change that alters QoS is rejected",
        seed("tightly-coupled-database"),
        set_in("spec", "resources", "limits", "cpu", value="10"),
        [("L2", QOS.format("Guaranteed"))],
    ),
    Case(
        "L3 pod-level limits cannot be removed",
        seed("ml-workload"),
        delete_in("spec", "resources", "limits"),
        [
            ("L2", QOS.format("Guaranteed")),
            ("L3", "spec.resources.limits: Forbidden: resource limits cannot be removed"),
        ],
    ),
    Case("a no-op resize of a seed pod is legal", seed("tightly-coupled-database"), nothing, []),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.description)
def test_resize_legality(case: Case) -> None:
    new = copy.deepcopy(case.old)
    case.change(new)
    violations = resize_violations(parse_pod(case.old), parse_pod(new), pod_level_resize=case.pod_level_resize)
    assert [(v.rule, str(v)) for v in violations] == case.expected


@dataclass(frozen=True)
class ChangeCase:
    description: str
    old: dict[str, Any]
    change: Mutation
    expected: list[ResourceChange]
    operations: list[str]


CHANGE_CASES = [
    ChangeCase(
        "a request increase",
        web_pod(),
        set_in(*WEB, "requests", "cpu", value="800m"),
        [ResourceChange("web", "app", "requests", "cpu", 500, 800)],
        ["increase"],
    ),
    ChangeCase(
        "a limit decrease",
        web_pod(),
        set_in(*WEB, "limits", "memory", value="384Mi"),
        [ResourceChange("web", "app", "limits", "memory", 512 * MI, 384 * MI)],
        ["decrease"],
    ),
    ChangeCase(
        "an added limit and a removed one",
        with_status(pod([container("a", {"cpu": "500m"}, {"memory": "1Gi"})]), "Burstable"),
        set_in(
            "spec",
            "containers",
            0,
            "resources",
            value={"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"}},
        ),
        [
            ResourceChange("a", "app", "limits", "memory", 1 << 30, None),
            ResourceChange("a", "app", "limits", "cpu", None, 1000),
        ],
        ["remove", "add"],
    ),
    ChangeCase(
        "pod-level changes have no container",
        seed("ml-workload"),
        set_in(
            "spec",
            "resources",
            value={"requests": {"cpu": "5", "memory": "8Gi"}, "limits": {"cpu": "5", "memory": "8Gi"}},
        ),
        [
            ResourceChange(None, None, "requests", "cpu", 4000, 5000),
            ResourceChange(None, None, "limits", "cpu", 4000, 5000),
        ],
        ["increase", "increase"],
    ),
    ChangeCase(
        "the same resources spelled differently are no change",
        web_pod(),
        set_in(*WEB, "limits", "cpu", value="1000m"),
        [],
        [],
    ),
]


@pytest.mark.parametrize("case", CHANGE_CASES, ids=lambda c: c.description)
def test_resource_changes(case: ChangeCase) -> None:
    new = copy.deepcopy(case.old)
    case.change(new)
    changes = resource_changes(parse_pod(case.old), parse_pod(new))
    assert changes == case.expected
    assert [c.operation for c in changes] == case.operations


def test_increases_requests_tells_growing_resizes_from_shrinking_ones() -> None:
    grow = [ResourceChange("a", "app", "requests", "cpu", 500, 800)]
    shrink = [
        ResourceChange("a", "app", "requests", "cpu", 800, 500),
        ResourceChange("a", "app", "limits", "cpu", 1, 2),
    ]
    assert increases_requests(grow)
    assert not increases_requests(shrink)
