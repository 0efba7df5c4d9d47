"""Layered hint generation gives the exhaustive merge's answer: a differential test against the kubelet's
enumeration of every NUMA set (``exhaustive_reference``), plus the constructed cases of issue #16.

Two engines run the same random operations on the same random machine, one as shipped, one under the
exhaustive reference; every decision (admitted or not, reason, message, CPUs, memory blocks, affinity)
must be identical.  Machines have 1-12 NUMA nodes of uneven size, optional 1 GiB hugepages, random SLIT
distances; policies none / best-effort / restricted / single-numa-node, with and without
prefer-closest, pod and container scope; pods with container- or pod-level resources and init
containers, admitted and removed in random order (fragmentation).  The short run is the default; the
long one (thousands of machines) is ``-m slow``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.engine.exhaustive_reference import exhaustive
from enforcer.engine.node import Decision, NodeEngine
from enforcer.topology import hint_masks, synthetic
from enforcer.topology.hints import TopologyHint
from enforcer.topology.machine import CPUInfo, CPUTopology, NUMANode
from shared.resources import ContainerResources, PodResources, Resources

GiB = 1 << 30
HUGE = "hugepages-1Gi"
POLICIES = ("none", "best-effort", "restricted", "single-numa-node")


@dataclass(frozen=True)
class Machine:
    cores: tuple[int, ...]  # per NUMA node (two hyperthreads each)
    memory_gib: tuple[int, ...]
    huge_gib: tuple[int, ...]
    sockets: int
    distances: tuple[tuple[int, ...], ...]

    def topology(self) -> CPUTopology:
        numa_count = len(self.cores)
        socket_of = [0 if self.sockets == 1 or n < max(1, numa_count // 2) else 1 for n in range(numa_count)]
        first_threads = sum(self.cores)
        cpus: list[CPUInfo] = []
        core = 0
        for numa, count in enumerate(self.cores):
            for _ in range(count):
                for cpu_id in (core, core + first_threads):
                    cpus.append(CPUInfo(cpu_id, core, socket_of[numa], numa, numa))
                core += 1
        nodes = []
        for n in range(numa_count):
            memory = {"memory": self.memory_gib[n] * GiB}
            if self.huge_gib[n]:
                memory[HUGE] = self.huge_gib[n] * GiB
            nodes.append(NUMANode(n, memory))
        return CPUTopology(cpus, nodes, {n: self.distances[n] for n in range(numa_count)})


@st.composite
def machines(draw: st.DrawFn, min_numa: int = 1, max_numa: int = 12) -> Machine:
    count = draw(st.integers(min_numa, max_numa))
    cores = tuple(draw(st.lists(st.integers(1, 3), min_size=count, max_size=count)))
    memory = tuple(draw(st.lists(st.integers(4, 8), min_size=count, max_size=count)))  # hugepages included
    with_huge = draw(st.booleans())
    huge = tuple(draw(st.lists(st.integers(0, 2), min_size=count, max_size=count))) if with_huge else (0,) * count
    rows = [[10] * count for _ in range(count)]
    for a in range(count):
        for b in range(a + 1, count):
            rows[a][b] = rows[b][a] = draw(st.sampled_from((11, 12, 20, 21, 30)))
    return Machine(cores, memory, huge, draw(st.sampled_from((1, 2))) if count > 1 else 1, tuple(map(tuple, rows)))


def _guaranteed(cpus: int, memory_gib: int, huge_gib: int) -> Resources:
    amounts = {"cpu": cpus * 1000, "memory": memory_gib * GiB}
    if huge_gib:
        amounts[HUGE] = huge_gib * GiB
    return Resources(dict(amounts), dict(amounts))


@st.composite
def pods(draw: st.DrawFn, uid: str, with_huge: bool) -> PodResources:
    huge = st.integers(0, 2) if with_huge else st.just(0)
    containers: list[ContainerResources] = []
    if draw(st.booleans()):
        containers.append(ContainerResources("init", "init", _guaranteed(draw(st.integers(1, 4)), 1, 0)))
    pod_level = draw(st.booleans())
    apps = draw(st.integers(1, 2))
    total_cpus = total_mem = total_huge = 0
    for i in range(apps):
        cpus, mem, hp = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(huge)
        total_cpus, total_mem, total_huge = total_cpus + cpus, total_mem + mem, total_huge + hp
        if pod_level and i == apps - 1 and draw(st.booleans()):
            containers.append(ContainerResources(f"app{i}", "app"))  # shares the pod's pool
        else:
            containers.append(ContainerResources(f"app{i}", "app", _guaranteed(cpus, mem, hp)))
    budget = None
    if pod_level:
        budget = _guaranteed(total_cpus + draw(st.integers(0, 2)), total_mem + 1, total_huge)
    return PodResources(uid, "default", uid, tuple(containers), pod=budget)


def engine_for(
    machine: Machine, policy: str, scope: str, prefer_closest: bool, align_by_socket: bool = False
) -> NodeEngine:
    options = {"max-allowable-numa-nodes": str(max(8, len(machine.cores)))}
    if prefer_closest:
        options["prefer-closest-numa-nodes"] = "true"
    gates = {"PodLevelResources": True, "PodLevelResourceManagers": True}
    cpu_options = {}
    if align_by_socket:
        gates["CPUManagerPolicyAlphaOptions"] = True
        cpu_options["align-by-socket"] = "true"
    config = from_kubelet(
        {
            "featureGates": gates,
            "cpuManagerPolicyOptions": cpu_options,
            "cpuManagerPolicy": "static",
            "reservedSystemCPUs": "0",
            "systemReserved": {"memory": "1Gi"},
            "memoryManagerPolicy": "Static",
            "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}}],
            "topologyManagerPolicy": policy,
            "topologyManagerScope": scope,
            "topologyManagerPolicyOptions": options,
        }
    )
    return builder.build(machine.topology(), config)


def _outcome(decision: Decision) -> tuple[object, ...]:
    return (decision.admitted, decision.reason, decision.message, decision.view, decision.qos_class)


@dataclass
class Tally:
    decisions: int = 0
    admitted: int = 0


def _differential(data: st.DataObject, machine: Machine, tally: Tally | None = None, *, budget: bool = False) -> None:
    """Same decisions on both engines; with ``budget`` (a tiny mask budget), except after a counted fallback."""
    policy = data.draw(st.sampled_from(POLICIES), label="policy")
    scope = data.draw(st.sampled_from(("pod", "container")), label="scope")
    prefer_closest = data.draw(st.booleans(), label="prefer_closest") and policy != "none"
    # align-by-socket prefers masks by the sockets they span (the CPU hints' other preferred rule);
    # single-numa-node refuses it at start-up, as the kubelet does
    by_socket = policy != "single-numa-node" and data.draw(st.integers(0, 3), label="align_by_socket") == 0
    shipped = engine_for(machine, policy, scope, prefer_closest, by_socket)
    with exhaustive():
        reference = engine_for(machine, policy, scope, prefer_closest, by_socket)
    with_huge = any(machine.huge_gib)
    admitted: list[str] = []
    for step in range(data.draw(st.integers(2, 9), label="steps")):
        if admitted and data.draw(st.integers(0, 3), label="remove?") == 0:
            uid = admitted.pop(data.draw(st.integers(0, len(admitted) - 1), label="which"))
            shipped.remove(uid)
            with exhaustive():
                reference.remove(uid)
            continue
        pod = data.draw(pods(f"pod-{step}", with_huge), label=f"pod-{step}")
        fallbacks = hint_masks.fallback_count()
        got = shipped.admit(pod)
        with exhaustive():
            want = reference.admit(pod)
        if budget and hint_masks.fallback_count() != fallbacks:
            if policy in ("restricted", "single-numa-node") and not prefer_closest:
                assert got.admitted == want.admitted  # preferred answers are searched exactly, never refused
            return  # a non-preferred answer from narrower layers, counted and logged: the nodes may now differ
        assert _outcome(got) == _outcome(want), (
            f"{policy}/{scope}/closest={prefer_closest}/socket={by_socket} {machine}"
        )
        if tally is not None:
            tally.decisions += 1
            tally.admitted += got.admitted
        if got.admitted:
            admitted.append(pod.uid)
    assert shipped.check() == reference.check()  # invariants: the same verdict (the same state)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(machines(), st.data())
def test_layered_hints_decide_as_the_exhaustive_enumeration(machine: Machine, data: st.DataObject) -> None:
    _differential(data, machine)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(machines(min_numa=9), st.data())
def test_layered_hints_decide_as_the_exhaustive_enumeration_beyond_eight_numa_nodes(
    machine: Machine, data: st.DataObject
) -> None:
    _differential(data, machine)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(machines(min_numa=3), st.data())
def test_beyond_the_mask_budget_only_counted_fallbacks_may_differ(machine: Machine, data: st.DataObject) -> None:
    """A budget of 10 masks puts 3-12 NUMA nodes beyond reach: the preferred search and the fallback run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hint_masks, "EXACT_MASK_BUDGET", 10)
        _differential(data, machine, budget=True)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(machines(), st.data())
def test_layered_hints_decide_as_the_exhaustive_enumeration_long(machine: Machine, data: st.DataObject) -> None:
    _differential(data, machine)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(machines(min_numa=9), st.data())
def test_layered_hints_decide_as_the_exhaustive_enumeration_beyond_eight_numa_nodes_long(
    machine: Machine, data: st.DataObject
) -> None:
    _differential(data, machine)


# --- the constructed cases of issue #16 ----------------------------------------------------------------------------


def _regular_engine(numa: int, policy: str, prefer_closest: bool = False) -> NodeEngine:
    options = {"max-allowable-numa-nodes": str(numa)}
    if prefer_closest:
        options["prefer-closest-numa-nodes"] = "true"
    config = from_kubelet(
        {
            "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
            "cpuManagerPolicy": "static",
            "reservedSystemCPUs": "0",
            "systemReserved": {"memory": "1Gi"},
            "memoryManagerPolicy": "Static",
            "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}}],
            "topologyManagerPolicy": policy,
            "topologyManagerScope": "pod",
            "topologyManagerPolicyOptions": options,
        }
    )
    return builder.build(synthetic.regular(numa), config)  # 16 CPUs and 64 GiB per NUMA node


def _pod(uid: str, cpus: int, memory_gib: int) -> PodResources:
    budget = _guaranteed(cpus, memory_gib, 0)
    return PodResources(uid, "default", uid, (ContainerResources("app", "app", budget),), pod=budget)


def _nodes_0_and_8_busy(node: NodeEngine) -> None:
    for i in range(9):  # 15 CPUs each: one pod per NUMA node, 0..8 (CPU 0 is reserved)
        decision = node.admit(_pod(f"fill-{i}", 15, 8))
        assert decision.admitted and decision.view is not None and decision.view.numa_affinity == (i,)
    for i in range(1, 8):
        node.remove(f"fill-{i}")


def _affinity(node: NodeEngine, pod: PodResources) -> tuple[int, ...] | None:
    decision = node.admit(pod)
    assert decision.admitted, decision.message
    assert decision.view is not None
    return decision.view.numa_affinity


@pytest.mark.parametrize(
    "reference",
    [False, pytest.param(True, marks=pytest.mark.slow)],  # exhaustive: 65,535 masks per hint list, ~20 s
    ids=["shipped", "exhaustive"],
)
def test_16_numa_nodes_0_and_8_busy_admit_72_cpus_and_300_gib_on_nodes_1_to_5(reference: bool) -> None:
    def run() -> tuple[int, ...] | None:
        node = _regular_engine(16, "restricted")
        _nodes_0_and_8_busy(node)
        return _affinity(node, _pod("wide", 72, 300))

    if reference:
        with exhaustive():
            assert run() == (1, 2, 3, 4, 5)
    else:
        assert run() == (1, 2, 3, 4, 5)


@pytest.mark.parametrize("numa", [9, 10, 11, 12])
@pytest.mark.parametrize("reference", [False, True], ids=["shipped", "exhaustive"])
def test_best_effort_4_cpus_and_150_gib_land_on_nodes_0_to_2(numa: int, reference: bool) -> None:
    def run() -> tuple[int, ...] | None:
        return _affinity(_regular_engine(numa, "best-effort"), _pod("p", 4, 150))

    if reference:
        with exhaustive():
            assert run() == (0, 1, 2)
    else:
        assert run() == (0, 1, 2)


@pytest.mark.parametrize("prefer_closest", [False, True])
def test_a_64_numa_machine_decides_a_five_node_pod_exactly_without_enumerating_five_node_masks(
    prefer_closest: bool,
) -> None:
    """Restricted on 64 nodes: 72 CPUs + 300 GiB need five NUMA nodes (7.6 million masks of that size); the
    preferred answer is found by the threshold search (with prefer-closest: the branch and bound on the
    distance sum, every five-node set of one socket tying), and is the lowest five-node mask that fits."""
    node = _regular_engine(64, "restricted", prefer_closest)
    _nodes_0_and_8_busy(node)
    before = hint_masks.fallback_count()
    assert _affinity(node, _pod("wide", 72, 300)) == (1, 2, 3, 4, 5)
    assert hint_masks.fallback_count() == before


def test_a_best_effort_pod_needing_five_of_64_nodes_is_decided_exactly_by_the_reach_certificate() -> None:
    """64 nodes, 4 CPUs + 300 GiB under best-effort: CPU prefers one node, memory five, so no hint is
    preferred and the bound of part 3 would need five-node layers (8.3 million masks).  Part 4 decides it:
    the five lowest nodes are a candidate (memory offers them, CPU the whole machine), the lowest of tier 0."""
    node = _regular_engine(64, "best-effort")
    before = hint_masks.fallback_count()
    assert _affinity(node, _pod("p", 4, 300)) == (0, 1, 2, 3, 4)
    assert hint_masks.fallback_count() == before


def _family(weights: list[int], need: int, preferred_size: int, min_fit: int) -> hint_masks.LayeredHints:
    """A hand-made threshold dimension: masks whose weights reach ``need``."""
    count = len(weights)
    threshold = hint_masks.Threshold((1 << count) - 1, 0, {n: (weights[n],) for n in range(count)}, (need,))

    def hint_for(mask: int) -> TopologyHint | None:
        return TopologyHint(mask, mask.bit_count() == preferred_size) if threshold.fits(mask) else None

    def generate(size: int) -> list[TopologyHint]:
        masks = (
            sum(1 << n for n in combo)
            for combo in hint_masks.candidate_masks(range(count), size, always=[tuple(range(count))])
        )
        return [h for m in masks if (h := hint_for(m)) is not None]

    return hint_masks.LayeredHints(
        numa_count=count,
        min_fit_size=min_fit,
        preferred_size=preferred_size,
        preferred_max=preferred_size,
        superset_slack=hint_masks.smallest_weights_count(weights, need),
        superset_floor=1,
        threshold=threshold,
        explicit=(),
        hint_for=hint_for,
        generate=generate,
    )


def test_beyond_the_budget_an_uncertified_non_preferred_answer_is_a_counted_logged_fallback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Six nodes, a budget of six masks (single nodes only).  A: any mask holding node 5; B: masks holding
    0, 1 and 5.  T = 3, nothing is preferred by both, and the three lowest nodes {0,1,2} are no candidate
    (every AND holds node 5), so part 4 cannot certify: the fallback answers {0,1,5}, counted and logged
    (here also the exhaustive answer)."""
    from enforcer.topology import merge as merging
    from enforcer.topology.numa_info import NUMAInfo

    info = NUMAInfo(tuple(range(6)))
    a, b = _family([0, 0, 0, 0, 0, 1], 1, 1, 1), _family([1, 1, 0, 0, 0, 1], 3, 3, 3)

    def merge(lists: Sequence[Sequence[TopologyHint]]) -> TopologyHint:
        return merging._merge_hint_lists(info, lists, prefer_closest=False)

    def key(mask: int) -> tuple[int, int, int]:
        return (mask.bit_count(), 0, mask)

    exhaustive_answer = merge([list(a), list(b)])
    before = hint_masks.fallback_count()
    with caplog.at_level("WARNING", logger="enforcer.topology.hint_masks"):
        got = hint_masks.merge_layered([a, b], merge, key, budget=6)
    assert got == exhaustive_answer == TopologyHint(0b100011, False)
    assert hint_masks.fallback_count() == before + 1
    assert any(getattr(r, "fallback", None) == hint_masks.FALLBACK_NAME for r in caplog.records)


def test_layers_come_out_in_iterate_bitmasks_order_with_the_always_kept_masks_last() -> None:
    masks = list(hint_masks.candidate_masks([0, 1, 2, 3], 2, always=[(0, 1, 2, 3), (1, 3)]))
    assert masks == [(0,), (1,), (2,), (3,), (0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3), (0, 1, 2, 3)]


Check = Callable[[list[list[int]], list[int], int, int], None]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=1, max_size=7),
    st.tuples(st.integers(0, 20), st.integers(0, 20)),
    st.integers(1, 3),
    st.integers(0, 127),
)
def test_min_cover_size_is_the_fewest_nodes_reaching_every_need(
    weights: list[tuple[int, int]], needs: tuple[int, int], floor: int, forced: int
) -> None:
    from itertools import combinations

    forced &= (1 << len(weights)) - 1
    got = hint_masks.min_cover_size(weights, needs, floor=floor, forced=forced)
    sizes = [
        k
        for k in range(1, len(weights) + 1)
        for combo in combinations(range(len(weights)), k)
        if k >= floor
        and all(forced >> i & 1 == 0 or i in combo for i in range(len(weights)))
        and all(sum(weights[i][q] for i in combo) >= needs[q] for q in range(2))
    ]
    assert got == (min(sizes) if sizes else None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=8), st.integers(0, 30), st.integers(0, 8))
def test_minimal_covers_are_no_bigger_than_the_smallest_weights_bound(values: list[int], need: int, base: int) -> None:
    """Lemma 2 of hint_masks on one sum: every inclusion-minimal cover has at most ``c`` nodes."""
    from itertools import combinations

    bound = hint_masks.smallest_weights_count(values, need)
    for k in range(1, len(values) + 1):
        for combo in combinations(range(len(values)), k):
            total = sum(values[i] for i in combo)
            minimal = total >= need and all(total - values[i] < need for i in combo)
            if minimal:
                assert k <= bound


@settings(max_examples=150, deadline=None)
@given(
    st.integers(2, 8).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.integers(0, 6), min_size=n, max_size=n),
            st.lists(st.lists(st.integers(10, 40), min_size=n, max_size=n), min_size=n, max_size=n),
            st.integers(1, n),
            st.integers(0, 20),
            st.integers(0, (1 << n) - 1),
        )
    )
)
def test_the_closest_search_finds_the_lowest_key_mask_of_its_size(
    case: tuple[int, list[int], list[list[int]], int, int, int],
) -> None:
    """ClosestSearch (prefer-closest preferred answers beyond the budget) against brute force."""
    from itertools import combinations

    from enforcer.topology.numa_info import NUMAInfo

    count, weights, rows, size, need, forced = case
    forced &= (1 << count) - 1
    info = NUMAInfo.build(list(range(count)), {n: rows[n] for n in range(count)}, need_distances=True)

    def key(mask: int) -> tuple[int, int, int]:
        return (mask.bit_count(), info.distance_sum(mask), mask)

    def accept(mask: int) -> bool:
        return mask % 3 != 0  # an arbitrary extra rule, as another dimension would impose

    threshold = hint_masks.Threshold((1 << count) - 1, forced, {n: (weights[n],) for n in range(count)}, (need,))
    search = hint_masks.ClosestSearch(threshold, size, accept, key, budget=1 << 20)
    got = search.best()
    masks = [sum(1 << n for n in combo) for combo in combinations(range(count), size)]
    fitting = [m for m in masks if threshold.fits(m) and accept(m)]
    assert not search.truncated
    assert got == (min(fitting, key=key) if fitting else None)


@given(st.lists(st.integers(min_value=0, max_value=64), min_size=1, max_size=12), st.integers(0, 400))
def test_min_size_is_the_fewest_nodes_whose_capacity_can_hold_the_request(caps: list[int], request: int) -> None:
    """The kubelet's "minimal affinity" (CPU capacity per NUMA node), which decides preferred CPU hints."""
    from itertools import combinations

    size = hint_masks.min_size_for(caps, request)
    fits = [k for k in range(1, len(caps) + 1) if any(sum(c) >= request for c in combinations(caps, k))]
    assert size == (min(fits) if fits else len(caps) + 1)
