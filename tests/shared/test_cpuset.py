"""CPUSet: the Linux list syntax, and set algebra that matches Python sets."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.cpuset import EMPTY, CPUSet
from shared.errors import CPUSetParseError


@dataclass(frozen=True)
class ListCase:
    description: str
    text: str
    cpus: frozenset[int]
    canonical: str


LIST_CASES = [
    ListCase("empty string is the empty set", "", frozenset(), ""),
    ListCase("sysfs newline is ignored", "0-3\n", frozenset(range(4)), "0-3"),
    ListCase("single cpu", "5", frozenset({5}), "5"),
    ListCase("ranges and singles merge", "1-3,17-19", frozenset({1, 2, 3, 17, 18, 19}), "1-3,17-19"),
    ListCase("unsorted and overlapping input is normalised", "8,0-2,1,3", frozenset({0, 1, 2, 3, 8}), "0-3,8"),
    ListCase("degenerate range", "4-4", frozenset({4}), "4"),
]


@pytest.mark.parametrize("case", LIST_CASES, ids=lambda c: c.description)
def test_linux_list_parses_to_the_cpus_it_names(case: ListCase) -> None:
    cpus = CPUSet.parse(case.text)
    assert set(cpus) == case.cpus
    assert str(cpus) == case.canonical


MALFORMED = ["a", "1-", "-1", "3-1", "1--2", "1-2-3", "1,,2", " 1, 2", "+3", "1_0", "0x3", "99999999"]


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_cpu_list_raises(text: str) -> None:
    with pytest.raises(CPUSetParseError) as err:
        CPUSet.parse(text)
    assert repr(text) in str(err.value)


def test_non_string_input_raises() -> None:
    with pytest.raises(CPUSetParseError):
        CPUSet.parse(3)  # type: ignore[arg-type]


def test_constructor_rejects_negative_and_non_integer_ids() -> None:
    with pytest.raises(CPUSetParseError):
        CPUSet([-1])
    with pytest.raises(CPUSetParseError):
        CPUSet([True])


cpu_ids = st.frozensets(st.integers(min_value=0, max_value=300), max_size=40)


@given(cpu_ids)
def test_parse_of_str_round_trips(cpus: frozenset[int]) -> None:
    s = CPUSet(cpus)
    assert CPUSet.parse(str(s)) == s
    assert s.sorted() == sorted(cpus)
    assert len(s) == len(cpus)


@given(cpu_ids, cpu_ids)
def test_algebra_matches_python_sets(a: frozenset[int], b: frozenset[int]) -> None:
    x, y = CPUSet(a), CPUSet(b)
    assert set(x | y) == a | b
    assert set(x & y) == a & b
    assert set(x - y) == a - b
    assert set(x ^ y) == a ^ b
    assert x.is_subset_of(y) == (a <= b)
    assert x.is_superset_of(y) == (a >= b)
    assert x.isdisjoint(y) == a.isdisjoint(b)
    assert (x == y) == (a == b)


@given(cpu_ids)
def test_membership_first_and_emptiness_agree_with_sets(a: frozenset[int]) -> None:
    s = CPUSet(a)
    assert all(cpu in s for cpu in a)
    assert bool(s) == bool(a)
    if a:
        assert s.first() == min(a)


def test_first_of_empty_set_raises() -> None:
    with pytest.raises(ValueError):
        EMPTY.first()


def test_cpuset_is_immutable_and_hashable() -> None:
    s = CPUSet.parse("0-1")
    with pytest.raises(AttributeError):
        s._mask = 0  # type: ignore[misc]
    assert {s: 1}[CPUSet([0, 1])] == 1
