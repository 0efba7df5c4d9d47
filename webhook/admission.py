"""Framework-free dispatch of one AdmissionRequest to its handler, with timing, logs and metrics.

Routing (the webhook configurations decide which of these reach us, R1.8):

============================  ===========  ==============================================
request                       operation    handler
============================  ===========  ==============================================
Pod, ``pods``                 CREATE       :mod:`webhook.handlers.pod_create`
Binding, ``pods/binding``     CREATE       :mod:`webhook.handlers.pod_binding`
Pod, ``pods/resize``          UPDATE       :mod:`webhook.handlers.pod_resize`
Pod, ``pods``                 UPDATE       :mod:`webhook.handlers.pod_resize` (resources only)
Pod, ``pods``                 DELETE       forget the pod; allowed
anything else                              allowed, untouched
============================  ===========  ==============================================

An :class:`~webhook.errors.AdmissionDenied` raised anywhere below becomes
``allowed: false``.  Any other exception is a bug: it is logged with the
request uid and answered as a denial with code 500 (reason ``InternalError``)
rather than an HTTP 500, so the client sees what happened.  Every review logs
one ``"admission reviewed"`` line carrying the request uid (written by
:func:`servicekit.logging.write`: the line ``log.info`` writes, for less).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Literal

from servicekit import logging as json_logging
from webhook import errors, responses, review
from webhook.handlers import common, pod_binding, pod_create, pod_resize
from webhook.services import Services

log = logging.getLogger("webhook.admission")

OperationLabel = Literal["create", "binding", "resize", "update", "delete", "other"]
Handler = Callable[..., Awaitable[review.AdmissionResponse]]

REASON_INTERNAL = "InternalError"


_POD_OPERATIONS: dict[str, OperationLabel] = {"CREATE": "create", "UPDATE": "update", "DELETE": "delete"}


def classify(request: review.AdmissionRequest) -> OperationLabel:
    """Which of our cases a request is (also the ``operation`` metric label)."""
    if request.resource.group != "" or request.resource.resource != "pods":
        return "other"
    sub, operation = request.sub_resource, request.operation
    if sub == "binding" and operation == "CREATE":
        return "binding"
    if sub == "resize" and operation == "UPDATE":
        return "resize"
    if sub == "" and request.kind.kind == "Pod":
        return _POD_OPERATIONS.get(operation, "other")
    return "other"


_HANDLERS: dict[OperationLabel, Handler] = {
    "create": pod_create.handle,
    "binding": pod_binding.handle,
    "resize": pod_resize.handle,
    "update": pod_resize.handle,
}


async def review_request(
    request: review.AdmissionRequest, *, mode: common.Mode, services: Services
) -> review.AdmissionResponse:
    label = classify(request)
    started = time.monotonic()
    try:
        response = await _dispatch(label, request, mode=mode, services=services)
    except errors.AdmissionDenied as denial:
        response = responses.from_denial(request.uid, denial)
    except Exception as err:
        log.exception("admission failed", extra={"uid": request.uid, "request": request.describe(), "mode": mode})
        message = f"internal error in the numaguard webhook: {type(err).__name__}"
        response = responses.denied(request.uid, message, reason=REASON_INTERNAL, code=500)
    elapsed = time.monotonic() - started
    result = "denied" if not response.allowed else ("patched" if response.patch else "allowed")
    reason = response.status.reason if response.status is not None else None
    services.metrics.observe_admission(label, result, elapsed, mode=mode, reason=reason)
    json_logging.write(
        log,
        logging.INFO,
        "admission reviewed",
        {
            "uid": request.uid,
            "mode": mode,
            "request": request.describe(),
            "dry_run": request.dry_run,
            "result": result,
            "reason": reason,
            "code": response.status.code if response.status is not None else None,
            "status_message": response.status.message if response.status is not None else None,
            "warnings": response.warnings or [],
            "duration_ms": round(elapsed * 1000, 3),
        },
    )
    return response


async def _dispatch(
    label: OperationLabel, request: review.AdmissionRequest, *, mode: common.Mode, services: Services
) -> review.AdmissionResponse:
    handler = _HANDLERS.get(label)
    if handler is not None:
        return await handler(request, mode=mode, services=services)
    if label == "delete":
        services.seen_pods.forget(namespace=request.namespace, name=request.name, uid=_uid_of(request.old_obj))
    return responses.allowed(request.uid)


def _uid_of(obj: object) -> str:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    uid = metadata.get("uid") if isinstance(metadata, dict) else None
    return uid if isinstance(uid, str) else ""
