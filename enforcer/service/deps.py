"""FastAPI dependency providers: the service, and who the caller is.

Tests replace these through ``app.dependency_overrides`` (an in-process
``httpx.ASGITransport`` has no TLS connection, so no client certificate).
They are ``async`` because they never block: FastAPI would otherwise send each
one through its thread pool, a thread hop per dependency per request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from enforcer.service import auth
from enforcer.service.node_service import NodeService
from servicekit import tls


async def get_service(request: Request) -> NodeService:
    service: NodeService = request.app.state.service
    return service


async def get_authenticator(request: Request) -> auth.Authenticator:
    authenticator: auth.Authenticator = request.app.state.authenticator
    return authenticator


async def require_reader(
    request: Request,
    authenticator: Annotated[auth.Authenticator, Depends(get_authenticator)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> auth.Caller:
    """A verified client certificate or the bearer token."""
    return authenticator.authorize("read", peer=tls.peer_certificate(request.scope), authorization=authorization)


async def require_writer(
    request: Request,
    authenticator: Annotated[auth.Authenticator, Depends(get_authenticator)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> auth.Caller:
    """A verified client certificate (tokens are for reading only)."""
    return authenticator.authorize("write", peer=tls.peer_certificate(request.scope), authorization=authorization)


Service = Annotated[NodeService, Depends(get_service)]
Reader = Annotated[auth.Caller, Depends(require_reader)]
Writer = Annotated[auth.Caller, Depends(require_writer)]
