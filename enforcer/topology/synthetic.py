"""Regular synthetic machines, for what-if planning and benchmarks of machines we do not have.

``regular(numa_nodes)``: 2 sockets (1 when there is one NUMA node), ``cores_per_numa``
cores x 2 hyperthreads per NUMA node, one uncore cache per NUMA node, ``memory`` per
node, SLIT distances 10 (local) / 12 (same socket) / 21 (other socket).  CPU ids
follow Linux's usual numbering: first threads 0..N-1, their siblings N..2N-1.
"""

from __future__ import annotations

from enforcer.topology.machine import CPUInfo, CPUTopology, NUMANode

GiB = 1 << 30


def regular(numa_nodes: int, *, cores_per_numa: int = 8, memory: int = 64 * GiB) -> CPUTopology:
    first_threads = numa_nodes * cores_per_numa
    sockets_of = {n: (0 if n < max(1, numa_nodes // 2) else 1) for n in range(numa_nodes)}
    cpus: list[CPUInfo] = []
    for numa in range(numa_nodes):
        for k in range(cores_per_numa):
            core = numa * cores_per_numa + k
            for cpu_id in (core, core + first_threads):
                cpus.append(CPUInfo(cpu_id, core, sockets_of[numa], numa, numa))
    nodes = [NUMANode(n, {"memory": memory}) for n in range(numa_nodes)]
    distances = {
        a: tuple(10 if a == b else (12 if sockets_of[a] == sockets_of[b] else 21) for b in range(numa_nodes))
        for a in range(numa_nodes)
    }
    return CPUTopology(cpus, nodes, distances)
