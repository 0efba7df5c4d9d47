"""Run an ASGI app under uvicorn with numaguard's own SSL context.

Three things uvicorn does not do on its own, done here:

* **Our SSLContext.**  uvicorn builds its context from file names once; we
  hand it the context of a :class:`servicekit.tls.ReloadingServerContext` (by
  setting ``Config.ssl`` after ``Config.load()``), so rotated certificates reach
  new handshakes without a restart.  :func:`serve` also runs the reload check
  on the server's loop.
* **The verified peer in the scope.**  uvicorn's HTTP scope carries no TLS
  facts.  Our protocol classes read the connection's ``ssl_object`` once, when
  the connection is made (after the handshake), and add the ASGI TLS extension
  (``scope["extensions"]["tls"]``) plus a parsed peer certificate that
  :func:`servicekit.tls.peer_certificate` reads.
* **Tests without sleeps.**  :class:`BackgroundServer` runs a server on an
  ephemeral loopback port in a thread and returns once it is listening (an
  Event set by ``startup``), with ``stop()`` and a way to run a callable on the
  server's loop (``call``), e.g. to trigger a certificate reload.

SIGTERM and SIGINT stop the server gracefully (no new connections, in-flight
requests finish within ``graceful_timeout``) and :func:`serve` then returns 0.
This module must not know any app: it serves whatever ASGI callable it gets.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import signal
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from types import FrameType, TracebackType
from typing import Any, TypeVar

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from servicekit import tls

log = logging.getLogger("servicekit.serve")

T = TypeVar("T")
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_CERT_CHECK_INTERVAL = 30.0
# Time from accepting a connection (TLS handshake included) to its first complete request head.
DEFAULT_HEADER_TIMEOUT = 10.0
_TLS_VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}
_RFC4514_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
}


class ServerStartError(RuntimeError):
    """The server did not start listening (port taken, lifespan failure, deadline passed)."""


# -- the TLS facts of a connection, in the ASGI scope --------------------------------------


def _tls_extensions(ssl_object: ssl.SSLObject) -> dict[str, Any]:
    der = ssl_object.getpeercert(binary_form=True)
    peer = tls.describe_peer(ssl_object.getpeercert(), der)
    name = None
    if peer is not None:
        name = ",".join(f"{_RFC4514_NAMES.get(k, k)}={v}" for k, v in reversed(peer["subject"].items()))
    return {
        tls.SCOPE_TLS_EXTENSION: {
            "server_cert": None,
            "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
            "client_cert_name": name,
            "client_cert_error": None,
            "tls_version": _TLS_VERSIONS.get(ssl_object.version() or ""),
            "cipher_suite": None,
        },
        tls.SCOPE_PEER_EXTENSION: peer,
    }


def _with_extensions(app: ASGIApp, extensions: dict[str, Any]) -> ASGIApp:
    async def app_with_tls(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") in ("http", "websocket"):
            scope.setdefault("extensions", {}).update(extensions)
        await app(scope, receive, send)

    return app_with_tls


def _cancelling_on_first_request(app: ASGIApp, deadline: asyncio.TimerHandle) -> ASGIApp:
    async def app_after_headers(scope: Scope, receive: Receive, send: Send) -> None:
        deadline.cancel()  # the server parsed a complete request head: the connection is no slow-loris
        await app(scope, receive, send)

    return app_after_headers


def _close_slow_connection(transport: asyncio.BaseTransport, timeout: float) -> None:
    if not transport.is_closing():
        log.info("connection closed: no complete request head in time", extra={"header_timeout": timeout})
        transport.close()


class _TLSScopeMixin:
    """Wraps the connection's app so each request scope carries the handshake's facts.

    Also bounds the time to the first complete request head (``header_timeout`` of :class:`_Config`):
    uvicorn has no such limit, so a client trickling header bytes would hold a connection (and its
    buffers) for ever.  Later requests on a kept-alive connection are bounded by uvicorn's keep-alive
    timeout between requests.
    """

    app: ASGIApp
    config: uvicorn.Config

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        ssl_object = transport.get_extra_info("ssl_object")
        if isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
            self.app = _with_extensions(self.app, _tls_extensions(ssl_object))  # type: ignore[arg-type]
        timeout = getattr(self.config, "header_timeout", None)
        if timeout:
            deadline = asyncio.get_running_loop().call_later(timeout, _close_slow_connection, transport, timeout)
            self.app = _cancelling_on_first_request(self.app, deadline)


class TLSScopeH11Protocol(_TLSScopeMixin, H11Protocol):
    """uvicorn's h11 protocol with the TLS scope extension."""


def _http_protocol() -> type[asyncio.Protocol]:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is optional in uvicorn; h11 always works
        return TLSScopeH11Protocol

    class TLSScopeHttpToolsProtocol(_TLSScopeMixin, HttpToolsProtocol):
        """uvicorn's httptools protocol with the TLS scope extension."""

    return TLSScopeHttpToolsProtocol


# -- uvicorn with our context -----------------------------------------------------------


class _Config(uvicorn.Config):
    def __init__(
        self,
        app: ASGIApp,
        *,
        ssl_context: ssl.SSLContext | None,
        header_timeout: float | None = DEFAULT_HEADER_TIMEOUT,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("http", _http_protocol())
        super().__init__(app, **kwargs)
        self._numaguard_ssl = ssl_context
        self.header_timeout = header_timeout

    def load(self) -> None:
        super().load()
        self.ssl = self._numaguard_ssl  # what loop.create_server(ssl=...) receives


class _Server(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        *,
        cert_reloader: tls.ReloadingServerContext | None,
        cert_check_interval: float,
        on_started: Callable[[_Server], None] | None = None,
    ) -> None:
        super().__init__(config)
        self.cert_reloader = cert_reloader
        self.cert_check_interval = cert_check_interval
        self.on_started = on_started
        self.loop: asyncio.AbstractEventLoop | None = None
        self.bound_port: int | None = None
        self._watch: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.started:
            return
        self.loop = asyncio.get_running_loop()
        listening = self.servers[0].sockets if self.servers else ()
        self.bound_port = listening[0].getsockname()[1] if listening else None
        if self.cert_reloader is not None:
            self._watch = asyncio.create_task(self.cert_reloader.watch(self.cert_check_interval))
        log.info(
            "server started",
            extra={"host": self.config.host, "port": self.bound_port, "tls": self.config.ssl is not None},
        )
        if self.on_started is not None:
            self.on_started(self)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        await super().shutdown(sockets=sockets)
        log.info("server stopped", extra={"port": self.bound_port})

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # uvicorn re-raises the captured signal after shutting down, which turns a
        # graceful SIGTERM into "killed by signal"; a finished shutdown is a success.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self._stop_on_signal) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _stop_on_signal(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            log.info("shutdown requested", extra={"signal": signal.Signals(sig).name})
            self.should_exit = True


def _config(
    app: ASGIApp,
    *,
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None,
    log_level: str,
    graceful_timeout: float,
    access_log: bool,
    loop: str = "auto",
    header_timeout: float | None = DEFAULT_HEADER_TIMEOUT,
) -> _Config:
    return _Config(
        app,
        ssl_context=ssl_context,
        header_timeout=header_timeout,
        loop=loop,  # "auto": uvloop when installed (uvicorn[standard]), else asyncio
        host=host,
        port=port,
        log_config=None,  # servicekit.logging (or the caller) owns logging
        log_level=log_level,
        access_log=access_log,
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=graceful_timeout,
    )


def _context(
    ssl_context_factory: Callable[[], ssl.SSLContext] | None,
    cert_reloader: tls.ReloadingServerContext | None,
) -> ssl.SSLContext | None:
    if ssl_context_factory is not None and cert_reloader is not None:
        raise ValueError("give either ssl_context_factory or cert_reloader, not both")
    if cert_reloader is not None:
        return cert_reloader.context
    return ssl_context_factory() if ssl_context_factory is not None else None


def serve(
    app: ASGIApp,
    *,
    host: str,
    port: int,
    ssl_context_factory: Callable[[], ssl.SSLContext] | None = None,
    cert_reloader: tls.ReloadingServerContext | None = None,
    cert_check_interval: float = DEFAULT_CERT_CHECK_INTERVAL,
    log_level: str = "info",
    graceful_timeout: float = 10.0,
    access_log: bool = False,
    loop: str = "auto",
    header_timeout: float | None = DEFAULT_HEADER_TIMEOUT,
) -> int:
    """Serve ``app`` until SIGTERM/SIGINT; 0 after a graceful stop, non-zero when it could not start.

    With ``cert_reloader`` its context is served and its files are checked
    every ``cert_check_interval`` seconds; ``ssl_context_factory`` serves a
    fixed context; with neither the server speaks plain HTTP (tests, compose
    behind nothing).
    """
    config = _config(
        app,
        host=host,
        port=port,
        ssl_context=_context(ssl_context_factory, cert_reloader),
        log_level=log_level,
        graceful_timeout=graceful_timeout,
        access_log=access_log,
        loop=loop,
        header_timeout=header_timeout,
    )
    server = _Server(config, cert_reloader=cert_reloader, cert_check_interval=cert_check_interval)
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits with STARTUP_FAILURE when it cannot bind or the lifespan fails
        code = exc.code if isinstance(exc.code, int) else 1
        log.error("server could not start", extra={"host": host, "port": port, "exit_code": code})
        return code or 1
    return 0


class BackgroundServer:
    """A real uvicorn server on a loopback ephemeral port, in a thread, for tests and demos.

    ``start()`` returns once the socket is listening (or raises
    :class:`ServerStartError`); ``port`` is the bound port; ``call(fn)`` runs
    ``fn`` on the server's event loop and returns its result; ``stop()`` shuts
    down gracefully and joins the thread.  Usable as a context manager.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        cert_reloader: tls.ReloadingServerContext | None = None,
        cert_check_interval: float = DEFAULT_CERT_CHECK_INTERVAL,
        startup_timeout: float = 15.0,
        log_level: str = "warning",
        loop: str = "auto",
        header_timeout: float | None = DEFAULT_HEADER_TIMEOUT,
    ) -> None:
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._startup_timeout = startup_timeout
        config = _config(
            app,
            host=host,
            port=port,
            ssl_context=cert_reloader.context if cert_reloader is not None else ssl_context,
            log_level=log_level,
            graceful_timeout=5.0,
            access_log=False,
            loop=loop,
            header_timeout=header_timeout,
        )
        self._server = _Server(
            config,
            cert_reloader=cert_reloader,
            cert_check_interval=cert_check_interval,
            on_started=lambda _server: self._ready.set(),
        )
        self._thread = threading.Thread(target=self._run, name=f"uvicorn-{host}", daemon=True)

    def _run(self) -> None:
        try:
            self._server.run()
        except BaseException as exc:  # SystemExit from a failed startup included
            self._error = exc
        finally:
            self._ready.set()

    @property
    def port(self) -> int:
        if self._server.bound_port is None:
            raise ServerStartError("the server is not listening")
        return self._server.bound_port

    def start(self) -> BackgroundServer:
        self._thread.start()
        if not self._ready.wait(self._startup_timeout):
            self.stop()
            raise ServerStartError(f"server did not start within {self._startup_timeout}s")
        if self._error is not None or not self._server.started:
            raise ServerStartError(f"server failed to start: {self._error!r}")
        return self

    def call(self, fn: Callable[[], T], timeout: float = 10.0) -> T:
        """Run ``fn`` on the server's event loop (where handshakes run) and return its result."""
        loop = self._server.loop
        if loop is None:
            raise ServerStartError("the server is not running")
        result: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                result.set_result(fn())
            except BaseException as exc:
                result.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return result.result(timeout)

    def stop(self, timeout: float = 15.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
