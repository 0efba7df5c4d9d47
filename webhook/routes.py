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

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse

from servicekit import tls
from webhook import admission, callers, deps, errors, metrics, review
from webhook.handlers import common
from webhook.services import Services

router = APIRouter()

ServicesDep = Annotated[Services, Depends(deps.get_services)]
_JSON = JSONResponse.media_type  # the review answers' content type, as JSONResponse sends it


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused as soon as it is known to exceed ``limit`` (declared length, or bytes streamed)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise errors.BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise errors.BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)  # a body in one chunk (the usual case) is that chunk, not a copy


async def _review(request: Request, mode: common.Mode) -> Response:
    services = deps.services_of(request)
    settings = services.settings
    # before a byte of the body is read: only the kube-apiserver may have a node allocate, release or resize
    callers.check_reviewer(
        tls.peer_certificate(request.scope), required=settings.client_ca is not None, allowed=settings.allowed_clients
    )
    body = await _read_body(request, settings.max_body_bytes)
    admission_request = review.parse_request(body)
    response = await admission.review_request(admission_request, mode=mode, services=services)
    return Response(review.response_body(response), media_type=_JSON)


async def mutate(request: Request) -> Response:
    return await _review(request, "mutate")


async def validate(request: Request) -> Response:
    return await _review(request, "validate")


def add_review_routes(app: FastAPI) -> None:
    """``POST /mutate`` and ``POST /validate`` on ``app`` itself (before any included router, so matched first).

    The review routes carry the load, so they are plain Starlette routes: FastAPI's per-route machinery (parameter
    solving, response serialization) costs more per review than the rest of the routing.  They still run inside the
    app, so its exception handlers (WebhookError: HTTP 400 with a message) and middleware apply to them as before.
    """
    app.router.add_route("/mutate", mutate, methods=["POST"], include_in_schema=False)
    app.router.add_route("/validate", validate, methods=["POST"], include_in_schema=False)


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
