"""Discover the machine model from sysfs, as the kubelet does through cAdvisor.

This is the **only** module that reads ``/sys``.  It takes the sysfs root as a
parameter so tests and the docker-compose demo point it at captured trees
(``tests/fixtures/sysfs/<machine>/``, ``enforcer/topology/fixtures/``).

What is read, relative to the root (``contracts/topology.md`` rule 6)::

    devices/system/cpu/online                                  online CPUs; the others are left out
    devices/system/cpu/cpuN/topology/{core_id,physical_package_id}
    devices/system/cpu/cpuN/cache/index3/id                    last-level cache (uncore) id
    devices/system/node/nodeN/cpulist                          NUMA membership
    devices/system/node/nodeN/meminfo                          "Node N MemTotal: <kB> kB"
    devices/system/node/nodeN/hugepages/hugepages-<size>kB/nr_hugepages
    devices/system/node/nodeN/distance                         SLIT row, ordered by node id

Kubelet semantics kept:

* A core's id is the lowest logical CPU id among its online threads
  (``getUniqueCoreID``): the kernel's ``core_id`` repeats on every socket.
  Threads are grouped by (package, core_id).
* No ``cache/index3`` (or no ``id`` in it) means the uncore cache is the socket
  (``getUncoreCacheID`` falls back to the socket id).
* No ``node`` directory (a kernel without NUMA) means one NUMA node 0 holding
  every CPU; its memory then comes from ``meminfo_fallback`` (``/proc/meminfo``
  on a real host) and its hugepages from ``kernel/mm/hugepages``.
* Memory capacity is MemTotal, hugepages are ``nr_hugepages`` x page size, as
  cAdvisor reports them; reserving and subtracting is the memory manager's job.

Every unreadable or malformed file raises :class:`enforcer.errors.TopologyError`
naming that file.  This module must not interpret the topology (no policy, no
allocation) and must not read anything but the files above.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from enforcer.errors import TopologyError
from enforcer.topology.machine import HUGEPAGES_PREFIX, MEMORY, CPUInfo, CPUTopology, NUMANode
from shared import quantity
from shared.cpuset import CPUSet
from shared.errors import DomainError

HOST_SYSFS = Path("/sys")
HOST_MEMINFO = Path("/proc/meminfo")

_CPU_DIR = re.compile(r"^cpu(\d+)$")
_NODE_DIR = re.compile(r"^node(\d+)$")
_HUGEPAGES_DIR = re.compile(r"^hugepages-(\d+)kB$")
_MEMTOTAL = re.compile(r"^(?:Node\s+\d+\s+)?MemTotal:\s+(\d+)\s*kB\s*$", re.MULTILINE)
# Some arm64 kernels report -1 ("unknown") for the package; they have one package.
_UNKNOWN_PACKAGE = -1


def discover(sysfs_root: str | Path = HOST_SYSFS, *, meminfo_fallback: str | Path | None = None) -> CPUTopology:
    """Build the machine model from the sysfs tree at ``sysfs_root``."""
    root = Path(sysfs_root)
    cpu_dir = root / "devices" / "system" / "cpu"
    if not cpu_dir.is_dir():
        raise TopologyError(f"{cpu_dir}: not a directory; is {root} a sysfs root?")
    online = _online_cpus(cpu_dir)
    numa_of_cpu, nodes, distances = _numa(root, online, meminfo_fallback)

    packages: dict[int, int] = {}
    thread_groups: dict[tuple[int, int], list[int]] = {}
    uncore_of_cpu: dict[int, int] = {}
    for cpu in online:
        topology = cpu_dir / f"cpu{cpu}" / "topology"
        package = _read_int(topology / "physical_package_id", minimum=_UNKNOWN_PACKAGE)
        package = 0 if package == _UNKNOWN_PACKAGE else package
        core_id = _read_int(topology / "core_id")
        packages[cpu] = package
        thread_groups.setdefault((package, core_id), []).append(cpu)
        uncore_file = cpu_dir / f"cpu{cpu}" / "cache" / "index3" / "id"
        uncore_of_cpu[cpu] = _read_int(uncore_file) if uncore_file.exists() else package

    core_of_cpu = {cpu: min(threads) for threads in thread_groups.values() for cpu in threads}
    cpus = [
        CPUInfo(id=cpu, core=core_of_cpu[cpu], socket=packages[cpu], numa=numa_of_cpu[cpu], uncore=uncore_of_cpu[cpu])
        for cpu in online
    ]
    return CPUTopology(cpus, nodes, distances)


def discover_host() -> CPUTopology:
    """This machine, read from ``/sys`` (and ``/proc/meminfo`` on a kernel without NUMA)."""
    return discover(HOST_SYSFS, meminfo_fallback=HOST_MEMINFO)


# -- CPUs ---------------------------------------------------------------------------------


def _online_cpus(cpu_dir: Path) -> list[int]:
    present = sorted(int(m.group(1)) for m in (_CPU_DIR.match(p.name) for p in _listdir(cpu_dir)) if m)
    online_file = cpu_dir / "online"
    if online_file.exists():
        online = set(_read_cpuset(online_file))
        cpus = [cpu for cpu in present if cpu in online]
        missing = sorted(online - set(present))
        if missing:
            raise TopologyError(f"{online_file}: lists CPU {missing[0]} but {cpu_dir}/cpu{missing[0]} does not exist")
    else:  # kernels without CPU hotplug have no online file: every CPU is online
        cpus = present
    if not cpus:
        raise TopologyError(f"{cpu_dir}: no online CPUs")
    return cpus


# -- NUMA nodes ----------------------------------------------------------------------------


def _numa(
    root: Path, online: list[int], meminfo_fallback: str | Path | None
) -> tuple[dict[int, int], list[NUMANode], dict[int, tuple[int, ...]] | None]:
    node_dir = root / "devices" / "system" / "node"
    node_ids = (
        sorted(int(m.group(1)) for m in (_NODE_DIR.match(p.name) for p in _listdir(node_dir)) if m)
        if node_dir.is_dir()
        else []
    )
    if not node_ids:
        memory: dict[str, int] = {}
        if meminfo_fallback is not None:
            memory[MEMORY] = _memtotal(Path(meminfo_fallback))
        memory.update(_hugepages(root / "kernel" / "mm" / "hugepages"))
        return dict.fromkeys(online, 0), [NUMANode(0, memory)], None

    numa_of_cpu: dict[int, int] = {}
    nodes: list[NUMANode] = []
    rows: dict[int, tuple[int, ...]] = {}
    for node in node_ids:
        base = node_dir / f"node{node}"
        cpulist = base / "cpulist"
        for cpu in _read_cpuset(cpulist):
            owner = numa_of_cpu.setdefault(cpu, node)
            if owner != node:
                raise TopologyError(f"{cpulist}: CPU {cpu} is also listed by node{owner}")
        memory = {MEMORY: _memtotal(base / "meminfo")}
        memory.update(_hugepages(base / "hugepages"))
        nodes.append(NUMANode(node, memory))
        distance = base / "distance"
        if distance.exists():
            rows[node] = _read_ints(distance)

    for cpu in online:
        if cpu not in numa_of_cpu:
            raise TopologyError(f"{node_dir}: online CPU {cpu} is in no node*/cpulist")
    if rows and len(rows) != len(node_ids):
        missing = next(n for n in node_ids if n not in rows)
        raise TopologyError(f"{node_dir / f'node{missing}' / 'distance'}: missing while other nodes have one")
    for node, row in rows.items():
        if len(row) != len(node_ids):
            raise TopologyError(
                f"{node_dir / f'node{node}' / 'distance'}: {len(row)} entries for {len(node_ids)} NUMA nodes"
            )
    return {cpu: numa_of_cpu[cpu] for cpu in online}, nodes, (rows or None)


def _memtotal(meminfo: Path) -> int:
    match = _MEMTOTAL.search(_read(meminfo))
    if match is None:
        raise TopologyError(f"{meminfo}: no 'MemTotal: <n> kB' line")
    return int(match.group(1)) * 1024


def _hugepages(directory: Path) -> dict[str, int]:
    """``hugepages-<size>`` -> bytes, for every page size the kernel offers (zero counts included)."""
    if not directory.is_dir():
        return {}
    sizes: dict[str, int] = {}
    for entry in _listdir(directory):
        match = _HUGEPAGES_DIR.match(entry.name)
        if match is None:
            continue
        page_bytes = int(match.group(1)) * 1024
        count = _read_int(entry / "nr_hugepages")
        sizes[HUGEPAGES_PREFIX + quantity.format_bytes(page_bytes)] = count * page_bytes
    return dict(sorted(sizes.items()))


# -- file reading ------------------------------------------------------------------------------


def _listdir(directory: Path) -> Iterable[Path]:
    try:
        return sorted(directory.iterdir())
    except OSError as err:
        raise TopologyError(f"{directory}: cannot list: {err.strerror or err}") from None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        raise TopologyError(f"{path}: cannot read: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise TopologyError(f"{path}: not text") from None


def _read_int(path: Path, *, minimum: int = 0) -> int:
    text = _read(path).strip()
    try:
        value = int(text)
    except ValueError:
        raise TopologyError(f"{path}: expected an integer, got {text!r}") from None
    if value < minimum:
        raise TopologyError(f"{path}: expected an integer >= {minimum}, got {value}")
    return value


def _read_ints(path: Path) -> tuple[int, ...]:
    text = _read(path)
    try:
        values = tuple(int(v) for v in text.split())
    except ValueError:
        raise TopologyError(f"{path}: expected integers separated by spaces, got {text.strip()!r}") from None
    if not values:
        raise TopologyError(f"{path}: empty")
    return values


def _read_cpuset(path: Path) -> CPUSet:
    text = _read(path)
    try:
        return CPUSet.parse(text)
    except DomainError as err:
        raise TopologyError(f"{path}: {err}") from None
