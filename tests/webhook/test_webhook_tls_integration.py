"""The webhook under uvicorn with real TLS, calling a fake enforcer over mutual TLS on loopback.

Certificates come from ``servicekit.certs`` (one CA: the webhook's serving
certificate, its client certificate, the enforcer's serving certificate).
The webhook is built by ``create_app(settings)`` with no test components: the
enforcer client, its SSL context and the static directory are the production
wiring.  The enforcer is a small FastAPI app written here that insists on a
verified client certificate and answers with the contract fake.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response
from webhook_testkit import FakeEnforcer, apply_patch, decoded_patch, load_review, review_bytes

from servicekit import certs, serve, tls
from shared import contract
from webhook import main, settings

pytestmark = pytest.mark.timeout(120)


def fake_enforcer_app(fake: FakeEnforcer, peers: list[str]) -> FastAPI:
    app = FastAPI()

    @app.post("/allocations")
    @app.post("/allocations/{uid}/resize")
    async def answer(request: Request) -> Response:
        peer = tls.peer_certificate(request.scope)
        if peer is None:
            body = contract.ErrorBody(reason="Unauthorized", message="a client certificate is required")
            return Response(body.to_json(), status_code=401, media_type="application/json")
        peers.append(peer["common_name"] or "")
        status, text = fake.answer(
            "POST", request.url.path, dict(request.query_params), json.loads(await request.body())
        )
        return Response(text, status_code=status, media_type="application/json")

    return app


@pytest.fixture(scope="module", autouse=True)
def _restore_uvicorn_log_levels() -> Iterator[None]:
    """uvicorn's Config sets its loggers' levels process-wide; leave them as other tests found them."""
    names = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
    saved = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> certs.Bundle:
    return certs.issue_bundle(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def fake() -> FakeEnforcer:
    return FakeEnforcer()


@pytest.fixture(scope="module")
def peers() -> list[str]:
    return []


@pytest.fixture(scope="module")
def enforcer_port(bundle: certs.Bundle, fake: FakeEnforcer, peers: list[str]) -> Iterator[int]:
    files = tls.TLSFiles(bundle.cert("enforcer"), bundle.key("enforcer"), bundle.cert("ca"))
    context = tls.server_context(files, require_client_cert=True)
    with serve.BackgroundServer(fake_enforcer_app(fake, peers), ssl_context=context) as server:
        yield server.port


def start_webhook(bundle: certs.Bundle, enforcer_port: int, tmp: Path, **overrides: Any) -> serve.BackgroundServer:
    enforcers = tmp / "enforcers.json"
    enforcers.write_text(json.dumps({"node-a": f"https://127.0.0.1:{enforcer_port}"}))
    config = settings.load(
        env={},
        overrides={
            "listen": "127.0.0.1:0",
            "tls_cert": bundle.cert("webhook"),
            "tls_key": bundle.key("webhook"),
            "client_cert": bundle.cert("webhook-client"),
            "client_key": bundle.key("webhook-client"),
            "enforcer_ca": bundle.cert("ca"),
            "enforcers_file": enforcers,
            **overrides,
        },
    )
    reloader = tls.ReloadingServerContext(tls.TLSFiles(bundle.cert("webhook"), bundle.key("webhook")))
    return serve.BackgroundServer(main.create_app(config), cert_reloader=reloader)


@pytest.fixture
def apiserver(bundle: certs.Bundle) -> Iterator[httpx.Client]:
    """The apiserver's side: HTTPS verifying the webhook's serving certificate against the caBundle."""
    # Connection: close, so stopping a webhook never waits for an idle keep-alive connection to drain
    with httpx.Client(
        verify=tls.client_context(bundle.cert("ca")), timeout=10, headers={"Connection": "close"}
    ) as client:
        yield client


def review(client: httpx.Client, port: int, path: str, name: str) -> dict[str, Any]:
    response = client.post(f"https://localhost:{port}{path}", content=review_bytes(name))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()["response"]
    return body


def test_a_binding_over_mutual_tls_records_the_enforcers_allocation(
    bundle: certs.Bundle,
    enforcer_port: int,
    fake: FakeEnforcer,
    peers: list[str],
    apiserver: httpx.Client,
    tmp_path: Path,
) -> None:
    with start_webhook(bundle, enforcer_port, tmp_path) as webhook:
        review(apiserver, webhook.port, "/validate", "create-validate-tightly-coupled-database")
        response = review(apiserver, webhook.port, "/mutate", "binding-tightly-coupled-database")
    assert response["allowed"] is True
    binding = load_review("binding-tightly-coupled-database")["request"]["object"]
    annotations = apply_patch(binding, decoded_patch(response))["metadata"]["annotations"]
    assert annotations[contract.NODE_ANNOTATION] == "node-a"
    assert (
        contract.Allocation.model_validate_json(annotations[contract.ALLOCATION_ANNOTATION]).uid
        == binding["metadata"]["uid"]
    )
    assert peers[-1] == certs.WEBHOOK_CLIENT_IDENTITY


def test_a_refusal_over_mutual_tls_denies_the_binding_with_the_nodes_reason(
    bundle: certs.Bundle, enforcer_port: int, fake: FakeEnforcer, apiserver: httpx.Client, tmp_path: Path
) -> None:
    fake.refuse["ml-workload"] = ("TopologyAffinityError", "Resources cannot be allocated with Topology locality")
    try:
        with start_webhook(bundle, enforcer_port, tmp_path) as webhook:
            review(apiserver, webhook.port, "/validate", "create-validate-ml-workload")
            response = review(apiserver, webhook.port, "/mutate", "binding-ml-workload")
    finally:
        fake.refuse.clear()
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["reason"] == "TopologyAffinityError"


def test_without_a_client_certificate_the_enforcer_refuses_the_handshake_and_the_binding_is_denied(
    bundle: certs.Bundle, enforcer_port: int, peers: list[str], apiserver: httpx.Client, tmp_path: Path
) -> None:
    before = len(peers)
    with start_webhook(bundle, enforcer_port, tmp_path, client_cert=None, client_key=None) as webhook:
        review(apiserver, webhook.port, "/validate", "create-validate-tightly-coupled-database")
        response = review(apiserver, webhook.port, "/mutate", "binding-tightly-coupled-database")
    assert response["allowed"] is False
    assert response["status"]["code"] == 503
    assert "the enforcer on node node-a is unreachable" in response["status"]["message"]
    assert len(peers) == before


def test_the_webhook_serves_only_tls_its_certificate_names_localhost(
    bundle: certs.Bundle, enforcer_port: int, apiserver: httpx.Client, tmp_path: Path
) -> None:
    with start_webhook(bundle, enforcer_port, tmp_path) as webhook:
        assert apiserver.get(f"https://localhost:{webhook.port}/healthz").json() == {"status": "ok"}
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{webhook.port}/healthz", timeout=5)
