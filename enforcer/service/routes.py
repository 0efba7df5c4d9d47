"""The enforcer's HTTP API: parse, call the service, serialise; nothing else.

Errors are raised as typed exceptions and mapped to status codes and
``ErrorBody`` in one place (``main``).  The state-changing handlers are
coroutines: they decide on the event loop (the service's lock serialises the
decisions) and then await the durable write without holding a thread, so a
change costs no thread hand-off and a finished group commit wakes no sleeping
threads.  Reads are plain functions FastAPI runs in its thread pool.
Request bodies are read and parsed here, by :func:`_read_body`, never by the
framework: FastAPI reads a declared body parameter *before* it resolves the
dependencies, which would parse an anonymous caller's body before ``Writer``
refused it.  So the handlers take the raw request, the dependencies
(authentication) run first, and the body is read after them, bounded by
``main.BodyLimit``.  The OpenAPI document still names each body model
(``openapi_extra``).  Bodies are serialised here, once, from the models the service built (the
``response_model`` declarations document them in OpenAPI): FastAPI would
otherwise dump each model, validate the dump again and serialise it, which is
most of a request's cost on the allocation path.
``POST /allocations`` and ``DELETE /allocations/{uid}`` are served by plain Starlette routes
(:func:`add_allocation_routes`) in front of their FastAPI routes, which stay for the OpenAPI document.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.routing import Match, Route
from starlette.types import Scope

from enforcer.service import deps, models, params, replica_export, requests
from enforcer.service.deps import Reader, Service, Writer
from enforcer.service.errors import WrongNodeError
from enforcer.service.metrics import CONTENT_TYPE
from enforcer.service.node_service import AllocateOutcome
from shared import contract

Responses = dict[int | str, dict[str, Any]]
ERROR: dict[str, Any] = {"model": contract.ErrorBody}
UNAUTHENTICATED: Responses = {401: {**ERROR, "description": "No client certificate (and, for reads, no bearer token)"}}
FORBIDDEN: Responses = {403: {**ERROR, "description": "Credentials not valid for this call"}}
UNAVAILABLE: Responses = {
    503: {**ERROR, "description": "State unavailable (StateUnavailable) or not durable (StateWriteFailed)"}
}
INVALID: Responses = {422: {**ERROR, "description": "Malformed request or pod; `field` names the offending value"}}
NOT_FOUND: Responses = {404: {**ERROR, "description": "No allocation for this pod uid"}}

_BUDGET_SHARE = 0.9
_ATTEMPT_MAX_LENGTH = 128
BUDGET = params.positive_int(contract.BUDGET_HEADER, "header", "How long the caller still waits (ms)")
ATTEMPT = params.bounded_str(
    contract.ATTEMPT_HEADER, "header", "The binding attempt (admission uid)", max_length=_ATTEMPT_MAX_LENGTH
)
RELEASE_ATTEMPT = params.bounded_str(
    contract.ATTEMPT_PARAM, "query", "withdraw only this attempt", max_length=_ATTEMPT_MAX_LENGTH
)

router = APIRouter()
router.include_router(replica_export.router)  # GET /replica: the engine snapshot for scheduler extenders

_BODY = TypeVar("_BODY", bound=BaseModel)


def _body_doc(model: type[BaseModel]) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


async def _read_body(request: Request, model: type[_BODY]) -> _BODY:
    """The body as ``model``, read only now (after authentication); errors as FastAPI's own 422."""
    raw = await request.body()
    try:
        return model.model_validate_json(raw)
    except ValidationError as err:
        details: list[dict[str, Any]] = []
        for detail in err.errors(include_url=False):
            details.append({**detail, "loc": ("body", *detail["loc"])})
        raise RequestValidationError(details) from None


def _json(body: BaseModel, status_code: int = 200) -> Response:
    return Response(body.model_dump_json(by_alias=True), status_code=status_code, media_type="application/json")


@router.post(
    "/allocations",
    response_model=models.AllocationStatus,
    status_code=201,
    tags=["allocations"],
    summary="Admit and allocate a pod (idempotent by pod uid)",
    responses={
        200: {"model": models.AllocationStatus, "description": "Already allocated with this spec: the same allocation"},
        201: {"description": "Allocated now"},
        **UNAUTHENTICATED,
        403: {**ERROR, "description": "Refused by the node (reason: the kubelet's, e.g. TopologyAffinityError)"},
        409: {**ERROR, "description": "This uid is allocated with a different spec (AllocationConflict)"},
        **INVALID,
        **UNAVAILABLE,
    },
    openapi_extra={**_body_doc(contract.AllocationRequest), **params.documented(BUDGET, ATTEMPT)},
)
async def allocate(request: Request, _: Writer) -> Any:
    return await _allocate(request)


async def _allocate(request: Request) -> Response:
    """``POST /allocations`` once the caller is authenticated (both routes of :func:`add_allocation_routes`)."""
    with deps.service_of(request).in_flight.track():  # background cgroup passes step aside (enforcer.service.in_flight)
        return await _allocate_in_flight(request)


async def _allocate_in_flight(request: Request) -> Response:
    # the service, the claims and the two headers are read here, not declared: see enforcer.service.params
    started = time.perf_counter()
    service, claims = deps.service_of(request), deps.claims_of(request)
    budget_ms, attempt = BUDGET.read(request), ATTEMPT.read(request)
    # decide nothing the caller will no longer wait for (a little early: its answer must still travel back)
    deadline = None if budget_ms is None else time.monotonic() + budget_ms / 1000 * _BUDGET_SHARE
    body = await _read_body(request, contract.AllocationRequest)
    if body.node_name != service.node_name:
        raise WrongNodeError(
            f"this enforcer serves node {service.node_name!r}, not {body.node_name!r}", field="nodeName"
        )
    pod = requests.pod_resources(body.pod, pod_level_resources=service.config.gates.pod_level_resources)
    parsed = time.perf_counter()
    if not attempt:
        outcome = await service.allocate_async(pod, deadline=deadline)
    else:
        async with claims.serialised(pod.uid):
            claims.check_not_withdrawn(pod.uid, attempt)
            outcome = await service.allocate_async(pod, deadline=deadline)
            claims.claim(pod.uid, attempt, created=outcome.created)
    served = time.perf_counter()
    response = _json(outcome.allocation, 201 if outcome.created else 200)
    response.headers["server-timing"] = _server_timing(started, parsed, outcome, served, time.perf_counter())
    return response


def _server_timing(started: float, parsed: float, outcome: AllocateOutcome, served: float, answered: float) -> str:
    """The allocation's time in the app by phase, as a ``Server-Timing`` header (W3C; ``dur`` in ms).

    Why: one slow round trip can then be paired with where its time went (reading the pod, waiting
    for the lock and deciding, waiting for the durable write, the follow-up, encoding the answer),
    which the per-phase histograms cannot do; the client's round trip minus their sum is outside
    the app (TLS, HTTP, scheduling).  ``python -m bench.bench_enforcer --held-where`` reads it.
    """
    phases = (
        ("read", started, parsed),
        ("decide", parsed, outcome.decided_at),
        ("durable", outcome.decided_at, outcome.durable_at),
        ("followup", outcome.durable_at, served),
        ("answer", served, answered),
    )
    return ", ".join(f"{name};dur={(end - begin) * 1000:.3f}" for name, begin, end in phases)


@router.get(
    "/allocations",
    response_model=models.AllocationListStatus,
    tags=["allocations"],
    summary="Every allocation on the node, with resize and cgroup status",
    responses={**UNAUTHENTICATED, **FORBIDDEN},
)
def list_allocations(
    service: Service, _: Reader, namespace: Annotated[str | None, Query(description="only this namespace")] = None
) -> Any:
    return _json(service.allocations(namespace))


@router.get(
    "/allocations/{uid}",
    response_model=models.AllocationStatus,
    tags=["allocations"],
    summary="One pod's allocation",
    responses={**UNAUTHENTICATED, **FORBIDDEN, **NOT_FOUND},
)
def get_allocation(uid: str, service: Service, _: Reader) -> Any:
    return _json(service.allocation(uid))


@router.delete(
    "/allocations/{uid}",
    response_model=models.ReleaseResult,
    tags=["allocations"],
    summary="Release a pod's allocation (idempotent: released=false when nothing was held)",
    description=(
        "With `attempt`, only that binding attempt's claim is withdrawn: the allocation is released when no "
        "other attempt claims it (a late release of a timed-out binding never removes its retry's allocation)."
    ),
    responses={**UNAUTHENTICATED, **FORBIDDEN, **UNAVAILABLE},
    openapi_extra=params.documented(RELEASE_ATTEMPT),
)
async def release(uid: str, request: Request, _: Writer) -> Any:
    return await _release(request)


async def _release(request: Request) -> Response:
    """``DELETE /allocations/{uid}`` once the caller is authenticated (see :func:`add_allocation_routes`)."""
    uid: str = request.path_params["uid"]
    service, claims = deps.service_of(request), deps.claims_of(request)
    attempt = RELEASE_ATTEMPT.read(request)
    with service.in_flight.track():
        if not attempt:
            claims.forget(uid)
            return _json(await service.release_async(uid))
        async with claims.serialised(uid):
            if not claims.withdraw(uid, attempt):
                return _json(models.ReleaseResult(released=False))
            return _json(await service.release_async(uid))


class _MethodRoute(Route):
    """A plain Starlette route that matches its own method only, and names itself the scope's ``route``.

    Never a partial match: a request with another method goes on to the FastAPI routes as before, so
    the first partial match (whose ``Allow`` header a 405 answer carries) is the one it always was.
    ``scope["route"]`` is what ``main.RequestTiming`` labels the request with (the same path template)."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http" or scope["method"] not in (self.methods or ()):
            return Match.NONE, {}
        match, child_scope = super().matches(scope)
        if match is Match.FULL:
            child_scope["route"] = self
        return match, child_scope


async def _allocate_route(request: Request) -> Response:
    await deps.authorize_writer(request)
    return await _allocate(request)


async def _release_route(request: Request) -> Response:
    await deps.authorize_writer(request)
    return await _release(request)


def add_allocation_routes(app: FastAPI) -> None:
    """``POST /allocations`` and ``DELETE /allocations/{uid}`` as plain Starlette routes on ``app``, matched first.

    Why: these two carry the binding load, and FastAPI's per-route machinery (dependency solving, its
    request and response wrapping, the included router's route matching) was about a fifth of the
    enforcer's event-loop time per allocation (``BENCHMARKS.md``, "Enforcer at 16 clients").  Call it
    before ``include_router(router)``.  The FastAPI routes above stay for the OpenAPI document (and are
    what these replace for their one method); the app's middleware and exception handlers apply to both
    alike, and authentication still runs before the body or any parameter is read.
    """
    app.router.routes.append(_MethodRoute("/allocations", _allocate_route, methods=["POST"], include_in_schema=False))
    app.router.routes.append(
        _MethodRoute("/allocations/{uid}", _release_route, methods=["DELETE"], include_in_schema=False)
    )


@router.post(
    "/allocations/{uid}/resize",
    response_model=contract.ResizeResult,
    tags=["allocations"],
    summary="Decide (and apply) an in-place resize: Accepted, Deferred or Infeasible",
    responses={**UNAUTHENTICATED, **FORBIDDEN, **NOT_FOUND, **INVALID, **UNAVAILABLE},
    openapi_extra=_body_doc(contract.ResizeRequest),
)
async def resize(
    uid: str,
    request: Request,
    service: Service,
    _: Writer,
    dry_run: Annotated[bool, Query(alias="dryRun", description="only judge feasibility; change nothing")] = False,
) -> Any:
    with service.in_flight.track():
        body = await _read_body(request, contract.ResizeRequest)
        gates = service.config.gates
        desired = requests.pod_resources(body.pod, pod_level_resources=gates.pod_level_resources, uid=uid)
        return _json(await service.resize_async(uid, desired, dry_run=dry_run))


@router.get(
    "/topology",
    response_model=contract.TopologyView,
    tags=["node"],
    summary="The machine and what is reserved, exclusive and free per NUMA node",
    responses={**UNAUTHENTICATED, **FORBIDDEN},
)
def topology(service: Service, _: Reader) -> Any:
    return _json(service.topology_view())


@router.get(
    "/metrics",
    tags=["node"],
    summary="Prometheus metrics (the kubelet's resource_manager_* counters and numaguard_enforcer_*)",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {}}}, **UNAUTHENTICATED, **FORBIDDEN},
)
def metrics(service: Service, _: Reader) -> Response:
    return Response(content=service.metrics_text(), media_type=CONTENT_TYPE)


@router.get("/healthz", tags=["probes"], summary="The process is alive")
def healthz() -> dict[str, bool]:
    return {"ok": True}


@router.get(
    "/readyz",
    response_model=models.Readiness,
    tags=["probes"],
    summary="Ready once the topology is known and the state loaded and verified",
    responses={503: {"model": models.Readiness, "description": "Not ready; reason and message say why"}},
)
def readyz(service: Service) -> Any:
    readiness = service.readiness()
    return _json(readiness, 200 if readiness.ready else 503)
