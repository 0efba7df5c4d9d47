"""Fixtures for the webhook: settings, a fake enforcer, and the app served through httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from webhook_testkit import NODE, NODE_URL, AppFactory, FakeEnforcer

from webhook import discovery, main
from webhook.settings import WebhookSettings


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def enforcer() -> FakeEnforcer:
    return FakeEnforcer()


@pytest.fixture
def make_app(enforcer: FakeEnforcer) -> AppFactory:
    """``make_app(**settings)``: the real app, with the fake enforcer on node-a behind a MockTransport."""

    def build(**overrides: Any) -> FastAPI:
        settings = WebhookSettings(**{"enforcer_retries": 0, **overrides})
        directory = discovery.StaticDirectory({NODE: NODE_URL})
        components = main.Components(enforcer_transport=enforcer.transport(), directory=directory)
        return main.create_app(settings, components=components)

    return build


@pytest.fixture
async def client(make_app: AppFactory) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app()
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as http,
    ):
        yield http
