"""Starting, stopping and signalling a served app: ephemeral ports, start failures, graceful SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from servicekit import certs, serve, tls


def test_background_server_listens_on_an_ephemeral_loopback_port_until_stopped(echo_app: Any) -> None:
    server = serve.BackgroundServer(echo_app).start()
    port = server.port
    assert port > 0
    assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 200
    server.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/")


def test_plain_http_requests_carry_no_peer(echo_app: Any) -> None:
    with serve.BackgroundServer(echo_app) as server:
        assert httpx.get(f"http://127.0.0.1:{server.port}/").json() == {"peer": None, "tls": None}


def test_a_taken_port_is_a_start_error_not_a_hang(echo_app: Any) -> None:
    with serve.BackgroundServer(echo_app) as first:
        second = serve.BackgroundServer(echo_app, port=first.port)
        with pytest.raises(serve.ServerStartError):
            second.start()


def test_call_runs_on_the_server_loop_and_returns_the_result(echo_app: Any) -> None:
    with serve.BackgroundServer(echo_app) as server:
        thread_name = server.call(lambda: threading.current_thread().name)
        assert thread_name != threading.current_thread().name
        with pytest.raises(ZeroDivisionError):
            server.call(lambda: 1 // 0)


def test_serve_refuses_both_a_fixed_context_and_a_reloader(bundle: certs.Bundle, echo_app: Any) -> None:
    files = tls.TLSFiles.in_directory(bundle.directory, "webhook")
    with pytest.raises(ValueError, match="either"):
        serve.serve(
            echo_app,
            host="127.0.0.1",
            port=0,
            ssl_context_factory=lambda: tls.server_context(files),
            cert_reloader=tls.ReloadingServerContext(files),
        )


SERVE_SCRIPT = textwrap.dedent(
    """
    import sys
    from servicekit import logging as jsonlog, serve, tls

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    jsonlog.configure("INFO")
    reloader = tls.ReloadingServerContext(tls.TLSFiles.in_directory(sys.argv[1], "webhook"))
    sys.exit(serve.serve(app, host="127.0.0.1", port=0, cert_reloader=reloader))
    """
)


def read_events(stream: Any, until: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for line in stream:
        events.append(json.loads(line))
        if events[-1]["event"] == until:
            return events
    raise AssertionError(f"process ended before logging {until!r}: {events}")


def test_sigterm_stops_serve_gracefully_with_exit_status_zero(tmp_path: Path, bundle: certs.Bundle) -> None:
    script = tmp_path / "serve_app.py"
    script.write_text(SERVE_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(bundle.directory)], stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        assert proc.stderr is not None
        started = read_events(proc.stderr, "server started")[-1]
        context = tls.client_context(bundle.cert("ca"))
        assert httpx.get(f"https://localhost:{started['port']}/", verify=context).text == "ok"
        assert started["tls"] is True

        proc.send_signal(signal.SIGTERM)
        stopping = read_events(proc.stderr, "server stopped")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert {"event": "shutdown requested", "signal": "SIGTERM"}.items() <= next(
        e for e in stopping if e["event"] == "shutdown requested"
    ).items()


def test_client_context_trusts_only_the_given_ca(bundle: certs.Bundle) -> None:
    context = tls.client_context(bundle.cert("ca"))
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("organizationName", "numaguard"),), (("commonName", "numaguard-ca"),))
    ]
