"""The engine's resize flow for Guaranteed exclusive pods: use cases, retry order, compatibility, persistence."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from resize_builders import assert_consistent, container, cpus_of, dual_socket_ht_32, engine, kubelet, pod, single

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.engine.node import NodeEngine
from shared.cpuset import CPUSet
from shared.resources import PodResources

NUMA0 = dual_socket_ht_32().cpus_in_numa_nodes([0])


def admit_all(node: NodeEngine, *pods: PodResources) -> None:
    for p in pods:
        decision = node.admit(p)
        assert decision.admitted, decision


# -- the in-place resize article's use cases, for exclusive CPUs ------------------------------------


def test_a_java_service_scaled_up_for_start_up_returns_to_its_promised_cpus() -> None:
    node = engine()
    admit_all(node, single("java", "2", "4Gi"))
    assert node.resize(single("java", "6", "4Gi")).status == "Accepted"  # JIT warm-up
    assert cpus_of(node, "java") == CPUSet.parse("1-3,17-19")
    assert node.resize(single("java", "2", "4Gi")).status == "Accepted"  # steady state
    assert cpus_of(node, "java") == CPUSet.parse("1,17")
    assert_consistent(node)


def test_a_java_service_admitted_large_cannot_shrink_below_what_it_was_promised() -> None:
    node = engine()
    admit_all(node, single("java", "6", "4Gi"))
    result = node.resize(single("java", "2", "4Gi"))
    assert (result.status, result.reason) == ("Infeasible", "prohibitedCPUAllocationError")
    assert len(cpus_of(node, "java")) == 6


def test_a_development_pod_scaled_up_for_a_build_grows_next_to_its_cpus_and_back() -> None:
    node = engine()
    admit_all(node, single("other", "4"), single("dev", "2", "2Gi"))
    assert cpus_of(node, "dev") == CPUSet.parse("3,19")
    result = node.resize(single("dev", "8", "2Gi"))
    assert result.status == "Accepted"
    grown = cpus_of(node, "dev")
    assert CPUSet.parse("3,19").is_subset_of(grown) and grown.is_subset_of(NUMA0)
    assert result.view is not None and result.view.containers[0].cpus == grown
    assert node.resize(single("dev", "2", "2Gi")).status == "Accepted"
    assert cpus_of(node, "dev") == CPUSet.parse("3,19")
    assert_consistent(node)


def test_a_deferred_exclusive_resize_completes_when_another_pod_leaves() -> None:
    node = engine()
    admit_all(node, single("web", "2"), single("batch", "12"))
    assert node.resize(single("web", "4")).status == "Deferred"
    assert node.pending_resize("default/web") is not None
    removed = node.remove("default/batch")
    assert removed.resizes_applied == ("default/web",)
    assert node.pending_resize("default/web") is None
    assert cpus_of(node, "web") == CPUSet.parse("1-2,17-18")


def test_a_newer_request_replaces_a_deferred_one() -> None:
    node = engine()
    admit_all(node, single("web", "2"), single("batch", "12"))
    assert node.resize(single("web", "4")).status == "Deferred"
    assert node.resize(single("web", "2")).status == "Accepted"  # back to what is allocated
    assert node.pending_resize("default/web") is None
    assert node.remove("default/batch").resizes_applied == ()
    assert cpus_of(node, "web") == CPUSet.parse("1,17")


# -- retry order (R4.5) --------------------------------------------------------------------------------


def burstable(name: str, cpu: str, *, priority: int = 0) -> PodResources:
    limit = str(int(cpu) * 2)
    return pod(name, container("c", cpu, "1Gi", cpu_limit=limit, memory_limit="2Gi"), priority=priority)


def guaranteed(name: str, cpu: str, *, priority: int = 0) -> PodResources:
    return pod(name, container("c", cpu, "1Gi"), priority=priority)


@dataclass(frozen=True)
class RaceCase:
    name: str
    first: tuple[str, int]  # (qos, priority), resized first (older)
    second: tuple[str, int]
    winner: str


RACES = [
    RaceCase("higher priority wins", ("Burstable", 0), ("Burstable", 10), "second"),
    RaceCase("guaranteed wins over burstable at equal priority", ("Burstable", 0), ("Guaranteed", 0), "second"),
    RaceCase("priority outranks qos", ("Burstable", 10), ("Guaranteed", 0), "first"),
    RaceCase("the oldest wins when all else is equal", ("Burstable", 0), ("Burstable", 0), "first"),
]


@pytest.mark.parametrize("case", RACES, ids=lambda c: c.name)
def test_deferred_resizes_are_retried_in_the_kubelets_order(case: RaceCase) -> None:
    node = engine(topology_policy="none")  # allocatable cpu 30
    make = {"Burstable": burstable, "Guaranteed": guaranteed}
    first = make[case.first[0]]("first", "2", priority=case.first[1])
    second = make[case.second[0]]("second", "2", priority=case.second[1])
    admit_all(node, burstable("filler", "12"), burstable("more", "12"), burstable("small", "2"), first, second)
    assert node.resize(make[case.first[0]]("first", "4", priority=case.first[1])).status == "Deferred"
    assert node.resize(make[case.second[0]]("second", "4", priority=case.second[1])).status == "Deferred"
    applied = node.remove("default/small").resizes_applied
    assert applied == (f"default/{case.winner}",)
    loser = "first" if case.winner == "second" else "second"
    assert node.pending_resize(f"default/{loser}") is not None


def test_a_resize_that_does_not_increase_requests_is_retried_first() -> None:
    # NUMA 0 is full.  vip (priority 1000, older) wants 2 more CPUs there; duo moves 2 CPUs from b
    # (NUMA 1) to a (NUMA 0) without increasing its requests.  When 2 CPUs free up on NUMA 0, duo goes first.
    node = engine()
    duo = pod("duo", container("a", "2"), container("b", "2"))
    admit_all(node, single("filler", "8"), single("small", "2"), guaranteed("vip", "2", priority=1000), duo)
    assert cpus_of(node, "duo", "a").is_subset_of(NUMA0) and not cpus_of(node, "duo", "b") & NUMA0
    assert node.resize(pod("duo", container("a", "2"), container("b", "4"))).status == "Accepted"
    assert node.resize(guaranteed("vip", "4", priority=1000)).status == "Deferred"
    assert node.resize(pod("duo", container("a", "4"), container("b", "2"))).status == "Deferred"
    assert node.remove("default/small").resizes_applied == ("default/duo",)
    assert node.pending_resize("default/vip") is not None
    assert len(cpus_of(node, "duo", "a")) == 4
    assert_consistent(node)


def test_an_accepted_resize_retries_the_deferred_ones() -> None:
    node = engine()
    admit_all(node, single("web", "2"), single("batch", "2"))
    assert node.resize(single("batch", "12")).status == "Accepted"  # NUMA 0 is now full
    assert node.resize(single("web", "4")).status == "Deferred"
    shrink = node.resize(single("batch", "10"))
    assert shrink.status == "Accepted"
    assert shrink.resizes_applied == ("default/web",)
    assert len(cpus_of(node, "web")) == 4
    assert_consistent(node)


# -- compatibility, dry run, persistence ------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "resized", "message"),
    [
        ({}, single("db", "4"), 'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"'),
        (
            {"cpu_policy": "none", "reserved": "", "memory": True},
            single("db", "2", "2Gi"),  # the memory request changes (a CPU-only change would be Accepted)
            'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"',
        ),
    ],
)
def test_kubelet_compatibility_keeps_the_v1_36_answer(
    fields: dict[str, object], resized: PodResources, message: str
) -> None:
    """More cases (what the kubelet accepts) in test_resize_kubelet_parity.py."""
    node = engine(compatibility="kubelet", **fields)  # type: ignore[arg-type]
    admit_all(node, single("db", "2"))
    before = node.snapshot()
    result = node.resize(resized)
    assert (result.status, result.reason, result.message) == ("Infeasible", "Infeasible", message)
    after = node.snapshot()
    for doc in (before, after):
        doc.pop("infeasibleResizes")
        doc.pop("sequence")
    assert after == before


def test_kubelet_compatibility_still_resizes_burstable_pods() -> None:
    node = engine(compatibility="kubelet")
    admit_all(node, burstable("web", "2"))
    assert node.resize(burstable("web", "4")).status == "Accepted"


def test_a_dry_run_answers_without_changing_anything() -> None:
    node = engine()
    admit_all(node, single("web", "2"), single("batch", "12"))
    before = node.snapshot()
    assert node.resize(single("web", "4"), dry_run=True).status == "Deferred"
    assert node.resize(single("web", "2", "1Gi"), dry_run=True).status == "Accepted"
    assert node.resize(single("web", "1"), dry_run=True).reason == "prohibitedCPUAllocationError"
    assert node.snapshot() == before


def test_pending_resizes_survive_a_snapshot_and_restore() -> None:
    node = engine()
    admit_all(node, single("web", "2"), single("batch", "12"), single("db", "2"))
    node.resize(single("web", "4"))  # Deferred
    node.resize(single("db", "17"))  # Infeasible: NUMA 1 holds 16
    node.resize(single("web", "4"))  # re-sent: still Deferred
    doc = node.snapshot()
    restored = builder.restore(node.topology, from_kubelet(kubelet()), doc)
    assert restored.snapshot() == doc
    assert restored.pending_resize("default/web") is not None
    assert restored.pending_resize("default/db") is not None
    assert restored.state.cpu.originals == node.state.cpu.originals
    assert restored.remove("default/batch").resizes_applied == ("default/web",)
    assert node.remove("default/batch").resizes_applied == ("default/web",)
    assert restored.snapshot() == node.snapshot()
    assert_consistent(restored)


def test_a_grow_onto_a_second_numa_node_reports_both_nodes_as_the_pods_affinity() -> None:
    """Restricted, container scope: 12 CPUs fit NUMA node 0; 20 need two nodes, which restricted prefers."""
    from enforcer.engine import builder
    from enforcer.engine.config import from_kubelet
    from enforcer.topology import machine
    from shared.resources import ContainerResources, PodResources, Resources

    scenarios = Path(__file__).resolve().parents[3] / "numaguard_cli" / "scenarios"
    topology = machine.load(scenarios / "dual-socket-ht-32.json")
    config = from_kubelet(
        {
            "cpuManagerPolicy": "static",
            "reservedSystemCPUs": "0,16",
            "topologyManagerPolicy": "restricted",
            "topologyManagerScope": "container",
        }
    )
    engine = builder.build(topology, config)

    def pod(cpus: int) -> PodResources:
        r = Resources({"cpu": cpus * 1000, "memory": 1 << 30}, {"cpu": cpus * 1000, "memory": 1 << 30})
        return PodResources("u1", "default", "a", (ContainerResources("app", "app", r),))

    admitted = engine.admit(pod(12))
    assert admitted.view is not None and admitted.view.numa_affinity == (0,)
    grown = engine.resize(pod(20))
    assert grown.status == "Accepted" and grown.view is not None
    assert grown.view.numa_affinity == (0, 1)
    assert engine.check() == []


# -- one plan per decision -------------------------------------------------------------------------


@pytest.mark.parametrize("memory", [False, True])
def test_an_accepted_resize_is_planned_once_per_manager(memory: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each manager checks a resize once: the trial placement and the commit share that plan."""
    from enforcer.cpumanager.policy_static import StaticPolicy
    from enforcer.memorymanager.policy_static import StaticMemoryPolicy

    calls: list[str] = []
    for cls, name in ((StaticPolicy, "cpu"), (StaticMemoryPolicy, "memory")):
        original = cls.plan_resize

        def counting(self: object, *args: object, _original: object = original, _name: str = name) -> object:
            calls.append(_name)
            return _original(self, *args)  # type: ignore[operator]

        monkeypatch.setattr(cls, "plan_resize", counting)
    node = engine(memory=memory)
    admit_all(node, single("java", "2", "2Gi"))
    assert node.resize(single("java", "4", "3Gi" if memory else "2Gi")).status == "Accepted"
    assert calls == (["cpu", "memory"] if memory else ["cpu"])
    assert cpus_of(node, "java") == CPUSet.parse("1-2,17-18")
    assert_consistent(node)
