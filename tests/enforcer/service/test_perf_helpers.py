"""The helpers the allocation path uses to save CPU must answer exactly what they replace.

``EnforcerMetrics.child`` stands for ``metric.labels(...)``, ``AllocationCounters.copy`` for a copy
through ``Counter(...)``, ``memorymanager.state.ordered_types`` for the keyed sort it skips for one type.
"""

from __future__ import annotations

from collections import Counter

from enforcer.counters import AllocationCounters
from enforcer.memorymanager.state import ordered_types
from enforcer.service.metrics import EnforcerMetrics


def test_child_is_the_labelled_child_and_counts_into_it() -> None:
    metrics = EnforcerMetrics()
    child = metrics.child(metrics.request_seconds, "POST", "/allocations", "201")
    assert child is metrics.request_seconds.labels(method="POST", route="/allocations", status="201")
    assert metrics.child(metrics.request_seconds, "POST", "/allocations", "201") is child
    metrics.child(metrics.releases, "api").inc()
    metrics.child(metrics.releases, "api").inc()
    metrics.child(metrics.releases, "pod_deleted").inc()
    released = "numaguard_enforcer_releases_total"
    assert metrics.registry.get_sample_value(released, {"cause": "api"}) == 2
    assert metrics.registry.get_sample_value(released, {"cause": "pod_deleted"}) == 1
    # the same values on two metrics are two children
    assert metrics.child(metrics.state_writes, "api") is not metrics.child(metrics.releases, "api")


def test_counters_copy_equals_the_original_and_is_independent() -> None:
    counters = AllocationCounters()
    counters.allocation("cpu", "node", 3)
    counters.error("memory", "pod")
    counters.assignment("cpu", "node_exclusive")
    copy = counters.copy()
    assert copy == counters
    assert all(type(c) is Counter for c in (copy.allocations, copy.errors, copy.assignments))
    copy.allocation("cpu", "node")
    copy.error("cpu", "node")
    copy.assignment("memory", "pod_shared")
    assert counters.allocations == Counter({("cpu", "node"): 3})
    assert counters.errors == Counter({("memory", "pod"): 1})
    assert counters.assignments == Counter({("cpu", "node_exclusive"): 1})
    assert copy.to_dict() != counters.to_dict()


def test_ordered_types_as_the_keyed_sort() -> None:
    for names in (
        [],
        ["memory"],
        ["hugepages-2Mi"],
        ["memory", "memory"],
        ["hugepages-1Gi", "memory", "hugepages-2Mi"],
    ):
        assert ordered_types(names) == sorted(set(names), key=lambda n: (n != "memory", n))
    assert ordered_types(n for n in ("hugepages-2Mi", "memory")) == ["memory", "hugepages-2Mi"]
