"""The service benchmarks run end to end and give rows the one-command table (``python -m bench``) can print.

Smoke only: real processes (webhook, echo, enforcer, wrk, the load process)
with tiny efforts, checking the shape of the rows and that no measured request
failed.  No figure is asserted: speed is measured in ``bench/``, never here.
The webhook smoke test needs wrk (``scripts/install-bench-tools.sh``) and is
skipped without it; the journal rows on a loop-mounted ext4 need root and the
loop-device tools, and are skipped without them (what a non-root run does
instead, a note or a message and exit status 2, is tested everywhere).  The
``--quick`` runs take about a minute each and are marked slow.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a directory of measuring scripts, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import __main__ as bench_main  # noqa: E402
from bench import bench_binding, bench_enforcer, bench_rss, bench_webhook, ext4_loop, proc, wrk  # noqa: E402
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
def test_the_instruction_counter_drives_each_app_in_process(app: str, workload: str, tmp_path: Path) -> None:
    # what valgrind runs: the app served through ASGI, every answer checked (HTTP 200; the echo returns the body)
    from bench import webhook_instructions

    bodies = tmp_path / "bodies.json"
    bodies.write_text(json.dumps(webhook_instructions.workload_bodies(workload)))
    script = ROOT / "bench" / "webhook_instructions.py"
    command = [sys.executable, str(script), "drive", "--tree", str(ROOT), "--app", app, "--bodies", str(bodies)]
    finished = subprocess.run([*command, "--count", "3"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr[-2000:]


def test_each_replica_request_is_a_new_pod_of_the_same_template() -> None:
    reviews = [json.loads(bench_webhook.REPLICAS.body(i))["request"] for i in range(4)]
    seeds = [path.read_text() for path in bench_webhook.REPLICAS.bodies]
    assert len({r["uid"] for r in reviews}) == 4 and len({r["name"] for r in reviews}) == 4
    for i, review in enumerate(reviews):
        seed = json.loads(seeds[i % len(seeds)])["request"]
        assert review["name"] == review["object"]["metadata"]["name"] == f"{seed['name']}-{i:012x}"
        assert review["uid"].rsplit("-", 1)[0] == seed["uid"].rsplit("-", 1)[0]
        assert review["object"]["spec"] == seed["object"]["spec"]  # a replica: the template's spec, as it was
        del review["uid"], review["name"], review["object"]["metadata"]["name"]
        del seed["uid"], seed["name"], seed["object"]["metadata"]["name"]
        assert review == seed
    # the load process varies its bodies the same way
    template = bench_webhook.REPLICAS.texts[0].encode()
    assert bench_webhook.REPLICAS.vary is not None
    assert bench_webhook.REPLICAS.vary.applied(template, 2) == bench_webhook.REPLICAS.body(2)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed (apt-get install valgrind)")
def test_the_instruction_counter_counts_a_positive_number_per_review() -> None:
    from bench import webhook_instructions

    assert webhook_instructions.per_review(ROOT, "echo", "replicas", 20) > 0


TINY_JOURNAL = 20  # appends each way, after the warm-up

needs_loop = pytest.mark.skipif(
    ext4_loop.unavailable_reason() is not None, reason=f"ext4 loop image: {ext4_loop.unavailable_reason()}"
)


def test_journal_rows_on_the_state_directory_filesystem_for_a_tiny_run(tmp_path: Path) -> None:
    result = bench_enforcer.journal_appends_on("dir", TINY_JOURNAL, directory=tmp_path)
    rows = bench_enforcer.journal_rows(result)
    assert_well_formed(rows)
    assert [row["case"].split(": ")[-1].split(" (")[0] for row in rows] == ["growing", "pre-zeroed"]
    assert all(row["case"].startswith(f"{tmp_path} (") for row in rows)
    assert {len(samples) for samples in result["times"].values()} == {TINY_JOURNAL}
    assert list(tmp_path.iterdir()) == []  # its working directory went with it


def attached_to(device: str) -> str | None:
    """What the loop device is backed by now (None when detached), without the `` (deleted)`` of a deleted file."""
    backing = Path(f"/sys/block/{Path(device).name}/loop/backing_file")
    return backing.read_text().strip().removesuffix(" (deleted)") if backing.exists() else None


def left_under(directory: Path) -> list[str]:
    """Loop devices (``losetup -a``) and mounts (``/proc/self/mounts``) naming a path under ``directory``."""
    losetup = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=True).stdout.splitlines()
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    return [row for row in losetup + mounts if str(directory) in row]


def assert_gone(mountpoint: Path, device: str, image: Path) -> None:
    assert not os.path.ismount(mountpoint)
    assert attached_to(device) != str(image)
    assert left_under(image.parent.parent) == []
    assert not mountpoint.parent.exists()


@needs_loop
def test_journal_rows_on_a_journaled_ext4_loop_image_for_a_tiny_run(tmp_path: Path) -> None:
    result = bench_enforcer.journal_appends_on("ext4-loop", TINY_JOURNAL, directory=tmp_path)
    rows = bench_enforcer.journal_rows(result)
    assert_well_formed(rows)
    assert result["filesystem"].startswith("ext4 on loop") and result["filesystem"].endswith(", with a journal")
    # the loop device is this run's alone, so its flush count is exact: what the pre-zeroed journal is for
    flushes = {kind: counts[2] for kind, counts in result["requests"].items()}
    assert flushes["pre-zeroed"] < flushes["growing"], flushes
    assert left_under(tmp_path) == []  # unmounted and detached
    assert list(tmp_path.iterdir()) == []  # image and directories deleted


@needs_loop
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "error"])
def test_the_loop_image_is_removed_however_the_run_ends(tmp_path: Path, how: str) -> None:
    previous = signal.getsignal(signal.SIGTERM)
    seen: list[tuple[Path, str, Path]] = []
    with pytest.raises(KeyboardInterrupt if how != "error" else OSError), ext4_loop.ext4_loop(tmp_path) as mountpoint:
        image = mountpoint.parent / "ext4.img"
        (device,) = ext4_loop.loop_devices_of(image)
        assert os.path.ismount(mountpoint) and attached_to(device) == str(image)
        seen.append((mountpoint, device, image))
        (mountpoint / "written").write_bytes(b"x")
        if how == "ctrl-c":
            raise KeyboardInterrupt
        if how == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises in this thread before kill returns
        raise OSError("the benchmark failed")
    (gone,) = seen
    assert_gone(*gone)
    assert signal.getsignal(signal.SIGTERM) is previous


@needs_loop
def test_an_interrupt_right_after_attaching_still_detaches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C as losetup returns, before the bench has the device's name: found again by its backing file
    attached: list[tuple[str, str]] = []
    run = ext4_loop._run

    def interrupted(command: list[str]) -> str:
        out = run(command)
        if command[0] == "losetup":
            attached.append((out.strip(), command[-1]))
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(ext4_loop, "_run", interrupted)
    with pytest.raises(KeyboardInterrupt), ext4_loop.ext4_loop(tmp_path):
        pytest.fail("entered although the set-up was interrupted")
    ((device, image),) = attached
    assert attached_to(device) != image
    assert left_under(tmp_path) == []
    assert list(tmp_path.iterdir()) == []


def test_without_root_the_loop_run_says_why_and_exits_non_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    status = bench_enforcer.main(["--journal-appends", "5", "--journal-fs", "ext4-loop"])
    assert status == 2
    assert "needs root" in capsys.readouterr().err
    assert bench_main.main(["--only", "journal-ext4"]) == 0
    assert "note: journal-ext4: skipped (needs root (losetup and mount))" in capsys.readouterr().out


def test_a_missing_tool_is_named(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    which = shutil.which
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "mkfs.ext4" else which(tool))
    assert bench_enforcer.main(["--journal-appends", "5", "--journal-fs", "ext4-loop"]) == 2
    assert "missing mkfs.ext4" in capsys.readouterr().err


def test_the_one_table_prints_the_journal_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main.main(["--quick", "--only", "journal"]) == 0
    out = capsys.readouterr().out
    rows = [row for row in out.splitlines() if row.startswith("| journal append")]
    assert len(rows) == 2 and f"{bench_enforcer.QUICK_JOURNAL_APPENDS} x" in rows[0], out
    assert logging.root.manager.disable == logging.NOTSET  # the tests after this one still see their logs
    steal = next(row for row in out.splitlines() if row.startswith("cpu steal during the run: "))
    assert 0 <= float(steal.split(": ")[1].split("%")[0]) <= 100


def test_steal_is_a_share_of_the_machines_cpu_time_between_two_readings() -> None:
    steal, total = proc.cpu_ticks()
    assert 0 <= steal <= total and total > 0
    assert proc.steal_share((10, 1000), (30, 1100)) == 0.2  # 20 of 100 ticks
    assert proc.steal_share((10, 1000), (10, 1000)) == 0.0  # no time passed: nothing to share


def test_journal_record_sizes_counts_every_record_and_restores_the_journal(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import journal_record_sizes
    from enforcer.state import journal

    line_builder = journal.record_line
    assert journal_record_sizes.main(["--pairs", "2"]) == 0
    out = capsys.readouterr().out
    assert "2 pairs at 1,024 CPUs: " in out and "record bytes: median" in out, out
    assert journal.record_line is line_builder
