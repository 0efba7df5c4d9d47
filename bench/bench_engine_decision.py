"""One engine decision (admit a one-CPU pod, then release it) with 25 and with 250 pods held, in process.

The enforcer's goal is a decision whose cost does not grow with the pods a node holds (issue #16).
This times only ``NodeEngine.admit`` + ``NodeEngine.remove`` on the 1,024-CPU synthetic machine the
held curve uses (8 NUMA nodes x 64 cores x 2 threads, the seed node's kubelet settings), so the
engine's part can be compared without the HTTP, TLS and disk noise of ``bench_enforcer --held``.
The minimum of many repeats is reported next to the median: on a shared machine the minimum is the
figure other processes disturb least.

    .venv/bin/python -m bench.bench_engine_decision [--repeats 300]

It uses only the engine's public API, so the same file run from another checkout's directory
measures that checkout (``cd /path/to/old && python /path/to/this/file``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import yaml

from enforcer.engine import builder
from enforcer.engine import config as engine_config
from enforcer.topology import synthetic
from shared.resources import ContainerResources, PodResources, Resources

SEED_SCENARIO = (
    Path(__file__).resolve().parents[1] / "numaguard_cli" / "scenarios" / "seed-1-tightly-coupled-database.yaml"
)
HELD = (25, 250)
WARMUP = 50
ONE_CPU = Resources({"cpu": 1000, "memory": 256 << 20}, {"cpu": 1000, "memory": 256 << 20})


def _pod(uid: str) -> PodResources:
    return PodResources(uid=uid, namespace="bench", name=uid, containers=(ContainerResources("main", "app", ONE_CPU),))


def decision_ms(held: int, repeats: int) -> tuple[float, float]:
    """(minimum, median) CPU ms of one admit + remove with ``held`` pods already admitted."""
    config = engine_config.from_kubelet(yaml.safe_load(SEED_SCENARIO.read_text())["node"]["kubelet"])
    engine = builder.build(synthetic.regular(8, cores_per_numa=64), config)
    for index in range(held):
        if not engine.admit(_pod(f"held-{index}")).admitted:
            raise RuntimeError(f"pod {index} was refused")
    probe = _pod("probe")
    for _ in range(WARMUP):  # allocator and cache warm-up, untimed
        engine.admit(probe)
        engine.remove(probe.uid)
    samples: list[float] = []
    for _ in range(repeats):
        started = time.process_time()
        engine.admit(probe)
        engine.remove(probe.uid)
        samples.append(time.process_time() - started)
    return min(samples) * 1000, statistics.median(samples) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args(argv)
    results = {held: decision_ms(held, args.repeats) for held in HELD}
    print(f"{'pods held':>9} {'min ms':>8} {'p50 ms':>8}")
    for held, (low, mid) in results.items():
        print(f"{held:>9} {low:>8.3f} {mid:>8.3f}")
    first, last = results[HELD[0]], results[HELD[-1]]
    print(f"{HELD[-1]} / {HELD[0]} held: min {last[0] / first[0]:.2f}x, p50 {last[1] / first[1]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
