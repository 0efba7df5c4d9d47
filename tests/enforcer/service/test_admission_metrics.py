"""The kubelet's admission series on the enforcer's /metrics: names, help, buckets and when each moves.

Names, types, help texts and buckets are pkg/kubelet/metrics/metrics.go's (kubernetes/kubernetes); the
increments follow where the kubelet makes them (see enforcer/service/admission_metrics.py).  Each test
sends real pods through the API in process (the real lifespan and engine) and reads /metrics back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_fixtures import SEED_KUBELET, allocation_request, guaranteed_pod, make_settings, pod

from enforcer.cgroups import recording
from enforcer.service import auth, deps, main

pytestmark = pytest.mark.anyio


async def _client(tmp_path: Path, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = main.create_app(
        make_settings(tmp_path / "state", **overrides), cgroup_driver=recording.RecordingCgroupDriver(auto_create=True)
    )
    app.dependency_overrides[deps.require_writer] = lambda: auth.Caller("certificate", "test-writer")
    app.dependency_overrides[deps.require_reader] = lambda: auth.Caller("certificate", "test-reader")
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://enforcer") as client,
    ):
        yield client


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async for client in _client(tmp_path):
        yield client


@pytest.fixture
async def smt_api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """full-pcpus-only on a 2-thread machine, no Topology Manager alignment: odd CPU counts fail in the CPU manager."""
    kubelet = {
        **SEED_KUBELET,
        "cpuManagerPolicyOptions": {"full-pcpus-only": "true"},
        "topologyManagerPolicy": "none",
        "topologyManagerScope": "container",
        "memoryManagerPolicy": "None",
        "reservedMemory": [],
    }
    async for client in _client(tmp_path, kubelet=kubelet):
        yield client


async def samples(api: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = (await api.get("/metrics")).text
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_the_series_carry_the_kubelets_names_types_help_and_buckets(api: httpx.AsyncClient) -> None:
    text = (await api.get("/metrics")).text
    for name, kind, help_text in [
        ("kubelet_topology_manager_admission_requests_total", "counter",
         "The number of admission requests where resources have to be aligned."),
        ("kubelet_topology_manager_admission_errors_total", "counter",
         "The number of admission request failures where resources could not be aligned."),
        ("kubelet_topology_manager_admission_duration_ms", "histogram",
         "Duration in milliseconds to serve a pod admission request."),
        ("kubelet_cpu_manager_pinning_requests_total", "counter",
         "The number of cpu core allocations which required pinning."),
        ("kubelet_cpu_manager_pinning_errors_total", "counter",
         "The number of cpu core allocations which required pinning failed."),
        ("kubelet_memory_manager_pinning_requests_total", "counter",
         "The number of memory pages allocations which required pinning."),
        ("kubelet_memory_manager_pinning_errors_total", "counter",
         "The number of memory pages allocations which required pinning that failed."),
        ("kubelet_admission_rejections_total", "counter", "Cumulative number pod admission rejections by the Kubelet."),
    ]:  # fmt: skip
        assert f"# HELP {name} [ALPHA] {help_text}" in text
        assert f"# TYPE {name} {kind}" in text
    # metrics.ExponentialBuckets(.05, 2, 15): 0.05 ms .. 819.2 ms
    bounds = [0.05 * 2**i for i in range(15)]
    for bound in bounds:
        assert f'kubelet_topology_manager_admission_duration_ms_bucket{{le="{bound}"}}' in text
    assert 'kubelet_topology_manager_admission_duration_ms_bucket{le="+Inf"}' in text


async def test_an_admitted_pod_level_pod_counts_one_admission_and_its_pinnings(api: httpx.AsyncClient) -> None:
    response = await api.post("/allocations", json=allocation_request(pod("tightly-coupled-database")))
    assert response.status_code == 201
    again = await api.post("/allocations", json=allocation_request(pod("tightly-coupled-database")))
    assert again.status_code == 200  # an idempotent retry is not a second admission
    found = await samples(api)
    assert value(found, "kubelet_topology_manager_admission_requests_total") == 1
    assert value(found, "kubelet_topology_manager_admission_duration_ms_count") == 1
    assert value(found, "kubelet_topology_manager_admission_errors_total") == 0
    assert value(found, "kubelet_cpu_manager_pinning_requests_total") == 1  # the database's exclusive slice
    assert value(found, "kubelet_memory_manager_pinning_requests_total") == 1  # AllocatePod: once per pod
    assert not [k for k in found if k[0] == "kubelet_admission_rejections_total"]


async def test_a_topology_affinity_error_shows_up_as_an_admission_error_and_a_rejection(
    api: httpx.AsyncClient,
) -> None:
    response = await api.post("/allocations", json=allocation_request(guaranteed_pod("too-wide", 20)))
    assert response.json()["reason"] == "TopologyAffinityError"
    found = await samples(api)
    assert value(found, "kubelet_topology_manager_admission_requests_total") == 1
    assert value(found, "kubelet_topology_manager_admission_errors_total") == 1
    assert value(found, "kubelet_admission_rejections_total", reason="TopologyAffinityError") == 1
    assert value(found, "numaguard_enforcer_admission_refusals_total", reason="TopologyAffinityError") == 1
    assert value(found, "kubelet_cpu_manager_pinning_errors_total") == 0  # the merge refused: nothing was pinned


@pytest.mark.parametrize(
    ("raw", "reason", "label"),
    [
        (guaranteed_pod("too-big", 40), "OutOfcpu", "OutOfcpu"),
        (pod("init-sidecar-hugepages"), "OutOfhugepages-2Mi", "OutOfExtendedResources"),
    ],
    ids=["OutOfcpu", "OutOfhugepages"],
)
async def test_an_out_of_resource_refusal_is_a_rejection_not_an_alignment_error(
    api: httpx.AsyncClient, raw: dict[str, Any], reason: str, label: str
) -> None:
    response = await api.post("/allocations", json=allocation_request(raw))
    assert (response.status_code, response.json()["reason"]) == (403, reason)
    found = await samples(api)
    assert value(found, "kubelet_admission_rejections_total", reason=label) == 1
    assert value(found, "numaguard_enforcer_admission_refusals_total", reason=reason) == 1
    assert value(found, "kubelet_topology_manager_admission_requests_total") == 1
    assert value(found, "kubelet_topology_manager_admission_errors_total") == 0  # the predicate handler's refusal


async def test_a_cpu_manager_failure_counts_a_pinning_request_and_error(smt_api: httpx.AsyncClient) -> None:
    response = await smt_api.post("/allocations", json=allocation_request(guaranteed_pod("odd", 3)))
    assert response.json()["reason"] == "SMTAlignmentError"
    admitted = await smt_api.post("/allocations", json=allocation_request(guaranteed_pod("even", 2)))
    assert admitted.status_code == 201
    found = await samples(smt_api)
    assert value(found, "kubelet_cpu_manager_pinning_requests_total") == 2
    assert value(found, "kubelet_cpu_manager_pinning_errors_total") == 1
    assert value(found, "kubelet_topology_manager_admission_errors_total") == 1
    assert value(found, "kubelet_admission_rejections_total", reason="Other") == 1  # not on the kubelet's allowlist
    assert value(found, "numaguard_enforcer_admission_refusals_total", reason="SMTAlignmentError") == 1
    assert value(found, "kubelet_memory_manager_pinning_requests_total") == 0  # memoryManagerPolicy None
