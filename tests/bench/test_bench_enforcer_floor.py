"""``python -m bench.bench_enforcer --floor``, ``--held-where`` and side-by-side pairs, end to end on real enforcers.

Smoke only (one measured round per client; three held pods for --held-where); no figure is asserted.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a directory of measuring scripts, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import bench_enforcer  # noqa: E402


def test_the_floor_rows_come_with_the_allocation_rows() -> None:
    rows = bench_enforcer.run(repeats=1, floor=True)
    assert [(r.clients, r.operation) for r in rows] == [
        (clients, operation) for clients in (1, 16) for operation in ("allocate", "release", "re-post")
    ]
    assert all(r.requests == r.clients for r in rows)  # one measured request per client, none failed
    assert all(r.server_cpu_ms is not None and r.server_cpu_ms >= 0 for r in rows)


def test_the_in_process_re_post_measure_runs() -> None:
    calls, cpu_ms = bench_enforcer.repost_in_process(requests=3, passes=1)
    assert calls > 0 and cpu_ms > 0  # a smoke run: neither figure is asserted


def test_the_in_process_allocate_release_measure_runs() -> None:
    assert bench_enforcer.pairs_in_process(2) >= 0  # every allocation 201 and release 200, or it raises


def test_the_held_where_split_counts_every_measured_allocation_on_each_side() -> None:
    where = bench_enforcer.held_where(3)
    assert len(where.client_ms) == 3
    assert set(where.server) == set(bench_enforcer.SERVER_SERIES)
    # the warm-up is scraped away: each series saw exactly the measured allocations (one write each: one client)
    assert {name: counts[float("inf")] for name, counts in where.server.items()} == dict.fromkeys(where.server, 3)
    for counts in where.server.values():  # cumulative buckets
        ordered = [counts[bound] for bound in sorted(counts)]
        assert ordered == sorted(ordered)
    # every measured answer carried its Server-Timing phases; the slowest are split with what was outside the app
    assert [list(phases) for phases in where.phases] == [["read", "decide", "durable", "followup", "answer"]] * 3
    (slowest_ms, split), *_ = where.slowest(1)
    assert slowest_ms == max(where.client_ms) and sum(split.values()) == pytest.approx(slowest_ms)
    medians = where.medians()
    assert list(medians) == ["round trip", *split] and medians["round trip"] == statistics.median(where.client_ms)


def test_a_server_timing_header_reads_as_its_phases_in_order() -> None:
    header = 'read;dur=0.412, decide;desc="lock and decision";dur=1.5,durable;dur=2, followup'
    assert bench_enforcer.server_timing(header) == {"read": 0.412, "decide": 1.5, "durable": 2.0, "followup": 0.0}
    assert bench_enforcer.server_timing("") == {}


def test_side_by_side_measures_the_samples_asked_on_each_node_and_names_its_mix() -> None:
    mixes = (bench_enforcer.NodeMix(2), bench_enforcer.NodeMix(3, shared=2))
    root = bench_enforcer.ROOT
    pair = bench_enforcer.side_by_side(mixes, samples=3, roots=(root, root))  # --against's path: a root per side
    # warm-up excluded: three samples each (a failed allocation or release raises)
    assert [len(samples) for samples in pair.samples] == [3, 3]
    rows = bench_enforcer.pair_rows(pair)
    assert [row["case"] for row in rows] == [
        "2 pods held, 3 allocations",
        "3 pods held + 2 shared-pool pods, 3 allocations",
    ]
    assert pair.p99_ratio > 0 and pair.p50_ratio > 0  # a smoke run: no figure is asserted
