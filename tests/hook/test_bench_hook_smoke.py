"""bench/bench_hook.py runs end to end and gives well-formed rows (figures are measured in bench/, not here)."""

from __future__ import annotations

import pytest
from runc_kit import unusable

from bench import bench_hook

pytestmark = [pytest.mark.slow, pytest.mark.kernel]


def test_quick_run_gives_rows() -> None:
    if unusable() is not None:
        pytest.skip(str(unusable()))
    rows = bench_hook.table_rows(quick=True)
    assert rows and all(set(r) == {"section", "case", "ours", "reference", "ratio", "check"} for r in rows)
    assert not [r for r in rows if r["check"] == "FAIL"]
