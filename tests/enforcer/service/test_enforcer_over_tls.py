"""The real enforcer under uvicorn, over mutual TLS with servicekit certificates, talked to with httpx."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from service_fixtures import (
    SEED_PODS,
    allocation_request,
    bundle_files,
    clients,
    exclusive_cpus,
    guaranteed_pod,
    make_settings,
    pod,
    running_enforcer,
)

from enforcer.service.settings import EnforcerSettings
from numaguard_cli import main as cli
from servicekit import certs


@pytest.fixture
def config(tmp_path: Path, bundle: certs.Bundle) -> EnforcerSettings:
    return make_settings(tmp_path / "state", **bundle_files(bundle, tmp_path))


def items_without_cgroups(listing: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "cgroups"} for item in listing["items"]]


def test_the_seed_pods_are_allocated_read_and_released(config: EnforcerSettings, bundle: certs.Bundle) -> None:
    with running_enforcer(config) as enforcer, clients(bundle, enforcer.base_url) as c:
        created = [c.writer.post("/allocations", json=allocation_request(pod(name))) for name in SEED_PODS]
        assert [r.status_code for r in created] == [201] * len(SEED_PODS)
        listing = c.reader.get("/allocations").json()
        assert sorted(item["name"] for item in listing["items"]) == sorted(r.json()["name"] for r in created)
        held = [exclusive_cpus(r.json()) for r in created]
        assert sum(len(cpus) for cpus in held) == len(set().union(*held))
        database = created[0].json()
        assert c.reader.get(f"/allocations/{database['uid']}").json()["containers"]["database"]["cpus"] == "1-3,17-19"
        for r in created:
            assert c.writer.delete(f"/allocations/{r.json()['uid']}").json() == {
                "released": True,
                "resizesApplied": [],
            }
        assert c.reader.get("/allocations").json()["items"] == []
        assert enforcer.service.check() == []


def test_a_restarted_enforcer_holds_the_same_allocations(config: EnforcerSettings, bundle: certs.Bundle) -> None:
    with running_enforcer(config) as enforcer, clients(bundle, enforcer.base_url) as c:
        for name in SEED_PODS:
            c.writer.post("/allocations", json=allocation_request(pod(name)))
        before = c.reader.get("/allocations").json()
        counters_before = [line for line in c.reader.get("/metrics").text.splitlines() if "resource_manager" in line]
    with running_enforcer(config) as enforcer, clients(bundle, enforcer.base_url) as c:
        after = c.reader.get("/allocations").json()
        counters_after = [line for line in c.reader.get("/metrics").text.splitlines() if "resource_manager" in line]
        assert items_without_cgroups(after) == items_without_cgroups(before)
        assert counters_after == counters_before
        again = c.writer.post("/allocations", json=allocation_request(pod(SEED_PODS[0])))
        assert again.status_code == 200
        held = set().union(*(exclusive_cpus(item) for item in before["items"]))
        twelve = c.writer.post("/allocations", json=allocation_request(guaranteed_pod("twelve-cpus", 12)))
        assert twelve.status_code == 201
        assert exclusive_cpus(twelve.json()).isdisjoint(held)


def test_state_changing_calls_need_a_client_certificate(config: EnforcerSettings, bundle: certs.Bundle) -> None:
    with running_enforcer(config) as enforcer, clients(bundle, enforcer.base_url) as c:
        body = allocation_request(pod("burstable-web"))
        anonymous = c.anonymous.post("/allocations", json=body)
        assert anonymous.status_code == 401
        assert anonymous.json()["reason"] == "Unauthorized"
        assert anonymous.headers["www-authenticate"] == "Bearer"
        with_token = c.reader.post("/allocations", json=body)
        assert with_token.status_code == 403
        assert with_token.json()["reason"] == "Forbidden"
        assert c.reader.delete("/allocations/anything").status_code == 403
        assert c.reader.get("/allocations").json()["items"] == []


def test_reads_accept_the_token_and_refuse_a_wrong_one(config: EnforcerSettings, bundle: certs.Bundle) -> None:
    with running_enforcer(config) as enforcer, clients(bundle, enforcer.base_url) as c:
        assert c.reader.get("/allocations").status_code == 200
        assert c.reader.get("/topology").status_code == 200
        assert c.writer.get("/allocations").status_code == 200
        assert c.wrong_token.get("/allocations").status_code == 403
        assert c.anonymous.get("/allocations").status_code == 401
        assert c.anonymous.get("/metrics").status_code == 401
        assert c.anonymous.get("/readyz").status_code == 200


def corrupt(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def test_a_corrupt_state_file_keeps_reads_refuses_writes_until_recovered(
    config: EnforcerSettings, bundle: certs.Bundle
) -> None:
    with running_enforcer(config) as enforcer, clients(bundle, enforcer.base_url) as c:
        database = c.writer.post("/allocations", json=allocation_request(pod("tightly-coupled-database"))).json()
    with running_enforcer(config):
        pass  # each start compacts the journal into a new base; the base it replaces becomes the backup
    with running_enforcer(config) as enforcer, clients(bundle, enforcer.base_url) as c:
        c.writer.post("/allocations", json=allocation_request(pod("ml-workload")))
    corrupt(config.state_path)

    with running_enforcer(config) as enforcer, clients(bundle, enforcer.base_url) as c:
        ready = c.anonymous.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["reason"] == "CheckpointCorrupt"
        listing = c.reader.get("/allocations")
        assert listing.status_code == 200
        assert listing.json()["state"]["available"] is False
        refused = c.writer.post("/allocations", json=allocation_request(pod("burstable-web")))
        assert refused.status_code == 503
        assert refused.json()["reason"] == "StateUnavailable"
        assert c.writer.delete(f"/allocations/{database['uid']}").status_code == 503
        assert 'numaguard_enforcer_state_problem{reason="CheckpointCorrupt"} 1.0' in c.reader.get("/metrics").text
        assert config.state_path.read_bytes()  # the damaged file is left for the operator, never overwritten

    code = cli.main(["recover-state", "--state-dir", str(config.state_dir), "--mode", "from-backup"])
    assert code == 0

    with running_enforcer(config) as enforcer, clients(bundle, enforcer.base_url) as c:
        assert c.anonymous.get("/readyz").status_code == 200
        # the backup is the base of the start before the last one: the database is there, the last pod is not
        assert [item["uid"] for item in c.reader.get("/allocations").json()["items"]] == [database["uid"]]
        assert c.writer.post("/allocations", json=allocation_request(pod("burstable-web"))).status_code == 201


def test_quarantining_the_state_starts_empty_and_ready(config: EnforcerSettings, bundle: certs.Bundle) -> None:
    with running_enforcer(config) as enforcer, clients(bundle, enforcer.base_url) as c:
        c.writer.post("/allocations", json=allocation_request(pod("ml-workload")))
    corrupt(config.state_path)
    assert cli.main(["recover-state", "--state-dir", str(config.state_dir), "--mode", "quarantine"]) == 0
    with running_enforcer(config) as enforcer, clients(bundle, enforcer.base_url) as c:
        assert c.anonymous.get("/readyz").json()["ready"] is True
        assert c.reader.get("/allocations").json()["items"] == []


def test_state_saved_under_another_kubelet_configuration_is_not_used(
    config: EnforcerSettings, bundle: certs.Bundle
) -> None:
    with running_enforcer(config) as enforcer, clients(bundle, enforcer.base_url) as c:
        c.writer.post("/allocations", json=allocation_request(pod("ml-workload")))
    kubelet = {**config.kubelet, "reservedSystemCPUs": "0-1,16-17"}
    changed = make_settings(config.state_dir, kubelet=kubelet, **_files(config))
    with running_enforcer(changed) as enforcer, clients(bundle, enforcer.base_url) as c:
        ready = c.anonymous.get("/readyz").json()
        assert ready["reason"] == "StateMismatch"
        assert "kubelet configuration" in ready["message"]
        assert c.writer.post("/allocations", json=allocation_request(pod("burstable-web"))).status_code == 503


def _files(config: EnforcerSettings) -> dict[str, Any]:
    return {
        "tls_cert": config.tls_cert,
        "tls_key": config.tls_key,
        "client_ca": config.client_ca,
        "token_file": config.token_file,
    }
