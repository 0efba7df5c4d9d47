"""Node allocatable and the kubelet's resource-fit admission check.

The kubelet refuses a pod whose requests do not fit what is left of node
allocatable (``OutOfcpu``, ``OutOfmemory``, ...); the same arithmetic decides
whether a resize is Infeasible (more than allocatable) or Deferred (more than is
free now).  Allocatable = capacity - kube-reserved - system-reserved - the hard
eviction threshold; with ``reservedSystemCPUs`` the reserved CPU count replaces
the cpu reservations, as the kubelet does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from enforcer.engine.config import NodeConfig
from enforcer.topology.machine import CPUTopology
from shared.resources import CPU, MEMORY, is_hugepages


def node_allocatable(topology: CPUTopology, config: NodeConfig) -> dict[str, int]:
    capacity: dict[str, int] = {CPU: topology.num_cpus * 1000}
    for node in topology.numa_nodes:
        for name, amount in node.memory.items():
            capacity[name] = capacity.get(name, 0) + amount
    allocatable = dict(capacity)
    if config.reserved_system_cpus is not None:
        allocatable[CPU] -= len(config.reserved_system_cpus) * 1000
    else:
        allocatable[CPU] -= config.reserved_cpu_millis
    for name in list(allocatable):
        if name == CPU:
            continue
        allocatable[name] -= config.kube_reserved.get(name, 0) + config.system_reserved.get(name, 0)
        if name == MEMORY:
            # hugepages are carved out of memory capacity: what is pre-allocated as pages is not allocatable memory
            allocatable[name] -= config.eviction_hard_memory
            allocatable[name] -= sum(v for k, v in capacity.items() if is_hugepages(k))
    return {k: max(0, v) for k, v in allocatable.items()}


@dataclass(frozen=True, slots=True)
class Shortfall:
    """One resource a pod does not fit, in the kubelet's wording."""

    resource: str
    requested: int
    used: int
    capacity: int

    @property
    def reason(self) -> str:
        return f"OutOf{self.resource}"

    def message(self) -> str:
        return (
            f"Node didn't have enough resource: {self.resource}, requested: {_fmt(self.resource, self.requested)}, "
            f"used: {_fmt(self.resource, self.used)}, capacity: {_fmt(self.resource, self.capacity)}"
        )

    def capacity_message(self) -> str:
        return (
            f"Node didn't have enough capacity: {self.resource}, requested: {_fmt(self.resource, self.requested)}, "
            f"capacity: {_fmt(self.resource, self.capacity)}"
        )


def _fmt(resource: str, value: int) -> str:
    # the kubelet prints raw integers here: millicores for cpu, bytes otherwise
    return str(value)


def used_by(requests: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """The sum of ``requests`` from scratch (zero sums left out, as :func:`add_to` and :func:`take_from` do).

    The engine keeps this sum as a running total (``EngineState.used``); this is the reference its
    consistency check compares that total with, and what a restored state starts from."""
    total: dict[str, int] = {}
    for r in requests:
        add_to(total, r)
    return total


def add_to(total: dict[str, int], requests: Mapping[str, int]) -> None:
    """Add one pod's requests to a running total in place."""
    for name, value in requests.items():
        _put(total, name, total.get(name, 0) + value)


def take_from(total: dict[str, int], requests: Mapping[str, int]) -> None:
    """Take one pod's requests (added earlier with :func:`add_to`) off a running total in place."""
    for name, value in requests.items():
        _put(total, name, total.get(name, 0) - value)


def _put(total: dict[str, int], name: str, value: int) -> None:
    # a resource nobody requests any more leaves the map, so a running total and a fresh sum compare equal
    if value:
        total[name] = value
    else:
        total.pop(name, None)


def shortfalls(
    requested: Mapping[str, int], used: Mapping[str, int], allocatable: Mapping[str, int]
) -> list[Shortfall]:
    """Resources (cpu, memory, hugepages) whose request does not fit what is free, in name order."""
    result: list[Shortfall] = []
    for name in sorted(requested):
        amount = requested[name]
        if amount <= 0 or (name != CPU and name != MEMORY and not is_hugepages(name)):
            continue
        capacity = allocatable.get(name, 0)
        in_use = used.get(name, 0)
        if amount + in_use > capacity:
            result.append(Shortfall(name, amount, in_use, capacity))
    return result
