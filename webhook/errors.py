"""Everything that can go wrong in the webhook, as one table of contents.

Three families, handled in three different places:

* :class:`WebhookError`: the HTTP request is not a usable AdmissionReview.
  The route answers HTTP 400 with a message; the apiserver then applies the
  webhook's ``failurePolicy`` (admission-and-api.md R2.7).  Never a 500.
* :class:`AdmissionDenied`: the review is fine and the answer is "no".  It
  becomes ``allowed: false`` with ``status {code, reason, message}`` (R2.4).
* :class:`EnforcerError`: a call to a node's enforcer failed.  The binding and
  resize handlers turn each kind into a decision (deny with the node's reason,
  or the configured failure mode for an unreachable node).

``ConfigError`` is raised at startup only.  This module holds no logic beyond
formatting the messages, and must not import the HTTP client or the framework.
"""

from __future__ import annotations

from typing import ClassVar


class WebhookError(Exception):
    """The request body is not an AdmissionReview v1 we can answer: HTTP 400, never a denial."""

    status_code: ClassVar[int] = 400
    reason: ClassVar[str] = "BadRequest"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class MalformedReview(WebhookError):
    """Invalid JSON, not an object, wrong apiVersion/kind, missing or invalid ``request``."""


class BodyTooLarge(WebhookError):
    """The body exceeds the configured limit; it is refused before it is parsed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds the limit of {limit} bytes")
        self.limit = limit


class CallerUnauthenticated(WebhookError):
    """A review without the kube-apiserver's client certificate, while one is required (HTTP 401)."""

    status_code = 401
    reason = "Unauthorized"


class CallerForbidden(WebhookError):
    """A verified client certificate that is not the apiserver's (no clientAuth, another name): HTTP 403."""

    status_code = 403
    reason = "Forbidden"


class AdmissionDenied(Exception):
    """A policy or validity decision: ``allowed: false`` carrying ``code``, ``reason`` and ``message``.

    ``reason`` is a stable CamelCase string (``Invalid``, ``Forbidden``, or the
    node's kubelet reason such as ``TopologyAffinityError``); metrics count
    denials by it, so never rename one casually.
    """

    def __init__(self, message: str, *, reason: str, code: int = 403, warnings: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.code = code
        self.warnings = warnings


class ConfigError(Exception):
    """The webhook's settings cannot work (missing file, budget not inside the timeout, bad URL)."""


# -- calls to a node's enforcer --------------------------------------------------------------


class EnforcerError(Exception):
    """Base of every failed enforcer call; ``node`` is the node whose enforcer was asked."""

    kind: ClassVar[str] = "error"

    def __init__(self, message: str, *, node: str) -> None:
        super().__init__(message)
        self.message = message
        self.node = node


class EnforcerUnavailable(EnforcerError):
    """No answer worth reading: connection refused, TLS failure, 5xx; subject to the failure mode."""

    kind = "unreachable"


class EnforcerTimeout(EnforcerUnavailable):
    """The call did not finish inside its deadline (the budget inside ``timeoutSeconds``)."""

    kind = "timeout"


class NoEnforcerForNode(EnforcerUnavailable):
    """Discovery knows no enforcer URL for the node (no DaemonSet pod there, or not in the static map)."""

    kind = "undiscovered"


class EnforcerRefused(EnforcerError):
    """The node answered and said no (HTTP 403): ``reason`` is the kubelet's reason string."""

    kind = "refused"

    def __init__(
        self, message: str, *, node: str, reason: str, field: str | None = None, status_code: int = 403
    ) -> None:
        super().__init__(message, node=node)
        self.reason = reason
        self.field = field
        self.status_code = status_code


class EnforcerConflict(EnforcerRefused):
    """HTTP 409: the node already holds this pod UID with a different spec (reason ``AllocationConflict``)."""

    kind = "conflict"


class EnforcerPodUnknown(EnforcerError):
    """HTTP 404 on a resize: the node holds no allocation for this pod."""

    kind = "unknown_pod"


class EnforcerProtocolError(EnforcerError):
    """The node answered something outside the contract (unexpected status, a body that does not parse)."""

    kind = "protocol"
