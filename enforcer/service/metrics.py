"""The enforcer's Prometheus metrics, in its own registry (never the process-global one).

Two families of series:

* The kubelet's resource manager counters, exactly as the kubelet exposes them
  (pod-level-resource-managers.md section 10): ``resource_manager_allocations_total``
  and ``resource_manager_allocation_errors_total`` ``{resource_name, source}`` and
  ``resource_manager_container_assignments`` ``{resource_name, assignment_type}``.
  Their values are the engine's :class:`~enforcer.counters.AllocationCounters`,
  which live in the durable state, so they never decrease, not even across
  restarts.  They are rendered here rather than through ``prometheus_client``
  because its text format appends ``_total`` to every counter's name and
  ``resource_manager_container_assignments`` has none in the kubelet.
* The kubelet's admission series, names (``kubelet_`` subsystem), types, help texts and buckets as
  ``pkg/kubelet/metrics/metrics.go`` defines them (kubernetes/kubernetes): the Topology Manager's
  ``kubelet_topology_manager_admission_{requests,errors}_total`` and ``_duration_ms`` histogram, the
  CPU and Memory Managers' ``kubelet_{cpu,memory}_manager_pinning_{requests,errors}_total`` and
  ``kubelet_admission_rejections_total{reason}``.  When each moves is
  :mod:`enforcer.service.admission_metrics`; they count since the process started, as the kubelet's do.
* The service's own ``numaguard_enforcer_*`` series: request and decision
  latency, durable write latency, free CPUs and memory per NUMA node, cgroup
  reconcile runs, errors and divergences, and whether the state is usable.

Must not: read engine state itself (callers pass values read under the lock).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from enforcer.counters import AllocationCounters
from enforcer.service import wire
from enforcer.service.admission_metrics import AdmissionCounts
from enforcer.topology import hint_masks
from enforcer.topology.machine import CPUTopology

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Decisions take microseconds to a few milliseconds; the durable write dominates.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

# metrics.ExponentialBuckets(.05, 2, 15): TopologyManagerAdmissionDuration's buckets, in milliseconds
TOPOLOGY_ADMISSION_MS_BUCKETS = tuple(0.05 * 2**i for i in range(15))
# component-base prefixes the HELP of every ALPHA metric with its stability level
_ALPHA = "[ALPHA] "

_KUBELET_FAMILIES = (
    (
        "resource_manager_allocations_total",
        "Number of successful resource allocations by the resource managers, by resource and source.",
        ("resource_name", "source"),
        "allocations",
    ),
    (
        "resource_manager_allocation_errors_total",
        "Number of failed resource allocations by the resource managers, by resource and source.",
        ("resource_name", "source"),
        "errors",
    ),
    (
        "resource_manager_container_assignments",
        "Number of containers assigned resources, by resource and assignment type.",
        ("resource_name", "assignment_type"),
        "assignments",
    ),
)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def render_kubelet_counters(counters: AllocationCounters) -> str:
    """The three kubelet families in the Prometheus text format, names and labels exactly as the kubelet's."""
    lines: list[str] = []
    for name, help_text, label_names, attribute in _KUBELET_FAMILIES:
        values: Mapping[tuple[str, str], int] = getattr(counters, attribute)
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} counter")
        for key, value in sorted(values.items()):
            labels = ",".join(
                f'{label}="{_escape(part)}"' for label, part in sorted(zip(label_names, key, strict=True))
            )
            lines.append(f"{name}{{{labels}}} {float(value)}")
    return "\n".join(lines) + "\n"


class _HintFallbacks(Collector):
    """``numaguard_enforcer_topology_hint_fallbacks_total``: merges beyond the exact mask budget (process-wide)."""

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily(
            "numaguard_enforcer_topology_hint_fallbacks",
            "Topology Manager merges that needed more NUMA masks than the exact budget and used the named fallback "
            "(see enforcer/topology/hint_masks.py).",
            labels=["fallback"],
        )
        family.add_metric([hint_masks.FALLBACK_NAME], hint_masks.fallback_count())
        yield family


_Metric = TypeVar("_Metric", Counter, Gauge, Histogram)


class EnforcerMetrics:
    """Every ``numaguard_enforcer_*`` series; one instance per app."""

    def __init__(self) -> None:
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.registry = CollectorRegistry()
        r = self.registry
        self.request_seconds = Histogram(
            "numaguard_enforcer_request_duration_seconds",
            "HTTP request latency inside the app (TLS handshake excluded), by route template and status.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.decision_seconds = Histogram(
            "numaguard_enforcer_decision_duration_seconds",
            "Time a state-changing call held the decision lock to decide, by operation (the durable write that "
            "follows, outside the lock: numaguard_enforcer_state_write_duration_seconds).",
            ["operation"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.state_write_seconds = Histogram(
            "numaguard_enforcer_state_write_duration_seconds",
            "Time to make one change durable (write, fsync, rename).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.state_writes = Counter(
            "numaguard_enforcer_state_writes",
            "Durable writes (each covers every change decided before it began), by the thread that ran it: "
            "event_loop (the only request in flight), executor (others were in flight), caller (the pod watch).",
            ["thread"],
            registry=r,
        )
        self.allocations_missing = Counter(
            "numaguard_enforcer_allocations_missing",
            "Pods bound to this node with a numaguard allocation annotation that the node's state does not hold "
            "(lost or wiped state): drain the node.",
            registry=r,
        )
        self.state_started_empty = Counter(
            "numaguard_enforcer_state_started_empty",
            "Starts from an empty state in a directory that once held state (a wiped or lost state file).",
            registry=r,
        )
        self.state_write_errors = Counter(
            "numaguard_enforcer_state_write_errors",
            "Changes that could not be made durable (rolled back, answered 503).",
            registry=r,
        )
        self.free_cpus = Gauge(
            "numaguard_enforcer_free_cpus",
            "CPUs of a NUMA node neither reserved nor exclusively assigned.",
            ["numa_node"],
            registry=r,
        )
        self.free_memory_bytes = Gauge(
            "numaguard_enforcer_free_memory_bytes",
            "Memory of a NUMA node the memory manager can still assign, by resource (memory, hugepages-*).",
            ["numa_node", "resource"],
            registry=r,
        )
        self.allocated_pods = Gauge("numaguard_enforcer_allocated_pods", "Pods holding an allocation.", registry=r)
        self.releases = Counter(
            "numaguard_enforcer_releases",
            "Allocations released, by cause (api, pod_deleted, pod_finished, not_bound).",
            ["cause"],
            registry=r,
        )
        self.reconcile_runs = Counter(
            "numaguard_enforcer_reconcile_runs",
            "cgroup reconcile passes, by trigger (change, periodic, startup, manual) and by the thread that ran "
            "them: worker (the reconciler's), event_loop (a new pod alone in flight, after its answer), caller.",
            ["trigger", "thread"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "numaguard_enforcer_reconcile_errors",
            "cgroup reads or writes that failed, or pods whose cgroups could not be named, by kind.",
            ["kind"],
            registry=r,
        )
        self.cgroup_writes = Counter(
            "numaguard_enforcer_cgroup_writes", "cgroup values written by reconciles.", registry=r
        )
        self.reconcile_step_aside = Counter(
            "numaguard_enforcer_reconcile_step_aside_seconds",
            "Time reconcile passes waited for the API's state-changing requests in flight (at most 0.5 s a pass).",
            registry=r,
        )
        self.cgroup_divergences = Counter(
            "numaguard_enforcer_cgroup_divergences",
            "cgroup values found different from the allocation (then repaired), by field.",
            ["field"],
            registry=r,
        )
        self.startup_divergences = Gauge(
            "numaguard_enforcer_startup_divergences",
            "cgroup values the first reconcile after start-up found different from the saved allocations.",
            registry=r,
        )
        self.pending_cgroups = Gauge(
            "numaguard_enforcer_pending_cgroups",
            "Managed cgroups that do not exist yet (containers not started), after the last reconcile.",
            registry=r,
        )
        self.state_available = Gauge(
            "numaguard_enforcer_state_available",
            "1 when the durable state loaded and verified; 0 while writes are refused until recover-state.",
            registry=r,
        )
        # -- the kubelet's admission series (pkg/kubelet/metrics/metrics.go); prometheus_client adds "_total"
        self.topology_admission_requests = Counter(
            "kubelet_topology_manager_admission_requests",
            _ALPHA + "The number of admission requests where resources have to be aligned.",
            registry=r,
        )
        self.topology_admission_errors = Counter(
            "kubelet_topology_manager_admission_errors",
            _ALPHA + "The number of admission request failures where resources could not be aligned.",
            registry=r,
        )
        self.topology_admission_ms = Histogram(
            "kubelet_topology_manager_admission_duration_ms",
            _ALPHA + "Duration in milliseconds to serve a pod admission request.",
            buckets=TOPOLOGY_ADMISSION_MS_BUCKETS,
            registry=r,
        )
        self.cpu_pinning_requests = Counter(
            "kubelet_cpu_manager_pinning_requests",
            _ALPHA + "The number of cpu core allocations which required pinning.",
            registry=r,
        )
        self.cpu_pinning_errors = Counter(
            "kubelet_cpu_manager_pinning_errors",
            _ALPHA + "The number of cpu core allocations which required pinning failed.",
            registry=r,
        )
        self.memory_pinning_requests = Counter(
            "kubelet_memory_manager_pinning_requests",
            _ALPHA + "The number of memory pages allocations which required pinning.",
            registry=r,
        )
        self.memory_pinning_errors = Counter(
            "kubelet_memory_manager_pinning_errors",
            _ALPHA + "The number of memory pages allocations which required pinning that failed.",
            registry=r,
        )
        self.admission_rejections = Counter(
            "kubelet_admission_rejections",
            _ALPHA + "Cumulative number pod admission rejections by the Kubelet.",
            ["reason"],
            registry=r,
        )
        self.admission_refusals = Counter(
            "numaguard_enforcer_admission_refusals",
            "Pods the node refused, by the exact kubelet reason (SMTAlignmentError and EmptyPodSharedPoolError, "
            "which kubelet_admission_rejections_total files under Other, included).",
            ["reason"],
            registry=r,
        )
        r.register(_HintFallbacks())
        self.state_problem = Gauge(
            "numaguard_enforcer_state_problem",
            "1 for the reason the durable state is unusable (CheckpointCorrupt, StateMismatch, ...).",
            ["reason"],
            registry=r,
        )

    def child(self, metric: _Metric, *values: str) -> _Metric:
        """``metric.labels(*values)`` (values in the order of its label names), memoised.

        ``labels`` checks and converts its values and takes the metric's lock on every call (~2.5 µs),
        and every allocation and release asks for a few children; the children are the metric's own, which
        keeps each one for good (nothing here removes one), so the memo can never hand out a stale child."""
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def observe_admission(self, counts: AdmissionCounts, *, milliseconds: float, reason: str | None) -> None:
        """One new admission decision: the kubelet's admission series and the refusal by reason."""
        self.topology_admission_requests.inc()
        self.topology_admission_ms.observe(milliseconds)
        if counts.topology_error:
            self.topology_admission_errors.inc()
        if counts.cpu_requests:
            self.cpu_pinning_requests.inc(counts.cpu_requests)
        if counts.cpu_errors:
            self.cpu_pinning_errors.inc(counts.cpu_errors)
        if counts.memory_requests:
            self.memory_pinning_requests.inc(counts.memory_requests)
        if counts.memory_errors:
            self.memory_pinning_errors.inc(counts.memory_errors)
        if counts.rejection is not None:
            self.admission_rejections.labels(reason=counts.rejection).inc()
            self.admission_refusals.labels(reason=reason or "UnexpectedAdmissionError").inc()

    def set_state(self, *, available: bool, reason: str | None) -> None:
        self.state_available.set(1 if available else 0)
        if reason is not None:
            self.state_problem.labels(reason=reason).set(1)

    def set_usage(self, topology: CPUTopology, usage: wire.NodeUsage, allocated_pods: int) -> None:
        free = usage.default_cpus - usage.reserved_cpus
        for numa_id in topology.numa_ids:
            self.free_cpus.labels(numa_node=str(numa_id)).set(len(free & topology.cpus_in_numa_nodes([numa_id])))
            for resource, table in usage.memory.get(numa_id, {}).items():
                self.free_memory_bytes.labels(numa_node=str(numa_id), resource=resource).set(table.free)
        self.allocated_pods.set(allocated_pods)

    def count_divergences(self, fields: Iterable[str]) -> None:
        for field in fields:
            self.cgroup_divergences.labels(field=field).inc()

    def render(self, counters: AllocationCounters) -> bytes:
        return render_kubelet_counters(counters).encode() + generate_latest(self.registry)
