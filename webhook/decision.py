"""The value a pure decision returns, and the failure-mode rule shared by binding and resize.

A :class:`Decision` is "allow (recording these annotations, saying these
warnings)" or "deny (with this denial)".  Handlers turn it into an
AdmissionResponse; whether annotations become a patch depends on the endpoint
(a validating webhook never patches, a resize is never patched: K5).

:func:`enforcer_unavailable` is the one place that reads ``failure_mode``:
an enforcer that cannot be asked (unreachable, timed out, undiscovered, or
answering outside the contract) denies the request with a message saying
so, or, when configured to ``allow``, lets it through with a warning.
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


def enforcer_unavailable(err: errors.EnforcerError, *, failure_mode: Literal["deny", "allow"], action: str) -> Decision:
    """``action`` completes "… so <action> was not checked", e.g. ``"the binding of ml/train-x7k2"``."""
    if failure_mode == "allow":
        return Decision.allow(warnings=(f"{err.message}; {action} was allowed without the node's check",))
    return Decision.deny(
        errors.AdmissionDenied(
            f"{err.message}; {action} is denied until the node's enforcer answers",
            reason=REASON_ENFORCER_UNAVAILABLE,
            code=503,
        )
    )
