"""Prometheus metrics of one webhook app instance.

Each :class:`WebhookMetrics` owns its own ``CollectorRegistry``: two apps in
one process (tests, a restart inside a test) never collide on metric names,
and ``/metrics`` shows exactly one app's numbers.

* ``numaguard_webhook_admission_duration_seconds{webhook, operation, result}``: how
  long a review took; ``operation`` is ``create`` / ``binding`` / ``resize`` /
  ``update`` / ``delete`` / ``other``, ``result`` is ``allowed`` / ``patched`` / ``denied``.
* ``numaguard_webhook_denials_total{webhook, operation, reason}``: denials by their
  stable reason string (``Invalid``, ``TopologyAffinityError``, ...).

``webhook`` is the hook that asked, by the name the webhook configurations give it
(``pods-create.mutate.numaguard.io``, ...), which is also the ``name`` label of the
apiserver's own ``apiserver_admission_webhook_admission_duration_seconds`` and
``apiserver_admission_webhook_rejection_count``: one PromQL ``on (name)`` join puts the
apiserver's view (round trip, timeouts) next to ours (time inside the webhook, reason).
* ``numaguard_webhook_bad_requests_total``: bodies that were not a usable AdmissionReview (HTTP 400).
* ``numaguard_webhook_enforcer_request_duration_seconds{call, outcome}`` and
  ``numaguard_webhook_enforcer_errors_total{call, kind}``: calls to the nodes'
  enforcers (``kind`` is the :class:`~webhook.errors.EnforcerError` kind).

Label values come from fixed vocabularies (never pod names), so cardinality stays bounded.
This module only counts; it must not decide anything.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Admission must finish far inside timeoutSeconds (default 10s); resolution where it matters.
_ADMISSION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_ENFORCER_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0)


def hook_name(operation: str, mode: str) -> str:
    """The admission webhook's name in the manifests for a review on ``/<mode>`` of ``operation``."""
    return f"pods-{operation}.{mode}.numaguard.io"


class WebhookMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # the admission histogram's children by (operation, result, mode): looked up once, not per review
        self._durations: dict[tuple[str, str, str], Histogram] = {}
        self.admission_duration = Histogram(
            "numaguard_webhook_admission_duration_seconds",
            "Time to answer one AdmissionReview, by webhook (the configuration's hook name), operation and result.",
            ("webhook", "operation", "result"),
            buckets=_ADMISSION_BUCKETS,
            registry=self.registry,
        )
        self.denials = Counter(
            "numaguard_webhook_denials",
            "AdmissionReviews answered allowed=false, by webhook, operation and reason.",
            ("webhook", "operation", "reason"),
            registry=self.registry,
        )
        self.bad_requests = Counter(
            "numaguard_webhook_bad_requests",
            "Request bodies that were not a usable AdmissionReview v1 (answered HTTP 400).",
            registry=self.registry,
        )
        self.enforcer_duration = Histogram(
            "numaguard_webhook_enforcer_request_duration_seconds",
            "Time of one call to a node's enforcer, retries included.",
            ("call", "outcome"),
            buckets=_ENFORCER_BUCKETS,
            registry=self.registry,
        )
        self.enforcer_errors = Counter(
            "numaguard_webhook_enforcer_errors",
            "Failed calls to a node's enforcer, by failure kind.",
            ("call", "kind"),
            registry=self.registry,
        )

    def observe_admission(
        self, operation: str, result: str, seconds: float, *, mode: str, reason: str | None = None
    ) -> None:
        """One review on ``/<mode>`` (``mutate`` / ``validate``)."""
        key = (operation, result, mode)
        duration = self._durations.get(key)
        if duration is None:  # first review of its kind: the labelled child, kept (label values are a fixed set)
            labels = {"webhook": hook_name(operation, mode), "operation": operation, "result": result}
            duration = self._durations[key] = self.admission_duration.labels(**labels)
        duration.observe(seconds)
        if result == "denied":
            webhook = hook_name(operation, mode)
            self.denials.labels(webhook=webhook, operation=operation, reason=reason or "Unknown").inc()

    def observe_enforcer_call(self, call: str, outcome: str, seconds: float, *, error_kind: str | None = None) -> None:
        self.enforcer_duration.labels(call=call, outcome=outcome).observe(seconds)
        if error_kind is not None:
            self.enforcer_errors.labels(call=call, kind=error_kind).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
