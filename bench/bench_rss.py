"""Resident memory of both services, read from ``/proc/<pid>/status`` (VmRSS, VmHWM) of the real processes.

Run: ``.venv/bin/python -m bench.bench_rss [--quick] [--json PATH]`` (or the
``memory`` section of ``python -m bench``).  MB here is 10^6 bytes.

* Webhook under load: the webhook as :mod:`bench.servers` runs it (pod source
  ``seen``, JSON logs at ``info``), idle after start-up, then under the
  ``/mutate`` load of :mod:`bench.load` (seed-1 and seed-2 CREATE
  reviews, 16 keep-alive httpx clients, a separate load process).  RSS is
  sampled every 100 ms during the load: *steady* is the median of the samples in
  the last third of the load, *peak* the kernel's high-water mark (VmHWM).
  Every ``/mutate`` files the pod in the webhook's bounded pod cache (10,000
  pods), so the figure grows until the cache is full; the row says how many
  reviews were served.
* Enforcer with 250 pods / 1,000 containers: ``numaguard enforcer --standalone
  --dry-run-cgroups`` over a synthetic machine (``synthetic.regular(16,
  cores_per_numa=32)``: 16 NUMA nodes, 1,024 CPUs, 1 TiB) written to a topology
  file, with the seed-1 kubelet settings (pod scope, single-numa-node, static
  CPU and Static memory managers).  250 pods of the seed-1 shape are allocated
  over mutual TLS: a 4-CPU / 2 GiB pod budget, two Guaranteed containers with
  an exclusive CPU each, two sidecars in the pod's shared pool; then RSS is
  sampled (median of 10 samples, 100 ms apart).  The node's allocation list is
  read back to check that 250 pods and 1,000 containers are held.

Every figure is a median over samples (and over runs when not ``--quick``).
Measured, never asserted.  This module is a measuring tool: it must not be
imported by product code or by tests of product code.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import load, proc, report, servers
from servicekit import certs, tls
from webhook.settings import WebhookSettings

ENFORCER_TARGET_MB = 100.0
PODS = 250
CONTAINERS_PER_POD = 4
# 16 NUMA nodes x 32 cores x 2 threads: 1,024 CPUs, room for 255 pods of 4 CPUs on single NUMA nodes.
ENFORCER_MACHINE = (16, 32, 64)
KIB = 1024
# every /mutate files a pod in the webhook's bounded cache: RSS is steady only once it is full
POD_CACHE_SIZE: int = WebhookSettings.model_fields["pod_cache_size"].default


@dataclass(frozen=True)
class Effort:
    runs: int
    load_seconds: float
    pods: int = PODS

    @classmethod
    def of(cls, quick: bool) -> Effort:
        return cls(runs=1, load_seconds=8.0) if quick else cls(runs=3, load_seconds=40.0)


def mb(kib: float) -> float:
    return kib * KIB / 1e6


def sample_rss(pid: int, samples: int = 10, interval: float = 0.1) -> list[int]:
    """``samples`` VmRSS readings of an idle process, ``interval`` seconds apart (KiB)."""
    readings = []
    for _ in range(samples):
        readings.append(proc.memory_kib(pid)[0])
        time.sleep(interval)  # spacing between readings of an idle process, not synchronisation
    return readings


# -- the webhook under load ------------------------------------------------------------------


@dataclass(frozen=True)
class WebhookMemory:
    idle_kib: float
    steady_kib: float
    peak_kib: int
    reviews: int
    per_second: float


def webhook_under_load(workdir: Path, bundle: certs.Bundle, effort: Effort) -> WebhookMemory:
    port = servers.free_port()
    command = servers.server_command("webhook", port=port, certs_dir=bundle.directory, log_level="info")
    steady = load.LoadEffort(
        rounds=1, clients=16, warmup=0.0, throughput_seconds=effort.load_seconds, rate=0.0, latency_seconds=0.0
    )
    with servers.launched(
        "webhook", command, port=port, bundle=bundle, ready_path="/healthz", log_file=workdir / "webhook.log"
    ) as webhook:
        idle = statistics.median(sample_rss(webhook.pid))
        (window,) = load.run_load(
            [load.Target("webhook", webhook.url, webhook.pid)], bundle, steady, "closed", servers.SEED_CREATE_BODIES
        )
    if window.failures or not window.rss_kib:
        raise RuntimeError(f"the webhook load failed: {window.failures} failed requests")
    last_third = window.rss_kib[len(window.rss_kib) * 2 // 3 :]
    return WebhookMemory(
        idle_kib=idle,
        steady_kib=statistics.median(last_third),
        peak_kib=max(window.hwm_kib, *window.rss_kib),
        reviews=window.completed,
        per_second=window.per_second,
    )


# -- the enforcer with 250 pods --------------------------------------------------------------


def pod(index: int) -> dict[str, Any]:
    """The seed-1 shape, scaled down: pod budget, two exclusive containers, two sidecars in the pod's pool."""

    def guaranteed(cpu: str, memory: str) -> dict[str, Any]:
        return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"rss-{index}", "namespace": "bench", "uid": str(uuid.uuid4())},
        "spec": {
            "resources": guaranteed("4", "2Gi"),
            "initContainers": [
                {"name": "proxy", "image": "proxy:v1", "restartPolicy": "Always"},
                {"name": "log-shipper", "image": "log-shipper:v1", "restartPolicy": "Always"},
            ],
            "containers": [
                {"name": "app", "image": "app:v1", "resources": guaranteed("1", "512Mi")},
                {"name": "worker", "image": "worker:v1", "resources": guaranteed("1", "512Mi")},
            ],
        },
    }


@dataclass(frozen=True)
class EnforcerMemory:
    idle_kib: float
    loaded_kib: float
    peak_kib: int
    pods: int
    containers: int
    allocate_p50_ms: float
    allocate_p99_ms: float
    problems: list[str]


def enforcer_with_pods(workdir: Path, bundle: certs.Bundle, pods: int) -> EnforcerMemory:
    from enforcer.topology import synthetic

    numa, cores, gib = ENFORCER_MACHINE
    document = synthetic.regular(numa, cores_per_numa=cores, memory=gib * synthetic.GiB).to_document()
    kubelet = servers.seed_kubelet(numa, cores)
    context = tls.client_context(
        bundle.cert("ca"), cert=bundle.cert("webhook-client"), key=bundle.key("webhook-client")
    )
    problems: list[str] = []
    latencies: list[float] = []
    with (
        servers.enforcer_process(workdir, bundle, document, kubelet) as enforcer,
        httpx.Client(base_url=enforcer.url, verify=context, timeout=60) as client,
    ):
        idle = statistics.median(sample_rss(enforcer.pid))
        for index in range(pods):
            started = time.perf_counter()
            answer = client.post("/allocations", json={"pod": pod(index), "nodeName": servers.NODE_NAME})
            latencies.append(time.perf_counter() - started)
            if answer.status_code != 201:
                problems.append(f"pod {index}: {answer.status_code} {answer.text[:200]}")
        loaded = statistics.median(sample_rss(enforcer.pid))
        peak = proc.memory_kib(enforcer.pid)[1]
        # the webhook's identity may only write (enforcer roles): read the node back as the operator
        operator = tls.client_context(
            bundle.cert("ca"), cert=bundle.cert("operator-client"), key=bundle.key("operator-client")
        )
        with httpx.Client(base_url=enforcer.url, verify=operator, timeout=60) as reader:
            listed = reader.get("/allocations").json().get("items", [])
    containers = sum(len(item.get("containers", {})) for item in listed)
    if len(listed) != pods or containers != pods * CONTAINERS_PER_POD:
        problems.append(f"the node holds {len(listed)} pods / {containers} containers")
    return EnforcerMemory(
        idle_kib=idle,
        loaded_kib=loaded,
        peak_kib=peak,
        pods=len(listed),
        containers=containers,
        allocate_p50_ms=statistics.median(latencies) * 1000,
        allocate_p99_ms=load.percentile(latencies, 0.99) * 1000,
        problems=problems,
    )


# -- the whole benchmark ---------------------------------------------------------------------


@dataclass(frozen=True)
class Results:
    effort: Effort
    webhook: list[WebhookMemory]
    enforcer: list[EnforcerMemory]

    def summary(self) -> dict[str, Any]:
        def median_of(rows: list[Any], name: str) -> float:
            return float(statistics.median(getattr(r, name) for r in rows))

        loaded_mb = mb(median_of(self.enforcer, "loaded_kib"))
        return {
            "webhook_mb": {
                "idle": mb(median_of(self.webhook, "idle_kib")),
                "steady_under_load": mb(median_of(self.webhook, "steady_kib")),
                "peak": mb(median_of(self.webhook, "peak_kib")),
                "reviews_served": median_of(self.webhook, "reviews"),
                "reviews_per_second": median_of(self.webhook, "per_second"),
            },
            "enforcer_mb": {
                "idle": mb(median_of(self.enforcer, "idle_kib")),
                "with_pods": loaded_mb,
                "pods": self.effort.pods,
                "peak": mb(median_of(self.enforcer, "peak_kib")),
                "target": ENFORCER_TARGET_MB,
                "meets_target": loaded_mb <= ENFORCER_TARGET_MB,
            },
            "enforcer_allocate_ms": {
                "p50": median_of(self.enforcer, "allocate_p50_ms"),
                "p99": median_of(self.enforcer, "allocate_p99_ms"),
            },
            "problems": [p for run in self.enforcer for p in run.problems][:10],
        }


def run(quick: bool = False, *, effort: Effort | None = None) -> Results:
    """Measure everything; ``effort`` overrides what ``quick`` chooses (the smoke test's tiny runs)."""
    effort = effort or Effort.of(quick)
    webhook: list[WebhookMemory] = []
    enforcer: list[EnforcerMemory] = []
    for _ in range(effort.runs):
        with tempfile.TemporaryDirectory(prefix="bench-rss-") as tmp:
            workdir = Path(tmp)
            bundle = servers.issue_certs(workdir / "certs")
            webhook.append(webhook_under_load(workdir, bundle, effort))
            enforcer.append(enforcer_with_pods(workdir, bundle, effort.pods))
    return Results(effort, webhook, enforcer)


def rows_of(results: Results) -> list[dict[str, str]]:
    s = results.summary()
    web, enf, alloc = s["webhook_mb"], s["enforcer_mb"], s["enforcer_allocate_ms"]
    numa, cores, _ = ENFORCER_MACHINE
    pods = results.effort.pods
    problems = s["problems"]
    verdict = "meets" if enf["meets_target"] else "misses"
    return [
        {
            "section": "memory (RSS)",
            "case": (
                f"webhook under /mutate load, 16 clients ({web['reviews_served']:,.0f} reviews in "
                f"{results.effort.load_seconds:g} s)"
            ),
            "ours": f"steady {web['steady_under_load']:.1f} MB, peak {web['peak']:.1f} MB",
            "reference": f"idle {web['idle']:.1f} MB",
            "ratio": f"+{web['steady_under_load'] - web['idle']:.1f} MB under load",
            "check": (
                f"pod cache full ({POD_CACHE_SIZE:,} pods)"
                if web["reviews_served"] >= POD_CACHE_SIZE
                else f"pod cache {web['reviews_served']:,.0f}/{POD_CACHE_SIZE:,}: still growing"
            ),
        },
        {
            "section": "memory (RSS)",
            "case": (
                f"enforcer, {pods} pods / {pods * CONTAINERS_PER_POD:,} containers allocated "
                f"({numa} NUMA / {numa * cores * 2:,} CPUs)"
            ),
            "ours": f"{enf['with_pods']:.1f} MB (peak {enf['peak']:.1f} MB)",
            "reference": f"idle {enf['idle']:.1f} MB",
            "ratio": f"allocate p50 {alloc['p50']:.1f} ms, p99 {alloc['p99']:.1f} ms",
            "check": (f"FAIL: {problems[0]}" if problems else f"{verdict} <= {ENFORCER_TARGET_MB:g} MB"),
        },
    ]


def table_rows(quick: bool) -> list[dict[str, str]]:
    return rows_of(run(quick))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one run and a short load (noisier)")
    parser.add_argument("--json", type=Path, help="also write the figures, per run, as JSON here")
    args = parser.parse_args(argv)
    results = run(args.quick)
    rows = rows_of(results)
    for row in rows:
        print(" | ".join(row[k] for k in ("case", "ours", "reference", "ratio", "check")))
    if args.json is not None:
        report.write_json(
            args.json,
            "bench_rss",
            args.quick,
            {
                "summary": results.summary(),
                "effort": asdict(results.effort),
                "webhook_runs": [asdict(r) for r in results.webhook],
                "enforcer_runs": [asdict(r) for r in results.enforcer],
            },
        )
    return 1 if any(row["check"].startswith("FAIL") for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
