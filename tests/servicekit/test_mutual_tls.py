"""A real uvicorn server on loopback with our TLS contexts: who gets in, what the app sees, reload.

Rejections are asserted as "no HTTP response": depending on the TLS version and
the event loop, a refused handshake surfaces as an ssl error at connect, an ssl
error at the first read, or a closed connection.  The positive cases run the
same code path and do get a response, so a server that wrongly accepted would
fail these tests.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509

from servicekit import certs, serve, tls


def serial_of(der: bytes) -> int:
    return x509.load_der_x509_certificate(der).serial_number


def refused(get: Callable[..., Any], port: int, context: ssl.SSLContext) -> bool:
    try:
        exchange = get(port, context)
    except (ssl.SSLError, ConnectionError):
        return True
    return not exchange.answered


@pytest.fixture(scope="module")
def server(bundle: certs.Bundle, echo_app: Any) -> Iterator[serve.BackgroundServer]:
    context = tls.server_context(tls.TLSFiles.in_directory(bundle.directory, "enforcer"))
    with serve.BackgroundServer(echo_app, ssl_context=context) as running:
        yield running


@pytest.fixture(scope="module")
def ca(bundle: certs.Bundle) -> certs.IssuedCertificate:
    return certs.load_pair(bundle.cert("ca"), bundle.key("ca"))


def client(bundle: certs.Bundle, role: str | None = None) -> ssl.SSLContext:
    if role is None:
        return tls.client_context(bundle.cert("ca"))
    return tls.client_context(bundle.cert("ca"), cert=bundle.cert(role), key=bundle.key(role))


def test_client_with_a_certificate_from_our_ca_is_seen_by_the_app(
    server: serve.BackgroundServer, bundle: certs.Bundle, get: Callable[..., Any]
) -> None:
    seen = get(server.port, client(bundle, "webhook-client")).json()
    assert seen["peer"]["common_name"] == "numaguard-webhook"
    assert seen["peer"]["issuer"]["commonName"] == "numaguard-ca"
    assert seen["tls"]["client_cert_name"] == "CN=numaguard-webhook,O=numaguard"
    assert seen["tls"]["tls_version"] == 0x0304
    presented = x509.load_pem_x509_certificate(seen["tls"]["client_cert_chain"][0].encode())
    assert presented == x509.load_pem_x509_certificate(bundle.cert("webhook-client").read_bytes())


def test_client_without_a_certificate_completes_the_handshake_but_has_no_peer(
    server: serve.BackgroundServer, bundle: certs.Bundle, get: Callable[..., Any]
) -> None:
    seen = get(server.port, client(bundle)).json()
    assert seen["peer"] is None
    assert seen["tls"]["client_cert_chain"] == []
    assert seen["tls"]["client_cert_name"] is None


def test_httpx_client_with_our_context_reaches_the_app_as_its_identity(
    server: serve.BackgroundServer, bundle: certs.Bundle
) -> None:
    with httpx.Client(verify=client(bundle, "operator-client")) as http:
        body = http.get(f"https://localhost:{server.port}/").json()
    assert body["peer"]["common_name"] == "numaguard-operator"


def test_certificate_from_another_ca_is_refused(
    server: serve.BackgroundServer,
    bundle: certs.Bundle,
    get: Callable[..., Any],
    client_pair: Callable[..., tuple[Path, Path]],
) -> None:
    stranger = certs.issue_client_certificate(certs.create_ca("other-ca"), "numaguard-webhook")
    cert, key = client_pair(stranger, "stranger")
    assert refused(get, server.port, tls.client_context(bundle.cert("ca"), cert=cert, key=key))


def test_expired_certificate_from_our_ca_is_refused(
    server: serve.BackgroundServer,
    bundle: certs.Bundle,
    ca: certs.IssuedCertificate,
    get: Callable[..., Any],
    client_pair: Callable[..., tuple[Path, Path]],
) -> None:
    now = datetime.datetime.now(datetime.UTC)
    validity = certs.Validity(not_before=now - datetime.timedelta(days=30), not_after=now - datetime.timedelta(days=1))
    cert, key = client_pair(certs.issue_client_certificate(ca, "numaguard-webhook", validity=validity), "expired")
    assert refused(get, server.port, tls.client_context(bundle.cert("ca"), cert=cert, key=key))


def test_server_certificate_is_refused_by_a_client_that_trusts_another_ca(
    server: serve.BackgroundServer, get: Callable[..., Any], tmp_path: Path
) -> None:
    other = tmp_path / "other-ca.crt"
    certs.write_private_file(other, certs.create_ca("other-ca").certificate_pem())
    with pytest.raises(ssl.SSLCertVerificationError):
        get(server.port, tls.client_context(other))


def legacy_client(bundle: certs.Bundle, version: ssl.TLSVersion) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(bundle.cert("ca"))
    context.minimum_version = version
    context.maximum_version = version
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let OpenSSL 3 offer TLS 1.1 at all
    return context


def test_tls_1_1_client_is_refused_while_the_same_client_at_tls_1_2_is_served(
    server: serve.BackgroundServer, bundle: certs.Bundle, get: Callable[..., Any]
) -> None:
    with pytest.warns(DeprecationWarning):
        old = legacy_client(bundle, ssl.TLSVersion.TLSv1_1)
    try:
        outcome = get(server.port, old)
    except ssl.SSLError as err:
        assert err.reason != "NO_PROTOCOLS_AVAILABLE", "the client never offered TLS 1.1"
    else:
        pytest.fail(f"TLS 1.1 was served: {outcome.version}")
    assert get(server.port, legacy_client(bundle, ssl.TLSVersion.TLSv1_2)).version == "TLSv1.2"


def test_tls_1_2_sessions_use_forward_secret_aead_ciphers_without_compression(
    server: serve.BackgroundServer, bundle: certs.Bundle, get: Callable[..., Any]
) -> None:
    context = client(bundle)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    exchange = get(server.port, context)
    assert exchange.cipher.startswith("ECDHE-")
    assert "GCM" in exchange.cipher or "CHACHA20" in exchange.cipher
    assert exchange.compression is None


def test_server_requiring_client_certificates_refuses_an_anonymous_client(
    bundle: certs.Bundle, get: Callable[..., Any], echo_app: Any
) -> None:
    context = tls.server_context(tls.TLSFiles.in_directory(bundle.directory, "enforcer"), require_client_cert=True)
    with serve.BackgroundServer(echo_app, ssl_context=context) as strict:
        assert refused(get, strict.port, client(bundle))
        assert get(strict.port, client(bundle, "webhook-client")).answered


def test_requiring_client_certificates_without_a_ca_is_a_configuration_error(bundle: certs.Bundle) -> None:
    files = tls.TLSFiles.in_directory(bundle.directory, "enforcer", ca=None)
    with pytest.raises(tls.TLSConfigError):
        tls.server_context(files, require_client_cert=True)


def test_missing_certificate_file_is_a_configuration_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(tls.TLSConfigError, match="missing.crt"):
        tls.server_context(tls.TLSFiles(tmp_path / "missing.crt", tmp_path / "missing.key"))


def test_peer_certificate_is_none_for_a_scope_without_tls_facts() -> None:
    assert tls.peer_certificate({"type": "http"}) is None
    assert tls.peer_certificate({"type": "http", "extensions": {"http.response.trailers": {}}}) is None


# -- reload without restart -----------------------------------------------------------


@pytest.fixture
def served_dir(tmp_path: Path) -> certs.Bundle:
    return certs.issue_bundle(tmp_path)


@pytest.fixture(params=["asyncio", "uvloop"])
def reloading(
    request: pytest.FixtureRequest, served_dir: certs.Bundle, echo_app: Any
) -> Iterator[tuple[serve.BackgroundServer, tls.ReloadingServerContext]]:
    """Both event loops uvicorn may pick: each has its own SSL transport, both must see the reload."""
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    reloader = tls.ReloadingServerContext(tls.TLSFiles.in_directory(served_dir.directory, "enforcer"))
    with serve.BackgroundServer(echo_app, cert_reloader=reloader, loop=request.param) as running:
        yield running, reloader


def test_new_connections_present_the_rewritten_certificate_after_a_reload(
    reloading: tuple[serve.BackgroundServer, tls.ReloadingServerContext],
    served_dir: certs.Bundle,
    get: Callable[..., Any],
) -> None:
    server, reloader = reloading
    before = serial_of(get(server.port, client(served_dir)).server_cert_der)
    ca = certs.load_pair(served_dir.cert("ca"), served_dir.key("ca"))
    rotated = certs.issue_serving_certificate(ca, "numaguard-enforcer", dns_names=["localhost"])
    certs.write_pair(rotated, served_dir.cert("enforcer"), served_dir.key("enforcer"))

    assert server.call(reloader.check) is True
    after = serial_of(get(server.port, client(served_dir)).server_cert_der)
    assert before != after == rotated.certificate.serial_number
    assert reloader.reloads == 1


def test_check_without_changes_reloads_nothing(
    reloading: tuple[serve.BackgroundServer, tls.ReloadingServerContext],
) -> None:
    server, reloader = reloading
    assert server.call(reloader.check) is False
    assert reloader.reloads == 0


def test_rewriting_identical_bytes_is_not_a_reload(
    reloading: tuple[serve.BackgroundServer, tls.ReloadingServerContext], served_dir: certs.Bundle
) -> None:
    server, reloader = reloading
    for path in (served_dir.cert("enforcer"), served_dir.key("enforcer")):
        certs.write_private_file(path, path.read_bytes())
    assert server.call(reloader.check) is False
    assert reloader.reloads == 0


def test_a_certificate_without_its_key_is_not_loaded_and_the_old_one_keeps_serving(
    reloading: tuple[serve.BackgroundServer, tls.ReloadingServerContext],
    served_dir: certs.Bundle,
    get: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, reloader = reloading
    before = serial_of(get(server.port, client(served_dir)).server_cert_der)
    ca = certs.load_pair(served_dir.cert("ca"), served_dir.key("ca"))
    half_written = certs.issue_serving_certificate(ca, "numaguard-enforcer", dns_names=["localhost"])
    certs.write_private_file(served_dir.cert("enforcer"), half_written.certificate_pem())  # key not yet replaced

    assert server.call(reloader.check) is False
    assert serial_of(get(server.port, client(served_dir)).server_cert_der) == before
    assert any(r.getMessage() == "tls reload failed, keeping the previous certificate" for r in caplog.records)

    certs.write_private_file(served_dir.key("enforcer"), half_written.private_key_pem())  # the update completes
    assert server.call(reloader.check) is True
    assert serial_of(get(server.port, client(served_dir)).server_cert_der) == half_written.certificate.serial_number


def test_clients_of_a_rotated_ca_are_accepted_after_the_ca_file_is_reloaded(
    reloading: tuple[serve.BackgroundServer, tls.ReloadingServerContext],
    served_dir: certs.Bundle,
    get: Callable[..., Any],
    client_pair: Callable[..., tuple[Path, Path]],
) -> None:
    server, reloader = reloading
    new_ca = certs.create_ca("numaguard-ca-2")
    cert, key = client_pair(certs.issue_client_certificate(new_ca, "numaguard-webhook"), "rotated-client")
    context = tls.client_context(served_dir.cert("ca"), cert=cert, key=key)
    assert refused(get, server.port, context)

    old_ca = served_dir.cert("ca").read_bytes()
    certs.write_private_file(served_dir.cert("ca"), old_ca + new_ca.certificate_pem())
    assert server.call(reloader.check) is True
    assert get(server.port, context).json()["peer"]["issuer"]["commonName"] == "numaguard-ca-2"


def test_watch_checks_after_every_interval_until_cancelled(served_dir: certs.Bundle) -> None:
    reloader = tls.ReloadingServerContext(tls.TLSFiles.in_directory(served_dir.directory, "enforcer"))
    ca = certs.load_pair(served_dir.cert("ca"), served_dir.key("ca"))
    rotated = certs.issue_serving_certificate(ca, "numaguard-enforcer", dns_names=["localhost"])
    certs.write_pair(rotated, served_dir.cert("enforcer"), served_dir.key("enforcer"))
    waited: list[float] = []

    async def clock(seconds: float) -> None:  # the watch loop's only clock: two ticks, then shutdown
        waited.append(seconds)
        if len(waited) > 2:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(reloader.watch(5.0, sleep=clock))
    assert waited == [5.0, 5.0, 5.0]
    assert reloader.reloads == 1  # the second tick found nothing new


def test_watching_runs_the_watch_task_only_inside_the_block(served_dir: certs.Bundle) -> None:
    reloader = tls.ReloadingServerContext(tls.TLSFiles.in_directory(served_dir.directory, "enforcer"))

    async def lifespan() -> tuple[bool, bool]:
        def watch_running() -> bool:
            return any(t.get_name() == "tls-certificate-reload" and not t.done() for t in asyncio.all_tasks())

        async with reloader.watching(3600):
            inside = watch_running()
        return inside, watch_running()

    assert asyncio.run(lifespan()) == (True, False)
