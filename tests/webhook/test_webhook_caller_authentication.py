"""Only the kube-apiserver may send admission reviews (finding 5 of issue 12).

Before: the webhook authenticated nobody, and it holds write rights on every
enforcer, so an anonymous caller on the network had a 14-CPU pod allocated
through ``/mutate``.  Now, with ``client_ca`` (the CA of the apiserver's
client certificate, the one its AdmissionConfiguration ``kubeConfigFile``
names), ``/mutate`` and ``/validate`` refuse callers without that
certificate, with another CA's, without the clientAuth usage, or (with
``allowed_clients``) with another name; and the node is never asked.  The
probes stay open for the kubelet.  Real uvicorn, real TLS, on loopback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from webhook_testkit import FakeEnforcer, review_bytes

from servicekit import certs, serve, tls
from webhook import main, settings

pytestmark = pytest.mark.timeout(120)

APISERVER = "kube-apiserver-webhook-client"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Our bundle plus: the apiserver's client pair (from a CA of its own), a stranger's, a serverAuth-only one."""
    directory = tmp_path_factory.mktemp("caller-pki")
    bundle = certs.issue_bundle(directory / "bundle")
    apiserver_ca = certs.create_ca("cluster-client-ca")
    certs.write_pair(apiserver_ca, directory / "client-ca.crt", directory / "client-ca.key")
    pairs: dict[str, tuple[Path, Path]] = {
        "bundle-ca": (bundle.cert("ca"), bundle.key("ca")),
        "webhook": (bundle.cert("webhook"), bundle.key("webhook")),
        "client-ca": (directory / "client-ca.crt", directory / "client-ca.key"),
    }
    issued = {
        "apiserver": certs.issue_client_certificate(apiserver_ca, APISERVER),
        "other-name": certs.issue_client_certificate(apiserver_ca, "system:anonymous-tool"),
        "stranger": certs.issue_client_certificate(certs.create_ca("elsewhere"), APISERVER),
        "server-only": certs.issue_serving_certificate(apiserver_ca, APISERVER, dns_names=("x.example",)),
    }
    for name, pair in issued.items():
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        certs.write_pair(pair, cert, key)
        pairs[name] = (cert, key)
    return pairs


@pytest.fixture
def fake() -> FakeEnforcer:
    return FakeEnforcer()


@pytest.fixture
def webhook(pki: dict[str, tuple[Path, Path]], fake: FakeEnforcer, tmp_path: Path) -> Iterator[serve.BackgroundServer]:
    enforcers = tmp_path / "enforcers.json"
    enforcers.write_text(json.dumps({"node-a": "https://node-a.enforcers.test:8443"}))
    config = settings.load(
        env={},
        overrides={
            "listen": "127.0.0.1:0",
            "tls_cert": pki["webhook"][0],
            "tls_key": pki["webhook"][1],
            "client_ca": pki["client-ca"][0],
            "allowed_clients": [APISERVER],
            "enforcers_file": enforcers,
            "enforcer_retries": 0,
        },
    )
    files = main.server_tls_files(config)
    assert files is not None
    app = main.create_app(config, components=main.Components(enforcer_transport=fake.transport()))
    with serve.BackgroundServer(app, cert_reloader=tls.ReloadingServerContext(files)) as server:
        yield server


def client(pki: dict[str, tuple[Path, Path]], identity: str | None) -> httpx.Client:
    ca = pki["bundle-ca"][0]
    context = (
        tls.client_context(ca, cert=pki[identity][0], key=pki[identity][1]) if identity else tls.client_context(ca)
    )
    return httpx.Client(verify=context, timeout=10, headers={"Connection": "close"}, trust_env=False)


def post(http: httpx.Client, port: int, path: str, name: str) -> httpx.Response:
    return http.post(f"https://localhost:{port}{path}", content=review_bytes(name))


def test_the_apiserver_certificate_is_served(
    pki: dict[str, tuple[Path, Path]], webhook: serve.BackgroundServer, fake: FakeEnforcer
) -> None:
    with client(pki, "apiserver") as http:
        assert post(http, webhook.port, "/validate", "create-validate-tightly-coupled-database").status_code == 200
        response = post(http, webhook.port, "/mutate", "binding-tightly-coupled-database")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()["response"]
    assert body["allowed"] is True
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    ("identity", "status", "reason"),
    [(None, 401, "Unauthorized"), ("other-name", 403, "Forbidden")],
    ids=["anonymous", "another-name-of-the-client-ca"],
)
def test_other_callers_are_refused_and_no_node_is_asked(
    pki: dict[str, tuple[Path, Path]],
    webhook: serve.BackgroundServer,
    fake: FakeEnforcer,
    identity: str | None,
    status: int,
    reason: str,
) -> None:
    with client(pki, identity) as http:
        for path, name in (
            ("/validate", "create-validate-tightly-coupled-database"),
            ("/mutate", "binding-tightly-coupled-database"),
            ("/validate", "resize-legal-burstable-web"),
        ):
            response = post(http, webhook.port, path, name)
            assert response.status_code == status, response.text
            assert response.json()["reason"] == reason
        assert http.get(f"https://localhost:{webhook.port}/healthz").status_code == 200  # probes stay open
    assert fake.requests == []


@pytest.mark.parametrize("identity", ["stranger", "server-only"])
def test_certificates_of_another_ca_or_without_client_auth_fail_the_handshake(
    pki: dict[str, tuple[Path, Path]], webhook: serve.BackgroundServer, fake: FakeEnforcer, identity: str
) -> None:
    with client(pki, identity) as http, pytest.raises(httpx.TransportError):
        post(http, webhook.port, "/mutate", "binding-tightly-coupled-database")
    assert fake.requests == []
