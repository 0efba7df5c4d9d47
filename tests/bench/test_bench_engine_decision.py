"""The engine-decision benchmark runs (smoke only: no figure is asserted, speed is measured in ``bench/``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a directory of measuring scripts, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import bench_engine_decision  # noqa: E402


def test_one_decision_is_timed_with_pods_held() -> None:
    low, mid = bench_engine_decision.decision_ms(3, 2)
    assert 0 < low <= mid


def test_the_report_names_both_sizes(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_engine_decision, "HELD", (1, 2))
    monkeypatch.setattr(bench_engine_decision, "WARMUP", 1)
    assert bench_engine_decision.main(["--repeats", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["pods", "held", "min", "ms", "p50", "ms"]
    assert [line.split()[0] for line in lines[1:3]] == ["1", "2"] and lines[3].startswith("2 / 1 held: min ")
