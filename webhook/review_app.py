"""The webhook's FastAPI app: the two review routes are answered ahead of FastAPI's middleware stack.

Why: every ``POST /mutate`` and ``/validate`` went through six layers before its endpoint (FastAPI's
server-error, exception-telemetry, body-limit, exception and exit-stack middleware, then the router)
and back through their ``send`` wrappers: a tenth of a replica review's instructions in process
(``python -m bench.webhook_instructions``; BENCHMARKS.md, "Webhook").  The reviews are the load;
the probes and ``/metrics`` are not, and keep the whole stack.

What those layers did for the review routes, and what :class:`WebhookApp` keeps:

* an exception that escapes the endpoint: the app's handler for its class (looked up along the
  class's MRO, as Starlette's ``ExceptionMiddleware`` does; ``WebhookError`` -> its own status, 400
  for a bad review, 401/403 for a refused caller, with a message, logged and counted), else HTTP 500
  ``Internal Server Error`` (plain text) when nothing was sent yet, then re-raised for the server to
  log, as ``ServerErrorMiddleware`` does.  A handled exception after the answer started is a
  ``RuntimeError``, as there.
* routing: only an exact ``POST`` to a review path is answered here; another method or path (a 405,
  a redirect for a trailing slash) goes through the stack as before.
* what the direct path cannot honour turns it off for the app's life, so the stack answers as before:
  FastAPI's native telemetry (an operator who asked for traces gets spans for the reviews too), an
  app-wide body limit, any middleware added to the app, a handler for 500 or ``Exception``, a
  ``root_path``, debug mode.  The exit stack served dependencies, which the review endpoints do not have.

``tests/webhook/test_webhook_review_app.py`` sends the same requests, errors included, through both
paths and compares every message sent.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class WebhookApp(FastAPI):
    """FastAPI, with ``direct_routes`` (path -> bare ASGI endpoint for ``POST``) answered before its middleware."""

    def __init__(self, *, direct_routes: Mapping[str, ASGIApp], direct: bool = True, **kwargs: Any) -> None:
        """``direct=False``: every request through the stack (the telemetry the operator asked for needs it)."""
        super().__init__(**kwargs)
        self._direct_routes = dict(direct_routes)
        self._direct_wanted = direct
        self._direct: bool | None = None  # decided at the first request, once the app is complete

    @property
    def answers_reviews_directly(self) -> bool:
        """Whether the direct path is on (see the module docstring for what turns it off)."""
        if self._direct is None:
            self._direct = (
                self._direct_wanted
                and not self.user_middleware
                and getattr(self, "max_body_size", None) is None
                and not self.root_path
                and not self.debug
                and 500 not in self.exception_handlers
                and Exception not in self.exception_handlers
            )
        return self._direct

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self._direct_routes.get(scope["path"])
            if endpoint is not None and self.answers_reviews_directly:
                scope["app"] = self  # what Starlette sets first; the endpoints find the app's services there
                await self._answer(endpoint, scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    async def _answer(self, endpoint: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await endpoint(scope, receive, tracked)
        except Exception as exc:
            handler = self._handler_for(exc)
            if handler is None:
                if not started:
                    await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send)
                raise
            if started:
                raise RuntimeError("Caught handled exception, but response already started.") from exc
            request = Request(scope, receive, send=send)
            if _is_async(handler):
                response = await handler(request, exc)
            else:
                response = await run_in_threadpool(handler, request, exc)
            if response is not None:
                await response(scope, receive, send)

    def _handler_for(self, exc: Exception) -> Any:
        """The handler Starlette's ``ExceptionMiddleware`` would call: by status for an HTTPException, then by class."""
        if isinstance(exc, HTTPException) and exc.status_code in self.exception_handlers:
            return self.exception_handlers[exc.status_code]
        for cls in type(exc).__mro__:
            if cls in self.exception_handlers:
                return self.exception_handlers[cls]
        return None


def _is_async(handler: Any) -> bool:
    """Whether calling ``handler`` gives a coroutine (Starlette runs the others in its thread pool)."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    call = handler.__call__ if not inspect.isroutine(handler) else None  # a callable object's method
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)
