"""Resizes the enforcer refuses as illegal before asking the engine (upstream's rules and messages)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from enforcer.service import legality
from shared.resources import ContainerResources, PodResources, Resources

GiB = 1024**3


def container(
    name: str,
    kind: str = "app",
    *,
    cpu: int = 1000,
    memory: int = GiB,
    request_cpu: int | None = None,
    extra: dict[str, int] | None = None,
) -> ContainerResources:
    requests = {"cpu": request_cpu if request_cpu is not None else cpu, "memory": memory, **(extra or {})}
    limits = {"cpu": cpu, "memory": memory, **(extra or {})}
    return ContainerResources(name=name, kind=kind, resources=Resources(requests=requests, limits=limits))  # type: ignore[arg-type]


CURRENT = PodResources(
    uid="u",
    namespace="default",
    name="p",
    containers=(container("setup", "init"), container("proxy", "sidecar"), container("app")),
    qos_class="Guaranteed",
)


def replaced(index: int, new: ContainerResources) -> PodResources:
    containers = list(CURRENT.containers)
    containers[index] = new
    return dataclasses.replace(CURRENT, containers=tuple(containers))


@dataclass(frozen=True)
class Case:
    description: str
    desired: PodResources
    rules: tuple[str, ...]


CASES = [
    Case("more cpu for the app is legal", replaced(2, container("app", cpu=2000)), ()),
    Case("more memory for a sidecar is legal", replaced(1, container("proxy", "sidecar", memory=2 * GiB)), ()),
    Case("a regular init container is immutable", replaced(0, container("setup", "init", cpu=2000)), ("L5",)),
    Case("a renamed container", replaced(2, container("main")), ("L6",)),
    Case("a container turned sidecar", replaced(0, container("setup", "sidecar")), ("L4",)),
    Case("hugepages are immutable", replaced(2, container("app", extra={"hugepages-2Mi": 2 * 1024**2})), ("L4",)),
    Case("guaranteed to burstable", replaced(2, container("app", cpu=2000, request_cpu=1000)), ("L2",)),
    Case(
        "a removed limit",
        replaced(2, ContainerResources("app", "app", Resources(requests={"cpu": 1000, "memory": GiB}))),
        ("L3", "L2"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.description)
def test_resize_rules(case: Case) -> None:
    found = legality.resize_violations(CURRENT, case.desired, pod_level_resources=True)
    assert tuple(v.rule for v in found) == case.rules


def test_the_qos_message_is_upstreams() -> None:
    found = legality.resize_violations(CURRENT, CASES[6].desired, pod_level_resources=True)
    assert found[0].message == "Pod QOS Class may not change as a result of resizing"


def test_a_renamed_container_is_named_by_its_index_as_the_api_server_does() -> None:
    found = legality.resize_violations(CURRENT, replaced(2, container("main")), pod_level_resources=True)
    assert [(v.field, v.message) for v in found] == [
        ("spec.containers[0].name", "containers may not be renamed or reordered on resize")
    ]
