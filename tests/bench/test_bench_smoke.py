"""The service benchmarks run end to end and give rows the one-command table (``python -m bench``) can print.

Smoke only: real processes (webhook, echo, enforcer, wrk, the load process)
with tiny efforts, checking the shape of the rows and that no measured request
failed.  No figure is asserted: speed is measured in ``bench/``, never here.
The webhook smoke test needs wrk (``scripts/install-bench-tools.sh``) and is
skipped without it.  The ``--quick`` runs take about a minute each and are
marked slow.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a directory of measuring scripts, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import bench_binding, bench_rss, bench_webhook, wrk  # noqa: E402
from bench.__main__ import Line  # noqa: E402

ROW_KEYS = {"section", "case", "ours", "reference", "ratio", "check"}

TINY_WEBHOOK = bench_webhook.Effort(
    rounds=1, wrk_seconds=1.0, connections=2, wrk_threads=1, warmup=0.1, rate=50.0, latency_seconds=0.3
)
TINY_BINDING = bench_binding.Effort(bindings_per_client_alone=2, bindings_per_client_concurrent=1)
TINY_MEMORY = bench_rss.Effort(runs=1, load_seconds=0.5, pods=4)


def assert_well_formed(rows: list[dict[str, str]]) -> None:
    assert rows
    for row in rows:
        assert set(row) == ROW_KEYS
        assert all(isinstance(value, str) and value for value in row.values()), row
        assert not row["check"].startswith("FAIL"), row
        Line(**row)


needs_wrk = pytest.mark.skipif(
    shutil.which("wrk") is None, reason="wrk is not installed (scripts/install-bench-tools.sh)"
)


@needs_wrk
def test_webhook_benchmark_gives_well_formed_rows_for_a_tiny_run() -> None:
    # this very checkout as the baseline: the before/after machinery runs, and the answers agree byte for byte
    results = bench_webhook.run(effort=TINY_WEBHOOK, baseline=ROOT)
    rows = bench_webhook.rows_of(results)
    assert_well_formed(rows)
    cases = [row["case"] for row in rows]
    assert sum("capacity" in case for case in cases) == 4  # replicas and new specs, this tree and the baseline
    assert any("latency" in case for case in cases)
    workloads = sorted((workload, run.target) for workload, run in results.wrk_runs)
    assert workloads == [
        ("new specs", "baseline"),
        ("new specs", "webhook"),
        ("replicas", "baseline"),
        ("replicas", "echo"),
        ("replicas", "webhook"),
    ]
    assert all(run.requests > 0 for _, run in results.wrk_runs)


def test_binding_benchmark_gives_well_formed_rows_for_a_tiny_run() -> None:
    rows = bench_binding.rows_of(bench_binding.run(effort=TINY_BINDING))
    assert_well_formed(rows)
    assert len(rows) == len(bench_binding.BINDING_CONCURRENCY)


def test_the_wrk_report_line_is_read_back() -> None:
    line = (
        'WRK-JSON {"duration_us":1000000,"requests":5,"bytes":9,"errors":{"connect":0,"read":0,"write":0,'
        '"status":1,"timeout":0},"latency_us":{"mean":1.0,"max":9,"p50":1,"p90":2,"p99":3,"p999":4}}'
    )
    report = wrk.parse_report("Running 1s test\n" + line + "\n")
    assert report["requests"] == 5
    with pytest.raises(ValueError, match="no report"):
        wrk.parse_report("Running 1s test\n")


def test_memory_benchmark_gives_well_formed_rows_for_a_tiny_run() -> None:
    results = bench_rss.run(effort=TINY_MEMORY)
    assert_well_formed(bench_rss.rows_of(results))
    (enforcer,) = results.enforcer
    assert (enforcer.pods, enforcer.containers) == (4, 4 * bench_rss.CONTAINERS_PER_POD)


@pytest.mark.slow
@pytest.mark.parametrize("module", [bench_webhook, bench_binding, bench_rss], ids=lambda m: m.__name__)
def test_quick_table_rows_are_well_formed(module: ModuleType) -> None:
    assert_well_formed(module.table_rows(quick=True))


@pytest.mark.parametrize(("app", "workload"), [("echo", "replicas"), ("webhook", "replicas"), ("webhook", "new")])
def test_the_instruction_counter_drives_each_app_in_process(app: str, workload: str) -> None:
    # what valgrind runs: the app served through ASGI, every answer checked (HTTP 200; the echo returns the body)
    script = ROOT / "bench" / "webhook_instructions.py"
    command = [sys.executable, str(script), "drive", "--tree", str(ROOT), "--app", app, "--workload", workload]
    finished = subprocess.run([*command, "--count", "3"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed (apt-get install valgrind)")
def test_the_instruction_counter_counts_a_positive_number_per_review() -> None:
    from bench import webhook_instructions

    assert webhook_instructions.per_review(ROOT, "echo", "replicas", 20) > 0
