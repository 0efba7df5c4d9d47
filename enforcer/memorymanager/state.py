"""The memory manager's state: per-NUMA accounting tables and the memory blocks handed out.

This is the kubelet's ``memorymanager/state`` (``MemoryTable``, ``NUMANodeState``,
``Block``, ``ContainerMemoryAssignments``, KEP-5526 ``PodMemoryAssignments``) as
one plain mutable value the engine owns and passes to the policy.  Rule numbers
refer to ``memory-manager.md`` (R2.x, R7.x) and ``pod-level-resource-managers.md``.

Invariants (checked by :meth:`MemoryState.check`):

* per node and type: ``free + reserved == allocatable`` and
  ``allocatable == total - systemReserved`` (``memory`` also minus the node's
  hugepages bytes, R2.2/R2.3);
* what the tables hold reserved is exactly what the entries charged: the pod
  entry's blocks for a KEP-5526 pod (charged once for the whole pod), the
  container blocks for every other pod (init-reuse already folded into them, A7);
* ``numberOfAssignments`` counts one per (block, node of its mask) and ``cells``
  is the group every node's blocks share (R2.4/R2.5).

The module holds no policy logic and does no I/O: ``to_dict``/``from_dict`` are
the JSON shape of the checkpoint body (kubelet key names), writing it is the
checkpoint module's job.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from enforcer.errors import ConfigError
from enforcer.topology.machine import CPUTopology
from shared.resources import HUGEPAGES_PREFIX, MEMORY

# pod UID -> NUMA mask (bit n = node n) -> resource type -> bytes an earlier regular
# init container left behind for later containers of the same pod (A7)
ReusableMemory = dict[str, dict[int, dict[str, int]]]


def ordered_types(names: Iterable[str]) -> list[str]:
    """``memory`` first, then hugepages sizes by name: a stable stand-in for Go's random map order.

    One type (``memory`` alone, the usual machine) needs no sort: every NUMA node's table is
    serialised through here on each state write, and the keyed sort is a Python call per name."""
    unique = set(names)
    if len(unique) < 2:
        return list(unique)
    return sorted(unique, key=lambda n: (n != MEMORY, n))


def mask_bits(mask: int) -> tuple[int, ...]:
    """The NUMA ids set in ``mask``, ascending (``bitmask.GetBits``)."""
    bits: list[int] = []
    while mask:
        low = mask & -mask
        bits.append(low.bit_length() - 1)
        mask ^= low
    return tuple(bits)


def bits_mask(bits: Iterable[int]) -> int:
    mask = 0
    for bit in bits:
        mask |= 1 << bit
    return mask


@dataclass(slots=True)
class MemoryTable:
    """One resource type on one NUMA node, in bytes (R2.1)."""

    total: int
    system_reserved: int
    allocatable: int
    reserved: int
    free: int

    def copy(self) -> MemoryTable:
        return MemoryTable(self.total, self.system_reserved, self.allocatable, self.reserved, self.free)

    def to_dict(self) -> dict[str, int]:
        return {
            "total": self.total,
            "systemReserved": self.system_reserved,
            "allocatable": self.allocatable,
            "reserved": self.reserved,
            "free": self.free,
        }

    @classmethod
    def from_dict(cls, data: object, path: str) -> MemoryTable:
        raw = _mapping(data, path)
        return cls(
            total=_uint(raw.get("total", 0), f"{path}.total"),
            system_reserved=_uint(raw.get("systemReserved", 0), f"{path}.systemReserved"),
            allocatable=_uint(raw.get("allocatable", 0), f"{path}.allocatable"),
            reserved=_uint(raw.get("reserved", 0), f"{path}.reserved"),
            free=_uint(raw.get("free", 0), f"{path}.free"),
        )


@dataclass(slots=True)
class NUMANodeState:
    """A NUMA node's tables, how many blocks touch it, and the group it belongs to (R2.4)."""

    number_of_assignments: int
    memory_map: dict[str, MemoryTable]
    cells: list[int]

    def copy(self) -> NUMANodeState:
        return NUMANodeState(
            self.number_of_assignments, {k: t.copy() for k, t in self.memory_map.items()}, list(self.cells)
        )

    def table(self, resource: str) -> MemoryTable | None:
        return self.memory_map.get(resource)

    def to_dict(self) -> dict[str, Any]:
        return {
            "numberOfAssignments": self.number_of_assignments,
            "memoryMap": {name: self.memory_map[name].to_dict() for name in ordered_types(self.memory_map)},
            "cells": list(self.cells),
        }

    @classmethod
    def from_dict(cls, data: object, path: str) -> NUMANodeState:
        raw = _mapping(data, path)
        tables = _optional(raw, "memoryMap", f"{path}.memoryMap")
        cells = raw.get("cells", [])
        if not isinstance(cells, list):
            raise ConfigError(f"{path}.cells: expected a list of NUMA ids")
        return cls(
            number_of_assignments=_uint(raw.get("numberOfAssignments", 0), f"{path}.numberOfAssignments"),
            memory_map={str(k): MemoryTable.from_dict(v, f"{path}.memoryMap.{k}") for k, v in tables.items()},
            cells=[_uint(c, f"{path}.cells[{i}]") for i, c in enumerate(cells)],
        )


@dataclass(frozen=True, slots=True)
class Block:
    """``size`` bytes of one resource ``type`` bound to the NUMA nodes in ``numa_affinity``."""

    numa_affinity: tuple[int, ...]
    type: str
    size: int

    @property
    def mask(self) -> int:
        return bits_mask(self.numa_affinity)

    def to_dict(self) -> dict[str, Any]:
        return {"numaAffinity": list(self.numa_affinity), "type": self.type, "size": self.size}

    @classmethod
    def from_dict(cls, data: object, path: str) -> Block:
        raw = _mapping(data, path)
        affinity = raw.get("numaAffinity")
        if not isinstance(affinity, list):
            raise ConfigError(f"{path}.numaAffinity: expected a list of NUMA ids")
        kind = raw.get("type")
        if not isinstance(kind, str) or not kind:
            raise ConfigError(f"{path}.type: expected a resource name")
        return cls(
            numa_affinity=tuple(_uint(n, f"{path}.numaAffinity[{i}]") for i, n in enumerate(affinity)),
            type=kind,
            size=_uint(raw.get("size", 0), f"{path}.size"),
        )


class MemoryStateView(Protocol):
    """What code outside the memory manager may read of a :class:`MemoryState` (maps as ``Mapping``,
    block lists as ``Sequence``: mypy refuses a write through it; see ``CPUStateView`` for why)."""

    @property
    def policy_name(self) -> str: ...

    @property
    def machine_state(self) -> Mapping[int, NUMANodeState]: ...

    @property
    def entries(self) -> Mapping[str, Mapping[str, Sequence[Block]]]: ...

    @property
    def pod_entries(self) -> Mapping[str, Sequence[Block]]: ...

    @property
    def reusable(self) -> Mapping[str, Mapping[int, Mapping[str, int]]]: ...

    def container_blocks(self, pod_uid: str, container_name: str) -> list[Block] | None: ...

    def pod_blocks(self, pod_uid: str) -> list[Block] | None: ...

    def charged_blocks(self) -> Iterable[tuple[str, str, Block]]: ...

    def to_dict(self) -> dict[str, Any]: ...

    def restricted_to(self, pod_uids: Collection[str], numa_nodes: Collection[int] | None = None) -> MemoryState: ...


@dataclass(slots=True)
class MemoryState:
    """Everything the memory manager remembers, as the engine stores and checkpoints it.

    ``entries`` are per-container blocks (``ContainerMemoryAssignments``); for a
    KEP-5526 pod they are the partition of the pod budget, while ``pod_entries``
    holds the blocks that were actually charged to the machine.  ``reusable``
    is the kubelet policy's in-memory ``initContainersReusableMemory``; it lives
    here because the engine copies state for transactional admission, so a
    rejected pod must not leave reuse bookkeeping behind either.

    The per-pod values of ``entries`` and ``pod_entries`` (container maps, block
    lists) are shared between a state and its copies and are copy-on-write:
    the methods below replace them and never change them in place, and the
    readers hand out copies; change them only through those methods.
    """

    policy_name: str
    machine_state: dict[int, NUMANodeState] = field(default_factory=dict)
    entries: dict[str, dict[str, list[Block]]] = field(default_factory=dict)
    pod_entries: dict[str, list[Block]] = field(default_factory=dict)
    reusable: ReusableMemory = field(default_factory=dict)

    # -- copies and serialisation -------------------------------------------------
    def copy(self) -> MemoryState:
        """An independent copy whose cost does not grow with the pods held.

        The NUMA tables are copied (one per node and type: the policy updates them in place). The
        per-pod entries are shared: they are copy-on-write (see the class docstring) and blocks are
        immutable, so copying them one by one would only cost per pod held on every decision.
        ``reusable`` is copied deeply because the policy updates it in place; it holds only the pod
        being admitted (the policy drops every other pod's entry before using it).
        """
        return MemoryState(
            policy_name=self.policy_name,
            machine_state={n: s.copy() for n, s in self.machine_state.items()},
            entries=dict(self.entries),
            pod_entries=dict(self.pod_entries),
            reusable={uid: {m: dict(types) for m, types in masks.items()} for uid, masks in self.reusable.items()},
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able body in the kubelet's checkpoint key names (V2, without the checksum)."""
        return {
            "policyName": self.policy_name,
            "machineState": {str(n): self.machine_state[n].to_dict() for n in sorted(self.machine_state)},
            "entries": {
                uid: {name: [b.to_dict() for b in blocks] for name, blocks in ctrs.items()}
                for uid, ctrs in self.entries.items()
            },
            "podEntries": {
                uid: {"memoryBlocks": [b.to_dict() for b in blocks]} for uid, blocks in self.pod_entries.items()
            },
            "initContainersReusableMemory": {
                uid: {",".join(map(str, mask_bits(m))): dict(types) for m, types in masks.items()}
                for uid, masks in self.reusable.items()
            },
        }

    @classmethod
    def from_dict(cls, data: object) -> MemoryState:
        raw = _mapping(data, "memoryState")
        name = raw.get("policyName")
        if not isinstance(name, str):
            raise ConfigError("memoryState.policyName: expected a string")
        machine = {
            _uint(k, f"memoryState.machineState.{k}"): NUMANodeState.from_dict(v, f"memoryState.machineState.{k}")
            for k, v in _optional(raw, "machineState", "memoryState.machineState").items()
        }
        entries: dict[str, dict[str, list[Block]]] = {}
        for uid, ctrs in _optional(raw, "entries", "memoryState.entries").items():
            path = f"memoryState.entries.{uid}"
            entries[str(uid)] = {
                str(name): _blocks(blocks, f"{path}.{name}") for name, blocks in _mapping(ctrs, path).items()
            }
        pod_entries: dict[str, list[Block]] = {}
        for uid, entry in _optional(raw, "podEntries", "memoryState.podEntries").items():
            path = f"memoryState.podEntries.{uid}"
            pod_entries[str(uid)] = _blocks(_mapping(entry, path).get("memoryBlocks", []), f"{path}.memoryBlocks")
        reusable: ReusableMemory = {}
        reusable_path = "memoryState.initContainersReusableMemory"
        for uid, masks in _optional(raw, "initContainersReusableMemory", reusable_path).items():
            path = f"memoryState.initContainersReusableMemory.{uid}"
            per_mask: dict[int, dict[str, int]] = {}
            for key, types in _mapping(masks, path).items():
                bits = [_uint(b, f"{path}.{key}") for b in str(key).split(",")] if str(key) else []
                per_mask[bits_mask(bits)] = {
                    str(t): _uint(v, f"{path}.{key}.{t}") for t, v in _mapping(types, f"{path}.{key}").items()
                }
            reusable[str(uid)] = per_mask
        return cls(name, machine, entries, pod_entries, reusable)

    def restricted_to(self, pod_uids: Collection[str], numa_nodes: Collection[int] | None = None) -> MemoryState:
        """This state with only these pods' entries and reuse, and only the tables of ``numa_nodes`` (all of
        them when ``None``): the part of a checkpoint a change to these pods rewrites; per-pod values and
        the tables are shared, as in :meth:`copy`."""
        wanted = set(pod_uids)
        machine = self.machine_state
        return MemoryState(
            policy_name=self.policy_name,
            machine_state=machine if numa_nodes is None else {n: machine[n] for n in numa_nodes if n in machine},
            entries={u: self.entries[u] for u in wanted if u in self.entries},
            pod_entries={u: self.pod_entries[u] for u in wanted if u in self.pod_entries},
            reusable={u: self.reusable[u] for u in wanted if u in self.reusable},
        )

    # -- container and pod entries (the kubelet State reader/writer) ------------------
    def container_blocks(self, pod_uid: str, container_name: str) -> list[Block] | None:
        """The container's blocks; ``None`` when it has no entry (an empty list is an entry)."""
        blocks = self.entries.get(pod_uid, {}).get(container_name)
        return None if blocks is None else list(blocks)

    def set_container_blocks(self, pod_uid: str, container_name: str, blocks: Iterable[Block]) -> None:
        # copy-on-write: the pod gets a new map, the old one may be shared with a copy of this state
        self.entries[pod_uid] = {**self.entries.get(pod_uid, {}), container_name: list(blocks)}

    def delete_container(self, pod_uid: str, container_name: str) -> None:
        """``Delete``: drop the entry, and the pod's map with its last container (copy-on-write)."""
        ctrs = self.entries.get(pod_uid)
        if ctrs is None:
            return
        rest = {name: blocks for name, blocks in ctrs.items() if name != container_name}
        if not rest:
            del self.entries[pod_uid]
        elif len(rest) != len(ctrs):
            self.entries[pod_uid] = rest

    def pod_blocks(self, pod_uid: str) -> list[Block] | None:
        blocks = self.pod_entries.get(pod_uid)
        return None if blocks is None else list(blocks)

    def set_pod_blocks(self, pod_uid: str, blocks: Iterable[Block]) -> None:
        self.pod_entries[pod_uid] = list(blocks)

    def delete_pod(self, pod_uid: str) -> None:
        """``DeletePod``: forget the pod entry and every container entry of the pod."""
        self.pod_entries.pop(pod_uid, None)
        self.entries.pop(pod_uid, None)

    # -- consistency ------------------------------------------------------------------
    def charged_blocks(self) -> Iterable[tuple[str, str, Block]]:
        """(pod, container, block) for every block that holds memory on the machine.

        A KEP-5526 pod is charged once through its pod entry (container ""): its
        container blocks only partition that budget.
        """
        for uid, blocks in self.pod_entries.items():
            for block in blocks:
                yield uid, "", block
        for uid, ctrs in self.entries.items():
            if uid in self.pod_entries:
                continue
            for name, blocks in ctrs.items():
                for block in blocks:
                    yield uid, name, block

    def check(self, topology: CPUTopology) -> list[str]:
        """Every broken invariant, as sentences; empty when the state is consistent."""
        if not self.machine_state:
            return [
                f"entries exist for pod {uid} but the machine state is empty"
                for uid in sorted(set(self.entries) | set(self.pod_entries))
            ]
        problems: list[str] = []
        problems += self._check_tables(topology)
        problems += self._check_charges()
        for uid in sorted(self.pod_entries):
            if not self.entries.get(uid):
                problems.append(f"pod {uid} has a pod-level entry but no container entries")
        return problems

    def _check_tables(self, topology: CPUTopology) -> list[str]:
        problems: list[str] = []
        if sorted(self.machine_state) != sorted(topology.numa_ids):
            problems.append(
                f"machine state has NUMA nodes {sorted(self.machine_state)}, the machine {list(topology.numa_ids)}"
            )
        # the kubelet keeps a table per node for every type, sized 0 where the node has none
        every_type = {name for node in self.machine_state.values() for name in node.memory_map}
        for node_id in sorted(self.machine_state):
            node = self.machine_state[node_id]
            for name in ordered_types(every_type - set(node.memory_map)):
                problems.append(f"node {node_id} has no {name} table (a node without it has one of size 0)")
            capacity = topology.memory_capacity(node_id)
            hugepages = sum(v for k, v in capacity.items() if k.startswith(HUGEPAGES_PREFIX))
            for name in ordered_types(node.memory_map):
                t = node.memory_map[name]
                where = f"node {node_id} {name}"
                if t.free + t.reserved != t.allocatable:
                    problems.append(f"{where}: free {t.free} + reserved {t.reserved} != allocatable {t.allocatable}")
                expected = t.total - t.system_reserved - (hugepages if name == MEMORY else 0)
                if t.allocatable != expected:
                    problems.append(f"{where}: allocatable {t.allocatable} != {expected} (total - system reserved)")
                if t.total != capacity.get(name, 0):
                    problems.append(f"{where}: total {t.total} != machine capacity {capacity.get(name, 0)}")
                if min(t.total, t.system_reserved, t.allocatable, t.reserved, t.free) < 0:
                    problems.append(f"{where}: negative value in {t.to_dict()}")
        return problems

    def _check_charges(self) -> list[str]:
        problems: list[str] = []
        assignments = dict.fromkeys(self.machine_state, 0)
        groups: dict[int, set[int]] = {n: set() for n in self.machine_state}
        charged: dict[tuple[int, str], int] = {}
        for uid, name, block in self.charged_blocks():
            owner = f"pod {uid}" + (f" container {name}" if name else " (pod entry)")
            if list(block.numa_affinity) != sorted(set(block.numa_affinity)) or not block.numa_affinity:
                problems.append(f"{owner}: block affinity {list(block.numa_affinity)} is not a sorted set")
            for node_id in block.numa_affinity:
                node = self.machine_state.get(node_id)
                if node is None:
                    problems.append(f"{owner}: block uses NUMA node {node_id} that does not exist")
                    continue
                if block.type not in node.memory_map:
                    problems.append(f"{owner}: block uses {block.type}, which node {node_id} does not have")
                assignments[node_id] += 1
                groups[node_id].add(block.mask)
            key = (block.mask, block.type)
            charged[key] = charged.get(key, 0) + block.size
        for node_id in sorted(self.machine_state):
            node = self.machine_state[node_id]
            if node.number_of_assignments != assignments[node_id]:
                problems.append(
                    f"node {node_id}: numberOfAssignments {node.number_of_assignments} != {assignments[node_id]} "
                    "blocks on it"
                )
            masks = groups[node_id]
            if len(masks) > 1:
                problems.append(f"node {node_id}: blocks of different NUMA groups {sorted(map(mask_bits, masks))}")
            want = list(mask_bits(next(iter(masks)))) if len(masks) == 1 else [node_id]
            if sorted(node.cells) != want:
                problems.append(f"node {node_id}: cells {node.cells} != {want}")
        # reserved bytes per group and type must equal what the group's blocks charged
        seen: set[tuple[int, str]] = set()
        for node_id in sorted(self.machine_state):
            node = self.machine_state[node_id]
            group = bits_mask(node.cells) if node.cells else bits_mask([node_id])
            for name in node.memory_map:
                key = (group, name)
                if key in seen:
                    continue
                seen.add(key)
                reserved = sum(
                    self.machine_state[n].memory_map[name].reserved
                    for n in mask_bits(group)
                    if n in self.machine_state and name in self.machine_state[n].memory_map
                )
                if reserved != charged.get(key, 0):
                    problems.append(
                        f"NUMA group {list(mask_bits(group))} {name}: reserved {reserved} != "
                        f"{charged.get(key, 0)} charged by blocks"
                    )
        for key, size in sorted(charged.items()):
            if key not in seen and size:
                problems.append(f"blocks charge {size} of {key[1]} to {list(mask_bits(key[0]))}, not a NUMA group")
        return problems


def _blocks(data: object, path: str) -> list[Block]:
    if not isinstance(data, list):
        raise ConfigError(f"{path}: expected a list of memory blocks")
    return [Block.from_dict(b, f"{path}[{i}]") for i, b in enumerate(data)]


def _optional(raw: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = raw.get(key)
    return {} if value is None else _mapping(value, path)


def _mapping(data: object, path: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected an object")
    return data


def _uint(value: object, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(f"{path}: expected a non-negative integer, got {value!r}")
    if isinstance(value, str):
        if not value.isdigit():
            raise ConfigError(f"{path}: expected a non-negative integer, got {value!r}")
        return int(value)
    if value < 0:
        raise ConfigError(f"{path}: expected a non-negative integer, got {value}")
    return value
