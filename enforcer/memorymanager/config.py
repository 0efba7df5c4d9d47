"""The kubelet's ``reservedMemory`` setting: parsed, validated, turned into per-NUMA bytes.

Ports the kubelet's startup checks for the Static memory policy (R1.2, R1.3 of
``memory-manager.md``):

* ``validateReservedMemoryConfiguration`` (kubelet config validation): only
  ``memory`` and ``hugepages-<size>``, no zero values, no duplicates;
* ``getTotalMemoryTypeReserved``: every NUMA node named must exist;
* ``validateReservedMemory``: per type, the sum over NUMA nodes must equal the
  Node Allocatable reservation, kube-reserved + system-reserved + the hard
  eviction threshold ``memory.available`` (``GetNodeAllocatableReservation``,
  ``hardEvictionReservation``);
* ``convertReserved``: bytes per NUMA node and type.

Messages are the kubelet's, prefixed with the field path.  Quantities keep the
format they were written in while they are summed, as Go's ``Quantity.Add``
does, so the mismatch message shows ``"1124Mi"`` where the kubelet does.  The
module parses configuration only; it never sees pods or state.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from enforcer.errors import ConfigError
from enforcer.topology.machine import CPUTopology
from shared import quantity
from shared.errors import QuantityError
from shared.resources import MEMORY, is_hugepages, is_memory_resource

DEFAULT_EVICTION_HARD_MEMORY = "100Mi"
_SIGNAL = "memory.available"
_SUPPORTED = "[memory hugepages-<HugePageSize>]"

SystemReservedMemory = dict[int, dict[str, int]]


@dataclass(frozen=True, slots=True)
class Amount:
    """A quantity as Go sums it: exact value plus the format ``String()`` will use."""

    value: Decimal
    fmt: quantity.Format | None = None

    def add(self, other: Amount) -> Amount:
        # Quantity.Add: a zero receiver takes the other's format
        fmt = other.fmt if self.value == 0 else self.fmt
        return Amount(self.value + other.value, fmt)

    def __str__(self) -> str:
        return quantity.format_quantity(self.value, self.fmt or "DecimalSI")


_ZERO = Amount(Decimal(0), "DecimalSI")


@dataclass(frozen=True, slots=True)
class MemoryReservation:
    """One ``reservedMemory`` entry: bytes per resource type on one NUMA node."""

    numa_node: int
    limits: Mapping[str, int]


def _amount(value: object, path: str) -> Amount:
    """A quantity string keeps its format; a bare int is already bytes (shown in binary units)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return Amount(Decimal(value), "BinarySI")
    try:
        q = quantity.parse(value, field=path)
    except QuantityError as err:
        raise ConfigError(str(err)) from None
    return Amount(q.value, q.format)


def _as_bytes(amount: Amount, path: str) -> int:
    # convertReserved: q.AsInt64() fails for fractional bytes
    if amount.value != amount.value.to_integral_value():
        raise ConfigError(f"{path}: could not covert a variable of type Quantity to int64")
    return int(amount.value)


def _parse(raw: object, field: str) -> tuple[list[MemoryReservation], list[tuple[int, str, Amount]]]:
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        raise ConfigError(f"{field}: expected a list of {{numaNode, limits}}")
    reservations: list[MemoryReservation] = []
    amounts: list[tuple[int, str, Amount]] = []
    seen: set[tuple[int, str]] = set()
    for i, entry in enumerate(raw):
        path = f"{field}[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{path}: expected an object with numaNode and limits")
        unknown = sorted(set(map(str, entry)) - {"numaNode", "limits"})
        if unknown:
            raise ConfigError(f"{path}: unknown fields: {', '.join(unknown)}")
        node = entry.get("numaNode")
        if isinstance(node, bool) or not isinstance(node, int):
            raise ConfigError(f"{path}.numaNode: expected an integer, got {node!r}")
        limits = entry.get("limits") or {}
        if not isinstance(limits, Mapping):
            raise ConfigError(f"{path}.limits: expected a map of resource name to quantity")
        parsed: dict[str, int] = {}
        for name, value in limits.items():
            name = str(name)
            lpath = f"{path}.limits.{name}"
            if not is_memory_resource(name):
                raise ConfigError(
                    f"{lpath}: invalid configuration: the limit type {_q(name)} for NUMA node {node} "
                    f"is not supported, only {_SUPPORTED} is accepted"
                )
            amount = _amount(value, lpath)
            if amount.value == 0:
                raise ConfigError(
                    f"{lpath}: invalid configuration: reserved memory may not be zero for NUMA node {node} "
                    f"and resource {_q(name)}"
                )
            if amount.value < 0:
                raise ConfigError(f"{lpath}: reserved memory must not be negative, got {amount}")
            if (node, name) in seen:
                raise ConfigError(
                    f"{lpath}: invalid configuration: the reserved memory has a duplicate value for NUMA node "
                    f"{node} and resource {_q(name)}"
                )
            seen.add((node, name))
            parsed[name] = _as_bytes(amount, lpath)
            amounts.append((node, name, amount))
        reservations.append(MemoryReservation(node, parsed))
    return reservations, amounts


def _f32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def eviction_memory_reservation(
    eviction_hard: Mapping[str, object] | None, memory_capacity: int, *, field: str = "kubelet.evictionHard"
) -> Amount:
    """``hardEvictionReservation`` for ``memory.available`` (the kubelet default 100Mi when unset).

    A percentage is taken of the machine memory with the kubelet's float32
    arithmetic; "0%" and "100%" set no threshold, as the kubelet ignores them.
    """
    if eviction_hard is None:
        eviction_hard = {_SIGNAL: DEFAULT_EVICTION_HARD_MEMORY}
    if not isinstance(eviction_hard, Mapping):
        raise ConfigError(f"{field}: expected a map of signal to threshold")
    raw = eviction_hard.get(_SIGNAL)
    path = f"{field}.{_SIGNAL}"
    if raw is None:
        return _ZERO
    if isinstance(raw, str) and raw.endswith("%"):
        if raw in ("0%", "100%"):
            return _ZERO
        try:
            percent = _f32(_f32(float(raw.rstrip("%"))) / 100)
        except ValueError:
            raise ConfigError(f"{path}: invalid percentage {raw!r}") from None
        if not math.isfinite(percent):
            raise ConfigError(f"{path}: invalid percentage {raw!r}")
        if percent < 0:
            raise ConfigError(f"{path}: eviction percentage threshold {_SIGNAL} must be >= 0%: {raw}")
        if percent > 1:
            raise ConfigError(f"{path}: eviction percentage threshold {_SIGNAL} must be <= 100%: {raw}")
        return Amount(Decimal(int(float(memory_capacity) * percent)), "BinarySI")
    amount = _amount(raw, path)
    if amount.value <= 0:
        raise ConfigError(f"{path}: eviction threshold {_SIGNAL} must be positive: {amount}")
    return amount


def node_allocatable_reservation(
    topology: CPUTopology,
    *,
    kube_reserved: Mapping[str, object] | None = None,
    system_reserved: Mapping[str, object] | None = None,
    eviction_hard: Mapping[str, object] | None = None,
) -> dict[str, Amount]:
    """``GetNodeAllocatableReservation`` restricted to the memory types the machine has."""
    capacity_types = set(topology.memory_resources()) | {MEMORY}
    memory_capacity = sum(topology.memory_capacity(n).get(MEMORY, 0) for n in topology.numa_ids)
    eviction = eviction_memory_reservation(eviction_hard, memory_capacity)
    result: dict[str, Amount] = {}
    for name in sorted(capacity_types):
        value = _ZERO
        for source, label in ((system_reserved, "systemReserved"), (kube_reserved, "kubeReserved")):
            if source and name in source:
                value = value.add(_amount(source[name], f"kubelet.{label}.{name}"))
        if name == MEMORY:
            value = value.add(eviction)
        if value.value != 0:
            result[name] = value
    return result


def system_reserved_memory(
    topology: CPUTopology,
    reserved_memory: object,
    *,
    kube_reserved: Mapping[str, object] | None = None,
    system_reserved: Mapping[str, object] | None = None,
    eviction_hard: Mapping[str, object] | None = None,
    field: str = "kubelet.reservedMemory",
) -> SystemReservedMemory:
    """``getSystemReservedMemory``: the validated ``reservedMemory`` as bytes per NUMA node and type.

    ``kube_reserved`` / ``system_reserved`` map resource names to quantities (or
    to bytes as ints); ``eviction_hard`` is the raw ``evictionHard`` map, ``None``
    meaning the kubelet default (``memory.available`` 100Mi).  Every NUMA node of
    the machine appears in the result, with ``{}`` when nothing is reserved on it.
    """
    reservations, amounts = _parse(reserved_memory, field)
    existing = set(topology.numa_ids)
    totals: dict[str, Amount] = {}
    for node, name, amount in amounts:
        if node not in existing:
            index = next(j for j, r in enumerate(reservations) if r.numa_node == node)
            raise ConfigError(
                f"{field}[{index}].numaNode: the reserved memory configuration references a NUMA node {node} "
                "that does not exist on this machine"
            )
        # getTotalMemoryTypeReserved: q.Add(previous total), q being this entry
        totals[name] = amount.add(totals[name]) if name in totals else amount
    allocatable = node_allocatable_reservation(
        topology, kube_reserved=kube_reserved, system_reserved=system_reserved, eviction_hard=eviction_hard
    )
    for name in _ordered(set(totals) | {n for n in allocatable if n == MEMORY or is_hugepages(n)}):
        reserved = _ZERO.add(totals.get(name, _ZERO))
        expected = _ZERO.add(allocatable.get(name, _ZERO))
        if reserved.value != expected.value:
            raise ConfigError(
                f"{field}: the total amount {_q(str(reserved))} of type {_q(name)} is not equal to the value "
                f"{_q(str(expected))} determined by Node Allocatable feature"
            )
    result: SystemReservedMemory = {n: {} for n in topology.numa_ids}
    for reservation in reservations:
        result[reservation.numa_node].update(reservation.limits)
    return result


def _ordered(names: set[str]) -> list[str]:
    return sorted(names, key=lambda n: (n != MEMORY, n))


def _q(text: str) -> str:
    """Go's ``%q`` for the plain ASCII names and quantities that appear in these messages."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
