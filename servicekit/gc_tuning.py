"""Garbage-collector settings for a long-running, request-serving numaguard process.

Why: every full collection scans every tracked object alive, the start-up heap (modules, the app,
the engine and its state) included: on the enforcer that made each full pass ~100 ms at 1,024
CPUs, on the scheduler extender (100 replicas) 25-40 ms, each one a request's tail latency
(``python -m bench.bench_enforcer --held-split 250 [--no-freeze]``, ``python -m bench.bench_extender``).
Objects alive after start-up are frozen out of future collections (still freed by reference
counting; only cycles among them would wait for an ``unfreeze``), and full collections become rare.

How often the young generation is collected depends on what requests leave behind:

* :data:`REQUEST_HEAVY` (the enforcer): a request allocates thousands of short-lived objects
  (parsed pods, pydantic models) and keeps almost none, so a young collection finds little to
  scan however rarely it runs; with the default threshold (700) it ran every few requests and
  stretched the tail of the requests queued behind it (p99 at 16 clients ~40 ms -> ~25 ms).
* :data:`ANSWER_CACHING` (the scheduler extender): requests keep what they computed (cached
  dry-run answers, and the poller installs new replicas), so every young collection scans what
  survived since the last one: at a threshold of 100,000 one collection took ~15 ms; at the
  default 700 each takes well under a millisecond.  Only the full collections are made rare.
"""

from __future__ import annotations

import gc
from typing import NamedTuple


class Thresholds(NamedTuple):
    young: int
    middle: int
    old: int


REQUEST_HEAVY = Thresholds(100_000, 50, 1_000)
ANSWER_CACHING = Thresholds(700, 10, 1_000)


def tune_for_serving(thresholds: Thresholds = REQUEST_HEAVY) -> None:
    """Collect once, freeze what start-up left alive, and set the collection thresholds.

    Call it once, after the app and its long-lived state are built and before serving."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
