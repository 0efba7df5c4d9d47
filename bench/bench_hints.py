"""Layered (shipped) vs exhaustive hint generation: do they decide the same, and what does each cost?

Random machines (uneven NUMA nodes: 2-6 cores x 2 threads, 4-8 GiB, some with 1 GiB hugepages), random
fragmentation (pods admitted and removed), random Guaranteed pods with container- or pod-level
resources; best-effort / restricted / single-numa-node, pod and container scope.  The same operations
run on two engines, one as shipped, one under :mod:`enforcer.engine.exhaustive_reference` (every NUMA set
as a hint, as the kubelet's ``IterateBitMasks``); a decision agrees when admitted-or-not, reason,
message, CPUs, memory blocks and affinity are identical.  Times are medians of single admissions,
both engines timed in the same run, interleaved.

``python -m bench.bench_hints [--machines N] [--seed S]``
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from enforcer.engine import builder
from enforcer.engine.config import from_kubelet
from enforcer.engine.exhaustive_reference import exhaustive
from enforcer.engine.node import Decision, NodeEngine
from enforcer.topology.machine import CPUInfo, CPUTopology, NUMANode
from shared.resources import ContainerResources, PodResources, Resources

GiB = 1 << 30
POLICIES = ("best-effort", "restricted", "single-numa-node")
GROUPS = ((1, 8), (9, 12))


def random_machine(rng: random.Random, numa_count: int) -> CPUTopology:
    cores = [rng.randint(2, 6) for _ in range(numa_count)]
    first_threads = sum(cores)
    socket_of = [0 if n < max(1, numa_count // 2) else 1 for n in range(numa_count)]
    cpus: list[CPUInfo] = []
    core = 0
    for numa, count in enumerate(cores):
        for _ in range(count):
            for cpu_id in (core, core + first_threads):
                cpus.append(CPUInfo(cpu_id, core, socket_of[numa], numa, numa))
            core += 1
    huge = rng.random() < 0.3
    nodes = []
    for n in range(numa_count):
        memory = {"memory": rng.randint(4, 8) * GiB}
        if huge:
            memory["hugepages-1Gi"] = rng.randint(0, 2) * GiB
        nodes.append(NUMANode(n, memory))
    distances = {
        a: tuple(10 if a == b else (12 if socket_of[a] == socket_of[b] else 21) for b in range(numa_count))
        for a in range(numa_count)
    }
    return CPUTopology(cpus, nodes, distances)


def random_pod(rng: random.Random, uid: str) -> PodResources:
    def guaranteed(cpus: int, memory_gib: int) -> Resources:
        amounts = {"cpu": cpus * 1000, "memory": memory_gib * GiB}
        return Resources(dict(amounts), dict(amounts))

    containers: list[ContainerResources] = []
    if rng.random() < 0.3:
        containers.append(ContainerResources("init", "init", guaranteed(rng.randint(1, 4), 1)))
    apps = rng.randint(1, 2)
    cpus = [rng.randint(1, 8) for _ in range(apps)]
    memory = [rng.randint(1, 10) for _ in range(apps)]
    for i in range(apps):
        containers.append(ContainerResources(f"app{i}", "app", guaranteed(cpus[i], memory[i])))
    budget = guaranteed(sum(cpus), sum(memory) + 1) if rng.random() < 0.4 else None
    return PodResources(uid, "bench", uid, tuple(containers), pod=budget)


def engine_for(topology: CPUTopology, policy: str, scope: str) -> NodeEngine:
    config = from_kubelet(
        {
            "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
            "cpuManagerPolicy": "static",
            "reservedSystemCPUs": "0",
            "systemReserved": {"memory": "1Gi"},
            "memoryManagerPolicy": "Static",
            "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}}],
            "topologyManagerPolicy": policy,
            "topologyManagerScope": scope,
            "topologyManagerPolicyOptions": {"max-allowable-numa-nodes": str(max(8, len(topology.numa_masks)))},
        }
    )
    return builder.build(topology, config)


def _outcome(decision: Decision) -> tuple[object, ...]:
    return (decision.admitted, decision.reason, decision.message, decision.view)


@dataclass
class Group:
    low: int
    high: int
    decisions: int = 0
    agree: int = 0
    admitted: int = 0
    layered_s: list[float] = field(default_factory=list)
    exhaustive_s: list[float] = field(default_factory=list)


def run(machines: int, seed: int = 16) -> list[Group]:
    rng = random.Random(seed)
    groups = [Group(low, high) for low, high in GROUPS]
    for index in range(machines):
        group = groups[index % len(groups)]
        topology = random_machine(rng, rng.randint(group.low, group.high))
        policy, scope = rng.choice(POLICIES), rng.choice(("pod", "container"))
        shipped = engine_for(topology, policy, scope)
        reference = engine_for(topology, policy, scope)
        held: list[str] = []
        for step in range(rng.randint(3, 10)):
            if held and rng.random() < 0.25:
                uid = held.pop(rng.randrange(len(held)))
                shipped.remove(uid)
                reference.remove(uid)
                continue
            pod = random_pod(rng, f"m{index}-p{step}")
            start = time.perf_counter()
            got = shipped.admit(pod)
            group.layered_s.append(time.perf_counter() - start)
            with exhaustive():
                start = time.perf_counter()
                want = reference.admit(pod)
                group.exhaustive_s.append(time.perf_counter() - start)
            group.decisions += 1
            group.agree += _outcome(got) == _outcome(want)
            group.admitted += got.admitted
            if got.admitted:
                held.append(pod.uid)
            if want.admitted and not got.admitted:
                reference.remove(pod.uid)  # keep the two nodes alike after a disagreement
            elif got.admitted and not want.admitted:
                shipped.remove(pod.uid)
                held.remove(pod.uid)
    return groups


def table_rows(quick: bool) -> list[dict[str, Any]]:
    logging.disable(logging.WARNING)
    rows = []
    for g in run(machines=20 if quick else 200):
        layered = statistics.median(g.layered_s) * 1000
        full = statistics.median(g.exhaustive_s) * 1000
        rows.append(
            {
                "section": "hint generation (layered vs exhaustive)",
                "case": f"{g.low}-{g.high} NUMA: {g.decisions} decisions, {g.admitted} admitted",
                "ours": f"{layered:.2f} ms",
                "reference": f"exhaustive {full:.2f} ms (same run)",
                "ratio": f"{full / layered:,.1f}x faster" if layered else "-",
                "check": f"{g.agree}/{g.decisions} agree"
                if g.agree == g.decisions
                else f"mismatch {g.agree}/{g.decisions}",
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--machines", type=int, default=200)
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    print(f"{'NUMA':>6} {'decisions':>9} {'agree':>6} {'admitted':>8} {'layered':>10} {'exhaustive':>11}")
    failed = False
    for g in run(args.machines, args.seed):
        layered = statistics.median(g.layered_s) * 1000
        full = statistics.median(g.exhaustive_s) * 1000
        print(f"{g.low:>2}-{g.high:<3} {g.decisions:>9} {g.agree:>6} {g.admitted:>8} {layered:>8.2f}ms {full:>9.2f}ms")
        failed = failed or g.agree != g.decisions
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
