"""FastAPI dependency providers: the app's :class:`~webhook.services.Services`.

Tests replace them with ``app.dependency_overrides[deps.get_services]``
instead of patching modules.
"""

from __future__ import annotations

from fastapi import Request

from webhook.services import Services


def services_of(request: Request) -> Services:
    """The app's services, for routes that read them without a dependency (the review routes, per request)."""
    services: Services = request.app.state.services
    return services


async def get_services(request: Request) -> Services:
    # async on purpose: FastAPI runs a plain ``def`` dependency in its thread pool, a thread hop per review
    return services_of(request)
