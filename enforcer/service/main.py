"""Composition root of the enforcer: ``create_app(settings)`` builds the FastAPI app and its lifespan.

The lifespan runs :func:`enforcer.service.runtime.start` (topology, verified
state, engine, start-up reconcile, reconcile worker, pod watch) in a worker
thread and stops it on shutdown.  Every error is mapped to an HTTP status and
an ``ErrorBody`` here, in one table, and request latency is measured by a small
ASGI middleware.  TLS is not this module's business: ``servicekit.serve``
terminates it and puts the verified peer certificate into each request's scope.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from enforcer.cgroups import driver as cgdriver
from enforcer.engine.node import PodConflictError, UnknownPodError
from enforcer.errors import EnforcerError
from enforcer.service import attempts, auth, deps, kube, routes, runtime, ui
from enforcer.service import errors as service_errors
from enforcer.service.metrics import EnforcerMetrics
from enforcer.service.settings import EnforcerSettings
from servicekit import telemetry
from shared import contract

API_VERSION = "1"

# Status code by error class; the first matching class (most specific first) wins.
_STATUS: tuple[tuple[type[EnforcerError], int], ...] = (
    (auth.AuthenticationRequired, 401),
    (auth.AccessDenied, 403),
    (service_errors.AdmissionRefusedError, 403),
    (UnknownPodError, 404),
    (PodConflictError, 409),
    (service_errors.InvalidRequestError, 422),
    (service_errors.WrongNodeError, 422),
    (service_errors.IllegalResizeError, 422),
    (service_errors.StateUnavailableError, 503),
    (service_errors.StateWriteError, 503),
    (service_errors.NotReadyError, 503),
    (service_errors.DeadlineExceededError, 503),
    (service_errors.BodyTooLargeError, 413),
    (attempts.AttemptWithdrawnError, 409),
)


def _status_of(error: EnforcerError) -> int:
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return 500


def _error_body(error: EnforcerError) -> contract.ErrorBody:
    reason = error.kubelet_reason if isinstance(error, service_errors.AdmissionRefusedError) else error.reason
    field = error.field if isinstance(error, service_errors.ServiceError) else None
    return contract.ErrorBody(reason=reason, message=error.message, field=field)


async def _enforcer_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, EnforcerError)
    status = _status_of(error)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(_error_body(error).model_dump(by_alias=True), status_code=status, headers=headers)


def _field_path(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    path = ""
    for part in parts:
        path += f"[{part}]" if part.isdigit() else (f".{part}" if path else part)
    return path


async def _validation_error(request: Request, error: Exception) -> JSONResponse:
    """FastAPI's validation details, inside an ErrorBody so every non-2xx answer has the same shape."""
    assert isinstance(error, RequestValidationError)
    details = list(error.errors())
    first = details[0] if details else {"loc": (), "msg": "invalid request"}
    # a JSON syntax error's location is a character offset, not a field
    field = "" if first.get("type") == "json_invalid" else _field_path(tuple(first.get("loc", ())))
    message = "; ".join(f"{_field_path(tuple(d.get('loc', ()))) or 'body'}: {d.get('msg', '')}" for d in details)
    body = contract.ErrorBody(reason="InvalidRequest", message=message or "invalid request", field=field or None)
    content = body.model_dump(by_alias=True)
    content["detail"] = [{"loc": list(d.get("loc", ())), "msg": d.get("msg"), "type": d.get("type")} for d in details]
    return JSONResponse(content, status_code=422)


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    """The framework's own errors (unparseable bodies, unknown routes, wrong methods) as an ErrorBody too."""
    assert isinstance(error, StarletteHTTPException)
    reason = HTTPStatus(error.status_code).phrase.replace(" ", "") if error.status_code in _KNOWN_STATUS else "Error"
    body = contract.ErrorBody(reason=reason, message=str(error.detail))
    content = body.model_dump(by_alias=True)
    content["detail"] = error.detail
    return JSONResponse(content, status_code=error.status_code, headers=getattr(error, "headers", None))


_KNOWN_STATUS = {s.value for s in HTTPStatus}


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class RequestTiming:
    """Observes every HTTP request's latency by method, route template and status."""

    def __init__(self, app: ASGIApp, metrics: EnforcerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.child(self.metrics.request_seconds, scope["method"], route, str(status)).observe(
                time.perf_counter() - started
            )


class BodyLimit:
    """Refuses request bodies over ``limit`` bytes with 413, before any of it is read or parsed.

    A declared ``Content-Length`` over the limit is answered at once; a chunked body is counted as the
    handler reads it, and the read fails with :class:`~enforcer.service.errors.BodyTooLargeError` (413
    through the error table) at the first byte over.  The handlers read bodies only after the caller was
    authenticated (``routes``), so an anonymous caller never gets a body read at all.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await _send_error(send, 413, service_errors.BodyTooLargeError(self._message()))
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise service_errors.BodyTooLargeError(self._message())
            return message

        await self.app(scope, counted, send)

    def _message(self) -> str:
        return f"the request body exceeds the limit of {self.limit} bytes"


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


async def _send_error(send: Send, status: int, error: EnforcerError) -> None:
    body = _error_body(error).model_dump_json(by_alias=True).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _openapi_document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document plus the request-body models the handlers parse themselves (``routes._read_body``)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    document = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for model in (contract.AllocationRequest, contract.ResizeRequest):
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    app.openapi_schema = document
    return document


def create_app(
    settings: EnforcerSettings,
    *,
    cgroup_driver: cgdriver.CgroupDriver | None = None,
    pod_source: kube.PodSource | None = None,
) -> FastAPI:
    """The enforcer app; ``cgroup_driver`` and ``pod_source`` replace the configured ones (tests, demos)."""
    metrics = EnforcerMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        start = functools.partial(runtime.start, settings, metrics, driver=cgroup_driver, pod_source=pod_source)
        node = await anyio.to_thread.run_sync(start)
        app.state.service = node.service
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(node.stop)

    docs = settings.api_docs
    app = FastAPI(
        title="numaguard enforcer",
        version=API_VERSION,
        # off by default: the API description is for developers, not for anyone who can reach the port
        openapi_url="/openapi.json" if docs else None,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
        description=(
            "Per-node allocation of exclusive, NUMA-aligned CPUs and memory with the kubelet's resource manager "
            "semantics. Calls need a client certificate signed by the enforcer's CA with the clientAuth usage and "
            "an identity whose role allows them (webhook: writes, operator: all, reader: reads); reads also accept "
            "the bearer token."
        ),
        lifespan=lifespan,
        telemetry=telemetry.fastapi_telemetry(),
    )
    app.openapi = functools.partial(_openapi_document, app)  # type: ignore[method-assign]
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.attempt_claims = attempts.AttemptClaims()
    token_file = auth.TokenFile(settings.token_file) if settings.token_file is not None else None
    app.state.authenticator = auth.Authenticator(token_file, settings.client_identities)
    routes.add_allocation_routes(app)  # before the router: matched first
    app.include_router(routes.router)
    app.include_router(ui.ui_router(deps.require_reader))
    app.add_exception_handler(EnforcerError, _enforcer_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(RequestTiming, metrics=metrics)
    return app
