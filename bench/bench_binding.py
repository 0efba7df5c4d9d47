"""The ``pods/binding`` round trip: webhook -> enforcer over mutual TLS, with the enforcer alone side by side.

Run: ``.venv/bin/python -m bench.bench_binding [--quick]`` (or the ``binding``
section of ``python -m bench``).

A binding review sent to the real webhook, which finds the pod (pod source
``seen``: each pod was sent through ``/validate`` CREATE first, untimed) and
calls the real enforcer (``numaguard enforcer --standalone --dry-run-cgroups``)
over mutual TLS; the enforcer decides and saves its state durably (write,
fsync, rename) before it answers, and the webhook answers with the allocation
as a patch.  The pod is the seed-1 pod; the node has the seed-1 kubelet
settings on a synthetic 4-NUMA machine large enough for 16 such pods at once
(:data:`BINDING_MACHINE`).  After each binding the client releases the
allocation at the enforcer (untimed), so the node never fills.  p50 and p99 at
1 and 16 concurrent clients.  The reference is measured side by side in the
same clients: each binding is followed by a direct ``POST /allocations`` of
another copy of the pod to the same enforcer with the webhook's client
certificate, so the difference is what the webhook adds (its admission work,
the pod lookup and its own TLS hop).

Measured, never asserted: only wrong answers (a denied binding, an HTTP error)
fail the table.  This module is a measuring tool: it must not be imported by
product code or by tests of product code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import report, servers
from bench.load import JSON_HEADERS, percentile
from servicekit import certs, tls

REVIEWS = servers.REVIEWS
SEED_VALIDATE_REVIEW = "create-validate-tightly-coupled-database.json"
SEED_BINDING_REVIEW = "binding-tightly-coupled-database.json"
BINDING_CONCURRENCY = (1, 16)
# (NUMA nodes, cores per NUMA node, GiB per NUMA node): 2 sockets x 2 NUMA x 24 cores x 2 threads = 192 CPUs,
# 6 seed-1 pods (8 CPUs, 16Gi) per NUMA node, so 16 bindings in flight always fit.
BINDING_MACHINE = (4, 24, 128)


@dataclass(frozen=True)
class Effort:
    """Bindings per client, alone and with 16 clients at once."""

    bindings_per_client_alone: int
    bindings_per_client_concurrent: int

    @classmethod
    def of(cls, quick: bool) -> Effort:
        return cls(100, 12) if quick else cls(300, 40)


def binding_machine_document() -> dict[str, Any]:
    from enforcer.topology import synthetic

    numa, cores, gib = BINDING_MACHINE
    topology: dict[str, Any] = synthetic.regular(numa, cores_per_numa=cores, memory=gib * synthetic.GiB).to_document()
    return topology


def _fresh_pod(index: int) -> tuple[bytes, bytes, dict[str, Any]]:
    """The seed-1 validate CREATE and binding reviews and the pod, renamed so that every binding is a new pod."""
    name = f"tightly-coupled-database-{index}"
    uid = str(uuid.uuid4())
    validate = json.loads((REVIEWS / SEED_VALIDATE_REVIEW).read_text())
    validate["request"].update(uid=str(uuid.uuid4()), name=name)
    validate["request"]["object"]["metadata"].update(name=name, uid=uid)
    binding = json.loads((REVIEWS / SEED_BINDING_REVIEW).read_text())
    binding["request"].update(uid=str(uuid.uuid4()), name=name)
    binding["request"]["object"]["metadata"].update(name=name, uid=uid)
    pod: dict[str, Any] = validate["request"]["object"]
    return json.dumps(validate).encode(), json.dumps(binding).encode(), pod


@dataclass
class _BindingSamples:
    via_webhook: list[float] = field(default_factory=list)
    direct: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BindingRun:
    """Bindings through the webhook, and the same pods allocated at the enforcer directly, side by side."""

    clients: int
    bindings: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    direct_p50_ms: float
    direct_p99_ms: float
    failures: list[str]


class _BindingClient:
    """One scheduler-like client: admit a fresh pod, bind it through the webhook, release; then the same directly."""

    def __init__(self, webhook: httpx.AsyncClient, enforcer: httpx.AsyncClient, samples: _BindingSamples) -> None:
        self.webhook, self.enforcer, self.samples = webhook, enforcer, samples

    async def bind_through_webhook(self, index: int, record: bool) -> None:
        validate, binding, pod = _fresh_pod(index)
        admitted = await self.webhook.post("/validate", content=validate, headers=JSON_HEADERS)
        if admitted.status_code != 200 or not admitted.json()["response"]["allowed"]:
            self.samples.failures.append(f"validate CREATE: {admitted.status_code} {admitted.text[:200]}")
            return
        started = time.perf_counter()
        bound = await self.webhook.post("/mutate", content=binding, headers=JSON_HEADERS)
        elapsed = time.perf_counter() - started
        answer = bound.json().get("response", {}) if bound.status_code == 200 else {}
        if not answer.get("allowed") or not answer.get("patch"):
            self.samples.failures.append(f"binding: {bound.status_code} {json.dumps(answer.get('status'))[:300]}")
        elif record:
            self.samples.via_webhook.append(elapsed)
        await self.release(pod)

    async def allocate_directly(self, index: int, record: bool) -> None:
        _, _, pod = _fresh_pod(index)
        body = json.dumps({"pod": pod, "nodeName": servers.NODE_NAME}).encode()
        started = time.perf_counter()
        allocated = await self.enforcer.post("/allocations", content=body, headers=JSON_HEADERS)
        elapsed = time.perf_counter() - started
        if allocated.status_code != 201:
            self.samples.failures.append(f"direct allocation: {allocated.status_code} {allocated.text[:200]}")
        elif record:
            self.samples.direct.append(elapsed)
        await self.release(pod)

    async def release(self, pod: dict[str, Any]) -> None:
        released = await self.enforcer.delete(f"/allocations/{pod['metadata']['uid']}")
        if released.status_code != 200:
            self.samples.failures.append(f"release: {released.status_code} {released.text[:200]}")


async def _binding_client(
    webhook: servers.Launched,
    enforcer: servers.Launched,
    bundle: certs.Bundle,
    index: int,
    repeats: int,
    samples: _BindingSamples,
) -> None:
    warmup = max(3, repeats // 10)
    trust = tls.client_context(bundle.cert("ca"))
    # the webhook's own identity, so the enforcer does for the direct calls exactly what it does for the webhook
    as_webhook = tls.client_context(
        bundle.cert("ca"), cert=bundle.cert("webhook-client"), key=bundle.key("webhook-client")
    )
    async with (
        httpx.AsyncClient(base_url=webhook.url, verify=trust, timeout=30) as to_webhook,
        httpx.AsyncClient(base_url=enforcer.url, verify=as_webhook, timeout=30) as to_enforcer,
    ):
        client = _BindingClient(to_webhook, to_enforcer, samples)
        for round_ in range(warmup + repeats):
            pod_index = index * 1_000_000 + 2 * round_
            await client.bind_through_webhook(pod_index, record=round_ >= warmup)
            await client.allocate_directly(pod_index + 1, record=round_ >= warmup)


async def _binding_run(
    webhook: servers.Launched, enforcer: servers.Launched, bundle: certs.Bundle, clients: int, repeats: int
) -> BindingRun:
    samples = _BindingSamples()
    await asyncio.gather(*(_binding_client(webhook, enforcer, bundle, i, repeats, samples) for i in range(clients)))
    if not samples.via_webhook or not samples.direct:
        return BindingRun(clients, 0, 0.0, 0.0, 0.0, 0.0, 0.0, samples.failures or ["no binding succeeded"])
    return BindingRun(
        clients=clients,
        bindings=len(samples.via_webhook),
        p50_ms=statistics.median(samples.via_webhook) * 1000,
        p99_ms=percentile(samples.via_webhook, 0.99) * 1000,
        max_ms=max(samples.via_webhook) * 1000,
        direct_p50_ms=statistics.median(samples.direct) * 1000,
        direct_p99_ms=percentile(samples.direct, 0.99) * 1000,
        failures=samples.failures,
    )


def run_bindings(workdir: Path, bundle: certs.Bundle, effort: Effort) -> list[BindingRun]:
    numa, cores, _ = BINDING_MACHINE
    runs: list[BindingRun] = []
    kubelet = servers.seed_kubelet(numa, cores)
    with servers.enforcer_process(workdir, bundle, binding_machine_document(), kubelet) as enforcer:
        port = servers.free_port()
        command = servers.server_command(
            "webhook", port=port, certs_dir=bundle.directory, enforcer_url=enforcer.url, log_level="info"
        )
        with servers.launched(
            "webhook", command, port=port, bundle=bundle, ready_path="/healthz", log_file=workdir / "binding.log"
        ) as webhook:
            for clients in BINDING_CONCURRENCY:
                repeats = effort.bindings_per_client_alone if clients == 1 else effort.bindings_per_client_concurrent
                runs.append(asyncio.run(_binding_run(webhook, enforcer, bundle, clients, repeats)))
    return runs


def run(quick: bool = False, *, effort: Effort | None = None) -> list[BindingRun]:
    """Measure both concurrencies; ``effort`` overrides what ``quick`` chooses (the smoke test's tiny runs)."""
    with tempfile.TemporaryDirectory(prefix="bench-binding-") as tmp:
        workdir = Path(tmp)
        bundle = servers.issue_certs(workdir / "certs")
        return run_bindings(workdir, bundle, effort or Effort.of(quick))


def _ms(value: float) -> str:
    return f"{value:.2f} ms"


def rows_of(runs: list[BindingRun]) -> list[dict[str, str]]:
    numa, cores, _ = BINDING_MACHINE
    return [
        {
            "section": "webhook binding",
            "case": (
                f"binding round trip webhook -> enforcer (mTLS, durable), {b.clients} client"
                f"{'s' if b.clients > 1 else ''}, seed-1 pod, {numa} NUMA / {numa * cores * 2} CPUs"
            ),
            "ours": f"p50 {_ms(b.p50_ms)}, p99 {_ms(b.p99_ms)}",
            "reference": f"enforcer alone p50 {_ms(b.direct_p50_ms)}, p99 {_ms(b.direct_p99_ms)}",
            "ratio": f"p50 +{b.p50_ms - b.direct_p50_ms:.2f} ms via webhook",
            "check": f"FAIL: {len(b.failures)}: {b.failures[0]}" if b.failures else f"{b.bindings} allocated",
        }
        for b in runs
    ]


def table_rows(quick: bool) -> list[dict[str, str]]:
    return rows_of(run(quick))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer bindings (noisier)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    runs = run(args.quick)
    rows = rows_of(runs)
    for row in rows:
        print(" | ".join(row[k] for k in ("case", "ours", "reference", "ratio", "check")))
    if args.json is not None:
        document = [{**asdict(b), "failures": b.failures[:5], "failure_count": len(b.failures)} for b in runs]
        report.write_json(args.json, "bench_binding", args.quick, {"bindings": document})
    return 1 if any(row["check"].startswith("FAIL") for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
