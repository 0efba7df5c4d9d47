"""FastAPI dependency providers: the service, and who the caller is.

Tests replace these through ``app.dependency_overrides`` (an in-process
``httpx.ASGITransport`` has no TLS connection, so no client certificate).
They are ``async`` because they never block: FastAPI would otherwise send each
one through its thread pool, a thread hop per dependency per request.  Each is
one flat function reading the request itself (the authenticator from the app's
state, the ``Authorization`` header from the headers): every sub-dependency or
declared header parameter costs a resolution step on every request.
"""

from __future__ import annotations

import inspect
from typing import Annotated

from fastapi import Depends, Request

from enforcer.service import attempts, auth
from enforcer.service.node_service import NodeService
from servicekit import tls


def service_of(request: Request) -> NodeService:
    """The service, for a handler that declares no dependency for it (the allocation routes)."""
    service: NodeService = request.app.state.service
    return service


def claims_of(request: Request) -> attempts.AttemptClaims:
    claims: attempts.AttemptClaims = request.app.state.attempt_claims
    return claims


async def get_service(request: Request) -> NodeService:
    return service_of(request)


def _authorize(request: Request, access: auth.Access) -> auth.Caller:
    authenticator: auth.Authenticator = request.app.state.authenticator
    return authenticator.authorize(
        access, peer=tls.peer_certificate(request.scope), authorization=request.headers.get("authorization")
    )


async def require_reader(request: Request) -> auth.Caller:
    """A verified client certificate or the bearer token."""
    return _authorize(request, "read")


async def require_writer(request: Request) -> auth.Caller:
    """A verified client certificate (tokens are for reading only)."""
    return _authorize(request, "write")


async def authorize_writer(request: Request) -> auth.Caller:
    """:func:`require_writer` for a plain route (no dependency solving), honouring ``app.dependency_overrides``.

    An override of ``require_writer`` is called with no arguments (as FastAPI calls one that declares none)."""
    override = request.app.dependency_overrides.get(require_writer)
    if override is None:
        return _authorize(request, "write")
    caller = override()
    if inspect.isawaitable(caller):
        caller = await caller
    if not isinstance(caller, auth.Caller):
        raise TypeError(f"an override of require_writer returned {type(caller).__name__}, not auth.Caller")
    return caller


Service = Annotated[NodeService, Depends(get_service)]
Reader = Annotated[auth.Caller, Depends(require_reader)]
Writer = Annotated[auth.Caller, Depends(require_writer)]
