"""Hint merging for every policy: one common table (kubelet ``commonPolicyMergeTestCases`` style) and
property tests pitting the pruned merge against a literal port of the kubelet's full cross-product merge.

The reference below follows ``policy.go`` / ``numa_info.go`` / ``policy_single_numa_node.go`` line by
line (float averages included); it is slow on purpose and lives here only.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enforcer.engine.builder import TOPOLOGY_POLICIES, new_topology_policy
from enforcer.errors import ConfigError
from enforcer.topology import bitmask, hints, options
from enforcer.topology.numa_info import NUMAInfo

H = hints.TopologyHint
BEST_EFFORT, RESTRICTED, SINGLE = options.POLICY_BEST_EFFORT, options.POLICY_RESTRICTED, options.POLICY_SINGLE_NUMA_NODE
MERGING_POLICIES = (BEST_EFFORT, RESTRICTED, SINGLE)


def m(*ids: int) -> int:
    return bitmask.from_ids(ids)


# --- the literal reference -----------------------------------------------------------------------------------------


def reference_merge(
    policy_name: str,
    numa_ids: Sequence[int],
    providers_hints: Sequence[hints.ProviderHints],
    *,
    prefer_closest: bool,
    distances: Mapping[int, Sequence[int]] | None,
    deduplicate: bool = False,
) -> tuple[H, bool]:
    """The kubelet's ``Merge`` of each policy, enumerating every permutation as the kubelet does.

    ``deduplicate`` folds over the distinct candidate hints (in an arbitrary order) instead of every
    permutation in cross-product order: the same answer if, as the merge module argues, the fold is an
    argmin; the literal mode checks that argument, the fast one lets bigger inputs be checked.
    """
    default_affinity = bitmask.from_ids(numa_ids)
    filtered: list[list[H]] = []
    for provider in providers_hints:
        if not provider:
            filtered.append([H(None, True)])
            continue
        for resource_hints in provider.values():
            if resource_hints is None:
                filtered.append([H(None, True)])
            elif len(resource_hints) == 0:
                filtered.append([H(None, False)])
            else:
                filtered.append(list(resource_hints))
    if policy_name == SINGLE:
        filtered = [
            [
                h
                for h in hs
                if (h.mask is None and h.preferred)
                or (h.mask is not None and bin(h.mask).count("1") == 1 and h.preferred)
            ]
            for hs in filtered
        ]
    closest_on = policy_name != SINGLE and prefer_closest

    def count(mask: int) -> int:
        return bin(mask).count("1")

    def narrower(a: int, b: int) -> bool:
        if count(a) == count(b) and a < b:
            return True
        return count(a) < count(b)

    def average(mask: int) -> float:
        assert distances is not None
        bits = [i for i in range(64) if mask >> i & 1]
        total, pairs = 0.0, 0.0
        for a in bits:
            for b in bits:
                total += float(distances[a][b])
                pairs += 1
        return total / pairs

    def narrowest(a: int, b: int) -> int:
        return a if narrower(a, b) else b

    def closest(a: int, b: int) -> int:
        if count(a) != count(b):
            return narrowest(a, b)
        da, db = average(a), average(b)
        if da == db:
            return a if a < b else b
        return a if da < db else b

    def compare_masks(current: H, candidate: H) -> H:
        assert current.mask is not None and candidate.mask is not None
        if candidate.mask == current.mask:
            return current
        best = closest(current.mask, candidate.mask) if closest_on else narrowest(current.mask, candidate.mask)
        return current if best == current.mask else candidate

    target = 0
    for hs in filtered:
        narrowest_hint: H | None = None
        for h in hs:
            if h.mask is None:
                continue
            if narrowest_hint is None:
                narrowest_hint = h
            assert narrowest_hint.mask is not None
            if narrower(h.mask, narrowest_hint.mask):
                narrowest_hint = h
        if narrowest_hint is not None and narrowest_hint.mask is not None:
            target = max(target, count(narrowest_hint.mask))

    def compare(current: H | None, candidate: H) -> H | None:
        assert candidate.mask is not None
        if count(candidate.mask) == 0:
            return current
        if current is None:
            return candidate
        assert current.mask is not None
        if not current.preferred and candidate.preferred:
            return candidate
        if current.preferred and not candidate.preferred:
            return current
        if current.preferred and candidate.preferred:
            return compare_masks(current, candidate)
        if count(current.mask) > target:
            return compare_masks(current, candidate)
        if count(current.mask) == target:
            if count(candidate.mask) != target:
                return current
            return compare_masks(current, candidate)
        if count(candidate.mask) > target:
            return current
        if count(candidate.mask) == target:
            return candidate
        if count(candidate.mask) > count(current.mask):
            return candidate
        if count(candidate.mask) < count(current.mask):
            return current
        return compare_masks(current, candidate)

    best: H | None = None
    if deduplicate:
        for candidate in sorted(_distinct_candidates(filtered, default_affinity), key=lambda h: (h.mask, h.preferred)):
            best = compare(best, candidate)
    else:
        for permutation in itertools.product(*filtered):
            preferred = True
            affinities: list[int] = []
            for h in permutation:
                if h.mask is not None:
                    affinities.append(h.mask)
                    if h.mask != affinities[0]:
                        preferred = False
                if not h.preferred:
                    preferred = False
            merged = default_affinity
            for a in affinities:
                merged &= a
            best = compare(best, H(merged, preferred))
    result = best if best is not None else H(default_affinity, False)

    if policy_name == SINGLE:
        if result.mask == default_affinity:
            result = H(None, result.preferred)
        return result, result.preferred
    if policy_name == RESTRICTED:
        return result, result.preferred
    return result, True


def _distinct_candidates(filtered: Sequence[Sequence[H]], default_affinity: int) -> set[H]:
    """Every distinct ``mergePermutation`` result, built dimension by dimension on
    (AND so far, preferred so far, first non-nil mask) states."""
    states: set[tuple[int, bool, int | None]] = {(default_affinity, True, None)}
    for hs in filtered:
        following: set[tuple[int, bool, int | None]] = set()
        for merged, preferred, first in states:
            for h in hs:
                if h.mask is None:
                    following.add((merged, preferred and h.preferred, first))
                    continue
                same = first is None or h.mask == first
                still = preferred and h.preferred and same
                # once not preferred, the first mask no longer matters: forget it to keep states few
                following.add((merged & h.mask, still, (h.mask if first is None else first) if still else -1))
        states = following
    return {H(merged, preferred) for merged, preferred, _ in states}


# --- one common table, every policy ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MergeCase:
    description: str
    providers: tuple[hints.ProviderHints, ...]
    expected: Mapping[str, tuple[H, bool]]
    numa_ids: tuple[int, ...] = (0, 1)
    prefer_closest: bool = False
    distances: Mapping[int, tuple[int, ...]] | None = field(default=None)


FOUR_NODE_DISTANCES = {0: (10, 11, 12, 12), 1: (11, 10, 12, 12), 2: (12, 12, 10, 11), 3: (12, 12, 11, 10)}


def _same_for(hint: H, admit: dict[str, bool]) -> dict[str, tuple[H, bool]]:
    return {name: (hint, admit[name]) for name in admit}


ALL_ADMIT = {BEST_EFFORT: True, RESTRICTED: True, SINGLE: True}
ONLY_BEST_EFFORT = {BEST_EFFORT: True, RESTRICTED: False, SINGLE: False}

COMMON_CASES = [
    MergeCase(
        "no providers at all gives the preferred default affinity",
        (),
        {
            BEST_EFFORT: (H(m(0, 1), True), True),
            RESTRICTED: (H(m(0, 1), True), True),
            SINGLE: (H(None, True), True),
        },
    ),
    MergeCase(
        "a nil provider and an empty provider both mean don't care",
        (None, {}),
        {
            BEST_EFFORT: (H(m(0, 1), True), True),
            RESTRICTED: (H(m(0, 1), True), True),
            SINGLE: (H(None, True), True),
        },
    ),
    MergeCase(
        "a nil hint list means don't care for that resource",
        ({"cpu": None}, {"memory": [H(m(1), True)]}),
        _same_for(H(m(1), True), ALL_ADMIT),
    ),
    MergeCase(
        "an empty hint list cannot be satisfied",
        ({"cpu": []}, {"memory": [H(m(1), True)]}),
        {
            BEST_EFFORT: (H(m(1), False), True),
            RESTRICTED: (H(m(1), False), False),
            SINGLE: (H(None, False), False),
        },
    ),
    MergeCase(
        "worked example 1: conflicting singletons leave the shared one preferred",
        ({"cpu": [H(m(0), True), H(m(1), True), H(m(0, 1), False)]}, {"memory": [H(m(1), True), H(m(0, 1), False)]}),
        _same_for(H(m(1), True), ALL_ADMIT),
    ),
    MergeCase(
        "worked example 2: a two-node CPU request cannot live on one node",
        ({"cpu": [H(m(0, 1), True)]},),
        {
            BEST_EFFORT: (H(m(0, 1), True), True),
            RESTRICTED: (H(m(0, 1), True), True),
            SINGLE: (H(None, False), False),
        },
    ),
    MergeCase(
        "preferred hints with different masks merge into a non-preferred hint",
        ({"cpu": [H(m(0, 1), True)]}, {"memory": [H(m(0, 1, 2), True)]}),
        {
            BEST_EFFORT: (H(m(0, 1), False), True),
            RESTRICTED: (H(m(0, 1), False), False),
            SINGLE: (H(None, False), False),
        },
        numa_ids=(0, 1, 2, 3),
    ),
    MergeCase(
        "disjoint masks give no candidate and fall back to the default affinity",
        ({"cpu": [H(m(0), True)]}, {"memory": [H(m(1), True)]}),
        {
            BEST_EFFORT: (H(m(0, 1), False), True),
            RESTRICTED: (H(m(0, 1), False), False),
            SINGLE: (H(None, False), False),
        },
    ),
    MergeCase(
        "worked example 4: the non-preferred target count beats a narrower mask",
        (
            {"a": [H(m(0, 1, 2, 3), False), H(m(0, 1), False)]},
            {"b": [H(m(0, 1, 2, 3), False), H(m(0, 1, 2), False)]},
        ),
        {
            BEST_EFFORT: (H(m(0, 1, 2), False), True),
            RESTRICTED: (H(m(0, 1, 2), False), False),
            SINGLE: (H(None, False), False),
        },
        numa_ids=(0, 1, 2, 3),
    ),
    MergeCase(
        "below the target the widest mask is closest to it",
        ({"a": [H(m(0), False), H(m(1, 2), False)]}, {"b": [H(m(0, 1, 2), False)]}),
        {
            BEST_EFFORT: (H(m(1, 2), False), True),
            RESTRICTED: (H(m(1, 2), False), False),
            SINGLE: (H(None, False), False),
        },
        numa_ids=(0, 1, 2, 3),
    ),
    MergeCase(
        "worked example 3 without the option: the lower mask value wins",
        ({"cpu": [H(m(0, 2), True), H(m(2, 3), True)]},),
        {
            BEST_EFFORT: (H(m(0, 2), True), True),
            RESTRICTED: (H(m(0, 2), True), True),
            SINGLE: (H(None, False), False),
        },
        numa_ids=(0, 1, 2, 3),
        distances=FOUR_NODE_DISTANCES,
    ),
    MergeCase(
        "worked example 3 with prefer-closest: the closer pair wins, single-numa-node ignores it",
        ({"cpu": [H(m(0, 2), True), H(m(2, 3), True)]},),
        {
            BEST_EFFORT: (H(m(2, 3), True), True),
            RESTRICTED: (H(m(2, 3), True), True),
            SINGLE: (H(None, False), False),
        },
        numa_ids=(0, 1, 2, 3),
        prefer_closest=True,
        distances=FOUR_NODE_DISTANCES,
    ),
    MergeCase(
        "single-numa-node keeps the preferred singleton among wider hints",
        ({"cpu": [H(m(0, 1), True), H(m(1), True)]}, {"memory": [H(m(1), True), H(m(0, 1), False)]}),
        {
            BEST_EFFORT: (H(m(1), True), True),
            RESTRICTED: (H(m(1), True), True),
            SINGLE: (H(m(1), True), True),
        },
    ),
    MergeCase(
        "masks are clipped to the machine's NUMA nodes",
        ({"cpu": [H(m(1, 5), False)]},),
        {
            BEST_EFFORT: (H(m(1), False), True),
            RESTRICTED: (H(m(1), False), False),
            SINGLE: (H(None, False), False),
        },
    ),
    MergeCase(
        "a deep search keeps nodes whose companions number exactly the target count",
        (
            {
                "a": [
                    H(m(0, 1, 3, 5, 6), False),
                    H(m(0, 1, 3, 4, 5), False),
                    H(m(1, 2, 3, 5, 6), False),
                    H(m(1, 4), False),
                ]
            },
            {"b": [H(m(0, 2, 4, 5, 6), False), H(m(0, 2, 4), False), H(m(2, 3, 6), False)]},
            {"c": [H(m(0, 4, 5, 6), False), H(m(0, 5, 6), False), H(m(0, 2, 3, 5, 6), False)]},
            {"d": [H(m(0, 1, 3, 4, 5, 6), False), H(m(1, 6), False), H(m(0, 2, 3, 4, 6), False)]},
        ),
        {
            BEST_EFFORT: (H(m(0, 4, 5), False), True),
            RESTRICTED: (H(m(0, 4, 5), False), False),
            SINGLE: (H(None, False), False),
        },
        numa_ids=tuple(range(7)),
    ),
    MergeCase(
        "an empty mask hint is skipped",
        ({"cpu": [H(0, True), H(m(0), False)]},),
        {
            BEST_EFFORT: (H(m(0), False), True),
            RESTRICTED: (H(m(0), False), False),
            SINGLE: (H(None, False), False),
        },
    ),
]


@pytest.mark.parametrize("policy_name", MERGING_POLICIES)
@pytest.mark.parametrize("case", COMMON_CASES, ids=lambda c: c.description)
def test_merge_answers_the_common_table_for_every_policy(case: MergeCase, policy_name: str) -> None:
    opts = options.TopologyManagerOptions(prefer_closest_numa=case.prefer_closest)
    merged = new_topology_policy(policy_name, case.numa_ids, opts, case.distances).merge(case.providers)
    assert merged == case.expected[policy_name]


@pytest.mark.parametrize("case", COMMON_CASES, ids=lambda c: c.description)
def test_common_table_expectations_agree_with_the_reference(case: MergeCase) -> None:
    for policy_name in MERGING_POLICIES:
        expected = reference_merge(
            policy_name, case.numa_ids, case.providers, prefer_closest=case.prefer_closest, distances=case.distances
        )
        assert case.expected[policy_name] == expected


@pytest.mark.parametrize("case", COMMON_CASES, ids=lambda c: c.description)
def test_none_policy_admits_everything_without_a_hint(case: MergeCase) -> None:
    none_policy = new_topology_policy(options.POLICY_NONE, case.numa_ids)
    assert none_policy.merge(case.providers) == (H(None, False), True)


def test_new_policy_rejects_an_unknown_name() -> None:
    with pytest.raises(ConfigError, match='^unknown policy: "packed"$'):
        new_topology_policy("packed", (0, 1))


def test_new_policy_needs_distances_for_prefer_closest() -> None:
    opts = options.TopologyManagerOptions(prefer_closest_numa=True)
    with pytest.raises(ConfigError, match="error getting NUMA distances from cadvisor"):
        new_topology_policy(BEST_EFFORT, (0, 1), opts, None)


def test_none_policy_needs_no_distances_even_with_prefer_closest() -> None:
    opts = options.TopologyManagerOptions(prefer_closest_numa=True)
    assert new_topology_policy(options.POLICY_NONE, (0, 1), opts, None).name == options.POLICY_NONE


def test_registry_holds_exactly_the_kubelet_policy_names() -> None:
    assert tuple(TOPOLOGY_POLICIES) == options.POLICY_NAMES
    for name in options.POLICY_NAMES:
        assert new_topology_policy(name, (0, 1)).name == name


def test_numa_info_orders_masks_as_the_kubelet() -> None:
    info = NUMAInfo.build((0, 1, 2, 3), FOUR_NODE_DISTANCES, need_distances=True)
    assert info.narrowest(m(2, 3), m(0, 2)) == m(0, 2)
    assert info.closest(m(0, 2), m(2, 3)) == m(2, 3)
    assert info.closest(m(0, 1), m(2, 3)) == m(0, 1)  # equal distances: lower value
    assert info.closest(m(0, 1, 2), m(3)) == m(3)  # different counts: narrower


# --- property tests: pruned merge == literal cross product -----------------------------------------------------------

MAX_NODES = 6
MergeData = tuple[tuple[int, ...], tuple[hints.ProviderHints, ...], dict[int, tuple[int, ...]]]


@st.composite
def merge_inputs(draw: st.DrawFn, max_hints: int = 5, max_dimensions: int = 4) -> MergeData:
    node_count = draw(st.integers(1, MAX_NODES))
    numa_ids = tuple(range(node_count))
    # masks may stray one node beyond the machine, and may be empty
    mask_strategy = st.one_of(st.none(), st.integers(0, (1 << (node_count + 1)) - 1))
    hint_strategy = st.builds(H, mask_strategy, st.booleans())
    hint_list = st.one_of(st.none(), st.lists(hint_strategy, min_size=0, max_size=max_hints))
    providers: list[hints.ProviderHints] = []
    dimensions = 0
    for _ in range(draw(st.integers(0, 3))):
        if dimensions >= max_dimensions or draw(st.integers(0, 9)) == 0:
            providers.append(draw(st.sampled_from([None, {}])))
            dimensions += 1
            continue
        resources = draw(st.integers(1, min(2, max_dimensions - dimensions)))
        providers.append({f"r{dimensions + i}": draw(hint_list) for i in range(resources)})
        dimensions += resources
    # few distinct distances, so that equal averages (value tie-break) happen
    rows = {
        i: tuple(10 if i == j else draw(st.sampled_from((11, 12, 20, 21))) for j in range(MAX_NODES + 1))
        for i in range(MAX_NODES + 1)
    }
    return numa_ids, tuple(providers), rows


def _assert_same_as_reference(
    policy_name: str,
    prefer_closest: bool,
    data: MergeData,
) -> None:
    numa_ids, providers, distances = data
    opts = options.TopologyManagerOptions(prefer_closest_numa=prefer_closest)
    ours = new_topology_policy(policy_name, numa_ids, opts, distances).merge(providers)
    kubelet = reference_merge(policy_name, numa_ids, providers, prefer_closest=prefer_closest, distances=distances)
    assert ours == kubelet


@pytest.mark.parametrize("prefer_closest", [False, True], ids=["narrowest", "prefer-closest"])
@pytest.mark.parametrize("policy_name", MERGING_POLICIES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=merge_inputs())
def test_pruned_merge_equals_the_full_cross_product(
    policy_name: str,
    prefer_closest: bool,
    data: MergeData,
) -> None:
    _assert_same_as_reference(policy_name, prefer_closest, data)


@pytest.mark.parametrize("prefer_closest", [False, True], ids=["narrowest", "prefer-closest"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=merge_inputs(max_hints=16, max_dimensions=3))
def test_pruned_merge_equals_the_full_cross_product_on_long_hint_lists(
    prefer_closest: bool,
    data: MergeData,
) -> None:
    _assert_same_as_reference(BEST_EFFORT, prefer_closest, data)


@st.composite
def non_preferred_heavy_inputs(
    draw: st.DrawFn,
) -> MergeData:
    """Hint lists where preferred permutations are rare, so the branch and bound does the work."""
    node_count = draw(st.integers(2, MAX_NODES))
    all_masks = list(bitmask.iterate_bitmasks(range(node_count)))
    providers: list[hints.ProviderHints] = []
    for index in range(draw(st.integers(1, 3))):
        chosen = draw(st.lists(st.sampled_from(all_masks), min_size=1, max_size=12, unique=True))
        minimal = min(bitmask.count(x) for x in chosen)
        providers.append({f"r{index}": [H(x, bitmask.count(x) == minimal and draw(st.booleans())) for x in chosen]})
    rows = {i: tuple(10 if i == j else 11 + (i + j) % 3 for j in range(node_count)) for i in range(node_count)}
    return tuple(range(node_count)), tuple(providers), rows


@pytest.mark.parametrize("prefer_closest", [False, True], ids=["narrowest", "prefer-closest"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=non_preferred_heavy_inputs())
def test_pruned_merge_equals_the_full_cross_product_when_nothing_is_preferred(
    prefer_closest: bool,
    data: MergeData,
) -> None:
    _assert_same_as_reference(RESTRICTED, prefer_closest, data)


@settings(max_examples=80, deadline=None)
@given(data=merge_inputs(), rotation=st.integers(0, 5))
def test_merge_result_does_not_depend_on_provider_order(data: MergeData, rotation: int) -> None:
    numa_ids, providers, distances = data
    if not providers:
        return
    shift = rotation % len(providers)
    rotated = providers[shift:] + providers[:shift]
    merger = new_topology_policy(BEST_EFFORT, numa_ids)
    assert merger.merge(providers) == merger.merge(rotated)


@st.composite
def wide_search_inputs(
    draw: st.DrawFn,
) -> MergeData:
    """Up to 8 nodes, 4 dimensions of up to 40 masks, few preferred hints: long branch-and-bound searches."""
    node_count = draw(st.integers(3, 8))
    all_masks = list(bitmask.iterate_bitmasks(range(node_count)))
    providers: list[hints.ProviderHints] = []
    for index in range(draw(st.integers(2, 4))):
        chosen = draw(st.lists(st.sampled_from(all_masks), min_size=1, max_size=40, unique=True))
        providers.append({f"r{index}": [H(x, draw(st.integers(0, 9)) == 0) for x in chosen]})
    rows = {i: tuple(10 if i == j else draw(st.sampled_from((11, 12, 21))) for j in range(8)) for i in range(8)}
    return tuple(range(node_count)), tuple(providers), rows


@pytest.mark.parametrize("prefer_closest", [False, True], ids=["narrowest", "prefer-closest"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=wide_search_inputs())
def test_pruned_merge_equals_the_deduplicated_fold_on_wide_searches(
    prefer_closest: bool,
    data: MergeData,
) -> None:
    numa_ids, providers, distances = data
    opts = options.TopologyManagerOptions(prefer_closest_numa=prefer_closest)
    ours = new_topology_policy(RESTRICTED, numa_ids, opts, distances).merge(providers)
    kubelet = reference_merge(
        RESTRICTED, numa_ids, providers, prefer_closest=prefer_closest, distances=distances, deduplicate=True
    )
    assert ours == kubelet


@settings(max_examples=60, deadline=None)
@given(data=merge_inputs(max_hints=6, max_dimensions=3))
def test_deduplicated_fold_agrees_with_the_literal_cross_product(
    data: MergeData,
) -> None:
    numa_ids, providers, distances = data
    for prefer_closest in (False, True):
        literal = reference_merge(BEST_EFFORT, numa_ids, providers, prefer_closest=prefer_closest, distances=distances)
        folded = reference_merge(
            BEST_EFFORT, numa_ids, providers, prefer_closest=prefer_closest, distances=distances, deduplicate=True
        )
        assert literal == folded


@given(
    mask=st.integers(0, (1 << 10) - 1),
    rows=st.lists(st.lists(st.integers(0, 255), min_size=10, max_size=10), min_size=10, max_size=10),
)
def test_distance_sum_adds_every_ordered_pair(mask: int, rows: list[list[int]]) -> None:
    info = NUMAInfo.build(tuple(range(10)), dict(enumerate(rows)), need_distances=True)
    ids = bitmask.ids_of(mask)
    assert info.distance_sum(mask) == sum(rows[i][j] for i in ids for j in ids)


@given(
    mask=st.integers(1, (1 << 8) - 1),
    size=st.integers(1, 4),
    rows=st.lists(st.lists(st.sampled_from((10, 11, 12, 20, 21)), min_size=8, max_size=8), min_size=8, max_size=8),
)
def test_closest_subset_is_the_lowest_sum_then_lowest_value(mask: int, size: int, rows: list[list[int]]) -> None:
    if size > bitmask.count(mask):
        return
    info = NUMAInfo.build(tuple(range(8)), dict(enumerate(rows)), need_distances=True)
    subsets = [bitmask.from_ids(s) for s in itertools.combinations(bitmask.ids_of(mask), size)]
    expected = min((sum(rows[i][j] for i in bitmask.ids_of(x) for j in bitmask.ids_of(x)), x) for x in subsets)
    assert info.closest_subset(mask, size) == expected


def test_distance_rows_are_read_by_position_when_numa_ids_have_gaps() -> None:
    # nodes 0 and 2 online: sysfs lists one distance per online node
    info = NUMAInfo.build((0, 2), {0: (10, 21), 2: (21, 10)}, need_distances=True)
    assert info.distance_sum(m(0, 2)) == 10 + 21 + 21 + 10


def test_distance_rows_too_short_for_the_machine_are_refused() -> None:
    with pytest.raises(ConfigError, match="distance row of NUMA node 0 has 1 entries for 2 NUMA nodes"):
        NUMAInfo.build((0, 1), {0: (10,), 1: (11, 10)}, need_distances=True)
