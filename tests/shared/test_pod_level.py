"""KEP-5526 rules in one place (shared.pod_level): eligibility, sizes and the empty-pool rule V1-V6.

The tables follow pod-level-resource-managers.md §5; the property test pins the pool rule against a
literal restatement of the kubelet's ``validatePodScopeResources`` loop (one resource).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import pod_level
from shared.resources import CPU, MEMORY, ContainerKind, ContainerResources, PodResources, Resources


def ctr(name: str, kind: ContainerKind = "app", *, cpu: int = 0, cpu_limit: int | None = None) -> ContainerResources:
    requests = {CPU: cpu, MEMORY: 1 << 30} if cpu else {}
    limits = {CPU: cpu if cpu_limit is None else cpu_limit, MEMORY: 1 << 30} if cpu else {}
    return ContainerResources(name, kind, Resources(requests=requests, limits=limits))


def pod(*containers: ContainerResources, pod_cpu: int | None = None) -> PodResources:
    level = None if pod_cpu is None else Resources(requests={CPU: pod_cpu}, limits={CPU: pod_cpu})
    return PodResources(uid="ns/p", namespace="ns", name="p", containers=containers, pod=level)


@pytest.mark.parametrize(
    ("pod_cpu", "enabled", "applies", "never_pinned"),
    [
        (None, True, False, False),  # no spec.resources: the classic managers
        (None, False, False, False),
        (4000, True, True, False),  # R1.1
        (4000, False, False, True),  # R1.5: pod-level resources on a node without the managers
    ],
)
def test_the_gate_predicate(pod_cpu: int | None, enabled: bool, applies: bool, never_pinned: bool) -> None:
    p = pod(ctr("a", cpu=2000), pod_cpu=pod_cpu)
    assert pod_level.managers_apply(p, managers_enabled=enabled) is applies
    assert pod_level.never_pinned(p, managers_enabled=enabled) is never_pinned


@pytest.mark.parametrize(
    ("container", "pod_cpu", "gate", "expected"),
    [
        (ctr("a", cpu=2000), None, True, 2),
        (ctr("a", cpu=2500), None, True, 0),  # fractional: shared
        (ctr("a"), 4000, True, 0),  # no resources of its own: the pod shared pool (R2.2)
        (ctr("a", cpu=2000, cpu_limit=3000), 4000, True, 0),  # not Guaranteed-equivalent
        (ctr("a", cpu=2000, cpu_limit=3000), 4000, False, 2),  # gate off: upstream reads the request only
        (ctr("a", cpu=3000), 4000, True, 3),
    ],
)
def test_who_is_exclusive(container: ContainerResources, pod_cpu: int | None, gate: bool, expected: int) -> None:
    p = pod(container, pod_cpu=pod_cpu)
    assert pod_level.container_exclusive_cpus(p, container, pod_level_resource_managers=gate) == expected


@pytest.mark.parametrize(("pod_cpu", "expected"), [(None, 0), (4000, 4), (4500, 0), (0, 0)])
def test_the_pod_cpu_budget_is_whole_cpus_only(pod_cpu: int | None, expected: int) -> None:
    assert pod_level.pod_cpu_budget(pod(ctr("a"), pod_cpu=pod_cpu)) == expected


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ([("app", 2), ("app", 3)], 5),
        ([("init", 6), ("app", 2)], 6),  # the largest init container wins
        ([("sidecar", 1), ("init", 4), ("app", 2)], 5),  # sidecars started before an init container add to it
        ([("init", 4), ("sidecar", 1), ("app", 2)], 4),  # ...and not when started after it
    ],
)
def test_the_aggregate_without_a_budget(counts: list[tuple[ContainerKind, int]], expected: int) -> None:
    assert pod_level.aggregate_exclusive_cpus(counts) == expected


M = pod_level.PoolMember


@dataclass(frozen=True)
class PoolCase:
    description: str
    budget: int
    members: tuple[pod_level.PoolMember, ...]
    rule: str | None
    pool: int = 0
    unused: int = 0


POOL_CASES = [
    PoolCase("exclusive and shared containers fit", 4, (M("a", "app", {CPU: 2}), M("b", "app", None)), None, 2),
    PoolCase(
        "V1 an exclusive init container larger than what the sidecars leave",
        4,
        (M("s", "sidecar", {CPU: 2}), M("i", "init", {CPU: 3}), M("a", "app", None)),
        "V1",
        2,
    ),
    PoolCase(
        "V2 a shared init container after sidecars that take everything",
        2,
        (M("s", "sidecar", {CPU: 2}), M("i", "init", None), M("a", "app", None)),
        "V2",
    ),
    PoolCase("V5 exclusive slices take the whole budget", 4, (M("a", "app", {CPU: 4}), M("b", "app", None)), "V5"),
    PoolCase("V6 budget left over with nobody to share it", 4, (M("a", "app", {CPU: 3}),), None, 1, 1),
    PoolCase("an init container is not long-running", 4, (M("i", "init", {CPU: 4}), M("a", "app", None)), None, 4),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=[c.description for c in POOL_CASES])
def test_the_empty_pool_rule(case: PoolCase) -> None:
    budget = {CPU: case.budget}
    check = pod_level.check_pod_shared_pool(budget, case.members)
    assert (check.violation.rule if check.violation else None) == case.rule
    assert check.pool_size(budget, CPU) == case.pool
    assert check.unused(budget, CPU) == case.unused


def test_a_violation_names_the_container_and_the_amounts() -> None:
    members = (M("s", "sidecar", {MEMORY: 2}), M("i", "init", {MEMORY: 3}))
    check = pod_level.check_pod_shared_pool({MEMORY: 4}, members)
    assert check.violation == pod_level.EmptyPoolViolation("V1", MEMORY, "i", 3, 2)


def kubelet_validate(total: int, members: list[tuple[ContainerKind, int]]) -> str | None:
    """``validatePodScopeResources`` for one resource, as the Go loop reads (inits first, then apps)."""
    has_shared = False
    exclusive = 0
    for kind, count in [m for m in members if m[0] != "app"]:
        if kind == "init":
            if count > 0:
                if count > total - exclusive:
                    return "V1"
            elif exclusive >= total:
                return "V2"
            continue
        if count == 0:
            has_shared = True
            continue
        exclusive += count
    for _, count in [m for m in members if m[0] == "app"]:
        if count == 0:
            has_shared = True
            continue
        exclusive += count
    if has_shared and exclusive >= total:
        return "V5"
    return None


@given(
    st.integers(0, 8),
    st.lists(st.tuples(st.sampled_from(["init", "sidecar"]), st.integers(0, 4)), max_size=4),
    st.lists(st.tuples(st.just("app"), st.integers(0, 4)), min_size=1, max_size=4),
)
def test_the_pool_rule_is_the_kubelets(
    total: int, inits: list[tuple[ContainerKind, int]], apps: list[tuple[ContainerKind, int]]
) -> None:
    members = [M(f"c{i}", kind, {CPU: count} if count else None) for i, (kind, count) in enumerate([*inits, *apps])]
    check = pod_level.check_pod_shared_pool({CPU: total}, members)
    assert (check.violation.rule if check.violation else None) == kubelet_validate(total, [*inits, *apps])
