"""All benchmarks, one command, one table: ``python -m bench [--quick] [--only SECTION ...]``.

Every figure is a median (or a percentile) over repeated runs, and every ratio
compares two things measured side by side in this run on this machine.  The
kubelet's Go code is not run here: its figures (../shared/bench/README.md,
``bench/kubelet_cpu_figures.json``) were recorded on another machine, so they
are printed marked ``†`` as context and no ratio is formed with them.
Sections whose dependencies are missing (wrk; root and the loop-device tools for
``journal-ext4``, the journal appends on a fresh journaled ext4 loop image) are skipped with a note rather than
failing the whole table.  A new section is one entry in :data:`SECTIONS`: a
module whose ``table_rows(quick)`` returns rows of :class:`Line`'s fields.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import proc
from bench.ext4_loop import Ext4LoopUnavailable
from bench.wrk import WrkMissing


@dataclass(frozen=True)
class Line:
    section: str
    case: str
    ours: str
    reference: str = "-"
    ratio: str = "-"
    check: str = "-"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f} µs" if value < 1 else f"{value:.2f} ms"


RECORDED_ELSEWHERE = (
    "† kubelet figures: Go medians recorded on another machine (2 vCPU, ../shared/bench/README.md), not on this one "
    "and not in this run: context, not a claim; no ratio is formed with them"
)


def _recorded(value_ms: float | None) -> str:
    return "-" if value_ms is None else f"kubelet {_ms(value_ms)} †"


def cpu_lines(quick: bool) -> list[Line]:
    from bench import bench_cpu

    rows = bench_cpu.run(repeats=20 if quick else 200)
    return [
        Line(
            "cpu selection (takeByTopology)",
            r["case"],
            _ms(r["ours_us"] / 1000),
            _recorded(None if r["kubelet_us"] is None else r["kubelet_us"] / 1000),
            "-",
            "same answer as the kubelet" if r["correct"] else "DIFFERENT ANSWER",
        )
        for r in rows
    ]


def merge_lines(quick: bool) -> list[Line]:
    from bench import bench_merge

    rows = bench_merge.run(repeats=3 if quick else 7)
    return [
        Line(
            "topology manager merge",
            f"{r.case} ({r.numa_nodes} NUMA, {r.hints} hints)",
            _ms(r.ours_ms),
            _recorded(r.kubelet_ms),
            "-",
            r.check,
        )
        for r in rows
    ]


def engine_lines(quick: bool) -> list[Line]:
    from bench import bench_engine

    rows = bench_engine.run(repeats=5 if quick else 30)
    return [
        Line(
            "pod admission vs machine size",
            f"{r['numa']} NUMA / {r['cpus']} CPUs, {r['scope']} scope, {r['policy']}",
            f"{_ms(r['median_ms'])} (p99 {_ms(r['p99_ms'])})",
            "-",
            "-",
            "admitted" if r["admitted"] else "REFUSED",
        )
        for r in rows
    ]


def journal_lines(quick: bool) -> list[Line]:
    from bench import bench_enforcer

    return [Line(**row) for row in bench_enforcer.journal_table_rows("dir", quick=quick)]


def journal_ext4_lines(quick: bool) -> list[Line]:
    from bench import bench_enforcer

    return [Line(**row) for row in bench_enforcer.journal_table_rows("ext4-loop", quick=quick)]


SECTIONS: dict[str, str] = {
    "cpu": "cpu_lines",
    "merge": "merge_lines",
    "engine": "engine_lines",
    "hints": "bench.bench_hints",
    "enforcer": "bench.bench_enforcer",
    "journal": "journal_lines",
    "journal-ext4": "journal_ext4_lines",
    "webhook": "bench.bench_webhook",
    "binding": "bench.bench_binding",
    "memory": "bench.bench_rss",
    "extender": "bench.bench_extender",
    "hook": "bench.bench_hook",
}
"""Section name -> a function of this module, or a module with ``table_rows(quick)``; run in this order."""


def module_lines(module_name: str, quick: bool) -> list[Line]:
    module = importlib.import_module(module_name)
    rows: list[dict[str, Any]] = module.table_rows(quick=quick)
    return [Line(**row) for row in rows]


def render(lines: list[Line]) -> str:
    header = Line("section", "case", "ours (median)", "reference", "ratio", "check")
    table = [header, *lines]
    cols = ("section", "case", "ours", "reference", "ratio", "check")
    widths = {c: max(len(getattr(line, c)) for line in table) for c in cols}
    out = []
    for i, line in enumerate(table):
        out.append("| " + " | ".join(getattr(line, c).ljust(widths[c]) for c in cols) + " |")
        if i == 0:
            out.append("|" + "|".join("-" * (widths[c] + 2) for c in cols) + "|")
    return "\n".join(out)


def machine_line() -> str:
    cpu = "unknown cpu"
    try:
        with open("/proc/cpuinfo") as f:
            for row in f:
                if row.startswith("model name"):
                    cpu = row.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    system = f"{platform.system()} {platform.machine()}"
    return f"{system}, {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run, noisier figures)")
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append", help="run only these sections")
    args = parser.parse_args(argv)
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # the engine warns about max-allowable-numa-nodes > 8 by design here
    try:
        return run_sections(args, argv)
    finally:  # called in-process by the smoke tests: the rest of the test run keeps its logging
        logging.disable(previous)


def run_sections(args: argparse.Namespace, argv: list[str] | None) -> int:
    lines: list[Line] = []
    notes: list[str] = []
    started = f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {load_line()}"
    ticks = proc.cpu_ticks()
    for name, target in SECTIONS.items():
        if args.only and name not in args.only:
            continue
        runner: Callable[[bool], list[Line]]
        runner = functools.partial(module_lines, target) if "." in target else globals()[target]
        try:
            lines += runner(args.quick)
        except (ModuleNotFoundError, WrkMissing, Ext4LoopUnavailable) as err:
            notes.append(f"{name}: skipped ({err})")
    command = " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])])
    print(f"command: {command}")
    print(f"machine: {machine_line()}")
    print(f"started: {started}; finished: {time.strftime('%H:%M UTC', time.gmtime())}, {load_line()}")
    steal = proc.steal_share(ticks, proc.cpu_ticks())
    print(
        f"cpu steal during the run: {steal:.1%} of the machine's CPU time (the hypervisor's; 0 when the host is quiet)"
    )
    print(render(lines))
    if any("†" in line.reference for line in lines):
        notes.append(RECORDED_ELSEWHERE)
    for note in notes:
        print(f"note: {note}")
    bad = [line for line in lines if line.check.startswith(("DIFFERENT", "REFUSED", "FAIL", "mismatch"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
