"""The resource plan: one table of pods (recorded fixtures and KEP-5526 examples) with the expected plan."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from webhook_testkit import PODS_DIR

from shared import pod as pod_model
from shared.resources import ContainerKind, ContainerResources, PodResources, Resources
from webhook import plan, wording

Gi = 1024**3
NUMA_16_64 = plan.NUMANodeSize(cpus=16, memory_bytes=64 * Gi)


def fixture(name: str) -> PodResources:
    return pod_model.parse_pod(json.loads((PODS_DIR / f"{name}.json").read_text())).to_resources()


def exact(cpu_millis: int, memory: int) -> Resources:
    """Requests equal limits: a Guaranteed-equivalent stanza."""
    values = {"cpu": cpu_millis, "memory": memory}
    return Resources(requests=values, limits=dict(values))


def container(name: str, resources: Resources | None = None, kind: ContainerKind = "app") -> ContainerResources:
    return ContainerResources(name=name, kind=kind, resources=resources or Resources())


def pod(*containers: ContainerResources, budget: Resources | None = None) -> PodResources:
    return PodResources(uid="", namespace="default", name="p", containers=containers, pod=budget)


@dataclass(frozen=True)
class Case:
    description: str
    pod: PodResources
    policy: plan.PlanPolicy
    # container -> (cpu assignment, exclusive CPUs, memory assignment)
    containers: dict[str, tuple[str, int, str]]
    pool: tuple[int, int] | None = None  # (cpus, memory bytes)
    alignment: tuple[int, int, str | None, int | None] | None = None  # (cpus, memory, container, NUMA nodes)
    warnings: tuple[str, ...] = field(default_factory=tuple)


POD_SCOPE = plan.PlanPolicy(scope="pod", numa_node=NUMA_16_64)
CONTAINER_SCOPE = plan.PlanPolicy(scope="container", numa_node=NUMA_16_64)

CASES = [
    Case(
        "seed 1, pod scope: the database is exclusive, both sidecars share the 2-CPU pod pool",
        fixture("tightly-coupled-database"),
        POD_SCOPE,
        {
            "metrics-exporter": ("pod_shared", 0, "pod_shared"),
            "backup-agent": ("pod_shared", 0, "pod_shared"),
            "database": ("pod_exclusive", 6, "pod_exclusive"),
        },
        pool=(2, 4 * Gi),
        alignment=(8, 16 * Gi, None, 1),
    ),
    Case(
        "seed 2, container scope: only ml-training is exclusive, from the node; no pod pool",
        fixture("ml-workload"),
        CONTAINER_SCOPE,
        {
            "service-mesh-sidecar": ("node_shared", 0, "node_shared"),
            "ml-training": ("node_exclusive", 3, "node_exclusive"),
        },
        alignment=(3, 6 * Gi, "ml-training", 1),
    ),
    Case(
        "seed 2 under pod scope: the sidecar shares what ml-training leaves of the budget",
        fixture("ml-workload"),
        POD_SCOPE,
        {
            "service-mesh-sidecar": ("pod_shared", 0, "pod_shared"),
            "ml-training": ("pod_exclusive", 3, "pod_exclusive"),
        },
        pool=(1, 2 * Gi),
        alignment=(4, 8 * Gi, None, 1),
    ),
    Case(
        "classic Guaranteed pod: whole CPUs are exclusive from the node, memory pinned",
        fixture("generate-name-train"),
        POD_SCOPE,
        {"trainer": ("node_exclusive", 2, "node_exclusive")},
        alignment=(2, 4 * Gi, None, 1),
    ),
    Case(
        "Burstable pod: nothing is pinned and nothing is aligned",
        fixture("burstable-web"),
        POD_SCOPE,
        {"web": ("node_shared", 0, "node_shared")},
    ),
    Case(
        "BestEffort pod: nothing is pinned",
        fixture("besteffort-batch"),
        POD_SCOPE,
        {"job": ("node_shared", 0, "node_shared")},
    ),
    Case(
        "init container reuse, a fractional sidecar and unused memory left in the budget",
        fixture("init-sidecar-hugepages"),
        POD_SCOPE,
        {
            "setup": ("pod_exclusive", 2, "pod_exclusive"),
            "telemetry": ("pod_shared", 0, "pod_exclusive"),
            "router": ("pod_exclusive", 3, "pod_exclusive"),
        },
        pool=(1, 1536 * 1024**2),
        alignment=(4, 4 * Gi, None, 1),
        warnings=(
            "1536Mi of the 4Gi pod memory stay reserved and unused: no container shares them",
            "only whole CPUs are exclusive: telemetry (500m) will run in the pod shared pool",
        ),
    ),
    Case(
        "KEP example C: exclusive slices take the whole budget, the shared container gets nothing",
        pod(
            container("c1", exact(3000, Gi)),
            container("c2", exact(2000, Gi)),
            container("c3"),
            budget=exact(5000, 4 * Gi),
        ),
        POD_SCOPE,
        {
            "c1": ("pod_exclusive", 3, "pod_exclusive"),
            "c2": ("pod_exclusive", 2, "pod_exclusive"),
            "c3": ("pod_shared", 0, "pod_shared"),
        },
        pool=(0, 2 * Gi),
        alignment=(5, 4 * Gi, None, 1),
        warnings=("exclusive containers take all 5 pod CPUs, none is left for c3: nodes will refuse the pod",),
    ),
    Case(
        "V6: budget left over with no container to share it",
        pod(container("db", exact(6000, 12 * Gi)), budget=exact(8000, 16 * Gi)),
        POD_SCOPE,
        {"db": ("pod_exclusive", 6, "pod_exclusive")},
        pool=(2, 4 * Gi),
        alignment=(8, 16 * Gi, None, 1),
        warnings=(
            "2 of the 8 pod CPUs stay reserved and unused: no container shares them",
            "4Gi of the 16Gi pod memory stay reserved and unused: no container shares them",
        ),
    ),
    Case(
        "V1: an exclusive init container larger than what the sidecars leave",
        pod(
            container("proxy", exact(2000, Gi), kind="sidecar"),
            container("warmup", exact(3000, Gi), kind="init"),
            container("app"),
            budget=exact(4000, 4 * Gi),
        ),
        POD_SCOPE,
        {
            "proxy": ("pod_exclusive", 2, "pod_exclusive"),
            "warmup": ("pod_exclusive", 3, "pod_exclusive"),
            "app": ("pod_shared", 0, "pod_shared"),
        },
        pool=(2, 3 * Gi),
        alignment=(4, 4 * Gi, None, 1),
        warnings=(
            "init container warmup asks 3 exclusive cpus but only 2 remain after sidecars: nodes will refuse the pod",
            "sidecar proxy pins 2 exclusive CPUs for the pod's life; with no cpu/memory of its own it shares "
            "the pod pool",
        ),
    ),
    Case(
        "V2: sidecars take the whole budget before a shared init container",
        pod(
            container("proxy", exact(4000, 4 * Gi), kind="sidecar"),
            container("migrate", kind="init"),
            container("app", exact(1000, Gi)),
            budget=exact(4000, 4 * Gi),
        ),
        POD_SCOPE,
        {
            "proxy": ("pod_exclusive", 4, "pod_exclusive"),
            "migrate": ("pod_shared", 0, "pod_shared"),
            "app": ("pod_exclusive", 1, "pod_exclusive"),
        },
        pool=(0, 0),
        alignment=(4, 4 * Gi, None, 1),
        warnings=(
            "sidecars take all 4 pod CPUs, none is left for init container migrate: nodes will refuse the pod",
            "sidecars take all 4Gi pod memory, none is left for init container migrate: nodes will refuse the pod",
            "sidecar proxy pins 4 exclusive CPUs for the pod's life; with no cpu/memory of its own it shares "
            "the pod pool",
        ),
    ),
    Case(
        "classic pod with an exclusive sidecar: a helper pinning a CPU it will mostly leave idle",
        pod(container("envoy", exact(1000, Gi), kind="sidecar"), container("app", exact(4000, 8 * Gi))),
        POD_SCOPE,
        {"envoy": ("node_exclusive", 1, "node_exclusive"), "app": ("node_exclusive", 4, "node_exclusive")},
        alignment=(5, 9 * Gi, None, 1),
        warnings=(
            "sidecar envoy pins 1 exclusive CPU for the pod's life; a fractional cpu such as 500m shares the node pool "
            "instead",
        ),
    ),
    Case(
        "classic pod with a fractional CPU: memory is pinned, CPUs shared",
        pod(container("app", exact(1500, 2 * Gi))),
        POD_SCOPE,
        {"app": ("node_shared", 0, "node_exclusive")},
        alignment=(0, 2 * Gi, None, 1),
        warnings=("only whole CPUs are exclusive: app (1500m) will run in the node shared pool",),
    ),
    Case(
        "a fractional pod budget pins no CPU in pod scope; memory is still aligned",
        pod(container("app", exact(4000, 2 * Gi)), container("log"), budget=exact(7500, 4 * Gi)),
        POD_SCOPE,
        {"app": ("node_shared", 0, "pod_exclusive"), "log": ("node_shared", 0, "pod_shared")},
        pool=(0, 2 * Gi),
        alignment=(0, 4 * Gi, None, 1),
        warnings=("pod cpu 7500m is not a whole number of CPUs: pod scope pins no CPU for this pod",),
    ),
    Case(
        "a Guaranteed-shaped container in a Burstable pod gets nothing",
        pod(
            container("db", exact(4000, 8 * Gi)),
            container("sidecar", Resources(requests={"cpu": 100}), kind="sidecar"),
        ),
        POD_SCOPE,
        {"db": ("node_shared", 0, "node_shared"), "sidecar": ("node_shared", 0, "node_shared")},
        warnings=("the pod is Burstable, so no CPU is exclusive: db asks whole CPUs with requests == limits",),
    ),
    Case(
        "pod-level resource managers off: a PLR pod is never pinned",
        fixture("tightly-coupled-database"),
        plan.PlanPolicy(scope="pod", pod_level_resource_managers=False),
        {
            "metrics-exporter": ("node_shared", 0, "node_shared"),
            "backup-agent": ("node_shared", 0, "node_shared"),
            "database": ("node_shared", 0, "node_shared"),
        },
        warnings=("pod-level resources are set but the pod-level resource managers are off: nothing is pinned",),
    ),
    Case(
        "a pod budget larger than one NUMA node",
        pod(container("app", exact(20000, 40 * Gi)), container("log"), budget=exact(24000, 48 * Gi)),
        POD_SCOPE,
        {"app": ("pod_exclusive", 20, "pod_exclusive"), "log": ("pod_shared", 0, "pod_shared")},
        pool=(4, 8 * Gi),
        alignment=(24, 48 * Gi, None, 2),
        warnings=("the pod needs 2 NUMA nodes for 24 CPUs and 48Gi: single-numa-node nodes will refuse it",),
    ),
    Case(
        "container scope names the container that needs more than one NUMA node",
        pod(
            container("small", exact(2000, Gi)), container("big", exact(8000, 100 * Gi)), budget=exact(12000, 120 * Gi)
        ),
        CONTAINER_SCOPE,
        {"small": ("node_exclusive", 2, "node_exclusive"), "big": ("node_exclusive", 8, "node_exclusive")},
        alignment=(8, 100 * Gi, "big", 2),
        warnings=("container big needs 2 NUMA nodes for 8 CPUs and 100Gi: single-numa-node nodes will refuse it",),
    ),
    Case(
        "without a NUMA node size the plan counts no NUMA nodes",
        fixture("tightly-coupled-database"),
        plan.PlanPolicy(scope="pod"),
        {
            "metrics-exporter": ("pod_shared", 0, "pod_shared"),
            "backup-agent": ("pod_shared", 0, "pod_shared"),
            "database": ("pod_exclusive", 6, "pod_exclusive"),
        },
        pool=(2, 4 * Gi),
        alignment=(8, 16 * Gi, None, None),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.description)
def test_plan_assigns_each_container_as_the_node_managers_will(case: Case) -> None:
    result = plan.plan_pod(case.pod, case.policy)
    assert {c.name: (c.cpu_assignment, c.exclusive_cpus, c.memory_assignment) for c in result.containers} == (
        case.containers
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.description)
def test_plan_sizes_the_pod_shared_pool(case: Case) -> None:
    result = plan.plan_pod(case.pod, case.policy)
    pool = result.pod_shared_pool
    assert (None if pool is None else (pool.cpus, pool.memory_bytes)) == case.pool


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.description)
def test_plan_counts_the_numa_nodes_of_the_largest_aligned_unit(case: Case) -> None:
    a = plan.plan_pod(case.pod, case.policy).alignment
    assert (None if a is None else (a.cpus, a.memory_bytes, a.container, a.numa_nodes)) == case.alignment


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.description)
def test_plan_warns_about_foot_guns_in_short_lines(case: Case) -> None:
    result = plan.plan_pod(case.pod, case.policy)
    assert result.warnings == case.warnings
    assert all(len(w) <= wording.MAX_WARNING_LENGTH for w in result.warnings)


def test_plan_annotation_is_compact_json_under_the_numaguard_prefix() -> None:
    result = plan.plan_pod(fixture("tightly-coupled-database"), POD_SCOPE)
    (key,) = result.annotations()
    assert key == "numaguard.io/plan"
    assert json.loads(result.annotations()[key]) == {
        "scope": "pod",
        "qosClass": "Guaranteed",
        "alignment": {"cpus": 8, "memory": "16Gi", "numaNodes": 1},
        "podSharedPool": {"cpus": 2, "memory": "4Gi"},
        "containers": {
            "metrics-exporter": {"kind": "sidecar", "cpu": "pod_shared", "memory": "pod_shared"},
            "backup-agent": {"kind": "sidecar", "cpu": "pod_shared", "memory": "pod_shared"},
            "database": {
                "kind": "app",
                "cpu": "pod_exclusive",
                "exclusiveCPUs": 6,
                "memory": "pod_exclusive",
                "exclusiveMemory": "12Gi",
            },
        },
    }


def test_a_numa_node_without_cpus_or_memory_is_refused() -> None:
    with pytest.raises(ValueError, match="a NUMA node needs CPUs and memory"):
        plan.NUMANodeSize(cpus=0, memory_bytes=Gi)


# -- properties over arbitrary pods ---------------------------------------------------------------------

_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-0123456789", min_size=1, max_size=63)
_cpu = st.sampled_from([0, 100, 500, 1000, 1500, 2000, 3000, 4000, 8000, 16000, 64000])
_mem = st.sampled_from([0, 256 * 1024**2, Gi, 2 * Gi, 16 * Gi, 100 * Gi])


@st.composite
def _resources(draw: st.DrawFn) -> Resources:
    requests = {"cpu": draw(_cpu), "memory": draw(_mem)}
    if draw(st.booleans()):
        return Resources(requests=requests, limits=dict(requests))
    limits = {k: v + draw(st.sampled_from([0, 500, Gi])) for k, v in requests.items() if draw(st.booleans())}
    return Resources(requests={k: v for k, v in requests.items() if v}, limits={k: v for k, v in limits.items() if v})


@st.composite
def _pods(draw: st.DrawFn) -> PodResources:
    names = draw(st.lists(_names, min_size=1, max_size=6, unique=True))
    kinds: list[ContainerKind] = [draw(st.sampled_from(["init", "sidecar", "app"])) for _ in names[:-1]] + ["app"]
    containers = [ContainerResources(n, k, draw(_resources())) for n, k in zip(names, kinds, strict=True)]
    containers.sort(key=lambda c: c.kind == "app")  # init containers first, as PodResources orders them
    budget = draw(st.one_of(st.none(), _resources()))
    return PodResources(uid="", namespace="default", name="p", containers=tuple(containers), pod=budget)


_policies = st.builds(
    plan.PlanPolicy,
    scope=st.sampled_from(["pod", "container"]),
    numa_node=st.one_of(st.none(), st.just(NUMA_16_64), st.just(plan.NUMANodeSize(4, 8 * Gi))),
    pod_level_resource_managers=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(pod=_pods(), policy=_policies)
def test_any_pod_gets_a_deterministic_plan_with_short_warnings(pod: PodResources, policy: plan.PlanPolicy) -> None:
    first, second = plan.plan_pod(pod, policy), plan.plan_pod(pod, policy)
    assert first.annotation_value() == second.annotation_value()
    assert [c.name for c in first.containers] == [c.name for c in pod.containers]
    assert all(len(w) <= wording.MAX_WARNING_LENGTH for w in first.warnings)
    for c in first.containers:
        assert (c.exclusive_cpus > 0) == (c.cpu_assignment in ("node_exclusive", "pod_exclusive"))
    if first.pod_shared_pool is not None:
        assert first.pod_shared_pool.cpus >= 0 and first.pod_shared_pool.memory_bytes >= 0
