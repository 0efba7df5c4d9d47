"""The value a pure decision returns, and the failure-mode rule shared by binding and resize.

A :class:`Decision` is "allow (recording these annotations, saying these
warnings)" or "deny (with this denial)".  Handlers turn it into an
AdmissionResponse; whether annotations become a patch depends on the endpoint
(a validating webhook never patches, a resize is never patched: K5).

:func:`enforcer_unavailable` is the one place that reads ``failure_mode``:
an enforcer that cannot be asked (unreachable, timed out, undiscovered, or
answering outside the contract) denies the request with a message saying
so, or, when configured to ``allow``, lets it through with a warning.  Only
a pod that needs exclusive resources (QoS Guaranteed: exclusive CPUs or
Static memory-manager pinning) is ever denied for that; any other pod lives
in the shared pool and is allowed with a warning whatever the failure mode,
so an enforcer outage never blocks the pods that do not depend on it.
:func:`not_enforced` answers for nodes numaguard does not run on: allowed.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from webhook import errors

REASON_ENFORCER_UNAVAILABLE = "EnforcerUnavailable"


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    annotations: Mapping[str, str | None] = field(default_factory=dict)  # None: the key must be absent
    denial: errors.AdmissionDenied | None = None
    warnings: tuple[str, ...] = ()

    @classmethod
    def allow(cls, *, annotations: Mapping[str, str | None] | None = None, warnings: tuple[str, ...] = ()) -> Decision:
        return cls(True, dict(annotations or {}), None, warnings)

    @classmethod
    def deny(cls, denial: errors.AdmissionDenied) -> Decision:
        return cls(False, {}, denial, ())


def enforcer_unavailable(
    err: errors.EnforcerError, *, failure_mode: Literal["deny", "allow"], action: str, exclusive: bool = True
) -> Decision:
    """``action`` completes "… so <action> was not checked", e.g. ``"the binding of ml/train-x7k2"``.

    ``exclusive``: whether the pod needs exclusive resources; False allows whatever ``failure_mode`` says.
    """
    if not exclusive:
        return Decision.allow(
            warnings=(f"{err.message}; {action} was allowed: the pod needs no exclusive CPUs or memory",)
        )
    if failure_mode == "allow":
        return Decision.allow(warnings=(f"{err.message}; {action} was allowed without the node's check",))
    return Decision.deny(
        errors.AdmissionDenied(
            f"{err.message}; {action} is denied until the node's enforcer answers",
            reason=REASON_ENFORCER_UNAVAILABLE,
            code=503,
        )
    )


def not_enforced(node: str, *, action: str) -> Decision:
    """``node`` runs no numaguard enforcer: numaguard has no say there, the node's kubelet decides."""
    return Decision.allow(
        warnings=(f"node {node} is not enforced by numaguard (no enforcer runs there); {action} was not checked",)
    )
