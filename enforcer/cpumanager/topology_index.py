"""The machine's CPU groupings as bitmasks, computed once per topology (kubelet ``CPUDetails`` queries).

Shared by the kubelet port of ``takeByTopology`` (:mod:`enforcer.cpumanager.assignment`) and the
resize-aware selection (:mod:`enforcer.cpumanager.resize_take`), which both sort the same groupings
by their free CPUs. Pure and read-only; the cache holds one index per topology object.
"""

from __future__ import annotations

from collections.abc import Sequence

from enforcer.topology.machine import CPUTopology

# (group id, mask whose free CPUs are counted for sorting, mask deciding membership in the parent)
Member = tuple[int, int, int]


class TopologyIndex:
    """What the kubelet's ``CPUDetails`` queries answer, as masks grouped by parent."""

    __slots__ = (
        "topology",
        "all_mask",
        "num_cpus",
        "numa_first",
        "cpus_per_core",
        "smallest_core",
        "smallest_numa",
        "smallest_socket",
        "numa_mask",
        "socket_mask",
        "uncore_mask",
        "core_mask",
        "numas",
        "sockets",
        "numas_in_socket",
        "sockets_in_numa",
        "cores_in_socket",
        "cores_in_numa",
        "uncores_in_numa",
        "cores_in_uncore",
        "sockets_of_numa",
    )

    def __init__(self, topology: CPUTopology) -> None:
        self.topology = topology
        self.all_mask = topology.all_cpus.mask
        self.num_cpus = topology.num_cpus
        self.numa_mask = dict(sorted(topology.numa_masks.items()))
        self.socket_mask = dict(sorted(topology.socket_masks.items()))
        self.uncore_mask = dict(sorted(topology.uncore_masks.items()))
        self.core_mask = dict(sorted(topology.core_masks.items()))
        # kubelet CPUTopology: NumNUMANodes counts NUMA nodes that hold CPUs; CPUsPerCore() is the
        # integer average NumCPUs / NumCores (used to size partial uncore-cache requests).
        self.numa_first = len(self.socket_mask) >= len(self.numa_mask)
        self.cpus_per_core = self.num_cpus // len(self.core_mask)
        self.smallest_core = min(m.bit_count() for m in self.core_mask.values())
        self.smallest_numa = min(m.bit_count() for m in self.numa_mask.values())
        self.smallest_socket = min(m.bit_count() for m in self.socket_mask.values())

        self.numas: tuple[Member, ...] = tuple((n, m, m) for n, m in self.numa_mask.items())
        self.sockets: tuple[Member, ...] = tuple((s, m, m) for s, m in self.socket_mask.items())
        self.numas_in_socket = {
            s: tuple((n, nm, nm & sm) for n, nm in self.numa_mask.items() if nm & sm)
            for s, sm in self.socket_mask.items()
        }
        self.sockets_in_numa = {
            n: tuple((s, sm, sm & nm) for s, sm in self.socket_mask.items() if sm & nm)
            for n, nm in self.numa_mask.items()
        }
        self.cores_in_socket = {
            s: tuple((c, cm, cm & sm) for c, cm in self.core_mask.items() if cm & sm)
            for s, sm in self.socket_mask.items()
        }
        self.cores_in_numa = {
            n: tuple((c, cm, cm & nm) for c, cm in self.core_mask.items() if cm & nm)
            for n, nm in self.numa_mask.items()
        }
        self.uncores_in_numa = {
            n: tuple((u, um, um & nm) for u, um in self.uncore_mask.items() if um & nm)
            for n, nm in self.numa_mask.items()
        }
        # (core id, the core's CPUs inside this uncore cache, all of the core's CPUs)
        self.cores_in_uncore = {
            u: tuple((c, cm & um, cm) for c, cm in self.core_mask.items() if cm & um)
            for u, um in self.uncore_mask.items()
        }
        self.sockets_of_numa = {
            n: frozenset(s for s, sm in self.socket_mask.items() if sm & nm) for n, nm in self.numa_mask.items()
        }


_CACHE: dict[int, TopologyIndex] = {}
_CACHE_LIMIT = 64


def index_of(topology: CPUTopology) -> TopologyIndex:
    # Keyed by identity: CPUTopology hashes its JSON fingerprint, far too slow for a hot path.  The
    # entry keeps its topology alive, so an id cannot be reused while the entry exists.
    index = _CACHE.get(id(topology))
    if index is None or index.topology is not topology:
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        index = TopologyIndex(topology)
        _CACHE[id(topology)] = index
    return index


def by_free_count(members: Sequence[Member], free: int) -> list[int]:
    """kubelet ``sort``: members with a free CPU, fewest free CPUs first, then ascending id."""
    counted = [((key & free).bit_count(), ident) for ident, key, member in members if member & free]
    counted.sort()
    return [ident for _, ident in counted]
