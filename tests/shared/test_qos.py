"""QoS class (R2.x) and effective pod requests/limits (R3.x), rule by rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pod_dicts import container, guaranteed, pod, resources

from shared import qos, quantity
from shared.pod import parse_pod
from shared.resources import ContainerKind, ContainerResources, PodResources, QOSClass, Resources


@dataclass(frozen=True)
class QOSCase:
    description: str
    raw: dict[str, Any]
    expected: QOSClass
    gate: bool = True


QOS_CASES = [
    QOSCase(
        "R2.1 with pod-level resources set only spec.resources decides",
        pod(
            [container("c", {"cpu": "1"}, {"cpu": "2"})], pod_resources=resources(*[{"cpu": "2", "memory": "2Gi"}] * 2)
        ),
        "Guaranteed",
    ),
    QOSCase(
        "R2.1 with the PodLevelResources gate off the containers decide",
        pod(
            [container("c", {"cpu": "1"}, {"cpu": "2"})], pod_resources=resources(*[{"cpu": "2", "memory": "2Gi"}] * 2)
        ),
        "Burstable",
        gate=False,
    ),
    QOSCase(
        "R2.1 an empty spec.resources is not pod-level resources (v1.36 fix)",
        pod([guaranteed("c", "1", "1Gi")], pod_resources={}),
        "Guaranteed",
    ),
    QOSCase(
        "R2.1 spec.resources naming only unsupported resources is not pod-level resources",
        pod([guaranteed("c", "1", "1Gi")], pod_resources=resources({"ephemeral-storage": "1Gi"})),
        "Guaranteed",
    ),
    QOSCase(
        "R2.2 zero requests and limits count as absent",
        pod([container("c", {"cpu": "0", "memory": "0"}, {"cpu": "0", "memory": "0"})]),
        "BestEffort",
    ),
    QOSCase(
        "R2.3 pod-level limits without memory cannot be Guaranteed",
        pod([container("c")], pod_resources=resources({"cpu": "2", "memory": "1Gi"}, {"cpu": "2"})),
        "Burstable",
    ),
    QOSCase(
        "R2.3 pod-level requests equal to cpu and memory limits is Guaranteed",
        pod([container("c")], pod_resources=resources(*[{"cpu": "2", "memory": "1Gi"}] * 2)),
        "Guaranteed",
    ),
    QOSCase(
        "R2.4 every container must limit both cpu and memory",
        pod([guaranteed("a", "1", "1Gi"), container("b", {"cpu": "1"}, {"cpu": "1"})]),
        "Burstable",
    ),
    QOSCase(
        "R2.4 init containers count like any other container",
        pod([guaranteed("a", "1", "1Gi")], init=[container("setup")]),
        "Burstable",
    ),
    QOSCase(
        "R2.4 Guaranteed sidecar and app containers make a Guaranteed pod",
        pod([guaranteed("a", "1", "1Gi")], init=[guaranteed("s", "500m", "128Mi", sidecar=True)]),
        "Guaranteed",
    ),
    QOSCase(
        "R2.5 nothing requested or limited anywhere is BestEffort", pod([container("a"), container("b")]), "BestEffort"
    ),
    QOSCase(
        "R2.6 limits only are defaulted into requests so the pod is Guaranteed",
        pod([container("a", limits={"cpu": "2", "memory": "4Gi"})]),
        "Guaranteed",
    ),
    QOSCase(
        "R2.6 requests equal to limits in value but not in spelling are Guaranteed",
        pod([container("a", {"cpu": "1000m", "memory": "1024Mi"}, {"cpu": "1", "memory": "1Gi"})]),
        "Guaranteed",
    ),
    QOSCase("R2.7 requests without limits are Burstable", pod([container("a", {"cpu": "1"})]), "Burstable"),
    QOSCase(
        "R2.7 requests below limits are Burstable",
        pod([container("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"})]),
        "Burstable",
    ),
    QOSCase(
        "R2.9 a BestEffort container inside Guaranteed pod-level resources leaves the pod Guaranteed",
        pod(
            [guaranteed("db", "6", "12Gi")],
            init=[container("exporter", sidecar=True)],
            pod_resources=resources(*[{"cpu": "8", "memory": "16Gi"}] * 2),
        ),
        "Guaranteed",
    ),
    QOSCase(
        "R2.9 Guaranteed containers inside Burstable pod-level resources leave the pod Burstable",
        pod(
            [guaranteed("db", "1", "1Gi")],
            pod_resources=resources({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"}),
        ),
        "Burstable",
    ),
]


@pytest.mark.parametrize("case", QOS_CASES, ids=lambda c: c.description)
def test_compute_qos_class(case: QOSCase) -> None:
    resources_view = parse_pod(case.raw).to_resources(pod_level_resources=case.gate)
    assert qos.compute_qos_class(resources_view, pod_level_resources_gate=case.gate) == case.expected


def test_seed_pods_are_guaranteed(fixture_pod: Any) -> None:
    for name in ("tightly-coupled-database", "ml-workload"):
        assert qos.qos_class(fixture_pod(name).to_resources()) == "Guaranteed"


def test_r2_8_status_qos_class_wins_over_recomputation() -> None:
    raw = pod([guaranteed("a", "1", "1Gi")], status={"qosClass": "Burstable"})
    view = parse_pod(raw).to_resources()
    assert qos.compute_qos_class(view) == "Guaranteed"
    assert qos.qos_class(view) == "Burstable"


@dataclass(frozen=True)
class EquivalenceCase:
    description: str
    requests: dict[str, int]
    limits: dict[str, int]
    expected: bool


EQUIVALENCE_CASES = [
    EquivalenceCase(
        "R2.10 integer cpu and memory requests equal to limits",
        {"cpu": 6000, "memory": 1},
        {"cpu": 6000, "memory": 1},
        True,
    ),
    EquivalenceCase(
        "R2.10 a fractional cpu is still Guaranteed-equivalent",
        {"cpu": 1500, "memory": 1},
        {"cpu": 1500, "memory": 1},
        True,
    ),
    EquivalenceCase("R2.10 zero requests are not", {"cpu": 0, "memory": 0}, {"cpu": 0, "memory": 0}, False),
    EquivalenceCase("R2.10 cpu alone is not", {"cpu": 1000}, {"cpu": 1000}, False),
    EquivalenceCase(
        "R2.10 a request below its limit is not", {"cpu": 1000, "memory": 1}, {"cpu": 2000, "memory": 1}, False
    ),
]


@pytest.mark.parametrize("case", EQUIVALENCE_CASES, ids=lambda c: c.description)
def test_container_guaranteed_equivalence(case: EquivalenceCase) -> None:
    c = ContainerResources("c", "app", Resources(case.requests, case.limits))
    assert c.is_guaranteed_equivalent() is case.expected


def _pod(
    *containers: ContainerResources, pod_level: Resources | None = None, overhead: dict[str, int] | None = None
) -> PodResources:
    return PodResources("uid", "default", "p", containers, pod=pod_level, overhead=overhead or {})


def _cpu(name: str, kind: ContainerKind, millis: int, limit: int | None = None) -> ContainerResources:
    return ContainerResources(name, kind, Resources({"cpu": millis}, {} if limit is None else {"cpu": limit}))


@dataclass(frozen=True)
class EffectiveCase:
    description: str
    pod: PodResources
    requests: dict[str, int]
    limits: dict[str, int] = field(default_factory=dict)
    include_overhead: bool = False


EFFECTIVE_CASES = [
    EffectiveCase(
        "R3.1-R3.4 worked example A: sidecars count for later init containers only",
        _pod(
            _cpu("init1", "init", 2000),
            _cpu("s1", "sidecar", 500),
            _cpu("init2", "init", 1000),
            _cpu("a1", "app", 1500),
            _cpu("a2", "app", 500),
        ),
        {"cpu": 2500},
    ),
    EffectiveCase("R3.1 app containers are summed", _pod(_cpu("a", "app", 300), _cpu("b", "app", 700)), {"cpu": 1000}),
    EffectiveCase(
        "R3.2 sidecars add to the long-running sum",
        _pod(_cpu("s", "sidecar", 250), _cpu("a", "app", 1000)),
        {"cpu": 1250},
    ),
    EffectiveCase(
        "R3.3 a sidecar declared before a regular init container adds to its usage",
        _pod(_cpu("s", "sidecar", 500), _cpu("init", "init", 2000), _cpu("a", "app", 100)),
        {"cpu": 2500},
    ),
    EffectiveCase(
        "R3.4 a large regular init container sets the floor",
        _pod(_cpu("init", "init", 4000), _cpu("a", "app", 1000)),
        {"cpu": 4000},
    ),
    EffectiveCase(
        "R3.5 worked example B: a pod-level request overrides only its own resource",
        _pod(
            ContainerResources("a", "app", Resources({"memory": 1 << 30})),
            ContainerResources("b", "app", Resources({"cpu": 100, "memory": 2 << 30})),
            pod_level=Resources({"cpu": 4000}),
        ),
        {"cpu": 4000, "memory": 3 << 30},
    ),
    EffectiveCase(
        "R3.5 pod-level limits override per resource too",
        _pod(_cpu("a", "app", 500, limit=1000), pod_level=Resources({"cpu": 2000}, {"cpu": 2000})),
        {"cpu": 2000},
        {"cpu": 2000},
    ),
    EffectiveCase(
        "R3.5 unsupported pod-level names never override",
        _pod(
            ContainerResources("a", "app", Resources({"ephemeral-storage": 5})),
            pod_level=Resources({"cpu": 1000, "ephemeral-storage": 1}),
        ),
        {"cpu": 1000, "ephemeral-storage": 5},
    ),
    EffectiveCase(
        "R3.6 overhead adds to requests and only to non-zero limits",
        _pod(_cpu("a", "app", 500, limit=1000), overhead={"cpu": 100, "memory": 64}),
        {"cpu": 600, "memory": 64},
        {"cpu": 1100},
        include_overhead=True,
    ),
    EffectiveCase(
        "R3.7 limits aggregate with the same formula",
        _pod(
            _cpu("init", "init", 100, limit=3000),
            _cpu("s", "sidecar", 100, limit=500),
            _cpu("a", "app", 100, limit=1000),
        ),
        {"cpu": 200},
        {"cpu": 3000},
    ),
]


@pytest.mark.parametrize("case", EFFECTIVE_CASES, ids=lambda c: c.description)
def test_effective_pod_requests_and_limits(case: EffectiveCase) -> None:
    assert qos.effective_pod_requests(case.pod, include_overhead=case.include_overhead) == case.requests
    assert qos.effective_pod_limits(case.pod, include_overhead=case.include_overhead) == case.limits


kinds = st.sampled_from(["init", "sidecar", "app"])


@given(st.lists(st.tuples(kinds, st.integers(min_value=0, max_value=64_000)), max_size=8))
def test_aggregating_quantities_agrees_with_aggregating_millicores(entries: list[tuple[ContainerKind, int]]) -> None:
    as_ints = qos.aggregate((kind, {"cpu": millis}) for kind, millis in entries)
    as_quantities = qos.aggregate(
        (kind, {"cpu": quantity.parse(quantity.format_millicores(millis))}) for kind, millis in entries
    )
    assert {n: q.milli() for n, q in as_quantities.items()} == as_ints


def test_aggregated_quantity_keeps_the_format_of_the_first_addend() -> None:
    total = qos.aggregate([("app", {"memory": quantity.parse("60Gi")}), ("app", {"memory": quantity.parse("60Gi")})])
    assert str(total["memory"]) == "120Gi"
