"""HTTP routes: read the body (bounded), parse, call :mod:`webhook.admission`, serialize. Nothing else.

``POST /mutate`` and ``POST /validate`` answer AdmissionReview v1; a body
that is not one raises :class:`~webhook.errors.WebhookError`, answered HTTP
400 by the app's exception handler (never 500).  ``GET /healthz`` says the
process serves; ``GET /readyz`` says the pod and enforcer sources have
synced (a webhook that cannot find pods would deny every binding);
``GET /metrics`` is the Prometheus exposition of this app's registry.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Response
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from servicekit import tls
from webhook import admission, callers, deps, errors, metrics, review
from webhook.handlers import common
from webhook.services import Services

router = APIRouter()

ServicesDep = Annotated[Services, Depends(deps.get_services)]
_JSON = JSONResponse.media_type  # the review answers' content type, as JSONResponse sends it


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The body, refused as soon as it is known to exceed ``limit`` (declared length, or bytes received).

    Read from the ASGI messages as ``Request.stream()`` reads them (a disconnect before the last chunk raises
    ``ClientDisconnect``), without the request object and its generator.
    """
    for name, value in scope["headers"]:
        if name == b"content-length":  # the first one, as Request.headers.get answers
            if value.isdigit() and int(value) > limit:
                raise errors.BodyTooLarge(limit)
            break
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            chunk: bytes = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise errors.BodyTooLarge(limit)
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        elif kind == "http.disconnect":
            raise ClientDisconnect()
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # a body in one chunk (the usual case): not copied


_CONTENT_TYPE_HEADER = (b"content-type", _JSON.encode("latin-1"))


async def send_json(send: Send, body: bytes) -> None:
    """What ``Response(body, media_type="application/json")`` sends (status 200, same headers), without making it."""
    headers = [(b"content-length", str(len(body)).encode("latin-1")), _CONTENT_TYPE_HEADER]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _ReviewEndpoint:
    """``POST /<mode>`` as a bare ASGI app: Starlette's ``Route`` calls it with no ``Request`` made for it.

    The app's exception handlers still apply (its ``ExceptionMiddleware`` answers a ``WebhookError`` with the
    handler's response, as the route's own wrapper did), and so does its middleware.
    """

    def __init__(self, mode: common.Mode) -> None:
        self.mode: common.Mode = mode

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        services = deps.services_of(scope["app"])
        settings = services.settings
        # before a byte of the body is read: only the kube-apiserver may have a node allocate, release or resize
        callers.check_reviewer(
            tls.peer_certificate(scope), required=settings.client_ca is not None, allowed=settings.allowed_clients
        )
        body = await _read_body(scope, receive, settings.max_body_bytes)
        admission_request = review.parse_request(body)
        response = await admission.review_request(admission_request, mode=self.mode, services=services)
        await send_json(send, review.response_body(response))


mutate = _ReviewEndpoint("mutate")
validate = _ReviewEndpoint("validate")
REVIEW_ENDPOINTS: dict[str, _ReviewEndpoint] = {"/mutate": mutate, "/validate": validate}
"""The review routes by path: the app's own routes (:func:`add_review_routes`) and its direct path
(:class:`webhook.review_app.WebhookApp`) serve the same endpoints."""


def add_review_routes(app: FastAPI) -> None:
    """``POST /mutate`` and ``POST /validate`` on ``app`` itself (before any included router, so matched first).

    The review routes carry the load, so they are bare ASGI endpoints on plain Starlette routes: FastAPI's
    per-route machinery (parameter solving, response serialization), and even Starlette's ``Request`` per review,
    cost more than the rest of the routing.  They still run inside the app, so its exception handlers
    (WebhookError: HTTP 400 with a message) and middleware apply to them as before.
    """
    # Route (what Router.add_route builds) takes an ASGI app as its endpoint; add_route's type admits functions only
    for path, endpoint in REVIEW_ENDPOINTS.items():
        app.router.routes.append(Route(path, endpoint, methods=["POST"], include_in_schema=False))


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep) -> JSONResponse:
    checks = {"pods": services.pods.is_ready(), "enforcers": services.enforcers.is_ready()}
    ready = all(checks.values())
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)


@router.get("/metrics")
async def prometheus_metrics(services: ServicesDep) -> Response:
    return Response(services.metrics.render(), media_type=metrics.CONTENT_TYPE)
