"""The resize-aware CPU selection (KEP-5554 ``takeByTopologyNUMAPackedForResize``): closest first, promise kept."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from resize_builders import dual_socket_ht_32, four_numa_16

from enforcer.cpumanager.resize_take import take_for_resize
from enforcer.errors import CPUAllocationError
from enforcer.topology import machine
from shared.cpuset import CPUSet


def single_socket_8() -> machine.CPUTopology:
    """KEP-5554's Example 3 machine: one NUMA node, 8 single-thread cores."""
    cpus = [machine.CPUInfo(id=i, core=i, socket=0, numa=0, uncore=0) for i in range(8)]
    return machine.CPUTopology(cpus, [machine.NUMANode(0)])


def two_caches_8() -> machine.CPUTopology:
    """One NUMA node, two uncore caches of 4 single-thread cores (0-3, 4-7)."""
    cpus = [machine.CPUInfo(id=i, core=i, socket=0, numa=0, uncore=i // 4) for i in range(8)]
    return machine.CPUTopology(cpus, [machine.NUMANode(0)])


@dataclass(frozen=True)
class TakeCase:
    name: str
    topology: str
    free: str
    retained: str
    count: int
    expected: str
    spread: bool = False
    align_uncore: bool = False


def sub_numa_16() -> machine.CPUTopology:
    """Sub-NUMA clustering: one socket split in 2 NUMA nodes of 4 cores x 2 threads (siblings c, c+8)."""
    cpus = [
        machine.CPUInfo(id=t * 8 + c, core=c, socket=0, numa=c // 4, uncore=c // 4) for t in range(2) for c in range(8)
    ]
    return machine.CPUTopology(cpus, [machine.NUMANode(0), machine.NUMANode(1)])


def smt_two_caches_16() -> machine.CPUTopology:
    """One NUMA node, two uncore caches of 4 cores x 2 threads (siblings c, c+8)."""
    cpus = [machine.CPUInfo(id=t * 8 + c, core=c, socket=0, numa=0, uncore=c // 4) for t in range(2) for c in range(8)]
    return machine.CPUTopology(cpus, [machine.NUMANode(0)])


TOPOLOGIES = {
    "sub-numa-16": sub_numa_16,
    "smt-two-caches-16": smt_two_caches_16,
    "single-socket-8": single_socket_8,
    "dual-socket-ht-32": dual_socket_ht_32,
    "four-numa-16": four_numa_16,
    "two-caches-8": two_caches_8,
}

CASES = [
    TakeCase("kep example 3: growing 2 to 4 takes the next cores", "single-socket-8", "3-7", "1-2", 4, "1-4"),
    TakeCase("kep example 3: shrinking 4 to 3 keeps the original", "single-socket-8", "3-4", "1-2", 3, "1-3"),
    TakeCase("a grow completes the held core before any other", "dual-socket-ht-32", "2-15,17-31", "1", 2, "1,17"),
    TakeCase(
        "a grow stays on the held NUMA node although the other one is emptier",
        "dual-socket-ht-32",
        "5-15,21-31",
        "1-2,17-18",
        6,
        "1-2,5,17-18,21",
    ),
    TakeCase(
        "a grow takes a whole free NUMA node when the need covers it",
        "four-numa-16",
        "4-15",
        "1",
        5,
        "1,4-7",
    ),
    TakeCase("a grow spills to the next node once the held one is full", "four-numa-16", "3,5-15", "0-2", 5, "0-3,5"),
    TakeCase(
        "a shrink keeps the promised CPUs and the closest of the others",
        "dual-socket-ht-32",
        "2,17-18,8,24",
        "1",
        3,
        "1-2,17",
    ),
    TakeCase(
        "uncore alignment grows inside the cache already held",
        "two-caches-8",
        "1,4-7",
        "2-3",
        3,
        "1-3",
        align_uncore=True,
    ),
    TakeCase(
        "sockets-first machines keep to the held NUMA node inside the socket",
        "sub-numa-16",
        "2-7,10-15",
        "1,9",
        4,
        "1-2,9-10",
    ),
    TakeCase(
        "sockets-first machines take a whole free NUMA node when the need covers it",
        "sub-numa-16",
        "4-7,12-15",
        "0",
        9,
        "0,4-7,12-15",
    ),
    TakeCase(
        "an odd need inside the held cache leaves the last sibling out",
        "smt-two-caches-16",
        "1-7,9-15",
        "0,8",
        5,
        "0-2,8-9",
        align_uncore=True,
    ),
    TakeCase(
        "the spread order walks the held socket by CPU id",
        "dual-socket-ht-32",
        "2-15,17-31",
        "1",
        3,
        "1-3",
        spread=True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_resize_selection_matches_the_kep_order(case: TakeCase) -> None:
    result = take_for_resize(
        TOPOLOGIES[case.topology](),
        CPUSet.parse(case.free),
        CPUSet.parse(case.retained),
        case.count,
        spread=case.spread,
        align_uncore=case.align_uncore,
    )
    assert result == CPUSet.parse(case.expected)


def test_asking_for_less_than_the_retained_cpus_is_an_error() -> None:
    with pytest.raises(CPUAllocationError, match=r"requested number of CPUs \( 1 \) are less than number of retained"):
        take_for_resize(single_socket_8(), CPUSet.parse("3-7"), CPUSet.parse("1-2"), 1)


def test_not_enough_free_cpus_gives_the_kubelet_message() -> None:
    message = "not enough cpus available to satisfy request: requested=6, available=4"
    with pytest.raises(CPUAllocationError, match=message):
        take_for_resize(single_socket_8(), CPUSet.parse("3-4"), CPUSet.parse("1-2"), 6)


def test_asking_for_exactly_the_retained_cpus_returns_them() -> None:
    assert take_for_resize(single_socket_8(), CPUSet.parse("3-7"), CPUSet.parse("1-2"), 2) == CPUSet.parse("1-2")


@settings(max_examples=150, deadline=None)
@given(
    free_mask=st.integers(min_value=0, max_value=(1 << 32) - 1),
    retained_mask=st.integers(min_value=0, max_value=(1 << 32) - 1),
    extra=st.integers(min_value=0, max_value=32),
    spread=st.booleans(),
    align_uncore=st.booleans(),
)
def test_the_result_holds_the_retained_cpus_and_only_free_ones(
    free_mask: int, retained_mask: int, extra: int, spread: bool, align_uncore: bool
) -> None:
    free = CPUSet.from_mask(free_mask & ~retained_mask)
    retained = CPUSet.from_mask(retained_mask)
    count = min(len(retained) + extra, len(retained) + len(free))
    result = take_for_resize(dual_socket_ht_32(), free, retained, count, spread=spread, align_uncore=align_uncore)
    assert len(result) == count
    assert retained.is_subset_of(result)
    assert result.is_subset_of(retained | free)
