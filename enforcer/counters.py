"""The counters behind the seed's ``resource_manager_*`` metrics.

The engine is pure, so it does not talk to Prometheus; policies record what
they did here (increment rules M1-M5 of pod-level-resource-managers.md §10) and
the enforcer service exports the totals.  Counters never decrease.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

Source = Literal["pod", "node"]
AssignmentType = Literal["node_exclusive", "pod_exclusive", "pod_shared"]


@dataclass
class AllocationCounters:
    """``resource_manager_allocations_total`` / ``_allocation_errors_total`` / ``_container_assignments``."""

    allocations: Counter[tuple[str, str]] = field(default_factory=Counter)
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    assignments: Counter[tuple[str, str]] = field(default_factory=Counter)

    def allocation(self, resource_name: str, source: Source, count: int = 1) -> None:
        self.allocations[(resource_name, source)] += count

    def error(self, resource_name: str, source: Source) -> None:
        self.errors[(resource_name, source)] += 1

    def assignment(self, resource_name: str, assignment_type: AssignmentType) -> None:
        self.assignments[(resource_name, assignment_type)] += 1

    def copy(self) -> AllocationCounters:
        """An independent copy (the keys and values are immutable, so the maps are copied one level deep).

        ``Counter(c)`` goes through ``Counter.update`` and its ``isinstance(..., Mapping)``, a Python-level
        ABC call per map on every decision's working copy; ``dict.update`` into an empty ``Counter``
        copies the same items in C."""
        return AllocationCounters(_copied(self.allocations), _copied(self.errors), _copied(self.assignments))

    def merge(self, other: AllocationCounters) -> None:
        self.allocations.update(other.allocations)
        self.errors.update(other.errors)
        self.assignments.update(other.assignments)

    def to_dict(self) -> dict[str, dict[str, int]]:
        def flat(c: Counter[tuple[str, str]]) -> dict[str, int]:
            return {f"{a},{b}": v for (a, b), v in sorted(c.items())}

        return {
            "allocations": flat(self.allocations),
            "errors": flat(self.errors),
            "assignments": flat(self.assignments),
        }

    @classmethod
    def from_dict(cls, data: dict[str, dict[str, int]]) -> AllocationCounters:
        def unflat(d: dict[str, int]) -> Counter[tuple[str, str]]:
            out: Counter[tuple[str, str]] = Counter()
            for key, value in d.items():
                a, _, b = key.partition(",")
                out[(a, b)] = int(value)
            return out

        return cls(
            unflat(data.get("allocations", {})), unflat(data.get("errors", {})), unflat(data.get("assignments", {}))
        )


def _copied(counter: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
    copy: Counter[tuple[str, str]] = Counter()
    dict.update(copy, counter)
    return copy
