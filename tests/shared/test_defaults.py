"""The API server's resource defaulting (R5.1-R5.5), on manifests and on the integer view."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pod_dicts import container, guaranteed, pod, resources

from shared import defaults, qos, quantity
from shared.pod import parse_pod
from shared.resources import ContainerKind, ContainerResources, PodResources, Resources

GI = 1 << 30


@dataclass(frozen=True)
class DefaultsCase:
    description: str
    raw: dict[str, Any]
    pod_requests: dict[str, int] | None
    pod_limits: dict[str, int] | None
    container_requests: dict[str, dict[str, int]] | None = None
    gate: bool = True


CASES = [
    DefaultsCase(
        "R5.1 a container request missing for a limited resource becomes the limit",
        pod([container("a", {"cpu": "1"}, {"cpu": "2", "memory": "1Gi"})]),
        None,
        None,
        {"a": {"cpu": 1000, "memory": GI}},
    ),
    DefaultsCase(
        "R5.1 init containers and sidecars are defaulted too",
        pod(
            [container("a")],
            init=[container("i", limits={"cpu": "1"}), container("s", limits={"memory": "1Gi"}, sidecar=True)],
        ),
        None,
        None,
        {"i": {"cpu": 1000}, "s": {"memory": GI}, "a": {}},
    ),
    DefaultsCase(
        "R5.2 worked example C: pod requests become the container aggregate",
        pod(
            [guaranteed("db", "6", "12Gi")],
            init=[container("s1", sidecar=True), container("s2", sidecar=True)],
            pod_resources=resources(limits={"cpu": "8", "memory": "16Gi"}),
        ),
        {"cpu": 6000, "memory": 12 * GI},
        {"cpu": 8000, "memory": 16 * GI},
    ),
    DefaultsCase(
        "R5.2 without container requests the pod request becomes the pod limit",
        pod([container("a")], pod_resources=resources(limits={"cpu": "4", "memory": "4Gi"})),
        {"cpu": 4000, "memory": 4 * GI},
        {"cpu": 4000, "memory": 4 * GI},
    ),
    DefaultsCase(
        "R5.2 an explicit pod request is kept",
        pod([guaranteed("a", "1", "1Gi")], pod_resources=resources({"cpu": "3"}, {"cpu": "4", "memory": "4Gi"})),
        {"cpu": 3000, "memory": GI},
        {"cpu": 4000, "memory": 4 * GI},
    ),
    DefaultsCase(
        "R5.2 the aggregate follows the init container formula",
        pod(
            [container("a", {"cpu": "1"})],
            init=[container("setup", {"cpu": "3"})],
            pod_resources=resources(limits={"cpu": "4"}),
        ),
        {"cpu": 3000},
        {"cpu": 4000},
    ),
    DefaultsCase(
        "R5.3 a hugepages limit set by containers only becomes the pod limit, then the pod request",
        pod(
            [container("a", {"cpu": "1", "hugepages-2Mi": "1Gi"}, {"cpu": "1", "hugepages-2Mi": "1Gi"})],
            pod_resources=resources(limits={"cpu": "2"}),
        ),
        {"cpu": 1000, "hugepages-2Mi": GI},
        {"cpu": 2000, "hugepages-2Mi": GI},
    ),
    DefaultsCase(
        "R5.3 no hugepages limit is derived when the pod requests that page size",
        pod(
            [container("a", limits={"cpu": "1", "hugepages-2Mi": "1Gi"})],
            pod_resources=resources({"hugepages-2Mi": "2Gi"}, {"cpu": "2"}),
        ),
        {"cpu": 1000, "hugepages-2Mi": 2 * GI},
        {"cpu": 2000},
    ),
    DefaultsCase(
        "R5.4 requests-only pod-level resources get a limit every container sets",
        pod(
            [container("a", limits={"cpu": "1"}), container("b", {"memory": "1Gi"}, {"cpu": "2"})],
            pod_resources=resources({"cpu": "3", "memory": "2Gi"}),
        ),
        {"cpu": 3000, "memory": 2 * GI},
        {"cpu": 3000},
    ),
    DefaultsCase(
        "R5.4 one container without a limit leaves the pod unbounded",
        pod([container("a", limits={"cpu": "1"}), container("b")], pod_resources=resources({"cpu": "3"})),
        {"cpu": 3000},
        {},
    ),
    DefaultsCase(
        "R5.4 a derived pod limit makes the next read default the pod request too (upstream re-defaults at decode)",
        pod([container("a", {"cpu": "500m"}, {"memory": "1Gi"})], pod_resources=resources({"memory": "1Gi"})),
        {"memory": GI, "cpu": 500},
        {"memory": GI},
    ),
    DefaultsCase(
        "R5.5 pod-level requests alone do not default other pod requests",
        pod([container("a", {"memory": "1Gi"})], pod_resources=resources({"cpu": "4"})),
        {"cpu": 4000},
        {},
    ),
    DefaultsCase(
        "R5.2 the PodLevelResources gate off means no pod-level defaulting, and spec.resources is dropped",
        pod([container("a", {"cpu": "1"})], pod_resources=resources(limits={"cpu": "2"})),
        None,
        None,
        gate=False,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.description)
def test_defaulting(case: DefaultsCase) -> None:
    view = parse_pod(case.raw).to_resources(pod_level_resources=case.gate)
    if case.pod_requests is None:
        assert view.pod is None
    else:
        assert view.pod is not None
        assert dict(view.pod.requests) == case.pod_requests
        assert dict(view.pod.limits) == case.pod_limits
    if case.container_requests is not None:
        assert {c.name: dict(c.resources.requests) for c in view.containers} == case.container_requests


def test_worked_example_c_leaves_the_pod_burstable() -> None:
    raw = CASES[2].raw
    assert qos.compute_qos_class(parse_pod(raw).to_resources()) == "Burstable"


def test_defaulted_pod_request_keeps_the_quantity_format_of_the_aggregate() -> None:
    raw = pod(
        [container("a", limits={"memory": "60Gi"}), container("b", limits={"memory": "60Gi"})],
        pod_resources=resources(limits={"memory": "200Gi"}),
    )
    _, stanza = parse_pod(raw).requirement_quantities()
    assert stanza is not None
    assert str(stanza.requests["memory"]) == "120Gi"


# -- the integer view and the manifest view agree -------------------------------

amounts = st.one_of(st.none(), st.integers(min_value=0, max_value=8000))


def _texts(values: dict[str, int]) -> dict[str, str]:
    """Engine integers back as manifest text: cpu millicores, memory bytes."""
    return {n: quantity.format_millicores(v) if n == "cpu" else str(v) for n, v in values.items()}


@st.composite
def _cpu_memory(draw: st.DrawFn) -> dict[str, int]:
    return {n: v for n in ("cpu", "memory") if (v := draw(amounts)) is not None}


@st.composite
def pods(draw: st.DrawFn) -> tuple[dict[str, Any], PodResources]:
    """A random pod, as a manifest and as the undefaulted integer view of the same numbers."""
    raw_containers: list[dict[str, Any]] = []
    raw_init: list[dict[str, Any]] = []
    views: list[ContainerResources] = []
    kinds: list[ContainerKind] = draw(st.lists(st.sampled_from(["init", "sidecar", "app"]), min_size=1, max_size=5))
    kinds = [k for k in kinds if k != "app"] + ["app"] * max(1, kinds.count("app"))
    for i, kind in enumerate(kinds):
        req, lim = draw(_cpu_memory()), draw(_cpu_memory())
        c = container(f"c{i}", _texts(req), _texts(lim), sidecar=kind == "sidecar")
        (raw_containers if kind == "app" else raw_init).append(c)
        views.append(ContainerResources(f"c{i}", kind, Resources(req, lim)))
    pod_level = draw(st.one_of(st.none(), st.tuples(_cpu_memory(), _cpu_memory())))
    stanza = None if pod_level is None else resources(_texts(pod_level[0]), _texts(pod_level[1]))
    raw = pod(raw_containers, init=raw_init, pod_resources=stanza)
    view = PodResources("", "default", "p", tuple(views), pod=None if pod_level is None else Resources(*pod_level))
    return raw, view


@settings(deadline=None)  # parses a pod per example; a loaded CI box must not flake
@given(pods())
def test_integer_defaulting_equals_manifest_defaulting(sample: tuple[dict[str, Any], PodResources]) -> None:
    raw, view = sample
    assert defaults.apply_defaults(view) == parse_pod(raw).to_resources()


@settings(deadline=None)  # parses a pod per example; a loaded CI box must not flake
@given(pods())
def test_defaulting_is_idempotent(sample: tuple[dict[str, Any], PodResources]) -> None:
    _, view = sample
    once = defaults.apply_defaults(view)
    assert defaults.apply_defaults(once) == once
