"""Prometheus metrics of the extender (a registry of its own, so tests can build many apps)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ExtenderMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.request_seconds = Histogram(
            "numaguard_extender_request_duration_seconds",
            "Time to answer one filter or prioritize call",
            ["verb", "status"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.verdicts = Counter(
            "numaguard_extender_node_verdicts_total",
            "Filter answers per node: passed, failed, unresolvable, no_alignment_needed, no_opinion",
            ["verdict"],
            registry=self.registry,
        )
        self.replicas = Gauge(
            "numaguard_extender_replicas", "Replicas by freshness", ["freshness"], registry=self.registry
        )

    def render(self, freshness_counts: dict[str, int]) -> bytes:
        for state in ("fresh", "stale", "down", "unknown"):
            self.replicas.labels(freshness=state).set(freshness_counts.get(state, 0))
        return generate_latest(self.registry)
