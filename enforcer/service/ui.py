"""The live NUMA map (``GET /ui``): a page behind the same authentication as the read API.

The page (``static/numa_map.html``, one self-contained file: no CDN, no
external fetches) draws the node from ``GET /topology`` and ``GET
/allocations``, polled every 2 s with the credentials the page was loaded
with.  A browser presenting a client certificate reuses its TLS session for
the polls.  A bearer token cannot ride a browser navigation, so the token
flow is: open ``/ui#token=<token>``; the navigation carries no credentials
and is answered 401 (the read API's own refusal) with a small sign-in page
instead of the JSON error body; that page moves the token from the fragment
(never sent to the server, never logged) into ``sessionStorage`` and fetches
``/ui`` again with ``Authorization: Bearer``.  The sign-in page holds no
node data, and only HTML navigations get it: API clients keep the JSON error.

Both pages run under a Content-Security-Policy that allows exactly their
inline script and style (by hash), requests to this origin only, and no
framing.

This module serves the pages and nothing else: it decides no access (the
injected dependency does) and reads no node state.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute

PATH = "/ui"
STATIC_PACKAGE = "enforcer.service"
MAP_PAGE = "numa_map.html"
SIGN_IN_PAGE = "numa_map_sign_in.html"
# Statuses the read dependency answers for missing (401) or insufficient (403) credentials.
AUTH_FAILURES = frozenset({401, 403})
# Copied from the refusal onto the sign-in page, so a client still learns which scheme to use.
_KEPT_HEADERS = ("www-authenticate",)

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


@dataclass(frozen=True, slots=True)
class StaticPage:
    """A page's HTML and the CSP source expressions of its inline ``<script>`` and ``<style>`` blocks."""

    html: str
    script_hashes: tuple[str, ...]
    style_hashes: tuple[str, ...]


def _inline_hashes(html: str, tag: str) -> tuple[str, ...]:
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.DOTALL)
    return tuple(
        "'sha256-" + base64.b64encode(hashlib.sha256(block.encode("utf-8")).digest()).decode("ascii") + "'"
        for block in blocks
    )


def load_page(name: str) -> StaticPage:
    """A page shipped in ``enforcer/service/static`` (package data), with its inline hashes."""
    html = resources.files(STATIC_PACKAGE).joinpath("static").joinpath(name).read_text(encoding="utf-8")
    return StaticPage(html, _inline_hashes(html, "script"), _inline_hashes(html, "style"))


def content_security_policy(*pages: StaticPage) -> str:
    """One policy for both pages: the sign-in page writes the map into its own document, whose policy stays."""
    scripts = " ".join(h for page in pages for h in page.script_hashes)
    styles = " ".join(h for page in pages for h in page.style_hashes)
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src {scripts}",
            f"style-src {styles}",
            "connect-src 'self'",
            "img-src 'self' data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


async def _app_error_response(request: Request, error: Exception) -> Response | None:
    """What the app's own exception handler answers for ``error`` (None: the app has no handler for it)."""
    handlers: dict[Any, Callable[..., Any]] = getattr(request.app, "exception_handlers", {})
    for cls in type(error).__mro__:
        handler = handlers.get(cls)
        if handler is not None:
            response = handler(request, error)
            if inspect.isawaitable(response):
                response = await response
            return response if isinstance(response, Response) else None
    return None


def _route_class(sign_in: StaticPage, headers: dict[str, str]) -> type[APIRoute]:
    class SignInOnAuthFailure(APIRoute):
        """Answers a browser navigation the read dependency refused with the sign-in page, same status.

        The refusal is rendered by the app's own exception handler first (so the
        status is whatever the app maps the error to); anything but 401/403, and
        any non-HTML request, gets exactly that response.
        """

        def get_route_handler(self) -> Handler:
            handle = super().get_route_handler()

            async def handle_or_sign_in(request: Request) -> Response:
                try:
                    return await handle(request)
                except Exception as error:
                    refusal = await _app_error_response(request, error)
                    if refusal is None:
                        raise
                    if refusal.status_code not in AUTH_FAILURES or not _wants_html(request):
                        return refusal
                    kept = {k: v for k, v in refusal.headers.items() if k in _KEPT_HEADERS}
                    return HTMLResponse(sign_in.html, status_code=refusal.status_code, headers={**headers, **kept})

            return handle_or_sign_in

    return SignInOnAuthFailure


def ui_router(read_auth_dependency: Callable[..., Any]) -> APIRouter:
    """``GET /ui``, guarded by ``read_auth_dependency`` (the enforcer's ``deps.require_reader``)."""
    page = load_page(MAP_PAGE)
    sign_in = load_page(SIGN_IN_PAGE)
    headers = {
        "Content-Security-Policy": content_security_policy(page, sign_in),
        # the page is tiny and the polls carry the data; never keep an authenticated page in a cache
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
    router = APIRouter(route_class=_route_class(sign_in, headers))

    @router.get(
        PATH,
        response_class=HTMLResponse,
        tags=["node"],
        summary="Live NUMA map of the node (HTML); same credentials as the read API",
        dependencies=[Depends(read_auth_dependency)],
        responses={401: {"description": "No credentials"}, 403: {"description": "Credentials not valid"}},
    )
    def numa_map() -> HTMLResponse:
        return HTMLResponse(page.html, headers=headers)

    return router
