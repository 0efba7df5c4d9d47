"""Many clients at once over mutual TLS: decisions are serialised, nothing is handed out twice."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
from service_fixtures import (
    allocation_request,
    bundle_files,
    exclusive_cpus,
    guaranteed_pod,
    make_settings,
    running_enforcer,
)

from servicekit import certs, tls

CLIENTS = 16
ROUNDS = 4


def churn(base_url: str, bundle: certs.Bundle, index: int, results: list[Any]) -> None:
    """Allocate a new pod, then release the previous one, ROUNDS times; keep the last."""
    context = tls.client_context(
        bundle.cert("ca"), cert=bundle.cert("webhook-client"), key=bundle.key("webhook-client")
    )
    statuses: list[int] = []
    with httpx.Client(base_url=base_url, verify=context, timeout=30) as client:
        held: str | None = None
        for round_ in range(ROUNDS):
            body = allocation_request(guaranteed_pod(f"c{index}-r{round_}", 1 + index % 2, "256Mi"))
            response = client.post("/allocations", json=body)
            statuses.append(response.status_code)
            if response.status_code == 201:
                if held is not None:
                    statuses.append(client.delete(f"/allocations/{held}").status_code)
                held = response.json()["uid"]
    results[index] = statuses


def test_sixteen_clients_allocating_and_releasing_never_share_a_cpu(tmp_path: Path, bundle: certs.Bundle) -> None:
    config = make_settings(tmp_path / "state", **bundle_files(bundle, tmp_path))
    with running_enforcer(config) as enforcer:
        results: list[Any] = [None] * CLIENTS
        threads = [threading.Thread(target=churn, args=(enforcer.base_url, bundle, i, results)) for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        statuses = [status for per_client in results for status in per_client]
        assert set(statuses) <= {200, 201, 403}  # 403: the node was full at that moment (OutOfcpu)
        clients_holding_a_pod = sum(1 for per_client in results if 201 in per_client)
        assert clients_holding_a_pod > CLIENTS // 2
        assert enforcer.service.check() == []

        context = tls.client_context(
            bundle.cert("ca"), cert=bundle.cert("operator-client"), key=bundle.key("operator-client")
        )
        with httpx.Client(base_url=enforcer.base_url, verify=context) as client:
            items = client.get("/allocations").json()["items"]
        held = [exclusive_cpus(item) for item in items]
        assert sum(len(cpus) for cpus in held) == len(set().union(*held))
        assert not set().union(*held) & {0, 16}  # reserved CPUs are never exclusive
        assert len(items) == clients_holding_a_pod
