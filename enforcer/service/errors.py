"""Errors of the enforcer service: what a request can run into beyond the engine's own errors.

Each class carries a stable ``reason`` (the ``ErrorBody.reason`` clients key
on); the HTTP status of each is decided in one place, ``main``'s exception
handler, never here.  Engine errors (``PodConflictError``, ``UnknownPodError``)
reach that handler unchanged.
"""

from __future__ import annotations

from enforcer.errors import EnforcerError


class ServiceError(EnforcerError):
    """Base class of the service's own errors; ``field`` names the offending request field when there is one."""

    reason = "ServiceError"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidRequestError(ServiceError):
    """The request body is well-formed JSON but not an acceptable pod (unparsable, invalid, no uid)."""

    reason = "InvalidPod"


class WrongNodeError(ServiceError):
    """An allocation request names another node than the one this enforcer serves."""

    reason = "WrongNode"


class IllegalResizeError(ServiceError):
    """A resize the API server would reject (QoS change, containers changed, non-resource fields)."""

    reason = "IllegalResize"


class AdmissionRefusedError(ServiceError):
    """The node refused the pod; ``kubelet_reason`` is the kubelet's reason string (``TopologyAffinityError``...)."""

    reason = "AdmissionRefused"

    def __init__(self, kubelet_reason: str, message: str) -> None:
        super().__init__(message)
        self.kubelet_reason = kubelet_reason


class StateUnavailableError(ServiceError):
    """The durable state could not be loaded or verified: state-changing calls wait for ``recover-state``."""

    reason = "StateUnavailable"


class StateWriteError(ServiceError):
    """The change was decided but could not be made durable; it was rolled back and not acknowledged."""

    reason = "StateWriteFailed"


class DeadlineExceededError(ServiceError):
    """The caller's budget (``X-Numaguard-Budget-Ms``) ran out before the request's turn: nothing was decided,
    because the caller (a webhook whose binding already timed out) will not act on the answer."""

    reason = "DeadlineExceeded"


class NotReadyError(ServiceError):
    """The service is still starting (topology or state not loaded yet)."""

    reason = "NotReady"


class BodyTooLargeError(ServiceError):
    """The request body is over the configured limit (HTTP 413); nothing of it was parsed."""

    reason = "RequestEntityTooLarge"
