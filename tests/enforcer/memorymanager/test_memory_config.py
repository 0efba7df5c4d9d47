"""``reservedMemory`` validation (memory-manager.md R1.2, R1.3) with the kubelet's messages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st
from memory_builders import HP1G, GiB, MiB, seed_topology, static_policy

from enforcer.errors import ConfigError
from enforcer.memorymanager import config
from enforcer.memorymanager.policy_static import NO_SYSTEM_RESERVED

SEED_RESERVED = [{"numaNode": 0, "limits": {"memory": "1124Mi"}}]


@dataclass(frozen=True)
class ConfigCase:
    description: str
    reserved_memory: object
    system_reserved: Mapping[str, object] | None = None
    kube_reserved: Mapping[str, object] | None = None
    eviction_hard: Mapping[str, object] | None = field(default_factory=lambda: {"memory.available": "100Mi"})
    expected: Mapping[int, Mapping[str, int]] | None = None
    error: str | None = None


CASES = [
    ConfigCase(
        "R1.3 seed 1: 1124Mi on node 0 equals systemReserved 1Gi + evictionHard 100Mi",
        SEED_RESERVED,
        system_reserved={"cpu": "1", "memory": "1Gi"},
        expected={0: {"memory": 1124 * MiB}, 1: {}},
    ),
    ConfigCase(
        "R1.3 the hard eviction threshold defaults to 100Mi when evictionHard is not given",
        SEED_RESERVED,
        system_reserved={"memory": "1Gi"},
        eviction_hard=None,
        expected={0: {"memory": 1124 * MiB}, 1: {}},
    ),
    ConfigCase(
        "R1.3 an evictionHard without memory.available reserves nothing for eviction",
        SEED_RESERVED,
        system_reserved={"memory": "1Gi"},
        eviction_hard={"nodefs.available": "10%"},
        error='kubelet.reservedMemory: the total amount "1124Mi" of type "memory" is not equal to the value "1Gi" '
        "determined by Node Allocatable feature",
    ),
    ConfigCase(
        "R1.3 kube-reserved, system-reserved and eviction add up, spread over both NUMA nodes",
        [{"numaNode": 0, "limits": {"memory": "562Mi"}}, {"numaNode": 1, "limits": {"memory": "562Mi"}}],
        system_reserved={"memory": "512Mi"},
        kube_reserved={"memory": "512Mi"},
        expected={0: {"memory": 562 * MiB}, 1: {"memory": 562 * MiB}},
    ),
    ConfigCase(
        "R1.3 a sum that misses the eviction threshold is refused with the kubelet message",
        [{"numaNode": 0, "limits": {"memory": "1Gi"}}],
        system_reserved={"memory": "1Gi"},
        error='kubelet.reservedMemory: the total amount "1Gi" of type "memory" is not equal to the value "1124Mi" '
        "determined by Node Allocatable feature",
    ),
    ConfigCase(
        "R1.3 no reservedMemory at all shows a zero total",
        None,
        system_reserved={"memory": "1Gi"},
        error='kubelet.reservedMemory: the total amount "0" of type "memory" is not equal to the value "1124Mi" '
        "determined by Node Allocatable feature",
    ),
    ConfigCase(
        "R1.3 quantities keep the format they were written in",
        [{"numaNode": 0, "limits": {"memory": "2G"}}],
        system_reserved={"memory": "1G"},
        eviction_hard={"memory.available": "0%"},
        error='kubelet.reservedMemory: the total amount "2G" of type "memory" is not equal to the value "1G" '
        "determined by Node Allocatable feature",
    ),
    ConfigCase(
        "R1.3 hugepages are checked per type: a hugepages reservation needs a matching node reservation",
        [{"numaNode": 0, "limits": {"memory": "1124Mi", HP1G: "1Gi"}}],
        system_reserved={"memory": "1Gi"},
        error='kubelet.reservedMemory: the total amount "1Gi" of type "hugepages-1Gi" is not equal to the value '
        '"0" determined by Node Allocatable feature',
    ),
    ConfigCase(
        "R1.3 hugepages reserved in system-reserved and in reservedMemory are accepted",
        [{"numaNode": 0, "limits": {"memory": "1124Mi"}}, {"numaNode": 1, "limits": {HP1G: "1Gi"}}],
        system_reserved={"memory": "1Gi", HP1G: "1Gi"},
        expected={0: {"memory": 1124 * MiB}, 1: {HP1G: GiB}},
    ),
    ConfigCase(
        "R1.3 a percentage threshold is taken of the machine memory with float32 arithmetic",
        [{"numaNode": 1, "limits": {"memory": "6871947776"}}],
        eviction_hard={"memory.available": "5%"},
        expected={0: {}, 1: {"memory": 6871947776}},
    ),
    ConfigCase(
        "R1.3 a NUMA node that does not exist is refused",
        [{"numaNode": 2, "limits": {"memory": "1124Mi"}}],
        system_reserved={"memory": "1Gi"},
        error="kubelet.reservedMemory[0].numaNode: the reserved memory configuration references a NUMA node 2 "
        "that does not exist on this machine",
    ),
    ConfigCase(
        "R1.3 a negative NUMA node does not exist either",
        [{"numaNode": -1, "limits": {"memory": "1124Mi"}}],
        system_reserved={"memory": "1Gi"},
        error="kubelet.reservedMemory[0].numaNode: the reserved memory configuration references a NUMA node -1 "
        "that does not exist on this machine",
    ),
    ConfigCase(
        "R1.2 a zero reservation is refused",
        [{"numaNode": 0, "limits": {"memory": "0"}}],
        error="kubelet.reservedMemory[0].limits.memory: invalid configuration: reserved memory may not be zero "
        'for NUMA node 0 and resource "memory"',
    ),
    ConfigCase(
        "R1.2 a negative reservation is refused",
        [{"numaNode": 0, "limits": {"memory": "-1Gi"}}],
        error="kubelet.reservedMemory[0].limits.memory: reserved memory must not be negative, got -1Gi",
    ),
    ConfigCase(
        "R1.2 only memory and hugepages may be reserved",
        [{"numaNode": 0, "limits": {"cpu": "1"}}],
        error='kubelet.reservedMemory[0].limits.cpu: invalid configuration: the limit type "cpu" for NUMA node 0 '
        "is not supported, only [memory hugepages-<HugePageSize>] is accepted",
    ),
    ConfigCase(
        "R1.2 a NUMA node and type reserved twice is refused",
        [{"numaNode": 0, "limits": {"memory": "1Gi"}}, {"numaNode": 0, "limits": {"memory": "100Mi"}}],
        error="kubelet.reservedMemory[1].limits.memory: invalid configuration: the reserved memory has a duplicate "
        'value for NUMA node 0 and resource "memory"',
    ),
    ConfigCase(
        "R1.2 a fractional byte count cannot be converted",
        [{"numaNode": 0, "limits": {"memory": "0.5"}}],
        error="kubelet.reservedMemory[0].limits.memory: could not covert a variable of type Quantity to int64",
    ),
    ConfigCase(
        "R1.2 numaNode must be an integer",
        [{"numaNode": "0", "limits": {"memory": "1124Mi"}}],
        error="kubelet.reservedMemory[0].numaNode: expected an integer, got '0'",
    ),
    ConfigCase(
        "R1.2 reservedMemory must be a list",
        {"numaNode": 0},
        error="kubelet.reservedMemory: expected a list of {numaNode, limits}",
    ),
    ConfigCase(
        "R1.2 an unparsable quantity names its field",
        [{"numaNode": 0, "limits": {"memory": "lots"}}],
        error="kubelet.reservedMemory[0].limits.memory: quantities must match",
    ),
    ConfigCase(
        "R1.3 a zero eviction threshold is refused as the kubelet does",
        SEED_RESERVED,
        system_reserved={"memory": "1Gi"},
        eviction_hard={"memory.available": "0"},
        error="kubelet.evictionHard.memory.available: eviction threshold memory.available must be positive: 0",
    ),
    ConfigCase(
        "R1.3 an eviction percentage above 100% is refused",
        SEED_RESERVED,
        eviction_hard={"memory.available": "150%"},
        error="kubelet.evictionHard.memory.available: eviction percentage threshold memory.available must be "
        "<= 100%: 150%",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.description)
def test_reserved_memory_is_validated_like_the_kubelet(case: ConfigCase) -> None:
    def run() -> dict[int, dict[str, int]]:
        return config.system_reserved_memory(
            seed_topology(),
            case.reserved_memory,
            kube_reserved=case.kube_reserved,
            system_reserved=case.system_reserved,
            eviction_hard=case.eviction_hard,
        )

    if case.error is not None:
        with pytest.raises(ConfigError) as raised:
            run()
        assert str(raised.value).startswith(case.error)
    else:
        assert run() == case.expected


def test_byte_counts_given_as_ints_read_as_binary_quantities_in_messages() -> None:
    with pytest.raises(ConfigError, match='value "1124Mi"'):
        config.system_reserved_memory(
            seed_topology(),
            [{"numaNode": 0, "limits": {"memory": "1Gi"}}],
            system_reserved={"memory": GiB},
            eviction_hard={"memory.available": 100 * MiB},
        )


@pytest.mark.parametrize(
    "reserved",
    [{0: {}, 1: {}}, {0: {HP1G: GiB}}, {}],
    ids=["R1.2 nothing reserved", "R1.2 only hugepages reserved", "R1.2 no NUMA node listed"],
)
def test_static_policy_needs_reserved_memory(reserved: dict[int, dict[str, int]]) -> None:
    with pytest.raises(ConfigError) as raised:
        static_policy(seed_topology(), reserved)
    assert str(raised.value) == NO_SYSTEM_RESERVED


def test_static_policy_refuses_a_reservation_larger_than_the_node() -> None:
    with pytest.raises(ConfigError, match="NUMA node 1 reserves 57Gi of memory, more than the 56Gi it has"):
        static_policy(seed_topology(), {1: {"memory": 57 * GiB}})


@given(st.integers(min_value=1, max_value=1124 * MiB - 4), st.integers(min_value=-3, max_value=3))
def test_any_split_over_numa_nodes_is_valid_exactly_when_it_sums_to_the_reservation(first: int, skew: int) -> None:
    total = 1124 * MiB
    second = total - first + skew
    reserved = [{"numaNode": 0, "limits": {"memory": str(first)}}, {"numaNode": 1, "limits": {"memory": str(second)}}]

    def run() -> dict[int, dict[str, int]]:
        return config.system_reserved_memory(seed_topology(), reserved, system_reserved={"memory": "1Gi"})

    if skew == 0:
        assert run() == {0: {"memory": first}, 1: {"memory": second}}
    else:
        with pytest.raises(ConfigError, match="is not equal to the value"):
            run()
