"""Typed domain errors.

Every error carries a stable ``reason`` string.  Reasons reach users (pod
status, AdmissionResponse, enforcer API bodies) so they are a contract: never
rename one casually.  Errors about a specific input also carry the offending
value and, where one exists, the Kubernetes field path.
"""

from __future__ import annotations

from typing import ClassVar


class DomainError(ValueError):
    """Base class for every error raised by the pure domain core."""

    reason: ClassVar[str] = "DomainError"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        if self.field:
            return f"{self.field}: {self.message}"
        return self.message


# apimachinery's ``ErrFormatWrong``: what the API server answers for an unparsable quantity.
QUANTITY_FORMAT_MESSAGE = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


class QuantityError(DomainError):
    """Raised when a string is not a Kubernetes resource quantity."""

    reason = "InvalidQuantity"

    def __init__(self, value: object, detail: str = "", *, field: str | None = None) -> None:
        text = f"{QUANTITY_FORMAT_MESSAGE}: {value!r}"
        if detail:
            text = f"{text} ({detail})"
        super().__init__(text, field=field)
        self.value = value


class CPUSetParseError(DomainError):
    """Raised when a string is not a Linux CPU list such as ``0-3,8-11``."""

    reason = "InvalidCPUSet"

    def __init__(self, value: object, detail: str, *, field: str | None = None) -> None:
        super().__init__(f"invalid cpuset {value!r}: {detail}", field=field)
        self.value = value


class PodModelError(DomainError):
    """Raised when a pod object cannot be read into the pod models."""

    reason = "InvalidPod"
