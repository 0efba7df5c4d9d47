"""The service benchmarks run end to end and give rows the one-command table (``python -m bench``) can print.

Smoke only: real processes (webhook, echo, enforcer, the load process) with
tiny efforts, checking the shape of the rows and that no measured request
failed.  No figure is asserted: speed is measured in ``bench/``, never here.
The ``--quick`` runs take about a minute each and are marked slow.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a directory of measuring scripts, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import bench_rss, bench_webhook  # noqa: E402
from bench.__main__ import Line  # noqa: E402

ROW_KEYS = {"section", "case", "ours", "reference", "ratio", "check"}

TINY_WEBHOOK = bench_webhook.Effort(
    rounds=1,
    clients=2,
    warmup=0.1,
    throughput_seconds=0.3,
    rate=50.0,
    latency_seconds=0.3,
    bindings_per_client_alone=2,
    bindings_per_client_concurrent=1,
)
TINY_MEMORY = bench_rss.Effort(runs=1, load_seconds=0.5, pods=4)


def assert_well_formed(rows: list[dict[str, str]]) -> None:
    assert rows
    for row in rows:
        assert set(row) == ROW_KEYS
        assert all(isinstance(value, str) and value for value in row.values()), row
        assert not row["check"].startswith("FAIL"), row
        Line(**row)


def test_webhook_benchmark_gives_well_formed_rows_for_a_tiny_run() -> None:
    rows = bench_webhook.rows_of(bench_webhook.run(effort=TINY_WEBHOOK))
    assert_well_formed(rows)
    cases = [row["case"] for row in rows]
    assert any("throughput" in case for case in cases)
    assert any("latency" in case for case in cases)
    assert sum("binding round trip" in case for case in cases) == len(bench_webhook.BINDING_CONCURRENCY)


def test_memory_benchmark_gives_well_formed_rows_for_a_tiny_run() -> None:
    results = bench_rss.run(effort=TINY_MEMORY)
    assert_well_formed(bench_rss.rows_of(results))
    (enforcer,) = results.enforcer
    assert (enforcer.pods, enforcer.containers) == (4, 4 * bench_rss.CONTAINERS_PER_POD)


@pytest.mark.slow
@pytest.mark.parametrize("module", [bench_webhook, bench_rss], ids=lambda m: m.__name__)
def test_quick_table_rows_are_well_formed(module: ModuleType) -> None:
    assert_well_formed(module.table_rows(quick=True))
