"""Security of the real servers over TLS: who is refused, which TLS versions are spoken, what the logs never hold.

The enforcer and the webhook run as processes (``numaguard enforcer`` /
``numaguard webhook``) at log level debug, so anything they might log is
logged.  Every route in the enforcer's OpenAPI document is called (so a new
endpoint is covered without editing this file) with each kind of bad
credential: none, a client certificate from another CA, an expired one from
our CA, a wrong bearer token, and for state-changing calls the *right* token
(tokens are for reads only).  Each must be refused (401/403, or the TLS
handshake fails) and change nothing; the same call with the operator's
certificate then succeeds, so the refusal was about the credential.  Only the
probes are public, and the set of public routes is pinned.

TLS: a client limited to TLS 1.1 (shown to work against a TLS 1.1 server made
here) cannot talk to either service; TLS 1.2 and 1.3 clients can.  Logs: the
token and every private key in the bundle never appear in either service's
log, although the token was sent on many requests.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from reliability_kit import (
    REVIEWS,
    EnforcerNode,
    Pki,
    ServiceProcess,
    WebhookNode,
    allocation_request,
    guaranteed_pod,
    https_client,
    with_main_resources,
)

from enforcer.service import main as enforcer_main
from enforcer.service import settings as enforcer_settings
from servicekit import tls

pytestmark = pytest.mark.timeout(180)

PUBLIC_ROUTES = {("GET", "/healthz"), ("GET", "/readyz")}  # probes: the kubelet calls them without credentials
PUBLIC_TAG = "probes"
WRONG_TOKEN = "wrong-" + "x" * 24
HEADER_TIMEOUT = 1.5


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    operation: dict[str, Any]

    @property
    def changes_state(self) -> bool:
        return self.method != "GET"

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


@dataclass
class Services:
    node: EnforcerNode
    enforcer: ServiceProcess
    webhook: ServiceProcess
    holder: dict[str, Any]  # a pod the enforcer holds: the target of every uid route


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Services]:
    node = EnforcerNode(tmp_path_factory.mktemp("secure-node"), pki)
    config = yaml.safe_load(node.config_file.read_text())
    node.config_file.write_text(yaml.safe_dump({**config, "headerTimeoutSeconds": HEADER_TIMEOUT}))
    holder = guaranteed_pod("holder", 2)
    node.cgroups.add_pod(holder)
    with node.running(log_level="debug") as enforcer:
        with node.writer(enforcer) as http:
            assert http.post("/allocations", json=allocation_request(holder)).status_code == 201
        webhook_node = WebhookNode(tmp_path_factory.mktemp("secure-webhook"), pki, enforcer.base_url)
        with webhook_node.running(log_level="debug") as webhook:
            yield Services(node, enforcer, webhook, holder)


def openapi_routes(services: Services) -> list[Route]:
    """Every route the enforcer's app declares (its OpenAPI document, built in process: it is not served)."""
    app = enforcer_main.create_app(enforcer_settings.load(services.node.config_file, env={}))
    document = app.openapi()
    return [
        Route(method.upper(), path, operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    ]


def protected_routes(services: Services) -> list[Route]:
    return [r for r in openapi_routes(services) if PUBLIC_TAG not in r.operation.get("tags", [])]


def request_for(route: Route, holder: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """A request that would succeed (and change state, for writes) with good credentials."""
    path = route.path.replace("{uid}", holder["metadata"]["uid"])
    schema = route.operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    body_model = str(schema.get("$ref", "")).rsplit("/", 1)[-1]
    if body_model == "AllocationRequest":
        return path, allocation_request(guaranteed_pod("intruder", 1))
    if body_model == "ResizeRequest":
        desired = with_main_resources(holder, {"cpu": "3", "memory": "256Mi"}, {"cpu": "3", "memory": "256Mi"})
        return path, {"pod": desired}
    assert not body_model, f"{route}: no request body known for {body_model}; teach this test"
    return path, None


def send(client: httpx.Client, route: Route, holder: dict[str, Any]) -> httpx.Response:
    path, body = request_for(route, holder)
    return client.request(route.method, path, json=body)


def listing_without_cgroups(services: Services) -> list[dict[str, Any]]:
    with services.node.writer(services.enforcer) as http:
        items = http.get("/allocations").json()["items"]
    return [{k: v for k, v in item.items() if k != "cgroups"} for item in items]


def test_only_the_probes_are_public(services: Services) -> None:
    public = {(r.method, r.path) for r in openapi_routes(services) if PUBLIC_TAG in r.operation.get("tags", [])}
    assert public == PUBLIC_ROUTES
    assert len(protected_routes(services)) >= 7  # the API as documented; fewer means the enumeration broke


BAD_CREDENTIALS = ["no-credentials", "foreign-ca-certificate", "expired-certificate", "wrong-token", "read-token"]


def bad_client(kind: str, services: Services, pki: Pki) -> httpx.Client:
    url = services.enforcer.base_url
    if kind == "no-credentials":
        return https_client(url, pki.ca)
    if kind == "foreign-ca-certificate":
        return https_client(url, pki.ca, cert=pki.foreign_client)
    if kind == "expired-certificate":
        return https_client(url, pki.ca, cert=pki.expired_client)
    if kind == "wrong-token":
        return https_client(url, pki.ca, token=WRONG_TOKEN)
    return https_client(url, pki.ca, token=pki.token)


@pytest.mark.parametrize("kind", BAD_CREDENTIALS)
def test_every_protected_route_refuses_bad_credentials_and_changes_nothing(
    services: Services, pki: Pki, kind: str
) -> None:
    before = listing_without_cgroups(services)
    refused: dict[str, str] = {}
    with bad_client(kind, services, pki) as client:
        for route in protected_routes(services):
            if kind == "read-token" and not route.changes_state:
                continue  # the token is a valid read credential
            try:
                response = send(client, route, services.holder)
            except httpx.TransportError as err:  # the TLS handshake refused the certificate
                assert kind.endswith("certificate"), f"{route} with {kind}: {err!r}"
                refused[str(route)] = "tls"
                continue
            expected = 401 if kind == "no-credentials" else 403
            assert response.status_code == expected, f"{route} with {kind}: {response.status_code} {response.text}"
            assert response.json()["reason"] in ("Unauthorized", "Forbidden")
            refused[str(route)] = str(response.status_code)
    if kind.endswith("certificate"):
        assert set(refused.values()) == {"tls"}, refused  # never let in as an anonymous caller either
    assert refused, "no route was tried"
    assert listing_without_cgroups(services) == before
    with services.node.writer(services.enforcer) as http:
        assert http.get("/readyz").status_code == 200  # refused by policy, not because the server went away


def test_the_operator_certificate_passes_on_every_protected_route(services: Services, pki: Pki) -> None:
    """The control: the same calls, well authenticated, succeed (writes last, release the very last)."""
    order = {"GET": 0, "POST": 1, "DELETE": 2}
    routes = sorted(protected_routes(services), key=lambda r: (order.get(r.method, 1), r.path))
    with (
        services.node.writer(services.enforcer) as http,
        https_client(services.enforcer.base_url, pki.ca, token=pki.token) as reader,
    ):
        for route in routes:
            if not route.changes_state:
                assert send(reader, route, services.holder).status_code == 200, f"{route} with the read token"
            response = send(http, route, services.holder)
            assert response.status_code in (200, 201), f"{route}: {response.status_code} {response.text}"
        intruder = guaranteed_pod("intruder", 1)["metadata"]["uid"]
        assert http.delete(f"/allocations/{intruder}").status_code == 200
        assert http.post("/allocations", json=allocation_request(services.holder)).status_code == 201


def test_the_api_description_is_not_served(services: Services) -> None:
    with services.node.writer(services.enforcer) as http:
        for path in ("/openapi.json", "/docs", "/redoc"):
            assert http.get(path).status_code == 404, path


def test_the_metrics_identity_reads_and_cannot_change_anything(services: Services, pki: Pki) -> None:
    """Finding 6: the Prometheus scrape identity could allocate and delete; now it only reads."""
    before = listing_without_cgroups(services)
    metrics_cert = (pki.bundle.cert("metrics-client"), pki.bundle.key("metrics-client"))
    with https_client(services.enforcer.base_url, pki.ca, cert=metrics_cert) as scraper:
        assert scraper.get("/metrics").status_code == 200
        for route in protected_routes(services):
            if route.changes_state:
                response = send(scraper, route, services.holder)
                assert response.status_code == 403, f"{route}: {response.status_code} {response.text}"
    assert listing_without_cgroups(services) == before


def test_the_webhook_identity_cannot_read_allocations(services: Services, pki: Pki) -> None:
    webhook_cert = (pki.bundle.cert("webhook-client"), pki.bundle.key("webhook-client"))
    with https_client(services.enforcer.base_url, pki.ca, cert=webhook_cert) as webhook:
        assert webhook.get("/allocations").status_code == 403


def test_an_anonymous_100_mb_body_is_refused_unread_and_the_enforcer_stays_small(services: Services, pki: Pki) -> None:
    """Finding 6: one 100 MB POST without credentials got the enforcer OOM-killed; now 413/401 before reading."""
    chunk = b"x" * (1024 * 1024)

    def stream() -> Iterator[bytes]:
        for _ in range(100):
            yield chunk

    with https_client(services.enforcer.base_url, pki.ca) as anonymous:
        declared = anonymous.post("/allocations", content=b"x" * (3 * 1024 * 1024))
        assert declared.status_code == 413
        assert declared.json()["reason"] == "RequestEntityTooLarge"
        try:
            chunked = anonymous.post("/allocations", content=stream())
        except httpx.TransportError:
            pass  # the server answered and closed while we were still sending: equally refused
        else:
            assert chunked.status_code in (401, 413)
    rss_kib = int(
        next(
            line.split()[1]
            for line in Path(f"/proc/{services.enforcer.pid}/status").read_text().splitlines()
            if line.startswith("VmHWM:")
        )
    )
    assert rss_kib < 200 * 1024, f"peak RSS {rss_kib} KiB"
    with services.node.writer(services.enforcer) as http:
        assert http.get("/readyz").status_code == 200


def test_a_connection_that_never_completes_its_request_head_is_closed(services: Services, pki: Pki) -> None:
    """Slow-loris: a client that sends part of a request head and stops is disconnected by the server."""
    context = tls.client_context(pki.ca)
    raw = socket.create_connection(("127.0.0.1", services.enforcer.port), timeout=30)
    with context.wrap_socket(raw, server_hostname="localhost") as conn:
        conn.sendall(b"POST /allocations HTTP/1.1\r\nHost: localhost\r\n")
        received = b"closed without close_notify"
        with contextlib.suppress(ssl.SSLEOFError, ConnectionResetError):
            received = conn.recv(1)  # closed by the server (EOF), not by our 30 s socket timeout
        assert received in (b"", b"closed without close_notify")


# -- TLS versions ---------------------------------------------------------------------------------


def tls11_client_context(pki: Pki) -> ssl.SSLContext:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # OpenSSL 3 refuses TLS 1.1 at the default security level
    context.load_verify_locations(str(pki.ca))
    return context


def handshake(port: int, context: ssl.SSLContext) -> str | None:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as conn,
    ):
        return conn.version()


@pytest.fixture(scope="module")
def tls11_server(pki: Pki) -> Iterator[int]:
    """A TLS 1.1-only server: proof that the TLS 1.1 client below really speaks TLS 1.1."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    context.load_cert_chain(str(pki.bundle.cert("enforcer")), str(pki.bundle.key("enforcer")))
    listener = socket.create_server(("127.0.0.1", 0))

    def accept_one() -> None:
        conn, _ = listener.accept()
        with conn, context.wrap_socket(conn, server_side=True):
            pass

    thread = threading.Thread(target=accept_one, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    thread.join(timeout=10)
    listener.close()


def test_a_tls11_client_is_refused_by_both_services(services: Services, pki: Pki, tls11_server: int) -> None:
    context = tls11_client_context(pki)
    assert handshake(tls11_server, context) == "TLSv1.1"  # the client is able to speak TLS 1.1
    for service in (services.enforcer, services.webhook):
        with pytest.raises(ssl.SSLError):
            handshake(service.port, context)


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["TLSv1.2", "TLSv1.3"])
def test_tls12_and_tls13_clients_are_served(services: Services, pki: Pki, version: ssl.TLSVersion) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = context.maximum_version = version
    context.load_verify_locations(str(pki.ca))
    for service in (services.enforcer, services.webhook):
        assert handshake(service.port, context) == ("TLSv1.2" if version == ssl.TLSVersion.TLSv1_2 else "TLSv1.3")


# -- logs -----------------------------------------------------------------------------------------------


def key_material(bundle_dir: Path) -> list[str]:
    """Lines of every private key's base64 body (any one of them in a log would leak the key)."""
    lines = []
    for key in sorted(bundle_dir.glob("*.key")):
        body = [line for line in key.read_text().splitlines() if line and not line.startswith("-----")]
        lines += [line for line in body if len(line) >= 16]
    return lines


def test_no_token_or_private_key_appears_in_either_services_log(services: Services, pki: Pki) -> None:
    uid = services.holder["metadata"]["uid"]
    with https_client(services.enforcer.base_url, pki.ca, token=pki.token) as reader:
        for path in ("/allocations", f"/allocations/{uid}", "/topology", "/metrics", "/allocations/unknown"):
            reader.get(path, params={"namespace": "reliability"} if path == "/allocations" else None)
        reader.post("/allocations", json=allocation_request(guaranteed_pod("token-write", 1)))  # 403, logged?
    with https_client(services.webhook.base_url, pki.ca, token=pki.token) as apiserver:
        for path, review in (("/validate", "create-validate-burstable-web"), ("/mutate", "binding-burstable-web")):
            answer = apiserver.post(path, content=(REVIEWS / f"{review}.json").read_bytes())
            assert answer.status_code == 200 and answer.json()["response"]["allowed"] is True, answer.text
        malformed = apiserver.post("/mutate", content=b'{"Authorization": "Bearer ' + pki.token.encode() + b'"}')
        assert malformed.status_code == 400
    logs = {"enforcer": services.enforcer.log_text(), "webhook": services.webhook.log_text()}
    assert '"level":"debug"' in logs["enforcer"] and "pod allocated" in logs["enforcer"]  # the log is really there
    assert "bad admission request" in logs["webhook"]
    secrets = {"token": pki.token}
    secrets.update({f"key line {i}": line for i, line in enumerate(key_material(pki.bundle.directory))})
    for service, text in logs.items():
        assert "PRIVATE KEY" not in text, f"{service} logged a private key"
        leaked = [name for name, secret in secrets.items() if secret in text]
        assert leaked == [], f"{service} logged {leaked}"
