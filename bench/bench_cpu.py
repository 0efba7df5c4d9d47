"""CPU selection speed: ``take_by_topology`` on the kubelet's benchmark cases, next to the kubelet's own medians.

Every case of ``tests/fixtures/kubelet/cpu_cases.json`` (a copy of ``../shared/bench/cpu_cases.json``) is
run ``repeats`` times after a warm-up and timed with ``time.perf_counter``; the median is printed next to the
kubelet's median for the same case (``kubelet_cpu_figures.json``, copied from ``../shared/bench/README.md``)
for context only: they were recorded on another machine (``kubelet_over_ours`` is kept in the rows for
the JSON, the tables print no ratio).  Each answer is also checked against the kubelet's (``expected``), so a fast
wrong answer shows up as wrong.

Run: ``python -m bench.bench_cpu [--repeats N]``.  This module measures only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from enforcer.cpumanager.assignment import TakeOptions, take_by_topology
from enforcer.errors import CPUAllocationError
from enforcer.topology import machine
from shared.cpuset import CPUSet

BENCH_DIR = Path(__file__).resolve().parent
FIXTURES = BENCH_DIR.parent / "tests" / "fixtures" / "kubelet"
KUBELET_FIGURES = BENCH_DIR / "kubelet_cpu_figures.json"
WARM_UP = 5
RECORDED_ELSEWHERE = (
    "the kubelet's Go medians were recorded on another machine (../shared/bench/README.md), not here and not in "
    "this run: context, not a claim; no ratio is formed with them"
)


def _options(raw: dict[str, Any]) -> TakeOptions:
    spread = raw["cpuSortingStrategy"] == "spread"
    if raw["function"] == "takeByTopologyNUMADistributed":
        return TakeOptions(
            algorithm="distributed",
            cpu_group_size=raw["cpuGroupSize"],
            spread_across_cores=spread,
            align_by_socket=raw["alignBySocket"],
        )
    return TakeOptions(spread_across_cores=spread, prefer_align_uncore=raw["preferAlignByUncoreCache"])


def _answer(topology: machine.CPUTopology, available: CPUSet, request: int, options: TakeOptions) -> str:
    """The answer in the fixture's terms: the cpuset text, or ``error: <message>``."""
    try:
        return str(take_by_topology(topology, available, request, options))
    except CPUAllocationError as err:
        return f"error: {err}"


def run(repeats: int) -> list[dict[str, Any]]:
    """One row per benchmark case: our median and the kubelet's (microseconds), their ratio, correctness."""
    cases = json.loads((FIXTURES / "cpu_cases.json").read_text())["cases"]
    kubelet = json.loads(KUBELET_FIGURES.read_text())["medians"]
    machines: dict[str, machine.CPUTopology] = {}
    rows = []
    for case in cases:
        topology_file = case["topologyFile"]
        if topology_file not in machines:
            machines[topology_file] = machine.load(FIXTURES / topology_file)
        topology = machines[topology_file]
        available = CPUSet.parse(case["available"])
        request = case["request"]
        options = _options(case["options"])
        expected = f"error: {case['expectedError']}" if case["expectedError"] else case["expected"]

        for _ in range(WARM_UP):
            answer = _answer(topology, available, request, options)
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            _answer(topology, available, request, options)
            samples.append(time.perf_counter() - start)
        ours = statistics.median(samples) * 1e6
        theirs = kubelet.get(case["name"])
        rows.append(
            {
                "case": case["name"],
                "topology": case["topology"],
                "mode": case["mode"],
                "request": request,
                "ours_us": ours,
                "kubelet_us": theirs,
                "kubelet_over_ours": None if theirs is None else theirs / ours,
                "correct": answer == expected,
            }
        )
    return rows


def _format_us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.1f} µs"


def render(rows: list[dict[str, Any]]) -> str:
    """A markdown table plus a summary (correct answers, the 384-CPU worst case, the ratio range)."""
    lines = ["| case | ours (median) | kubelet (median) † | same answer |", "|---|---:|---:|:---:|"]
    for row in rows:
        lines.append(
            f"| {row['case']} | {_format_us(row['ours_us'])} | {_format_us(row['kubelet_us'])} | "
            f"{'yes' if row['correct'] else 'NO'} |"
        )
    big = [row["ours_us"] for row in rows if row["topology"] == "2s-8numa-384-uncore8"]
    lines.append("")
    lines.append(f"cases: {len(rows)}, same answer as the kubelet: {sum(row['correct'] for row in rows)}")
    if big:
        lines.append(f"384-CPU machine: slowest median {_format_us(max(big))}, fastest {_format_us(min(big))}")
    lines.append(f"† {RECORDED_ELSEWHERE}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=200, help="timed calls per case after the warm-up")
    args = parser.parse_args(argv)
    rows = run(args.repeats)
    print(render(rows))
    return 0 if all(row["correct"] for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
