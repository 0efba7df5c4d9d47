"""FastAPI dependency providers: the app's :class:`~webhook.services.Services`.

Tests replace them with ``app.dependency_overrides[deps.get_services]``
instead of patching modules.
"""

from __future__ import annotations

from fastapi import Request
from starlette.applications import Starlette

from webhook.services import Services


def services_of(app: Starlette) -> Services:
    """The app's services, for endpoints that read them without a dependency (the review routes, per request)."""
    services: Services = app.state.services
    return services


async def get_services(request: Request) -> Services:
    # async on purpose: FastAPI runs a plain ``def`` dependency in its thread pool, a thread hop per review
    return services_of(request.app)
