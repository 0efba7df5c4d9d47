"""CPU selection beyond the kubelet's tables: named behaviours, Go quirks we reproduce, and invariants.

Machines are built in the Linux numbering the kubelet sees: core ``c`` of ``n`` has threads
``c, c + n, ...`` and its core id is its lowest thread (kubelet ``getUniqueCoreID``).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from enforcer.cpumanager.assignment import (
    TakeOptions,
    go_owned_prefix,
    go_remembered_combination,
    take_by_topology,
)
from enforcer.errors import CPUAllocationError
from enforcer.topology.machine import CPUInfo, CPUTopology
from shared.cpuset import CPUSet

PACKED = TakeOptions()
SPREAD = TakeOptions(spread_across_cores=True)
UNCORE = TakeOptions(prefer_align_uncore=True)
DISTRIBUTED = TakeOptions(algorithm="distributed")
DISTRIBUTED_CORES = TakeOptions(algorithm="distributed", cpu_group_size=2)


def build_machine(
    *,
    sockets: int = 1,
    numa_per_socket: int = 1,
    sockets_per_numa: int = 1,
    cores_per_numa: int,
    threads: int = 1,
    cores_per_uncore: int | None = None,
) -> CPUTopology:
    """A symmetric machine; ``sockets_per_numa > 1`` builds NUMA nodes that hold several sockets."""
    numas = sockets * numa_per_socket // sockets_per_numa
    cores = numas * cores_per_numa
    per_uncore = cores_per_uncore or cores_per_numa
    cpus = []
    for core in range(cores):
        numa = core // cores_per_numa
        if sockets_per_numa > 1:
            socket = numa * sockets_per_numa + (core % cores_per_numa) * sockets_per_numa // cores_per_numa
        else:
            socket = numa // numa_per_socket
        uncore = numa * -(-cores_per_numa // per_uncore) + (core % cores_per_numa) // per_uncore
        for thread in range(threads):
            cpus.append(CPUInfo(id=core + thread * cores, core=core, socket=socket, numa=numa, uncore=uncore))
    return CPUTopology(cpus)


# 2 sockets x 6 cores x 2 threads, one NUMA node per socket: socket 0 = 0-5 + 12-17 (spec Example 1).
DUAL_SOCKET_HT = build_machine(sockets=2, cores_per_numa=6, threads=2)
# 1 socket, 4 NUMA nodes x 8 single-thread cores (spec Example 2).
FOUR_NUMA = build_machine(numa_per_socket=4, cores_per_numa=8)
# 2 sockets x 4 NUMA nodes x 4 single-thread cores.
EIGHT_NUMA = build_machine(sockets=2, numa_per_socket=4, cores_per_numa=4)
# 1 socket, 4 NUMA nodes x 8 cores x 2 threads: NUMA n = cores 8n..8n+7 and their siblings +32.
FOUR_NUMA_HT = build_machine(numa_per_socket=4, cores_per_numa=8, threads=2)
# 1 socket, 1 NUMA node, 8 cores x 2 threads, uncore caches of 4 cores: cache 0 = 0-3,8-11.
UNCORE_HT = build_machine(cores_per_numa=8, threads=2, cores_per_uncore=4)
# 2 sockets x 2 NUMA nodes x 4 single-thread cores: socket 0 = NUMA 0 (0-3) + NUMA 1 (4-7).
TWO_BY_TWO = build_machine(sockets=2, numa_per_socket=2, cores_per_numa=4)


@dataclass(frozen=True)
class Case:
    description: str
    topology: CPUTopology
    available: CPUSet
    request: int
    options: TakeOptions
    expected: CPUSet


def _all_but(topology: CPUTopology, busy: str) -> CPUSet:
    return topology.all_cpus - CPUSet.parse(busy)


CASES = [
    Case(
        "packed takes whole cores from the socket with fewer free cpus first (spec example 1)",
        DUAL_SOCKET_HT,
        _all_but(DUAL_SOCKET_HT, "0,12"),
        4,
        PACKED,
        CPUSet.parse("1-2,13-14"),
    ),
    Case(
        "packed takes a whole free socket when the request covers it",
        DUAL_SOCKET_HT,
        _all_but(DUAL_SOCKET_HT, "0"),
        12,
        PACKED,
        CPUSet.parse("6-11,18-23"),
    ),
    Case(
        "packed fills the half-used core before breaking a whole one for a single cpu",
        DUAL_SOCKET_HT,
        _all_but(DUAL_SOCKET_HT, "0"),
        1,
        PACKED,
        CPUSet.parse("12"),
    ),
    Case(
        "spread takes one thread per core before any sibling",
        DUAL_SOCKET_HT,
        DUAL_SOCKET_HT.all_cpus,
        3,
        SPREAD,
        CPUSet.parse("0-2"),
    ),
    Case(
        "uncore alignment takes a whole free cache when the request is a cache's worth",
        UNCORE_HT,
        _all_but(UNCORE_HT, "0"),
        8,
        UNCORE,
        CPUSet.parse("4-7,12-15"),
    ),
    Case(
        "uncore alignment fits a partial request into the first cache with room",
        UNCORE_HT,
        _all_but(UNCORE_HT, "0-2,8-10"),
        4,
        UNCORE,
        CPUSet.parse("4-5,12-13"),
    ),
    Case(
        "an odd uncore request on SMT leaves the last sibling of the last core free",
        UNCORE_HT,
        UNCORE_HT.all_cpus,
        3,
        UNCORE,
        CPUSet.parse("0-1,8"),
    ),
    Case(
        "distributed splits evenly over two NUMA nodes and the first pair wins ties (spec example 2)",
        FOUR_NUMA,
        FOUR_NUMA.all_cpus,
        10,
        DISTRIBUTED,
        CPUSet.parse("0-4,8-12"),
    ),
    Case(
        "distributed falls back to packed when the request is not a whole number of groups",
        FOUR_NUMA_HT,
        FOUR_NUMA_HT.all_cpus,
        3,
        DISTRIBUTED_CORES,
        CPUSet.parse("0,32,1"),
    ),
    Case(
        "distributed allocates from the combination Go's shared slice was overwritten with (0,1,2,7 not 0,1,2,3)",
        EIGHT_NUMA,
        EIGHT_NUMA.all_cpus,
        14,
        DISTRIBUTED,
        CPUSet.parse("0-10,28-30"),
    ),
    Case(
        "distributed takes the best-balanced pair of NUMA nodes even across sockets",
        TWO_BY_TWO,
        _all_but(TWO_BY_TWO, "12"),
        6,
        DISTRIBUTED,
        CPUSet.parse("0-2,8-10"),
    ),
    Case(
        "align-by-socket prefers NUMA nodes of one socket over a better-balanced cross-socket pair",
        TWO_BY_TWO,
        _all_but(TWO_BY_TWO, "12"),
        6,
        TakeOptions(algorithm="distributed", align_by_socket=True),
        CPUSet.parse("0-2,4-6"),
    ),
    Case(
        "distributed completes where the kubelet's remainder round robin would spin forever",
        FOUR_NUMA_HT,
        _all_but(FOUR_NUMA_HT, "0-1,8-9,16-17,24-25,32,40,48,56"),
        46,
        DISTRIBUTED_CORES,
        CPUSet.parse("2-7,10-15,18-23,26-30,34-39,42-47,50-55,58-62"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.description)
def test_take_by_topology_chooses_the_kubelet_cpus(case: Case) -> None:
    assert take_by_topology(case.topology, case.available, case.request, case.options) == case.expected


def test_zero_or_negative_request_takes_nothing() -> None:
    assert take_by_topology(DUAL_SOCKET_HT, DUAL_SOCKET_HT.all_cpus, 0) == CPUSet()
    assert take_by_topology(DUAL_SOCKET_HT, DUAL_SOCKET_HT.all_cpus, -3, DISTRIBUTED) == CPUSet()


def test_not_enough_cpus_error_counts_every_available_cpu_as_the_kubelet_does() -> None:
    # CPUs unknown to the machine are ignored for the choice but still counted in the message.
    available = CPUSet.parse("0-3,100")
    with pytest.raises(CPUAllocationError) as raised:
        take_by_topology(DUAL_SOCKET_HT, available, 5)
    assert str(raised.value) == "not enough cpus available to satisfy request: requested=5, available=5"


def test_cpus_unknown_to_the_machine_are_never_chosen() -> None:
    assert take_by_topology(DUAL_SOCKET_HT, CPUSet.parse("23,100-101"), 1) == CPUSet.parse("23")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"algorithm": "scattered"}, "unknown takeByTopology algorithm"),
        ({"cpu_group_size": 0}, "cpu_group_size must be at least 1"),
    ],
)
def test_take_options_reject_impossible_settings(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TakeOptions(**options)  # type: ignore[arg-type]


# -- Go slice aliasing: the closed form against a literal replay of Go's append ---------------------


def _go_append_walk(pool_size: int, k: int, best_at: int, stop_after: int | None) -> list[int]:
    """Replay iterateCombinations with Go's append growth; return the content of the slice kept at ``best_at``."""
    kept: tuple[list[int], int] | None = None
    count = 0

    def helper(left: int, start: int, array: list[int], length: int) -> bool:
        nonlocal kept, count
        if left == 0:
            if stop_after is not None and count == stop_after:
                return True  # f returned Break: this combination was written, not evaluated
            if count == best_at:
                kept = (array, length)
            count += 1
            return False
        for i in range(start, pool_size - left + 1):
            if length < len(array):  # room left: write into the shared backing array
                array[length] = i
                grown = array
            else:  # full: Go allocates twice the capacity (1 from empty) and copies
                grown = array[:length] + [i] + [-1] * (max(1, 2 * len(array)) - length - 1)
            if helper(left - 1, i + 1, grown, length + 1):
                return True
        return False

    helper(k, 0, [], 0)
    assert kept is not None
    return kept[0][: kept[1]]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_remembered_combination_matches_a_replay_of_go_append(data: st.DataObject) -> None:
    pool_size = data.draw(st.integers(1, 10))
    k = data.draw(st.integers(1, pool_size))
    walk = list(combinations(range(pool_size), k))
    best_at = data.draw(st.integers(0, len(walk) - 1))
    stop_after = data.draw(st.none() | st.integers(best_at + 1, len(walk)))
    stopped_at = walk[stop_after] if stop_after is not None and stop_after < len(walk) else None
    expected = _go_append_walk(pool_size, k, best_at, stop_after if stopped_at is not None else None)
    assert list(go_remembered_combination(walk[best_at], stopped_at, pool_size)) == expected


def test_owned_prefix_follows_go_capacity_doubling() -> None:
    assert [go_owned_prefix(k) for k in range(1, 18)] == [1, 2, 3, 3, 5, 5, 5, 5, 9, 9, 9, 9, 9, 9, 9, 9, 17]


# -- invariants over random machines, free sets, requests and options --------------------------------


@st.composite
def machines(draw: st.DrawFn) -> CPUTopology:
    if draw(st.booleans()):
        layout = {"sockets": draw(st.integers(1, 2)), "numa_per_socket": draw(st.integers(1, 3))}
    else:  # NUMA nodes holding two sockets each: the kubelet's "NUMA first" order
        layout = {"sockets": 2 * draw(st.integers(1, 2)), "sockets_per_numa": 2}
    cores_per_numa = draw(st.sampled_from([2, 4, 6]))
    return build_machine(
        **layout,
        cores_per_numa=cores_per_numa,
        threads=draw(st.integers(1, 2)),
        cores_per_uncore=draw(st.sampled_from([1, 2, cores_per_numa])),
    )


options_strategy = st.builds(
    TakeOptions,
    algorithm=st.sampled_from(["packed", "distributed"]),
    cpu_group_size=st.integers(1, 2),
    spread_across_cores=st.booleans(),
    prefer_align_uncore=st.booleans(),
    align_by_socket=st.booleans(),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[CPUTopology, CPUSet, int, TakeOptions]:
    machine = draw(machines())
    cpus = machine.all_cpus.sorted()
    available = CPUSet(draw(st.lists(st.sampled_from(cpus), unique=True)))
    request = draw(st.integers(0, len(available)))
    return machine, available, request, draw(options_strategy)


@settings(max_examples=300, deadline=None)
@given(requests())
def test_result_is_exactly_the_requested_number_of_available_cpus(
    request: tuple[CPUTopology, CPUSet, int, TakeOptions],
) -> None:
    machine, available, num_cpus, options = request
    try:
        chosen = take_by_topology(machine, available, num_cpus, options)
    except CPUAllocationError as err:
        # Only the distributed algorithm can trip over its own accounting (the kubelet would hang or fail).
        assert options.algorithm == "distributed"
        assert str(err).startswith("accounting error")
        return
    assert chosen.is_subset_of(available)
    assert len(chosen) == num_cpus


@settings(max_examples=150, deadline=None)
@given(requests())
def test_same_inputs_give_the_same_cpus(request: tuple[CPUTopology, CPUSet, int, TakeOptions]) -> None:
    machine, available, num_cpus, options = request
    first = take_by_topology(machine, available, num_cpus, options)
    assert take_by_topology(machine, available, num_cpus, options) == first


@settings(max_examples=150, deadline=None)
@given(machines(), options_strategy)
def test_asking_for_every_available_cpu_returns_them_all(machine: CPUTopology, options: TakeOptions) -> None:
    available = machine.all_cpus - CPUSet.parse("0")
    assert take_by_topology(machine, available, len(available), options) == available


@settings(max_examples=150, deadline=None)
@given(requests(), st.integers(1, 64))
def test_asking_for_more_than_is_available_fails_with_the_kubelet_message(
    request: tuple[CPUTopology, CPUSet, int, TakeOptions], extra: int
) -> None:
    machine, available, _, options = request
    too_many = len(available) + extra
    with pytest.raises(CPUAllocationError) as raised:
        take_by_topology(machine, available, too_many, options)
    assert str(raised.value) == (
        f"not enough cpus available to satisfy request: requested={too_many}, available={len(available)}"
    )


@settings(max_examples=300, deadline=None)
@given(requests(), st.booleans())
def test_packed_never_splits_a_core_when_whole_free_cores_suffice(
    request: tuple[CPUTopology, CPUSet, int, TakeOptions], align_uncore: bool
) -> None:
    machine, available, _, _ = request
    per_core = machine.cpus_per_core()
    free_cores = [mask for mask in machine.core_masks.values() if mask & available.mask == mask]
    num_cpus = per_core * (len(free_cores) // 2 + 1) if free_cores else 0
    if num_cpus > per_core * len(free_cores):
        num_cpus = per_core * len(free_cores)
    chosen = take_by_topology(machine, available, num_cpus, TakeOptions(prefer_align_uncore=align_uncore))
    for mask in machine.core_masks.values():
        assert mask & chosen.mask in (0, mask)
