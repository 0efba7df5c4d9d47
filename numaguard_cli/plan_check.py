"""``numaguard plan --check``: the plan compared with the scenario's ``expect``, as a readable diff.

The comparison is the one ``../shared/bin/check-scenarios`` makes (contracts/plan.md, "``expect``
and the checker"): an expected step holds only the keys it checks, nested objects compare the same
way, lists of objects entry by entry.  Each difference is one line naming the path, what was
expected and what the engine answered, so the first line already says what moved.  Pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def differences(expected: Any, actual: Any, where: str = "steps") -> Iterator[str]:
    """``steps[0].containers.database.cpus: expected "1-3,17-19", got "0-2"`` per difference."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            yield f"{where}: expected an object, got {_show(actual)}"
            return
        for key, value in expected.items():
            if key not in actual:
                yield f"{where}.{key}: missing (expected {_show(value)})"
            else:
                yield from differences(value, actual[key], f"{where}.{key}")
    elif isinstance(expected, list) and expected and isinstance(expected[0], dict):
        if not isinstance(actual, list) or len(actual) != len(expected):
            got = f"{len(actual)} entries" if isinstance(actual, list) else _show(actual)
            yield f"{where}: expected {len(expected)} entries, got {got}"
            return
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            yield from differences(e, a, f"{where}[{i}]")
    elif expected != actual:
        yield f"{where}: expected {_show(expected)}, got {_show(actual)}"
