"""What ``numaguard allocations`` prints: one enforcer's allocations and free resources, as text.

A container's CPU NUMA nodes are not in the allocation; they are derived here
from its CPU list and the machine document of ``GET /topology`` (``cpus[].numa``),
so the table shows when a container's CPUs and its memory sit on different
nodes.  Memory columns use binary units rounded to one decimal (exact values
are in ``-o json``).

Pure: parsed ``shared.contract`` bodies in, strings out.  No network, no
terminal control, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared import contract, quantity
from shared.cpuset import CPUSet

MISSING = "-"
# A CPU the topology document does not know (the answers came from different machines).
UNKNOWN_NUMA = "?"
TABLE_HEADER = ("POD", "CONTAINER", "ASSIGNMENT", "CPUS", "CPU NUMA", "MEMORY", "MEMORY NUMA", "CFS QUOTA")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One poll of the enforcer: the validated bodies, and the JSON exactly as served (for ``-o json``)."""

    allocations: contract.AllocationList
    topology: contract.TopologyView
    raw_allocations: Any
    raw_topology: Any


@dataclass(frozen=True, slots=True)
class ContainerRow:
    pod: str
    container: str
    assignment: str
    cpus: str
    cpu_numa: str
    memory_assignment: str
    memory_numa: str
    cfs_quota: str

    def cells(self) -> tuple[str, ...]:
        return (
            self.pod,
            self.container,
            self.assignment,
            self.cpus,
            self.cpu_numa,
            self.memory_assignment,
            self.memory_numa,
            self.cfs_quota,
        )


def numa_of_cpus(topology_document: Mapping[str, Any]) -> dict[int, int]:
    """CPU id -> NUMA node id, from a ``contracts/topology.md`` document."""
    return {int(cpu["id"]): int(cpu["numa"]) for cpu in topology_document.get("cpus", [])}


def _numa_text(nodes: Iterable[int | str]) -> str:
    text = ",".join(str(n) for n in nodes)
    return text or MISSING


def cpu_numa_nodes(cpus: str | None, numa_of: Mapping[int, int]) -> str:
    """The NUMA nodes a CPU list lies on (``0,1``); ``?`` for CPUs the topology does not know."""
    if not cpus:
        return MISSING
    ids = list(CPUSet.parse(cpus))
    nodes: list[int | str] = sorted({numa_of[cpu] for cpu in ids if cpu in numa_of})
    if any(cpu not in numa_of for cpu in ids):
        nodes.append(UNKNOWN_NUMA)
    return _numa_text(nodes)


def container_rows(snapshot: Snapshot) -> list[ContainerRow]:
    """Every long-running container, pods sorted by namespace/name, containers in the enforcer's order."""
    numa_of = numa_of_cpus(snapshot.topology.topology)
    rows: list[ContainerRow] = []
    for pod in sorted(snapshot.allocations.items, key=lambda p: (p.namespace, p.name)):
        for name, container in pod.containers.items():
            memory_nodes = container.memory_numa_nodes
            rows.append(
                ContainerRow(
                    pod=f"{pod.namespace}/{pod.name}",
                    container=name,
                    assignment=container.assignment,
                    cpus=container.cpus or MISSING,
                    cpu_numa=cpu_numa_nodes(container.cpus, numa_of),
                    memory_assignment=container.memory_assignment,
                    memory_numa=MISSING if memory_nodes is None else _numa_text(memory_nodes),
                    cfs_quota=container.cfs_quota,
                )
            )
    return rows


def memory_types(topology: contract.TopologyView) -> list[str]:
    """Every memory type any NUMA node reports, ``memory`` first, then hugepages by name."""
    names = {name for usage in topology.numa_nodes for name in usage.memory}
    return sorted(names, key=lambda name: (name != "memory", name))


def numa_rows(topology: contract.TopologyView) -> list[tuple[str, ...]]:
    """Per NUMA node: CPUs free/total, reserved and exclusive counts, the free CPUs, memory free/allocatable."""
    names = memory_types(topology)
    header = ("NUMA", "CPUS FREE/TOTAL", "RESERVED", "EXCLUSIVE", "FREE CPUS", *(f"{n} FREE/ALLOC" for n in names))
    rows: list[tuple[str, ...]] = [header]
    for usage in sorted(topology.numa_nodes, key=lambda u: u.id):
        memory = []
        for name in names:
            table = usage.memory.get(name)
            if table is None:
                memory.append(MISSING)
            else:
                memory.append(f"{quantity.human_bytes(table.free)}/{quantity.human_bytes(table.allocatable)}")
        rows.append(
            (
                str(usage.id),
                f"{usage.cpus.free}/{usage.cpus.total}",
                str(usage.cpus.reserved),
                str(usage.cpus.exclusive),
                usage.cpus.free_cpus or MISSING,
                *memory,
            )
        )
    return rows


def columns(rows: Sequence[Sequence[str]], *, gap: str = "  ") -> list[str]:
    """Left-aligned columns as wide as their widest cell, trailing blanks removed."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [gap.join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def _resize_lines(allocations: contract.AllocationList) -> list[str]:
    lines = []
    for pod in sorted(allocations.items, key=lambda p: (p.namespace, p.name)):
        if pod.resize is None:
            continue
        status = pod.resize
        detail = "".join(
            (
                f" {status.reason}" if status.reason else "",
                f": {status.message}" if status.message else "",
            )
        )
        lines.append(f"  {pod.namespace}/{pod.name}: {status.state}{detail} (since {status.since.isoformat()})")
    return lines


def render_table(snapshot: Snapshot) -> str:
    """The allocations table, the node's pools, pending resizes and free resources per NUMA node."""
    allocations, topology = snapshot.allocations, snapshot.topology
    rows = container_rows(snapshot)
    pods = len(allocations.items)
    lines = [f"node {allocations.node}: {pods} pod{'s' if pods != 1 else ''}, {len(rows)} containers"]
    if rows:
        lines += columns([TABLE_HEADER, *(row.cells() for row in rows)])
    else:
        lines.append("no allocations")
    lines.append("")
    lines.append(
        f"node shared pool: {topology.shared_pool or MISSING}   reserved CPUs: {topology.reserved_cpus or MISSING}"
    )
    resizes = _resize_lines(allocations)
    if resizes:
        lines += ["", "resizes:", *resizes]
    lines.append("")
    if topology.numa_nodes:
        lines += columns(numa_rows(topology))
    else:
        lines.append("free resources unknown: the enforcer has no state loaded")
    return "\n".join(lines)


def render_json(snapshot: Snapshot, *, compact: bool = False) -> str:
    """Both bodies as the enforcer served them: ``{"allocations": ..., "topology": ...}``."""
    document = {"allocations": snapshot.raw_allocations, "topology": snapshot.raw_topology}
    if compact:
        return json.dumps(document, separators=(",", ":"), sort_keys=True)
    return json.dumps(document, indent=2, sort_keys=True)
