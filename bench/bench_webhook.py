"""The admission webhook as a service: ``/mutate`` throughput and latency against a bare echo, and bindings end to end.

Run: ``.venv/bin/python -m bench.bench_webhook [--quick] [--json PATH]`` (or the
``webhook`` section of ``python -m bench``).

1. ``/mutate`` of the seed pods' CREATE reviews (seed-1 ``tightly-coupled-database``
   and seed-2 ``ml-workload``, ``tests/fixtures/reviews/create-mutate-*.json``,
   sent alternately) to the real webhook, against a bare FastAPI endpoint that
   echoes the same body.  Both run as their own process under the same uvicorn
   set-up (:mod:`bench.servers`: uvloop, httptools, TLS from the same reloading
   context, JSON logs at ``info`` as shipped).  The load is one separate process
   (``drive``, below) using httpx with keep-alive connections:

   * throughput: ``clients`` concurrent closed-loop clients for a fixed window
     after a warm-up; also the server's CPU seconds per request, read from
     ``/proc/<pid>/stat`` over the same window, which still compares the two
     servers when the client (httpx costs more per request than either server)
     is what limits throughput on a 2-core machine;
   * latency at a fixed rate: open-loop pacing (requests start on a schedule,
     not when the previous one ends), latency measured from the scheduled start
     so a stalled server cannot hide its queue (no coordinated omission).

   The two servers alternate within every round (the order flips each round)
   and every figure is the median over rounds, which cancels most of the noise
   of a shared machine; the ratio compares medians of the same run.

2. ``pods/binding`` round trip: a binding review sent to the real webhook, which
   finds the pod (pod source ``seen``: each pod was sent through ``/validate``
   CREATE first, untimed) and calls the real enforcer (``numaguard enforcer
   --standalone --dry-run-cgroups``) over mutual TLS; the enforcer decides and
   saves its state durably (write, fsync, rename) before it answers, and the
   webhook answers with the allocation as a patch.  The pod is the seed-1 pod;
   the node has the seed-1 kubelet settings on a synthetic 4-NUMA machine large
   enough for 16 such pods at once (:data:`BINDING_MACHINE`).  After each
   binding the client releases the allocation at the enforcer (untimed), so the
   node never fills.  p50 and p99 at 1 and 16 concurrent clients.  The
   reference is measured side by side in the same clients: each binding is
   followed by a direct ``POST /allocations`` of another copy of the pod to the
   same enforcer with the webhook's client certificate, so the difference is
   what the webhook adds (its admission work, the pod lookup and its own TLS
   hop).

Measured, never asserted: a target missed is reported as such, only wrong
answers (an echo that differs, a denied binding, an HTTP error) fail the table.
This module is a measuring tool: it must not be imported by product code or by
tests of product code.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import servers
from servicekit import certs, tls

ROOT = Path(__file__).resolve().parents[1]
REVIEWS = ROOT / "tests" / "fixtures" / "reviews"
SEED_CREATE_REVIEWS = ("create-mutate-tightly-coupled-database.json", "create-mutate-ml-workload.json")
SEED_VALIDATE_REVIEW = "create-validate-tightly-coupled-database.json"
SEED_BINDING_REVIEW = "binding-tightly-coupled-database.json"
THROUGHPUT_TARGET = 0.80  # the webhook keeps at least this share of the echo's throughput
OPEN_LOOP_CONNECTIONS = 32
# Beyond these, the figures say more about the other tenants of the machine than about the servers: say so.
BUSY_PRESSURE = 0.20
LAG_TOLERANCE_MS = 5.0
BINDING_CONCURRENCY = (1, 16)
# (NUMA nodes, cores per NUMA node, GiB per NUMA node): 2 sockets x 2 NUMA x 24 cores x 2 threads = 192 CPUs,
# 6 seed-1 pods (8 CPUs, 16Gi) per NUMA node, so 16 bindings in flight always fit.
BINDING_MACHINE = (4, 24, 128)
JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Effort:
    """How long to measure; ``quick`` keeps ``python -m bench --quick`` short, at the price of noise."""

    rounds: int
    clients: int
    warmup: float
    throughput_seconds: float
    rate: float
    latency_seconds: float
    bindings_per_client_alone: int
    bindings_per_client_concurrent: int

    @classmethod
    def of(cls, quick: bool) -> Effort:
        if quick:
            return cls(3, 16, 0.5, 2.5, 200.0, 2.5, 100, 12)
        return cls(7, 16, 2.0, 8.0, 200.0, 8.0, 300, 40)


# -- the load process ------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A server under load: its name, base URL and pid (for /proc)."""

    name: str
    url: str
    pid: int

    def arg(self) -> str:
        return f"{self.name}={self.url}@{self.pid}"

    @classmethod
    def parse(cls, text: str) -> Target:
        name, _, rest = text.partition("=")
        url, _, pid = rest.rpartition("@")
        return cls(name, url, int(pid))


@dataclass
class Window:
    """What one target did during one measured window."""

    target: str
    mode: str  # "closed" (throughput) or "open" (fixed rate)
    seconds: float
    completed: int
    failures: int
    latencies_ms: list[float] = field(default_factory=list)
    server_cpu_seconds: float = 0.0
    rss_kib: list[int] = field(default_factory=list)
    hwm_kib: int = 0
    # open loop: how late the load process started each request (a starved load process shows here)
    send_lag_ms: list[float] = field(default_factory=list)
    # share of the window in which some runnable task waited for a CPU (/proc/pressure/cpu), -1 if unknown
    cpu_pressure: float = -1.0

    @property
    def per_second(self) -> float:
        return self.completed / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_request(self) -> float:
        return self.server_cpu_seconds / self.completed * 1e6 if self.completed else 0.0


def _cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (fields 14 and 15 of /proc/<pid>/stat, after the parenthesised name)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_stall_seconds() -> float | None:
    """The machine's cumulative "some" CPU pressure stall time (PSI), or None without PSI."""
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    return int(some.rpartition("total=")[2]) / 1e6


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB, from /proc/<pid>/status."""
    values = {"VmRSS": 0, "VmHWM": 0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in values:
            values[key] = int(rest.split()[0])
    return values["VmRSS"], values["VmHWM"]


class _Probe:
    """Server CPU over the window, and its RSS sampled every ``interval`` seconds meanwhile."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid, self.interval = pid, interval
        self.rss: list[int] = []
        self._cpu_start = 0.0
        self._stall_start: float | None = None
        self._started_at = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        while True:
            self.rss.append(memory_kib(self.pid)[0])
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._cpu_start = _cpu_seconds(self.pid)
        self._stall_start = _cpu_stall_seconds()
        self._started_at = time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def stop(self, window: Window) -> None:
        window.server_cpu_seconds = _cpu_seconds(self.pid) - self._cpu_start
        stall = _cpu_stall_seconds()
        if stall is not None and self._stall_start is not None:
            window.cpu_pressure = (stall - self._stall_start) / (time.perf_counter() - self._started_at)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        window.rss_kib = self.rss
        window.hwm_kib = memory_kib(self.pid)[1]


async def _at(moment: float) -> None:
    delay = moment - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


async def _probe_window(probe: _Probe, window: Window, start: float, end: float) -> None:
    await _at(start)
    probe.start()
    await _at(end)
    await probe.stop(window)


async def closed_loop(
    client: httpx.AsyncClient, target: Target, bodies: Sequence[bytes], clients: int, warmup: float, seconds: float
) -> Window:
    """``clients`` workers, each sending its next request as soon as the previous answer arrived."""
    window = Window(target.name, "closed", seconds, 0, 0)
    start = time.perf_counter() + warmup
    end = start + seconds

    async def worker(index: int) -> None:
        sent_count = index
        while (sent := time.perf_counter()) < end:
            body = bodies[sent_count % len(bodies)]
            sent_count += 1
            try:
                response = await client.post(f"{target.url}/mutate", content=body, headers=JSON_HEADERS)
                ok = response.status_code == 200
            except httpx.HTTPError:
                ok = False
            done = time.perf_counter()
            if start <= done <= end:
                window.completed += ok
                window.failures += not ok
                if sent >= start:
                    window.latencies_ms.append((done - sent) * 1000)

    probe = _Probe(target.pid)
    await asyncio.gather(_probe_window(probe, window, start, end), *(worker(i) for i in range(clients)))
    return window


async def open_loop(
    client: httpx.AsyncClient, target: Target, bodies: Sequence[bytes], rate: float, warmup: float, seconds: float
) -> Window:
    """Requests start every ``1/rate`` seconds whatever the server does; latency counts from the scheduled start."""
    window = Window(target.name, "open", seconds, 0, 0)
    begin = time.perf_counter() + 0.05
    start = begin + warmup
    total = int((warmup + seconds) * rate)

    async def one(index: int, scheduled: float) -> None:
        lag = time.perf_counter() - scheduled
        try:
            response = await client.post(
                f"{target.url}/mutate", content=bodies[index % len(bodies)], headers=JSON_HEADERS
            )
            ok = response.status_code == 200
        except httpx.HTTPError:
            ok = False
        if scheduled >= start:
            window.completed += ok
            window.failures += not ok
            window.latencies_ms.append((time.perf_counter() - scheduled) * 1000)
            window.send_lag_ms.append(lag * 1000)

    probe = _Probe(target.pid)
    probing = asyncio.create_task(_probe_window(probe, window, start, start + seconds))
    requests: list[asyncio.Task[None]] = []
    for index in range(total):
        scheduled = begin + index / rate
        await _at(scheduled)
        requests.append(asyncio.create_task(one(index, scheduled)))
    await asyncio.gather(probing, *requests)
    return window


async def _drive(
    targets: Sequence[Target], ca: Path, bodies: Sequence[bytes], effort: Effort, modes: str
) -> list[Window]:
    context = tls.client_context(ca)
    windows: list[Window] = []
    for mode in modes.split(","):
        connections = effort.clients if mode == "closed" else OPEN_LOOP_CONNECTIONS
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        for round_ in range(effort.rounds):
            order = targets if round_ % 2 == 0 else list(reversed(targets))
            for target in order:
                async with httpx.AsyncClient(verify=context, limits=limits, timeout=30) as client:
                    if mode == "closed":
                        windows.append(
                            await closed_loop(
                                client, target, bodies, effort.clients, effort.warmup, effort.throughput_seconds
                            )
                        )
                    else:
                        windows.append(
                            await open_loop(client, target, bodies, effort.rate, effort.warmup, effort.latency_seconds)
                        )
    return windows


def drive_main(argv: list[str]) -> int:
    """The load process: ``python -m bench.bench_webhook drive ...``; prints its windows as JSON."""
    parser = argparse.ArgumentParser(prog="bench.bench_webhook drive")
    parser.add_argument("--target", action="append", type=Target.parse, required=True, help="NAME=URL@PID")
    parser.add_argument("--ca", type=Path, required=True)
    parser.add_argument("--body", action="append", type=Path, required=True)
    parser.add_argument("--effort", required=True, help="an Effort as JSON")
    parser.add_argument("--modes", default="closed,open")
    args = parser.parse_args(argv)
    bodies = [path.read_bytes() for path in args.body]
    effort = Effort(**json.loads(args.effort))
    windows = asyncio.run(_drive(args.target, args.ca, bodies, effort, args.modes))
    json.dump([asdict(w) for w in windows], sys.stdout)
    return 0


def run_load(targets: Sequence[Target], bundle: certs.Bundle, effort: Effort, modes: str) -> list[Window]:
    """Run the load process against ``targets`` and return its windows."""
    command = [sys.executable, "-m", "bench.bench_webhook", "drive", "--ca", str(bundle.cert("ca"))]
    command += [arg for t in targets for arg in ("--target", t.arg())]
    command += [arg for name in SEED_CREATE_REVIEWS for arg in ("--body", str(REVIEWS / name))]
    command += ["--effort", json.dumps(asdict(effort)), "--modes", modes]
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, check=False)
    if finished.returncode != 0:
        raise RuntimeError(f"the load process failed:\n{finished.stderr.decode(errors='replace')[-2000:]}")
    return [Window(**w) for w in json.loads(finished.stdout)]


# -- servers ---------------------------------------------------------------------------------


@contextlib.contextmanager
def webhook_and_echo(
    workdir: Path, bundle: certs.Bundle, *, enforcer_url: str | None = None
) -> Iterator[tuple[servers.Launched, servers.Launched]]:
    """Both servers, started the same way (:mod:`bench.servers`), for as long as the block runs."""
    with contextlib.ExitStack() as stack:
        started = []
        for name in ("webhook", "echo"):
            port = servers.free_port()
            command = servers.server_command(
                name, port=port, certs_dir=bundle.directory, enforcer_url=enforcer_url, log_level="info"
            )
            started.append(
                stack.enter_context(
                    servers.launched(
                        name, command, port=port, bundle=bundle, ready_path="/healthz", log_file=workdir / f"{name}.log"
                    )
                )
            )
        yield started[0], started[1]


def check_answers(webhook: servers.Launched, echo: servers.Launched, bundle: certs.Bundle) -> str:
    """Before timing anything: the echo returns the body, the webhook allows and patches both seed pods."""
    problems: list[str] = []
    with httpx.Client(verify=tls.client_context(bundle.cert("ca")), timeout=30) as client:
        for name in SEED_CREATE_REVIEWS:
            body = (REVIEWS / name).read_bytes()
            echoed = client.post(f"{echo.url}/mutate", content=body, headers=JSON_HEADERS)
            if echoed.status_code != 200 or echoed.content != body:
                problems.append(f"echo changed {name}")
            reviewed = client.post(f"{webhook.url}/mutate", content=body, headers=JSON_HEADERS)
            answer = reviewed.json().get("response", {}) if reviewed.status_code == 200 else {}
            if not answer.get("allowed") or answer.get("patchType") != "JSONPatch":
                problems.append(f"webhook did not patch {name}: {reviewed.status_code} {reviewed.text[:200]}")
    return "FAIL: " + "; ".join(problems) if problems else "allowed + patched"


# -- the binding round trip ------------------------------------------------------------------


def binding_machine_document() -> dict[str, Any]:
    from enforcer.topology import synthetic

    numa, cores, gib = BINDING_MACHINE
    topology: dict[str, Any] = synthetic.regular(numa, cores_per_numa=cores, memory=gib * synthetic.GiB).to_document()
    return topology


def seed_kubelet(numa_nodes: int, cores_per_numa: int) -> dict[str, Any]:
    """The seed-1 node's kubelet settings (pod scope, single-numa-node) on a ``synthetic.regular`` machine.

    The reserved core is CPU 0 and its sibling, as seed-1 reserves "0,16" on
    its 32-CPU machine; beyond 8 NUMA nodes the Topology Manager needs
    ``max-allowable-numa-nodes`` raised, as the kubelet does.
    """
    kubelet: dict[str, Any] = {
        "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
        "cpuManagerPolicy": "static",
        "reservedSystemCPUs": f"0,{numa_nodes * cores_per_numa}",
        "systemReserved": {"cpu": "1", "memory": "1Gi"},
        "evictionHard": {"memory.available": "100Mi"},
        "memoryManagerPolicy": "Static",
        "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}}],
        "topologyManagerPolicy": "single-numa-node",
        "topologyManagerScope": "pod",
    }
    if numa_nodes > 8:
        kubelet["topologyManagerPolicyOptions"] = {"max-allowable-numa-nodes": str(numa_nodes)}
    return kubelet


@contextlib.contextmanager
def enforcer_process(
    workdir: Path, bundle: certs.Bundle, topology_document: dict[str, Any], kubelet: dict[str, Any]
) -> Iterator[servers.Launched]:
    port = servers.free_port()
    command = servers.enforcer_command(workdir, bundle, port=port, topology_document=topology_document, kubelet=kubelet)
    with servers.launched(
        "enforcer", command, port=port, bundle=bundle, ready_path="/readyz", log_file=workdir / "enforcer.log"
    ) as launched:
        yield launched


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


def percentile(samples: Sequence[float], share: float) -> float:
    """The nearest-rank percentile (``share`` in [0, 1]) of ``samples``."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, int(round(share * (len(ordered) - 1)))))]


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
    with enforcer_process(workdir, bundle, binding_machine_document(), seed_kubelet(numa, cores)) as enforcer:
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


# -- the whole benchmark ---------------------------------------------------------------------


def per_second(w: Window) -> float:
    return w.per_second


def cpu_us_per_request(w: Window) -> float:
    return w.cpu_us_per_request


def latency_p50(w: Window) -> float:
    return percentile(w.latencies_ms, 0.5) if w.latencies_ms else 0.0


def latency_p99(w: Window) -> float:
    return percentile(w.latencies_ms, 0.99) if w.latencies_ms else 0.0


def send_lag_p99(w: Window) -> float:
    return percentile(w.send_lag_ms, 0.99) if w.send_lag_ms else 0.0


@dataclass
class Results:
    effort: Effort
    answers: str
    windows: list[Window]
    bindings: list[BindingRun]

    def of(self, target: str, mode: str) -> list[Window]:
        return [w for w in self.windows if w.target == target and w.mode == mode]

    def median(self, target: str, mode: str, metric: Callable[[Window], float]) -> float:
        """The median over rounds of ``metric`` for one server and one kind of load."""
        values = [metric(w) for w in self.of(target, mode)]
        return statistics.median(values) if values else 0.0

    def cpu_pressure(self) -> float:
        """The machine's median CPU pressure over all windows (-1 without PSI): how busy it was meanwhile."""
        return statistics.median(w.cpu_pressure for w in self.windows) if self.windows else -1.0

    def failures(self) -> int:
        return sum(w.failures for w in self.windows)

    def summary(self) -> dict[str, Any]:
        def figures(target: str) -> dict[str, float]:
            return {
                "throughput_rps": self.median(target, "closed", per_second),
                "server_cpu_us_per_request": self.median(target, "closed", cpu_us_per_request),
                "latency_p50_ms": self.median(target, "open", latency_p50),
                "latency_p99_ms": self.median(target, "open", latency_p99),
                "load_process_send_lag_p99_ms": self.median(target, "open", send_lag_p99),
            }

        webhook, echo = figures("webhook"), figures("echo")
        ratio = webhook["throughput_rps"] / echo["throughput_rps"] if echo["throughput_rps"] else 0.0
        return {
            "webhook": webhook,
            "echo": echo,
            "throughput_ratio": ratio,
            "throughput_target": THROUGHPUT_TARGET,
            "meets_target": ratio >= THROUGHPUT_TARGET,
            "failed_requests": self.failures(),
            "machine_cpu_pressure": self.cpu_pressure(),
            "answers": self.answers,
            "bindings": [
                {**asdict(b), "failures": b.failures[:5], "failure_count": len(b.failures)} for b in self.bindings
            ],
        }


def run(quick: bool = False, *, with_bindings: bool = True, effort: Effort | None = None) -> Results:
    """Measure everything; ``effort`` overrides what ``quick`` chooses (the smoke test's tiny runs)."""
    effort = effort or Effort.of(quick)
    with tempfile.TemporaryDirectory(prefix="bench-webhook-") as tmp:
        workdir = Path(tmp)
        bundle = servers.issue_certs(workdir / "certs")
        with webhook_and_echo(workdir, bundle) as (webhook, echo):
            answers = check_answers(webhook, echo, bundle)
            targets = [Target("echo", echo.url, echo.pid), Target("webhook", webhook.url, webhook.pid)]
            windows = run_load(targets, bundle, effort, "closed,open")
        bindings = run_bindings(workdir, bundle, effort) if with_bindings else []
    return Results(effort, answers, windows, bindings)


def _ms(value: float) -> str:
    return f"{value:.2f} ms"


def rows_of(results: Results) -> list[dict[str, str]]:
    s = results.summary()
    effort = results.effort
    web, echo = s["webhook"], s["echo"]
    section = "webhook service"
    failed = s["failed_requests"]
    load_check = f"FAIL: {failed} requests failed" if failed else results.answers
    if s["machine_cpu_pressure"] > BUSY_PRESSURE:
        load_check += f"; busy machine (CPU pressure {s['machine_cpu_pressure']:.0%})"
    lag = max(web["load_process_send_lag_p99_ms"], echo["load_process_send_lag_p99_ms"])
    latency_check = load_check + (f"; load process late by {lag:.0f} ms (p99)" if lag > LAG_TOLERANCE_MS else "")
    verdict = "meets" if s["meets_target"] else "misses"
    rows = [
        {
            "section": section,
            "case": f"/mutate seed-1+2 CREATE, {effort.clients} keep-alive clients (httpx, TLS): throughput",
            "ours": f"{web['throughput_rps']:,.0f} req/s",
            "reference": f"echo {echo['throughput_rps']:,.0f} req/s",
            "ratio": f"{s['throughput_ratio']:.0%} of echo",
            "check": f"{verdict} >= {THROUGHPUT_TARGET:.0%}; {load_check}",
        },
        {
            "section": section,
            "case": "/mutate server CPU per request (same windows)",
            "ours": f"{web['server_cpu_us_per_request']:,.0f} µs",
            "reference": f"echo {echo['server_cpu_us_per_request']:,.0f} µs",
            "ratio": (
                f"{echo['server_cpu_us_per_request'] / web['server_cpu_us_per_request']:.0%} of echo capacity"
                if web["server_cpu_us_per_request"]
                else "-"
            ),
            "check": "-",
        },
        {
            "section": section,
            "case": f"/mutate latency at {effort.rate:g} req/s (open loop)",
            "ours": f"p50 {_ms(web['latency_p50_ms'])}, p99 {_ms(web['latency_p99_ms'])}",
            "reference": f"echo p50 {_ms(echo['latency_p50_ms'])}, p99 {_ms(echo['latency_p99_ms'])}",
            "ratio": f"p50 +{web['latency_p50_ms'] - echo['latency_p50_ms']:.2f} ms",
            "check": latency_check,
        },
    ]
    numa, cores, _ = BINDING_MACHINE
    for b in results.bindings:
        rows.append(
            {
                "section": section,
                "case": (
                    f"binding round trip webhook -> enforcer (mTLS, durable), {b.clients} client"
                    f"{'s' if b.clients > 1 else ''}, seed-1 pod, {numa} NUMA / {numa * cores * 2} CPUs"
                ),
                "ours": f"p50 {_ms(b.p50_ms)}, p99 {_ms(b.p99_ms)}",
                "reference": f"enforcer alone p50 {_ms(b.direct_p50_ms)}, p99 {_ms(b.direct_p99_ms)}",
                "ratio": f"p50 +{b.p50_ms - b.direct_p50_ms:.2f} ms via webhook",
                "check": f"FAIL: {len(b.failures)}: {b.failures[0]}" if b.failures else f"{b.bindings} allocated",
            }
        )
    return rows


def table_rows(quick: bool) -> list[dict[str, str]]:
    return rows_of(run(quick))


def write_json(path: Path, benchmark: str, quick: bool, results: dict[str, Any]) -> None:
    document = {
        "benchmark": benchmark,
        "command": " ".join([Path(sys.executable).name, "-m", f"bench.{benchmark}", *sys.argv[1:]]),
        "quick": quick,
        "machine": {
            "system": f"{platform.system()} {platform.machine()}",
            "cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["drive"]:
        return drive_main(args_list[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer and shorter rounds (noisier)")
    parser.add_argument("--json", type=Path, help="also write the figures, per round, as JSON here")
    parser.add_argument("--no-bindings", action="store_true", help="skip the webhook -> enforcer round trip")
    args = parser.parse_args(args_list)
    results = run(args.quick, with_bindings=not args.no_bindings)
    rows = rows_of(results)
    for row in rows:
        print(" | ".join(row[k] for k in ("case", "ours", "reference", "ratio", "check")))
    if args.json is not None:
        write_json(
            args.json,
            "bench_webhook",
            args.quick,
            {
                "summary": results.summary(),
                "effort": asdict(results.effort),
                "windows": [_window_summary(w) for w in results.windows],
            },
        )
    return 1 if any(row["check"].startswith("FAIL") for row in rows) else 0


def _window_summary(w: Window) -> dict[str, Any]:
    return {
        "target": w.target,
        "mode": w.mode,
        "seconds": w.seconds,
        "completed": w.completed,
        "failures": w.failures,
        "per_second": w.per_second,
        "server_cpu_us_per_request": w.cpu_us_per_request,
        "p50_ms": latency_p50(w) if w.latencies_ms else None,
        "p99_ms": latency_p99(w) if w.latencies_ms else None,
        "rss_peak_kib": max(w.rss_kib, default=0),
        "hwm_kib": w.hwm_kib,
        "send_lag_p99_ms": send_lag_p99(w) if w.send_lag_ms else None,
        "cpu_pressure": w.cpu_pressure,
    }


if __name__ == "__main__":
    sys.exit(main())
