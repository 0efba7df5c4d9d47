"""The review routes answered ahead of FastAPI's middleware (webhook.review_app) send what the stack sends.

Each case goes to two apps built alike, one with the direct path and one with it turned off by a
pass-through middleware (what an operator's middleware does), and every ASGI message each sends is
compared: answers, 400s, 413-class refusals, a 500 from an exception nothing handles, a disconnect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import pytest
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Receive, Scope, Send
from webhook_testkit import NODE, NODE_URL, FakeEnforcer, review_bytes, review_names

from webhook import admission, discovery, errors, main, review_app
from webhook.settings import WebhookSettings

pytestmark = pytest.mark.anyio

Messages = list[dict[str, Any]]


class PassThrough:
    """A middleware that changes nothing: its presence alone sends every request through the stack."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def build(*, direct: bool, **overrides: Any) -> review_app.WebhookApp:
    settings = WebhookSettings(**{"enforcer_retries": 0, **overrides})
    components = main.Components(
        enforcer_transport=FakeEnforcer().transport(), directory=discovery.StaticDirectory({NODE: NODE_URL})
    )
    app = main.create_app(settings, components=components)
    assert isinstance(app, review_app.WebhookApp)
    if not direct:
        app.add_middleware(PassThrough)
    return app


def http_scope(path: str, body_length: int | None, method: str = "POST") -> dict[str, Any]:
    headers = [(b"content-type", b"application/json")]
    if body_length is not None:
        headers.append((b"content-length", str(body_length).encode()))
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "https",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8443),
        "extensions": {},
        "state": {},
    }


async def call(
    app: ASGIApp,
    path: str,
    chunks: list[bytes],
    *,
    declared: bool = True,
    disconnect: bool = False,
    method: str = "POST",
) -> tuple[Messages, BaseException | None, dict[str, Any]]:
    """Every message ``app`` sends for a request whose body arrives as ``chunks``; what it raised; the scope."""
    pending: list[dict[str, Any]] = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1 or disconnect}
        for i, chunk in enumerate(chunks)
    ]

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    sent: Messages = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    scope = http_scope(path, sum(map(len, chunks)) if declared else None, method)
    try:
        await app(scope, receive, send)
    except Exception as exc:  # what escapes to the server (uvicorn logs it)
        return sent, exc, scope
    return sent, None, scope


@pytest.fixture
async def apps() -> AsyncIterator[tuple[review_app.WebhookApp, review_app.WebhookApp]]:
    direct, stacked = build(direct=True), build(direct=False)
    async with direct.router.lifespan_context(direct), stacked.router.lifespan_context(stacked):
        yield direct, stacked


async def both(
    apps: tuple[review_app.WebhookApp, review_app.WebhookApp], path: str, chunks: list[bytes], **how: Any
) -> tuple[Messages, BaseException | None]:
    direct, stacked = apps
    got, raised, scope = await call(direct, path, chunks, **how)
    expected, expected_raised, stacked_scope = await call(stacked, path, chunks, **how)
    assert "router" not in scope and "router" in stacked_scope  # the first skipped the stack, the second did not
    assert got == expected
    assert type(raised) is type(expected_raised) and str(raised) == str(expected_raised)
    return got, raised


def _status(messages: Messages) -> int:
    return int(messages[0]["status"])


CREATE_AND_UPDATE = review_names("create-") + review_names("resize-") + review_names("update-")


@pytest.mark.parametrize("name", CREATE_AND_UPDATE)
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
async def test_every_recorded_review_is_answered_as_through_the_stack(
    apps: tuple[review_app.WebhookApp, review_app.WebhookApp], name: str, path: str
) -> None:
    sent, raised = await both(apps, path, [review_bytes(name)])
    assert raised is None and _status(sent) == 200


@pytest.mark.parametrize("name", [*review_names("body-"), "body-not-json.txt"])
async def test_a_body_that_is_not_a_review_is_the_same_400(
    apps: tuple[review_app.WebhookApp, review_app.WebhookApp], name: str
) -> None:
    sent, raised = await both(apps, "/validate", [review_bytes(name)])
    assert raised is None and _status(sent) == 400


@pytest.mark.parametrize("declared", [True, False], ids=["declared-length", "streamed"])
async def test_an_oversized_body_is_the_same_refusal(declared: bool) -> None:
    direct, stacked = build(direct=True, max_body_bytes=1024), build(direct=False, max_body_bytes=1024)
    sent, raised = await both((direct, stacked), "/mutate", [b" " * 512] * 4, declared=declared)
    assert raised is None and _status(sent) == 400


async def test_a_client_gone_before_the_last_chunk_is_the_same_500_and_error(
    apps: tuple[review_app.WebhookApp, review_app.WebhookApp],
) -> None:
    body = review_bytes(CREATE_AND_UPDATE[0])
    sent, raised = await both(apps, "/mutate", [body[:100], body[100:200]], disconnect=True)
    assert isinstance(raised, ClientDisconnect) and _status(sent) == 500


async def test_an_exception_nothing_handles_is_the_same_plain_500_then_raised(
    apps: tuple[review_app.WebhookApp, review_app.WebhookApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise LookupError("a bug")

    monkeypatch.setattr(admission, "review_request", broken)
    sent, raised = await both(apps, "/mutate", [review_bytes(CREATE_AND_UPDATE[0])])
    assert isinstance(raised, LookupError)
    assert _status(sent) == 500 and sent[1]["body"] == b"Internal Server Error"


@pytest.mark.parametrize("method", ["GET", "PUT"])
async def test_another_method_or_path_goes_through_the_stack(
    apps: tuple[review_app.WebhookApp, review_app.WebhookApp], method: str
) -> None:
    direct, _ = apps
    sent, raised, scope = await call(direct, "/mutate", [b""], method=method)
    assert raised is None and _status(sent) == 405 and "router" in scope
    sent, raised, scope = await call(direct, "/mutate/", [review_bytes(CREATE_AND_UPDATE[0])])
    assert raised is None and "router" in scope  # the trailing-slash redirect, as before


# -- the app's generic rules, with endpoints written for them ------------------------------------------------------

Endpoint = Callable[[Scope, Receive, Send], Awaitable[None]]


class Refused(Exception):
    pass


class Bare:
    """A bare ASGI endpoint, as the review endpoints are (Starlette's Route calls a function with a Request)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.endpoint(scope, receive, send)


def tiny_app(endpoint: Endpoint, *, direct: bool) -> review_app.WebhookApp:
    from starlette.routing import Route

    app = review_app.WebhookApp(direct_routes={"/review": Bare(endpoint)}, openapi_url=None)
    app.router.routes.append(Route("/review", Bare(endpoint), methods=["POST"]))

    def sync_handler(request: Request, exc: Exception) -> JSONResponse:  # Starlette runs it in its thread pool
        return JSONResponse({"refused": str(exc), "path": request.url.path}, status_code=409)

    async def teapot(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"status": "teapot"}, status_code=418)

    app.add_exception_handler(Refused, sync_handler)
    app.add_exception_handler(418, teapot)
    if not direct:
        app.add_middleware(PassThrough)
    return app


async def start_then_refuse(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    raise Refused("too late")


async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
    raise Refused("no")


async def teapot(scope: Scope, receive: Receive, send: Send) -> None:
    raise HTTPException(418)


@pytest.mark.parametrize("endpoint", [refuse, start_then_refuse, teapot], ids=lambda e: e.__name__)
async def test_handlers_are_chosen_and_called_as_starlette_does(endpoint: Endpoint) -> None:
    sent, raised = await both((tiny_app(endpoint, direct=True), tiny_app(endpoint, direct=False)), "/review", [b"{}"])
    if endpoint is start_then_refuse:  # a handled exception once the answer started cannot be answered
        assert isinstance(raised, RuntimeError) and len(sent) == 1
    else:
        assert raised is None and _status(sent) in (409, 418)


def test_what_the_direct_path_cannot_honour_turns_it_off() -> None:
    assert build(direct=True).answers_reviews_directly
    assert not build(direct=False).answers_reviews_directly  # any middleware added to the app

    def changed(change: Callable[[review_app.WebhookApp], object]) -> bool:
        app = build(direct=True)
        change(app)
        return app.answers_reviews_directly

    async def on_500(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({}, status_code=500)

    assert not changed(lambda app: setattr(app, "root_path", "/webhook"))
    assert not changed(lambda app: setattr(app, "max_body_size", 1 << 20))
    assert not changed(lambda app: setattr(app, "debug", True))
    assert not changed(lambda app: app.add_exception_handler(500, on_500))
    assert not changed(lambda app: app.add_exception_handler(Exception, on_500))


def test_telemetry_the_operator_asked_for_keeps_every_request_in_the_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTAPI_OTEL_AUTO_CONFIGURE", "true")
    assert not build(direct=True).answers_reviews_directly
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert build(direct=True).answers_reviews_directly


async def test_a_bad_review_on_the_direct_path_is_logged_and_counted_by_the_apps_handler(
    apps: tuple[review_app.WebhookApp, review_app.WebhookApp], caplog: pytest.LogCaptureFixture
) -> None:
    direct, _ = apps
    with caplog.at_level("INFO", logger="webhook.main"):
        sent, raised, scope = await call(direct, "/validate", [b"[1]"])
    assert raised is None and _status(sent) == 400 and "router" not in scope
    (record,) = [r for r in caplog.records if r.getMessage() == "bad admission request"]
    assert record.__dict__["path"] == "/validate"
    assert errors.WebhookError in direct.exception_handlers
