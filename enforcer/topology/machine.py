"""The machine model: logical CPUs, cores, uncore caches, sockets, NUMA nodes.

This is the kubelet's ``cpumanager/topology`` (``CPUTopology`` + ``CPUDetails``)
in one frozen value.  Every grouping is precomputed as a CPU bitmask when the
model is built, so the allocator's queries ("CPUs of these cores", "free CPUs
on NUMA node 3") are dictionary look-ups and integer operations.

The document format is ``../shared/contracts/topology.md``; the only producer
besides documents is :mod:`enforcer.topology.discovery` (sysfs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from enforcer.errors import TopologyError
from shared import quantity
from shared.cpuset import CPUSet
from shared.errors import QuantityError

MEMORY = "memory"
HUGEPAGES_PREFIX = "hugepages-"


@dataclass(frozen=True, slots=True)
class CPUInfo:
    """One logical CPU and the groups it belongs to."""

    id: int
    core: int
    socket: int
    numa: int
    uncore: int


@dataclass(frozen=True, slots=True)
class NUMANode:
    """A NUMA node's memory capacity per resource (``memory``, ``hugepages-<size>``), in bytes."""

    id: int
    memory: Mapping[str, int] = field(default_factory=dict)


def _group(cpus: Iterable[CPUInfo], attr: str) -> dict[int, int]:
    masks: dict[int, int] = {}
    for cpu in cpus:
        key = getattr(cpu, attr)
        masks[key] = masks.get(key, 0) | (1 << cpu.id)
    return masks


class CPUTopology:
    """A frozen machine model with precomputed group masks."""

    __slots__ = (
        "cpus",
        "numa_nodes",
        "distances",
        "all_cpus",
        "_by_id",
        "core_masks",
        "socket_masks",
        "numa_masks",
        "uncore_masks",
        "numa_ids",
        "socket_ids",
        "core_ids",
        "uncore_ids",
        "sockets_of_numa",
        "numas_of_socket",
        "_memory_nodes",
    )

    def __init__(
        self,
        cpus: Iterable[CPUInfo],
        numa_nodes: Iterable[NUMANode] = (),
        distances: Mapping[int, tuple[int, ...]] | None = None,
    ) -> None:
        ordered = tuple(sorted(cpus, key=lambda c: c.id))
        if not ordered:
            raise TopologyError("topology has no CPUs")
        ids = [c.id for c in ordered]
        if len(set(ids)) != len(ids):
            raise TopologyError("topology lists a CPU id twice")
        core_sockets: dict[int, tuple[int, int]] = {}
        for cpu in ordered:
            if min(cpu.id, cpu.core, cpu.socket, cpu.numa, cpu.uncore) < 0:
                raise TopologyError(f"cpu {cpu.id}: ids must be non-negative")
            owner = core_sockets.setdefault(cpu.core, (cpu.socket, cpu.numa))
            if owner != (cpu.socket, cpu.numa):
                raise TopologyError(f"core {cpu.core} spans sockets or NUMA nodes (cpu {cpu.id})")
        self.cpus: tuple[CPUInfo, ...] = ordered
        self._by_id = {c.id: c for c in ordered}
        self.all_cpus = CPUSet(ids)
        self.core_masks = _group(ordered, "core")
        self.socket_masks = _group(ordered, "socket")
        self.numa_masks = _group(ordered, "numa")
        self.uncore_masks = _group(ordered, "uncore")
        self.core_ids = tuple(sorted(self.core_masks))
        self.socket_ids = tuple(sorted(self.socket_masks))
        self.uncore_ids = tuple(sorted(self.uncore_masks))

        nodes = {n.id: n for n in numa_nodes}
        all_numa = sorted(set(self.numa_masks) | set(nodes))
        self.numa_ids: tuple[int, ...] = tuple(all_numa)
        self.numa_nodes: tuple[NUMANode, ...] = tuple(nodes.get(i, NUMANode(i)) for i in all_numa)
        self._memory_nodes = {n.id: n for n in self.numa_nodes}
        sockets_of_numa: dict[int, set[int]] = {n: set() for n in all_numa}
        numas_of_socket: dict[int, set[int]] = {s: set() for s in self.socket_ids}
        for cpu in ordered:
            sockets_of_numa[cpu.numa].add(cpu.socket)
            numas_of_socket[cpu.socket].add(cpu.numa)
        self.sockets_of_numa = {k: tuple(sorted(v)) for k, v in sockets_of_numa.items()}
        self.numas_of_socket = {k: tuple(sorted(v)) for k, v in numas_of_socket.items()}

        if distances is not None:
            for node in all_numa:
                row = distances.get(node)
                if row is None or len(row) != len(all_numa):
                    raise TopologyError(f"distances: row for NUMA node {node} must have {len(all_numa)} entries")
        self.distances: dict[int, tuple[int, ...]] | None = dict(distances) if distances is not None else None

    # -- counts (kubelet CPUTopology fields) ----------------------------------------
    @property
    def num_cpus(self) -> int:
        return len(self.cpus)

    @property
    def num_cores(self) -> int:
        return len(self.core_masks)

    @property
    def num_sockets(self) -> int:
        return len(self.socket_masks)

    @property
    def num_numa_nodes(self) -> int:
        return len(self.numa_ids)

    @property
    def num_uncore_caches(self) -> int:
        return len(self.uncore_masks)

    def cpus_per_core(self) -> int:
        return self.num_cpus // self.num_cores

    # -- look-ups -----------------------------------------------------------------
    def cpu(self, cpu_id: int) -> CPUInfo:
        return self._by_id[cpu_id]

    def cpus_in_numa_nodes(self, numa_ids: Iterable[int]) -> CPUSet:
        mask = 0
        for n in numa_ids:
            mask |= self.numa_masks.get(n, 0)
        return CPUSet.from_mask(mask)

    def cpus_in_cores(self, core_ids: Iterable[int]) -> CPUSet:
        mask = 0
        for c in core_ids:
            mask |= self.core_masks.get(c, 0)
        return CPUSet.from_mask(mask)

    def numa_nodes_of(self, cpus: CPUSet) -> tuple[int, ...]:
        return tuple(n for n in self.numa_ids if self.numa_masks.get(n, 0) & cpus.mask)

    def cores_of(self, cpus: CPUSet) -> tuple[int, ...]:
        return tuple(c for c in self.core_ids if self.core_masks[c] & cpus.mask)

    def sibling_cpus(self, cpus: CPUSet) -> CPUSet:
        """Every CPU on a core that holds one of ``cpus`` (kubelet ``reservedPhysicalCPUs``)."""
        return self.cpus_in_cores(self.cores_of(cpus))

    def memory_capacity(self, numa_id: int) -> Mapping[str, int]:
        node = self._memory_nodes.get(numa_id)
        return node.memory if node is not None else {}

    def memory_resources(self) -> tuple[str, ...]:
        """Every memory resource name with capacity on some node, ``memory`` first."""
        names = {name for node in self.numa_nodes for name in node.memory}
        return tuple(sorted(names, key=lambda n: (n != MEMORY, n)))

    def distance(self, a: int, b: int) -> int:
        if self.distances is None:
            return 10 if a == b else 20
        return self.distances[a][self.numa_ids.index(b)]

    # -- serialisation --------------------------------------------------------------
    def to_document(self) -> dict[str, Any]:
        """The topology format of ``contracts/topology.md`` (quantities in canonical form)."""
        doc: dict[str, Any] = {
            "cpus": [
                {"id": c.id, "core": c.core, "socket": c.socket, "numa": c.numa, "uncoreCache": c.uncore}
                for c in self.cpus
            ],
            "numaNodes": [
                {"id": n.id, "memory": {k: quantity.format_bytes(v) for k, v in n.memory.items()}}
                for n in self.numa_nodes
            ],
        }
        if self.distances is not None:
            doc["distances"] = {str(k): list(v) for k, v in sorted(self.distances.items())}
        return doc

    def fingerprint(self) -> str:
        """A stable text identity of the machine, to detect state saved on another machine."""
        return json.dumps(self.to_document(), sort_keys=True, separators=(",", ":"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUTopology) and self.fingerprint() == other.fingerprint()

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __repr__(self) -> str:
        return (
            f"CPUTopology(cpus={self.num_cpus}, cores={self.num_cores}, sockets={self.num_sockets}, "
            f"numa={self.num_numa_nodes}, uncore={self.num_uncore_caches})"
        )


def from_document(doc: object) -> CPUTopology:
    """Build a machine model from a parsed topology document, with field paths in errors."""
    if not isinstance(doc, Mapping):
        raise TopologyError("topology: expected an object with 'cpus'")
    raw_cpus = doc.get("cpus")
    if not isinstance(raw_cpus, list) or not raw_cpus:
        raise TopologyError("topology.cpus: expected a non-empty list")
    cpus: list[CPUInfo] = []
    for i, raw in enumerate(raw_cpus):
        if not isinstance(raw, Mapping):
            raise TopologyError(f"topology.cpus[{i}]: expected an object")
        values: dict[str, int] = {}
        for key in ("id", "core", "socket", "numa"):
            values[key] = _int(raw.get(key), f"topology.cpus[{i}].{key}")
        uncore = raw.get("uncoreCache")
        values["uncore"] = values["socket"] if uncore is None else _int(uncore, f"topology.cpus[{i}].uncoreCache")
        cpus.append(CPUInfo(**values))
    nodes: list[NUMANode] = []
    raw_nodes = doc.get("numaNodes") or []
    if not isinstance(raw_nodes, list):
        raise TopologyError("topology.numaNodes: expected a list")
    for i, raw in enumerate(raw_nodes):
        if not isinstance(raw, Mapping):
            raise TopologyError(f"topology.numaNodes[{i}]: expected an object")
        node_id = _int(raw.get("id"), f"topology.numaNodes[{i}].id")
        memory: dict[str, int] = {}
        raw_memory = raw.get("memory") or {}
        if not isinstance(raw_memory, Mapping):
            raise TopologyError(f"topology.numaNodes[{i}].memory: expected a map")
        for name, value in raw_memory.items():
            path = f"topology.numaNodes[{i}].memory.{name}"
            if name != MEMORY and not str(name).startswith(HUGEPAGES_PREFIX):
                raise TopologyError(f"{path}: only memory and hugepages-<size> are supported")
            try:
                amount = quantity.to_bytes(value, field=path)
            except QuantityError as err:
                raise TopologyError(str(err)) from None
            if amount < 0:
                raise TopologyError(f"{path}: must not be negative")
            memory[str(name)] = amount
        nodes.append(NUMANode(node_id, memory))
    distances: dict[int, tuple[int, ...]] | None = None
    raw_dist = doc.get("distances")
    if raw_dist is not None:
        if not isinstance(raw_dist, Mapping):
            raise TopologyError("topology.distances: expected a map of NUMA id to a row")
        distances = {}
        for key, row in raw_dist.items():
            path = f"topology.distances.{key}"
            if not isinstance(row, list):
                raise TopologyError(f"{path}: expected a list")
            distances[_int(key, path)] = tuple(_int(v, path) for v in row)
    return CPUTopology(cpus, nodes, distances)


def load(path: str | Path) -> CPUTopology:
    """Read a topology document from a JSON or YAML file."""
    text = Path(path).read_text()
    try:
        if str(path).endswith((".yaml", ".yml")):
            import yaml

            doc = yaml.safe_load(text)
        else:
            doc = json.loads(text)
    except ValueError as err:  # json.JSONDecodeError and yaml.YAMLError's parse errors
        raise TopologyError(f"{path}: not valid JSON/YAML: {err}") from None
    except Exception as err:  # yaml.YAMLError does not subclass ValueError
        raise TopologyError(f"{path}: not valid YAML: {err}") from None
    return from_document(doc)


def _int(value: object, path: str) -> int:
    if isinstance(value, bool):
        raise TopologyError(f"{path}: expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise TopologyError(f"{path}: expected an integer, got {value!r}")
