"""FastAPI dependency providers: the app's :class:`~webhook.services.Services`.

Tests replace them with ``app.dependency_overrides[deps.get_services]``
instead of patching modules.
"""

from __future__ import annotations

from fastapi import Request

from webhook.services import Services


async def get_services(request: Request) -> Services:
    # async on purpose: FastAPI runs a plain ``def`` dependency in its thread pool, a thread hop per review
    services: Services = request.app.state.services
    return services
