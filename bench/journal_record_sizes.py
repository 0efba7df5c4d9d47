"""Journal records per allocation + release at 1,024 CPUs: their size, and which appends add a zeroed chunk
or compact.

Why: a pre-zeroed journal adds its next 1 MiB chunk on the append that would not fit, so how often an
allocation pays that depends on the record size; this counts it on the same in-process path as
``bench_enforcer --pairs-in-process --large`` instead of estimating it.

Usage: ``.venv/bin/python -m bench.journal_record_sizes [--pairs N]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from bench import bench_enforcer
from enforcer.state import journal


@dataclass
class JournalTrace:
    record_bytes: list[int] = field(default_factory=list)
    extends: list[tuple[int, float]] = field(default_factory=list)  # (records written before it, ms)
    saves: list[tuple[int, float]] = field(default_factory=list)


@contextmanager
def traced() -> Iterator[JournalTrace]:
    """Wraps the journal's line builder, chunk growth and compaction for the duration (restored after)."""
    trace = JournalTrace()
    record_line, extend, save = journal.record_line, journal.JournaledStore._extend, journal.JournaledStore.save

    def counting_record_line(seq: int, prev: str, ops: Sequence[Mapping[str, Any]], **kwargs: Any) -> tuple[bytes, str]:
        line = record_line(seq, prev, ops, **kwargs)
        trace.record_bytes.append(len(line[0]))
        return line

    def timed_extend(store: journal.JournaledStore, fd: int, size: int) -> None:
        started = time.perf_counter()
        extend(store, fd, size)
        trace.extends.append((len(trace.record_bytes), (time.perf_counter() - started) * 1000))

    def timed_save(store: journal.JournaledStore, document: dict[str, Any]) -> None:
        started = time.perf_counter()
        save(store, document)
        trace.saves.append((len(trace.record_bytes), (time.perf_counter() - started) * 1000))

    journal.record_line = counting_record_line
    journal.JournaledStore._extend = timed_extend  # type: ignore[method-assign,assignment]
    journal.JournaledStore.save = timed_save  # type: ignore[method-assign,assignment]
    try:
        yield trace
    finally:
        journal.record_line = record_line
        journal.JournaledStore._extend = extend  # type: ignore[method-assign]
        journal.JournaledStore.save = save  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pairs", type=int, default=100, help="allocations of new pods, each released again")
    args = parser.parse_args(argv)
    with traced() as trace:
        bench_enforcer.pairs_in_process(args.pairs, large=True)
    sizes = trace.record_bytes
    print(f"{args.pairs} pairs at 1,024 CPUs: {len(sizes)} journal records")
    print(f"record bytes: median {statistics.median(sizes):.0f}, max {max(sizes)}")
    per_chunk = journal.CHUNK_BYTES / statistics.median(sizes)
    print(f"appends per {journal.CHUNK_BYTES:,}-byte chunk at the median: {per_chunk:.0f}")
    print("chunks added (after record #, ms):", [(n, round(ms, 2)) for n, ms in trace.extends])
    print("saves (after record #, ms):", [(n, round(ms, 2)) for n, ms in trace.saves])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
