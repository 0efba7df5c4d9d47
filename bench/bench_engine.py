"""Full pod admissions vs topology size: the engine's decision time up to 64 NUMA nodes / 1,024 CPUs.

Each machine is ``enforcer.topology.synthetic.regular``: 2 sockets, N NUMA nodes of 8 cores x 2 threads
(16 CPUs) and 64 GiB each, SLIT distances 10 / 12 (same socket) / 21 (other socket).  The node runs the static CPU
policy, the Static memory policy and the Topology Manager with ``max-allowable-numa-nodes`` raised to
the machine's size (the kubelet refuses more than 8 NUMA nodes without it, and its merge cannot finish
beyond ~20).  The engine is first filled to about half with pods, then one more pod is admitted and
released, repeatedly; the median admission time is reported.  Measured, never asserted.

Run: ``python -m bench.bench_engine [--repeats N]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.engine.node import NodeEngine
from enforcer.topology import synthetic
from shared.resources import ContainerResources, PodResources, Resources

GiB = 1 << 30
SIZES = (2, 8, 16, 32, 64)
CORES_PER_NUMA = 8


def engine_for(numa_count: int, scope: str, policy: str) -> NodeEngine:
    reserved_mib = 1024 + 100
    config = from_kubelet(
        {
            "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
            "cpuManagerPolicy": "static",
            "reservedSystemCPUs": "0",
            "systemReserved": {"memory": "1Gi"},
            "memoryManagerPolicy": "Static",
            "reservedMemory": [{"numaNode": 0, "limits": {"memory": f"{reserved_mib}Mi"}}],
            "topologyManagerPolicy": policy,
            "topologyManagerScope": scope,
            "topologyManagerPolicyOptions": {"max-allowable-numa-nodes": str(max(8, numa_count))},
        }
    )
    return builder.build(synthetic.regular(numa_count, cores_per_numa=CORES_PER_NUMA), config)


def guaranteed_pod(uid: str, cpus: int, memory_gib: int) -> PodResources:
    """The seed-1 shape: pod budget, one exclusive app container, one shared sidecar."""
    app = cpus - 2
    return PodResources(
        uid=uid,
        namespace="bench",
        name=uid,
        pod=Resources(
            {"cpu": cpus * 1000, "memory": memory_gib * GiB}, {"cpu": cpus * 1000, "memory": memory_gib * GiB}
        ),
        containers=(
            ContainerResources("sidecar", "sidecar"),
            ContainerResources(
                "app",
                "app",
                Resources(
                    {"cpu": app * 1000, "memory": (memory_gib - 1) * GiB},
                    {"cpu": app * 1000, "memory": (memory_gib - 1) * GiB},
                ),
            ),
        ),
    )


def measure(numa_count: int, scope: str, policy: str, repeats: int) -> dict[str, Any]:
    engine = engine_for(numa_count, scope, policy)
    filler = 0
    while filler < numa_count // 2 * 3:  # ~3 pods of 4 CPUs per NUMA node on half the nodes
        engine.admit(guaranteed_pod(f"fill-{filler}", 4, 4))
        filler += 1
    pod = guaranteed_pod("probe", 8, 8)
    times: list[float] = []
    admitted = True
    for _ in range(repeats):
        start = time.perf_counter()
        decision = engine.admit(pod)
        times.append(time.perf_counter() - start)
        admitted = admitted and decision.admitted
        engine.remove(pod.uid)
    return {
        "numa": numa_count,
        "cpus": numa_count * CORES_PER_NUMA * 2,
        "scope": scope,
        "policy": policy,
        "median_ms": statistics.median(times) * 1000,
        "p99_ms": sorted(times)[max(0, int(len(times) * 0.99) - 1)] * 1000,
        "admitted": admitted,
    }


def run(repeats: int) -> list[dict[str, Any]]:
    rows = []
    for numa_count in SIZES:
        for scope, policy in (("pod", "single-numa-node"), ("pod", "best-effort"), ("container", "restricted")):
            rows.append(measure(numa_count, scope, policy, repeats))
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'NUMA':>5} {'CPUs':>5} {'scope':<10} {'policy':<17} {'median':>10} {'p99':>10}  admitted"]
    for r in rows:
        lines.append(
            f"{r['numa']:>5} {r['cpus']:>5} {r['scope']:<10} {r['policy']:<17} "
            f"{r['median_ms']:>8.2f}ms {r['p99_ms']:>8.2f}ms  {r['admitted']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)
    print(render(run(args.repeats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
