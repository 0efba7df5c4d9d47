"""The runtime hook's series, registered in the enforcer's own registry (``/metrics`` shows them)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

HOOK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)


class HookMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "numaguard_enforcer_hook_requests",
            "Runtime hook requests, by outcome (pinned, failed) and pool.",
            ["outcome", "pool"],
            registry=registry,
        )
        self.seconds = Histogram(
            "numaguard_enforcer_hook_duration_seconds",
            "Time from a hook request's arrival to its answer (cgroup writes included).",
            buckets=HOOK_BUCKETS,
            registry=registry,
        )
        self.failures = Counter(
            "numaguard_enforcer_hook_failures",
            "Hook requests that could not be served, by reason.",
            ["reason"],
            registry=registry,
        )
        self.fail_open_repairs = Counter(
            "numaguard_enforcer_hook_fail_open_repairs",
            "Containers a fail-open hook started unpinned (left in the spool), then repaired by the enforcer, "
            "by outcome (repaired, gone, failed).",
            ["outcome"],
            registry=registry,
        )
        self.reapplied = Counter(
            "numaguard_enforcer_hook_reapplied_writes",
            "cgroup values re-applied to hooked containers after a foreign rewrite or an allocation change, "
            "by trigger (rewrite, change).",
            ["trigger"],
            registry=registry,
        )
        self.hooked_containers = Gauge(
            "numaguard_enforcer_hooked_containers",
            "Containers programmed through the runtime hook and still running.",
            registry=registry,
        )
