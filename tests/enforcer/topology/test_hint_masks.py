"""The masks hint providers consider: exactly the kubelet's up to 8 NUMA nodes, pruned (soundly) beyond."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from enforcer.topology import hint_masks


@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_small_machines_get_every_subset_in_iterate_bitmasks_order(count: int) -> None:
    ids = list(range(count))
    expected = [c for size in range(1, count + 1) for c in combinations(ids, size)]
    assert list(hint_masks.candidate_masks(ids, min_size=3)) == expected


def test_big_machines_get_the_narrowest_feasible_size_and_the_next() -> None:
    ids = list(range(16))
    masks = list(hint_masks.candidate_masks(ids, min_size=1))
    assert {len(m) for m in masks} == {1, 2}
    assert len(masks) == 16 + 120  # every single node and every pair: all preferred hints are kept


def test_sizes_with_too_many_subsets_keep_compact_neighbourhoods_by_distance() -> None:
    ids = list(range(64))
    distances = {a: [10 if a == b else (12 if a // 8 == b // 8 else 21) for b in ids] for a in ids}
    masks = list(hint_masks.candidate_masks(ids, min_size=3, distances=distances))
    triples = [m for m in masks if len(m) == 3]
    assert triples and all(m[-1] // 8 == m[0] // 8 for m in triples)  # each within one distance group
    assert len(masks) <= 2 * hint_masks.MAX_MASKS_PER_SIZE


def test_masks_come_out_by_size_then_lexicographic_and_include_extra_groups() -> None:
    masks = list(hint_masks.candidate_masks(list(range(20)), min_size=1, extra=[(3, 7, 11, 19)]))
    assert masks == sorted(masks, key=lambda m: (len(m), m))
    assert (3, 7, 11, 19) in masks


@given(st.lists(st.integers(min_value=0, max_value=64), min_size=1, max_size=12), st.integers(0, 400))
def test_min_size_is_the_fewest_nodes_whose_capacity_can_hold_the_request(caps: list[int], request: int) -> None:
    size = hint_masks.min_size_for(caps, request)
    fits = [k for k in range(1, len(caps) + 1) if any(sum(c) >= request for c in combinations(caps, k))]
    assert size == (min(fits) if fits else len(caps) + 1)
