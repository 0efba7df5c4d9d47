"""NUMA bitmask helpers: the kubelet's ``bitmask`` orderings, which the merge's tie-breaks rely on."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from enforcer.topology import bitmask


def test_iterate_bitmasks_lists_singletons_then_pairs_then_triples() -> None:
    masks = [bitmask.ids_of(x) for x in bitmask.iterate_bitmasks([0, 1, 2])]
    assert masks == [[0], [1], [2], [0, 1], [0, 2], [1, 2], [0, 1, 2]]


def test_iterate_bitmasks_over_eight_nodes_yields_all_255_masks_once() -> None:
    masks = list(bitmask.iterate_bitmasks(range(8)))
    assert len(masks) == 255
    assert sorted(masks) == list(range(1, 256))


@given(st.lists(st.integers(0, 63), min_size=0, max_size=7, unique=True))
def test_iterate_bitmasks_is_by_size_then_lexicographic_over_the_given_ids(ids: list[int]) -> None:
    position = {numa_id: i for i, numa_id in enumerate(ids)}
    expected = [
        bitmask.from_ids(subset) for size in range(1, len(ids) + 1) for subset in itertools.combinations(ids, size)
    ]
    produced = list(bitmask.iterate_bitmasks(ids))
    assert produced == expected
    keys = [(bitmask.count(x), sorted(position[i] for i in bitmask.ids_of(x))) for x in produced]
    assert keys == sorted(keys)


@pytest.mark.parametrize(
    ("first", "second", "narrower"),
    [
        ([0], [0, 1], True),
        ([0, 1], [0], False),
        ([0, 1], [0, 2], True),  # same count: lower value
        ([0, 2], [0, 1], False),
        ([1], [1], False),
        ([3], [0, 1], True),
    ],
)
def test_is_narrower_than_counts_first_then_value(first: list[int], second: list[int], narrower: bool) -> None:
    assert bitmask.is_narrower_than(bitmask.from_ids(first), bitmask.from_ids(second)) is narrower


def test_is_less_than_compares_the_raw_value() -> None:
    assert bitmask.is_less_than(bitmask.from_ids([0, 1]), bitmask.from_ids([0, 2]))
    assert not bitmask.is_less_than(bitmask.from_ids([2]), bitmask.from_ids([0, 1]))


@pytest.mark.parametrize("bad_id", [-1, 64])
def test_from_ids_refuses_ids_a_kubelet_bitmask_cannot_hold(bad_id: int) -> None:
    with pytest.raises(bitmask.BitMaskError, match="bit number must be in range 0-63"):
        bitmask.from_ids([0, bad_id])


@given(st.sets(st.integers(0, 63)))
def test_ids_of_and_count_invert_from_ids(ids: set[int]) -> None:
    mask = bitmask.from_ids(ids)
    assert bitmask.ids_of(mask) == sorted(ids)
    assert bitmask.count(mask) == len(ids)


@given(st.integers(0, (1 << 64) - 1), st.integers(0, 64))
def test_lowest_bits_is_the_smallest_subset_value_of_that_size(mask: int, size: int) -> None:
    picked = bitmask.lowest_bits(mask, size)
    assert picked & ~mask == 0
    assert bitmask.count(picked) == min(size, bitmask.count(mask))
    assert picked == bitmask.from_ids(bitmask.ids_of(mask)[:size])


def test_and_all_starts_from_the_first_mask() -> None:
    assert bitmask.and_all(0b1111, [0b0110, 0b0011]) == 0b0010
    assert bitmask.and_all(0b101, []) == 0b101


def test_format_mask_reads_as_a_set() -> None:
    assert bitmask.format_mask(bitmask.from_ids([0, 2])) == "{0,2}"
    assert bitmask.format_mask(None) == "any"
