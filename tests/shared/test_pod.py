"""Reading Pod objects: recorded kubectl output, error paths, and the defaulted integer view."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import pytest
from pod_dicts import PODS_DIR, container, pod, resources
from pydantic import BeforeValidator, TypeAdapter, ValidationError

from shared import pod as pod_model
from shared.errors import PodModelError, QuantityError
from shared.pod import Pod, parse_pod
from shared.resources import ContainerResources, PodResources, Resources

GI = 1 << 30
FIXTURES = sorted(p.stem for p in PODS_DIR.glob("*.json"))


def test_every_fixture_has_its_yaml_source() -> None:
    assert FIXTURES
    assert sorted(p.stem for p in (PODS_DIR / "src").glob("*.yaml")) == FIXTURES


@pytest.mark.parametrize("name", FIXTURES)
def test_every_recorded_fixture_parses_and_converts(name: str, fixture_pod: Callable[[str], Pod]) -> None:
    p = fixture_pod(name)
    view = p.to_resources()
    assert [c.name for c in view.containers] == [c.name for c in p.spec.init_containers + p.spec.containers]


def test_seed_one_reads_as_the_engine_expects(fixture_pod: Callable[[str], Pod]) -> None:
    view = fixture_pod("tightly-coupled-database").to_resources()
    none = Resources({}, {})
    assert view == PodResources(
        uid="",
        namespace="default",
        name="tightly-coupled-database",
        containers=(
            ContainerResources("metrics-exporter", "sidecar", none),
            ContainerResources("backup-agent", "sidecar", none),
            ContainerResources(
                "database", "app", Resources({"cpu": 6000, "memory": 12 * GI}, {"cpu": 6000, "memory": 12 * GI})
            ),
        ),
        pod=Resources({"cpu": 8000, "memory": 16 * GI}, {"cpu": 8000, "memory": 16 * GI}),
    )


def test_generate_name_pod_has_no_name_yet(fixture_pod: Callable[[str], Pod]) -> None:
    p = fixture_pod("generate-name-train")
    assert (p.metadata.name, p.metadata.generate_name, p.namespace) == ("", "train-", "ml")
    assert p.metadata.annotations == {"example.com/team": "vision"}
    assert p.to_resources().priority == 1000


def test_yaml_numbers_are_read_as_quantities(pod_json: Callable[[str], dict[str, Any]]) -> None:
    raw = pod_json("burstable-web")
    assert raw["spec"]["containers"][0]["resources"]["limits"]["cpu"] == 1  # kubectl kept the YAML number
    web = parse_pod(raw).to_resources().container("web")
    assert web.resources.limits == {"cpu": 1000, "memory": 512 * (1 << 20)}


def test_resize_policy_and_sidecars_are_read(fixture_pod: Callable[[str], Pod]) -> None:
    web = fixture_pod("burstable-web").spec.containers[0]
    assert [(p.resource_name, p.restart_policy) for p in web.resize_policy] == [
        ("cpu", "NotRequired"),
        ("memory", "RestartContainer"),
    ]
    router = fixture_pod("init-sidecar-hugepages")
    assert [c.is_sidecar for c in router.spec.init_containers] == [False, True]
    assert [kind for kind, _, _ in router.containers_with_paths()] == ["init", "sidecar", "app"]


def test_raw_object_is_kept_as_a_private_copy() -> None:
    raw = pod([container("a", image="app:v1", command=["run"])])
    p = parse_pod(raw)
    raw["spec"]["containers"][0]["command"] = ["changed"]
    assert p.raw["spec"]["containers"][0]["command"] == ["run"]


def test_the_raw_object_travels_with_copies_and_is_not_part_of_equality() -> None:
    raw = pod([container("a", image="app:v1")], volumes=[{"name": "kube-api-access-x7k2p"}])
    other = pod([container("a", image="app:v1")], volumes=[{"name": "kube-api-access-9qz4d"}])
    p, q = parse_pod(raw), parse_pod(other, copy_raw=False)
    assert p == q and p.raw == raw and q.raw is other  # what the models read is equal; the objects are not
    assert p.model_copy().raw == raw and p.model_copy(deep=True).raw == raw
    built = Pod.model_validate(raw)  # not through parse_pod: no object behind it
    assert built.raw == {} and built == p


def test_unknown_fields_and_nulls_are_tolerated() -> None:
    raw = pod([container("a", futureField={"x": 1})], dnsPolicy="ClusterFirst")
    raw["metadata"]["annotations"] = None
    raw["spec"]["initContainers"] = None
    raw["spec"]["containers"][0]["resources"] = {"requests": None, "limits": {"cpu": "1"}}
    p = parse_pod(raw)
    assert p.metadata.annotations == {}
    assert p.spec.init_containers == []
    assert p.to_resources().container("a").resources.requests == {"cpu": 1000}


def test_status_is_read(fixture_pod: Callable[[str], Pod]) -> None:
    raw = pod(
        [container("a", {"cpu": "1"})],
        status={
            "qosClass": "Burstable",
            "containerStatuses": [
                {
                    "name": "a",
                    "state": {"running": {}},
                    "allocatedResources": {"cpu": "1"},
                    "resources": {"requests": {"cpu": "1"}},
                }
            ],
            "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}],
            "resources": {"requests": {"cpu": "1"}},
            "allocatedResources": {"cpu": "1"},
        },
    )
    status = parse_pod(raw).status
    assert status.qos_class == "Burstable"
    assert status.container_statuses[0].state.running == {}
    assert status.container_statuses[0].allocated_resources == {"cpu": "1"}
    assert status.conditions[0].reason == "Deferred"
    assert status.allocated_resources == {"cpu": "1"}


@dataclass(frozen=True)
class BadPodCase:
    description: str
    raw: object
    field: str | None
    fragment: str


def _with(raw: dict[str, Any], path: tuple[str | int, ...], value: object) -> dict[str, Any]:
    node: Any = raw
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return raw


BAD_PODS = [
    BadPodCase("a pod must be an object", ["not", "a", "pod"], None, "JSON object"),
    BadPodCase("spec.containers is required", {"spec": {}}, "spec.containers", "Field required"),
    BadPodCase(
        "a container needs a name",
        pod([container("a"), {"image": "x"}]),
        "spec.containers[1].name",
        "Field required",
    ),
    BadPodCase(
        "a boolean is not a quantity",
        pod([container("a", limits={"cpu": True})]),
        "spec.containers[0].resources.limits[cpu]",
        "quantity must be a string or a number",
    ),
    BadPodCase(
        "a list is not a quantity",
        pod([container("a")], init=[container("i", {"memory": ["1Gi"]})]),
        "spec.initContainers[0].resources.requests[memory]",
        "valid string",
    ),
    BadPodCase(
        "annotation values are strings",
        pod([container("a")], annotations={"example.com/x": 1}),  # type: ignore[dict-item]
        "metadata.annotations[example.com/x]",
        "valid string",
    ),
    BadPodCase(
        "an unknown QoS class is rejected",
        pod([container("a")], status={"qosClass": "Platinum"}),
        "status.qosClass",
        "Guaranteed",
    ),
    BadPodCase(
        "allocated resources are quantities",
        pod([container("a")], status={"containerStatuses": [{"name": "a", "allocatedResources": {"cpu": False}}]}),
        "status.containerStatuses[0].allocatedResources[cpu]",
        "quantity",
    ),
]


@pytest.mark.parametrize("case", BAD_PODS, ids=lambda c: c.description)
def test_bad_pod_error_names_the_kubernetes_field_path(case: BadPodCase) -> None:
    with pytest.raises(PodModelError) as err:
        parse_pod(case.raw)
    assert err.value.field == case.field
    assert case.fragment in str(err.value)
    if case.field:
        assert str(err.value).startswith(case.field + ": ")


def test_every_bad_field_is_listed() -> None:
    with pytest.raises(PodModelError) as err:
        parse_pod(pod([{"image": "x"}, {"image": "y"}]))
    assert "spec.containers[0].name" in str(err.value) and "spec.containers[1].name" in str(err.value)


@dataclass(frozen=True)
class BadQuantityCase:
    description: str
    raw: dict[str, Any]
    field: str


BAD_QUANTITIES = [
    BadQuantityCase(
        "app container request",
        pod([container("a", {"cpu": "1x"})]),
        "spec.containers[0].resources.requests[cpu]",
    ),
    BadQuantityCase(
        "init container limit",
        pod([container("a")], init=[container("i", limits={"memory": "lots"})]),
        "spec.initContainers[0].resources.limits[memory]",
    ),
    BadQuantityCase(
        "pod-level request",
        pod([container("a")], pod_resources=resources({"cpu": "two"})),
        "spec.resources.requests[cpu]",
    ),
    BadQuantityCase("overhead", pod([container("a")], overhead={"cpu": "?"}), "spec.overhead[cpu]"),
]


@pytest.mark.parametrize("case", BAD_QUANTITIES, ids=lambda c: c.description)
def test_unparsable_quantity_error_names_the_field(case: BadQuantityCase) -> None:
    p = parse_pod(case.raw)
    with pytest.raises(QuantityError) as err:
        p.to_resources()
    assert err.value.field == case.field
    assert str(err.value).startswith(case.field + ": quantities must match")


def test_namespace_defaults_and_mirror_and_windows_are_recognised() -> None:
    raw = pod([container("a")], annotations={"kubernetes.io/config.mirror": "abc"}, os="windows")
    raw["metadata"].pop("namespace")
    p = parse_pod(raw)
    assert (p.namespace, p.is_mirror, p.is_windows) == ("default", True, True)
    assert not parse_pod(pod([container("a")], os="linux")).is_windows


def test_pod_level_resources_are_dropped_with_the_gate_off(fixture_pod: Callable[[str], Pod]) -> None:
    assert fixture_pod("ml-workload").to_resources(pod_level_resources=False).pod is None


def test_status_qos_class_and_overhead_reach_the_engine_view() -> None:
    raw = pod([container("a", {"cpu": "1"})], overhead={"cpu": "250m"}, status={"qosClass": "Burstable"})
    view = parse_pod(raw).to_resources()
    assert (view.qos_class, dict(view.overhead)) == ("Burstable", {"cpu": 250})


# -- spec_json: the plan memo's key ---------------------------------------------------------------------------------

_DB = {"cpu": "2", "memory": "4Gi"}


@pytest.mark.parametrize(
    ("description", "left", "right"),
    [
        (
            "unset pod resources vs an empty stanza",
            pod([container("a", _DB, _DB)]),
            pod([container("a", _DB, _DB)], pod_resources={}),
        ),
        (
            "no claims vs an empty claims list",
            pod([container("a", _DB, _DB)], pod_resources={}),
            pod([container("a", _DB, _DB)], pod_resources={"claims": []}),
        ),
        ("no priority vs priority 0", pod([container("a", _DB, _DB)]), pod([container("a", _DB, _DB)], priority=0)),
        ("no os vs an os without a name", pod([container("a", _DB, _DB)]), pod([container("a", _DB, _DB)], os="")),
        (
            "an app container vs a sidecar",
            pod([container("a", _DB, _DB)], init=[container("s")]),
            pod([container("a", _DB, _DB)], init=[container("s", sidecar=True)]),
        ),
        (
            "a default restart policy vs Never",
            pod([container("a", _DB, _DB)]),
            pod([container("a", _DB, _DB)], restart_policy="Never"),
        ),
        (
            "2 cpus vs 2000m",
            pod([container("a", _DB, _DB)]),
            pod([container("a", {"cpu": "2000m", "memory": "4Gi"}, _DB)]),
        ),
    ],
)
def test_different_typed_specs_have_different_spec_json(
    description: str, left: dict[str, Any], right: dict[str, Any]
) -> None:
    first, second = parse_pod(left), parse_pod(right)
    assert first.spec != second.spec
    assert first.spec_json() != second.spec_json()


@pytest.mark.parametrize(
    ("description", "left", "right"),
    [
        (
            "fields the model does not read",
            pod([container("a", _DB, _DB)]),
            pod([container("a", _DB, _DB, env=[{"name": "X"}])], volumes=[{"name": "token-x7k2"}]),
        ),
        (
            "null lists and maps read as empty",
            pod([container("a", _DB, _DB)]),
            pod([container("a", _DB, _DB, resizePolicy=None)], initContainers=None, overhead=None),
        ),
        (
            "an unset restart policy is Always",
            pod([container("a", _DB, _DB)]),
            pod([container("a", _DB, _DB)], restart_policy="Always"),
        ),
        (
            "YAML numbers read as quantities",
            pod([container("a", {"cpu": 2}, None)]),
            pod([container("a", {"cpu": "2"}, None)]),
        ),
    ],
)
def test_equal_typed_specs_have_equal_spec_json(description: str, left: dict[str, Any], right: dict[str, Any]) -> None:
    first, second = parse_pod(left), parse_pod(right)
    assert first.spec == second.spec
    assert first.spec_json() == second.spec_json()


def test_spec_json_is_encoded_once_per_pod_and_anew_for_a_copy() -> None:
    parsed = parse_pod(pod([container("a", _DB, _DB)]))
    assert parsed.spec_json() is parsed.spec_json()
    copied = parsed.model_copy(update={"spec": parsed.spec.model_copy(update={"priority": 7})})
    assert '"priority":7' in copied.spec_json()
    assert '"priority"' not in parsed.spec_json()


# What ResourceList was before its map of strings skipped the per-quantity Python calls: every answer must match.
_RESOURCE_LIST_AS_BEFORE: TypeAdapter[dict[str, str]] = TypeAdapter(
    Annotated[dict[str, pod_model.QuantityText], BeforeValidator(lambda v: {} if v is None else v)]
)


class _Text(str):
    pass


@pytest.mark.parametrize(
    "value",
    [
        None,
        {},
        {"cpu": "2", "memory": "4Gi"},
        {"cpu": 2, "memory": "4Gi"},
        {"cpu": 0.5},
        {"cpu": True},
        {"cpu": None},
        {"memory": ["1Gi"]},
        {"cpu": _Text("2")},
        {1: "2"},
        {_Text("cpu"): "2"},
        "2",
        ["cpu"],
        {"cpu": "2", "memory": {"x": 1}},
    ],
    ids=repr,
)
def test_resource_lists_read_as_the_per_quantity_validation_reads_them(value: object) -> None:
    adapter: TypeAdapter[dict[str, str]] = TypeAdapter(pod_model.ResourceList)
    try:
        expected: object = _RESOURCE_LIST_AS_BEFORE.validate_python(value)
    except ValidationError as err:
        with pytest.raises(ValidationError) as got:
            adapter.validate_python(value)
        assert got.value.errors(include_context=False) == err.errors(include_context=False)  # type, loc, msg, input
    else:
        got_value = adapter.validate_python(value)
        assert got_value == expected
        assert isinstance(got_value, dict) and isinstance(expected, dict)
        assert [(type(k), type(v)) for k, v in got_value.items()] == [(type(k), type(v)) for k, v in expected.items()]
        assert got_value is not value  # a copy: the model never shares the request's map
