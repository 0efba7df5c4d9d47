"""Fixtures for servicekit tests: a certificate bundle, a peer-echoing ASGI app, a raw HTTPS GET."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from servicekit import certs, tls


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> certs.Bundle:
    return certs.issue_bundle(tmp_path_factory.mktemp("certs"), namespace="numaguard")


async def peer_echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers every request with the verified peer and the ASGI TLS extension, as JSON."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = json.dumps({"peer": tls.peer_certificate(scope), "tls": scope.get("extensions", {}).get("tls")}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="session")
def echo_app() -> Callable[..., Any]:
    return peer_echo_app


@dataclass(frozen=True)
class Exchange:
    """What one HTTPS GET saw: the server's certificate, the TLS session facts and the raw response."""

    server_cert_der: bytes
    version: str | None
    cipher: str | None
    compression: str | None
    response: bytes

    @property
    def answered(self) -> bool:
        return self.response.startswith(b"HTTP/1.1 200")

    def json(self) -> Any:
        return json.loads(self.response.split(b"\r\n\r\n", 1)[1])


def https_get(port: int, context: ssl.SSLContext, server_hostname: str = "localhost") -> Exchange:
    """One request on a fresh connection; ssl errors from the handshake or the first read propagate."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=server_hostname) as conn,
    ):
        der = conn.getpeercert(binary_form=True) or b""
        version, cipher, compression = conn.version(), conn.cipher(), conn.compression()
        conn.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        response = b""
        while chunk := conn.recv(65536):
            response += chunk
    return Exchange(der, version, cipher[0] if cipher else None, compression, _dechunk(response))


def _dechunk(response: bytes) -> bytes:
    head, sep, body = response.partition(b"\r\n\r\n")
    if not sep or b"transfer-encoding: chunked" not in head.lower():
        return response
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out, body = out + rest[:size], rest[size + 2 :]
    return head + sep + out


@pytest.fixture
def get() -> Callable[..., Exchange]:
    return https_get


def write_client_pair(issued: certs.IssuedCertificate, directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    certs.write_pair(issued, cert, key)
    return cert, key


@pytest.fixture
def client_pair(tmp_path: Path) -> Callable[[certs.IssuedCertificate, str], tuple[Path, Path]]:
    return lambda issued, name: write_client_pair(issued, tmp_path, name)
