"""All benchmarks, one command, one table: ``python -m bench [--quick]``.

Every figure is a median (or a percentile) over repeated runs, and every ratio
compares two things measured in the same run on the same machine (or, for the
kubelet's Go code, its own published medians from ../shared/bench/README.md on a
machine of the same kind).  Sections whose dependencies are missing are skipped
with a note rather than failing the whole table.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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


def cpu_lines(quick: bool) -> list[Line]:
    from bench import bench_cpu

    rows = bench_cpu.run(repeats=20 if quick else 200)
    lines = []
    for r in rows:
        ratio = r["kubelet_over_ours"]
        lines.append(
            Line(
                "cpu selection (takeByTopology)",
                r["case"],
                _ms(r["ours_us"] / 1000),
                _ms(None if r["kubelet_us"] is None else r["kubelet_us"] / 1000),
                "-" if ratio is None else f"{ratio:,.0f}x faster",
                "same answer" if r["correct"] else "DIFFERENT ANSWER",
            )
        )
    return lines


def merge_lines(quick: bool) -> list[Line]:
    from bench import bench_merge

    rows = bench_merge.run(repeats=3 if quick else 7)
    return [
        Line(
            "topology manager merge",
            f"{r.case} ({r.numa_nodes} NUMA, {r.hints} hints)",
            _ms(r.ours_ms),
            _ms(r.kubelet_ms),
            "-" if r.speedup is None else f"{r.speedup:,.0f}x faster",
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
            "kubelet: full 2^N merge, no answer" if r["numa"] > 16 else "-",
            "-",
            "admitted" if r["admitted"] else "REFUSED",
        )
        for r in rows
    ]


SECTIONS: dict[str, str] = {
    "cpu": "cpu_lines",
    "merge": "merge_lines",
    "engine": "engine_lines",
    "hints": "bench.bench_hints",
    "enforcer": "bench.bench_enforcer",
    "webhook": "bench.bench_webhook",
    "memory": "bench.bench_rss",
}


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run, noisier figures)")
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append", help="run only these sections")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # the engine warns about max-allowable-numa-nodes > 8 by design here
    lines: list[Line] = []
    notes: list[str] = []
    for name, target in SECTIONS.items():
        if args.only and name not in args.only:
            continue
        runner: Callable[[bool], list[Line]]
        if "." in target:
            try:
                lines += module_lines(target, args.quick)
            except ModuleNotFoundError as err:
                notes.append(f"{name}: skipped ({err})")
            continue
        runner = globals()[target]
        lines += runner(args.quick)
    print(f"machine: {machine_line()}")
    print(render(lines))
    for note in notes:
        print(f"note: {note}")
    bad = [line for line in lines if line.check.startswith(("DIFFERENT", "REFUSED", "FAIL", "mismatch"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

