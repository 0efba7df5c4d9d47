"""Garbage-collector settings for a long-running, request-serving numaguard process.

Why: a request allocates thousands of short-lived objects (parsed pods, pydantic models) and
almost never a reference cycle.  With the interpreter's defaults the young generation is collected
every 700 net allocations, and every full collection scans every tracked object alive, the
start-up heap (modules, the app, the engine and its state) included: on the enforcer that made
each full pass ~100 ms at 1,024 CPUs, on the scheduler extender (100 replicas) 25-40 ms, each one
a request's tail latency (``python -m bench.bench_enforcer --held-split 250 [--no-freeze]``,
``python -m bench.bench_extender``).  Objects alive after start-up are frozen out of future
collections (still freed by reference counting; only cycles among them would wait for an
``unfreeze``), and collections run far less often.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 100_000
MIDDLE_THRESHOLD = 50
OLD_THRESHOLD = 1_000


def tune_for_serving() -> None:
    """Collect once, freeze what start-up left alive, and raise the collection thresholds.

    Call it once, after the app and its long-lived state are built and before serving."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
