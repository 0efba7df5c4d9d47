"""Benchmark of the enforcer's allocation round trip over mutual TLS, durable write included.

Run: ``.venv/bin/python -m bench.bench_enforcer [--repeats N]``.

What is measured: ``POST /allocations`` of a one-container Guaranteed pod (one
exclusive CPU under the seed node's static CPU / Static memory managers, pod
scope, single-numa-node) from a client holding a client certificate, until the
201 arrives.  Each answer comes after the engine decided and the state file was
saved (write, ``fsync``, rename, directory ``fsync``).  Every client then
releases its pod (``DELETE``, also durable) before the next allocation, so
the node never fills up; releases are timed separately.

Set-up: the enforcer runs as its own process (``numaguard enforcer
--standalone --dry-run-cgroups``, certificates from ``servicekit.certs``, state
in a temporary directory), as it would on a node; clients are asyncio tasks
with one keep-alive mutual-TLS connection each, at 1 and 16 concurrent
clients.  Latency percentiles are over ``repeats`` allocations per client
after a warm-up.

Two clients: ``raw`` (default) speaks minimal HTTP/1.1 over asyncio's TLS
streams, so on a 2-core machine the client's own CPU takes as little as
possible from the server being measured; ``httpx`` is the webhook's client
library (``--client httpx``), whose own cost per request is about twice the
enforcer's cost for a trivial endpoint.

Cost against pods held (``--held``): one client allocates ``HELD_PODS`` pods
without releasing any on a synthetic 1,024-CPU machine (8 NUMA nodes x 64 cores
x 2 threads, ``enforcer.topology.synthetic.regular``; the seed node's kubelet
settings), and the allocation latencies of the first and the last
``HELD_WINDOW`` pods are compared: with durable state written per change and
incremental reconciles, the last ones should cost what the first ones did.
``--enforcer-root DIR`` runs the enforcer from another checkout (for a side by
side comparison with an older build; the client and this bench stay the same).
``--floor`` adds, per concurrency, a held pod's allocation sent again and again
(answered 200 from what is held: TLS, HTTP, the framework, authentication and
parsing, no decision and no write): the stack's own cost per request.  Every
row also gives the enforcer process's CPU time per request (all threads, from
``/proc``), the figure a shared machine disturbs least.
``--held-where PODS`` (with ``--held-repeats``) runs the curve once per repeat and puts the client's
round trips next to the enforcer's own histograms over the same allocations (time in the app, the
decision under the lock, the durable write after it; ``/metrics`` scraped with the read-only
identity after the warm-up and after the run): how many allocations each finished within 1, 2.5, 5,
10 and 25 ms; each run's medians (round trip, each phase, outside); then the slowest round trips of
each run split by the ``Server-Timing`` header of their
answers (read the pod, lock wait + decision, durable wait, follow-up, encode) and what was outside the
app (the round trip minus those: TLS, HTTP, the client, scheduling).
``--quick`` measures what ``python -m bench --quick`` does for this section (30 allocations per
client, then ``--held-pair`` with 200 samples), from ``--enforcer-root`` too.
``--held-pair SAMPLES`` is what ``python -m bench`` reports for cost against pods held: two
enforcers on the 1,024-CPU machine, one holding 25 pods and one 250, in turns of 10 samples
each (the order alternating), a sample being a new pod allocated (timed) and a held pod chosen
at random released, so both are measured at their count throughout and side by side
(:class:`Paired`).  ``--shared-pair SAMPLES`` compares the same way a node holding 25 pods
with one that also holds 100 Burstable pods of the shared pool, whose cpusets follow every
exclusive allocation.  ``--against CHECKOUT`` turns either into a before/after in one run: both
enforcers hold the larger mix, the first from CHECKOUT, the second from ``--enforcer-root``.

The journal append alone (``--journal-appends N``, in-process, no server): wall time of each
append of a ``--journal-line``-byte record (default 1,300, as a change at 1,024 CPUs writes),
two ways side by side in one run and one directory (``--journal-dir``, default the system's
temporary directory), alternating which goes first: *growing*, the append as it was before the
NUL padding (``os.write`` at the end of the file, ``fdatasync``, the reachability ``stat``: the
file grows, so every ``fdatasync`` also commits its size), and *pre-zeroed*,
``JournaledStore.append`` (the line written over the journal's zeroed chunk, then
``fdatasync``; one append per chunk also adds the next chunk, counted apart).  The cost is the
disk's, not instructions: besides wall time it counts the block device's write requests, sectors
and flushes around each append (``/sys/dev/block/M:m/stat``, device-wide), which other processes'
CPU load does not move.  Whether the growing way pays a journal commit depends on the filesystem
(ext4 with a journal: yes; see BENCHMARKS.md).  ``--journal-fs ext4-loop`` (root) runs the same
appends on a freshly made, journaled ext4: a 512 MiB sparse image, ``mkfs.ext4 -q``, loop-mounted
for the run and removed after it (``bench.ext4_loop``); ``--journal-fs dir`` (default) uses the
directory's own filesystem.  ``python -m bench`` prints both as the ``journal`` and ``journal-ext4``
sections (the second skipped, with the reason, when not root).

This module is a measuring tool: it must not be imported by product code or by tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import json
import os
import random
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench import proc
from bench.ext4_loop import IMAGE_BYTES, Ext4LoopUnavailable, describe, ext4_loop
from servicekit import certs, tls

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGY = ROOT / "numaguard_cli" / "scenarios" / "dual-socket-ht-32.json"
SEED_SCENARIO = ROOT / "numaguard_cli" / "scenarios" / "seed-1-tightly-coupled-database.yaml"
CONCURRENCY = (1, 16)
WARMUP = 20
TARGET_P99_MS_AT_16 = 15.0
HELD_PODS = 250
HELD_WINDOW = 25
HELD_MACHINE = (8, 64)  # NUMA nodes, cores per NUMA node (x 2 threads = 1,024 CPUs)
TARGET_HELD_RATIO = 1.2
TARGET_HELD_P99_MS = 5.0
HELD_SAMPLES = 400  # allocations at each count, side by side (python -m bench)
QUICK_HELD_SAMPLES = 200  # the same for python -m bench --quick
PAIR_BLOCK = 10  # allocations in a row on one enforcer before the other's turn (see _pair)
SHARED_PODS = 100  # Burstable pods following the default set in the second side-by-side comparison
PAIR_SEED = 16  # which held pods the side-by-side samples release (see _pair)


@dataclass(frozen=True)
class Row:
    clients: int
    operation: str
    requests: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    per_second: float
    server_cpu_ms: float | None = None  # the enforcer process's CPU time (all threads) per request


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _pod(index: int) -> dict[str, Any]:
    resources = {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"bench-{index}", "namespace": "bench", "uid": str(uuid.uuid4())},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": resources}]},
    }


def _synthetic_topology(workdir: Path) -> Path:
    from enforcer.topology import synthetic  # a bench input, built with the product's own generator

    numa_nodes, cores = HELD_MACHINE
    path = workdir / "synthetic-topology.json"
    path.write_text(json.dumps(synthetic.regular(numa_nodes, cores_per_numa=cores).to_document()))
    return path


@contextlib.contextmanager
def enforcer_process(
    workdir: Path, *, topology: Path = TOPOLOGY, root: Path = ROOT
) -> Iterator[tuple[str, certs.Bundle, int]]:
    """The enforcer in a process of its own: its base URL, the certificates, its pid (for its CPU time)."""
    bundle = certs.issue_bundle(workdir / "certs")
    node = yaml.safe_load(SEED_SCENARIO.read_text())["node"]
    node["topologyFile"] = str(topology)
    config = workdir / "enforcer.yaml"
    config.write_text(yaml.safe_dump({"node": node, "reconcileInterval": 0}))
    port = _free_port()
    command = [
        sys.executable, "-m", "numaguard_cli.main", "enforcer", "--config", str(config),
        "--standalone", "--dry-run-cgroups", "--listen", f"127.0.0.1:{port}",
        "--state-dir", str(workdir / "state"), "--log-level", "warning",
        "--tls-cert", str(bundle.cert("enforcer")), "--tls-key", str(bundle.key("enforcer")),
        "--client-ca", str(bundle.cert("ca")),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMAGUARD_ENFORCER_")}
    if root != ROOT:
        env["PYTHONPATH"] = str(root)  # ``-m`` from ``root`` imports that checkout's packages first
    process = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"https://localhost:{port}"
    try:
        _wait_ready(base_url, bundle, process)
        yield base_url, bundle, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def _wait_ready(base_url: str, bundle: certs.Bundle, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    with httpx.Client(verify=tls.client_context(bundle.cert("ca"))) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the enforcer exited with {process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{base_url}/readyz").status_code == 200:
                    return
            time.sleep(0.1)  # a benchmark's start-up poll, not test synchronisation
    raise RuntimeError("the enforcer did not become ready within 60s")


class RawHTTPS:
    """One keep-alive HTTP/1.1 connection over TLS; just enough HTTP for this benchmark."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.last_headers: dict[str, str] = {}  # the last answer's headers, names lower-cased

    @classmethod
    async def connect(cls, base_url: str, context: ssl.SSLContext) -> RawHTTPS:
        host, _, port = base_url.removeprefix("https://").partition(":")
        reader, writer = await asyncio.open_connection(host, int(port), ssl=context, server_hostname=host)
        return cls(reader, writer)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(body)}\r\n"
        if body:
            head += "Content-Type: application/json\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        status_and_headers = await self.reader.readuntil(b"\r\n\r\n")
        lines = status_and_headers.decode("latin-1").split("\r\n")
        self.last_headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:] if line)
        }
        length = int(self.last_headers["content-length"])
        return int(lines[0].split()[1]), await self.reader.readexactly(length)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ssl.SSLError, ConnectionError):
            await self.writer.wait_closed()


class HTTPXClient:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    @classmethod
    async def connect(cls, base_url: str, context: ssl.SSLContext) -> HTTPXClient:
        return cls(httpx.AsyncClient(base_url=base_url, verify=context, timeout=30))

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"} if body else None
        response = await self.client.request(method, path, content=body or None, headers=headers)
        return response.status_code, response.content

    async def close(self) -> None:
        await self.client.aclose()


CLIENTS: dict[str, type[RawHTTPS] | type[HTTPXClient]] = {"raw": RawHTTPS, "httpx": HTTPXClient}


async def _client(
    base_url: str,
    bundle: certs.Bundle,
    index: int,
    repeats: int,
    allocate: list[float],
    release: list[float],
    kind: str,
) -> None:
    identity = "webhook-client"
    context = tls.client_context(bundle.cert("ca"), cert=bundle.cert(identity), key=bundle.key(identity))
    client = await CLIENTS[kind].connect(base_url, context)
    try:
        for round_ in range(WARMUP + repeats):
            pod = _pod(index * 1_000_000 + round_)
            body = json.dumps({"pod": pod, "nodeName": "node-a"}).encode()
            started = time.perf_counter()
            status, answer = await client.request("POST", "/allocations", body)
            allocated = time.perf_counter()
            if status != 201:
                raise RuntimeError(f"allocation failed: {status} {answer!r}")
            status, answer = await client.request("DELETE", f"/allocations/{pod['metadata']['uid']}")
            done = time.perf_counter()
            if status != 200:
                raise RuntimeError(f"release failed: {status} {answer!r}")
            if round_ >= WARMUP:
                allocate.append(allocated - started)
                release.append(done - allocated)
    finally:
        await client.close()


def _row(clients: int, operation: str, samples: list[float], elapsed: float) -> Row:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return Row(
        clients=clients,
        operation=operation,
        requests=len(samples),
        p50_ms=statistics.median(ordered) * 1000,
        p99_ms=p99 * 1000,
        max_ms=ordered[-1] * 1000,
        per_second=len(samples) / elapsed,
    )


async def _measure(base_url: str, bundle: certs.Bundle, clients: int, repeats: int, kind: str) -> list[Row]:
    allocate: list[float] = []
    release: list[float] = []
    started = time.perf_counter()
    await asyncio.gather(*(_client(base_url, bundle, i, repeats, allocate, release, kind) for i in range(clients)))
    elapsed = time.perf_counter() - started
    return [_row(clients, "allocate", allocate, elapsed), _row(clients, "release", release, elapsed)]


async def _repost_client(
    base_url: str, bundle: certs.Bundle, index: int, repeats: int, latencies: list[float], kind: str
) -> None:
    """Allocate one pod, then send the same allocation again and again: each answer is the idempotent
    one (200, the allocation held), which runs everything but the decision and the durable write."""
    identity = "webhook-client"
    context = tls.client_context(bundle.cert("ca"), cert=bundle.cert(identity), key=bundle.key(identity))
    client = await CLIENTS[kind].connect(base_url, context)
    pod = _pod(900_000_000 + index)
    body = json.dumps({"pod": pod, "nodeName": "node-a"}).encode()
    try:
        status, answer = await client.request("POST", "/allocations", body)
        if status != 201:
            raise RuntimeError(f"allocation failed: {status} {answer!r}")
        for round_ in range(WARMUP + repeats):
            started = time.perf_counter()
            status, answer = await client.request("POST", "/allocations", body)
            if status != 200:
                raise RuntimeError(f"re-allocation failed: {status} {answer!r}")
            if round_ >= WARMUP:
                latencies.append(time.perf_counter() - started)
        await client.request("DELETE", f"/allocations/{pod['metadata']['uid']}")
    finally:
        await client.close()


async def _measure_floor(base_url: str, bundle: certs.Bundle, clients: int, repeats: int, kind: str) -> Row:
    latencies: list[float] = []
    started = time.perf_counter()
    await asyncio.gather(*(_repost_client(base_url, bundle, i, repeats, latencies, kind) for i in range(clients)))
    return _row(clients, "re-post", latencies, time.perf_counter() - started)


def run(repeats: int = 200, client: str = "raw", *, root: Path = ROOT, floor: bool = False) -> list[Row]:
    """Rows for 1 and 16 concurrent clients: allocation and release latency percentiles.

    ``floor``: also the idempotent re-allocation of a held pod (``re-post``): TLS, HTTP, the framework,
    authentication, parsing the pod and the answer, but no decision and no write; what the stack
    costs per request before the enforcer does any work."""
    rows: list[Row] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-enforcer-") as workdir,
        enforcer_process(Path(workdir), root=root) as (base_url, bundle, pid),
    ):
        for clients in CONCURRENCY:
            before = proc.cpu_seconds(pid)
            measured = asyncio.run(_measure(base_url, bundle, clients, repeats, client))
            rows += _with_server_cpu(measured, proc.cpu_seconds(pid) - before, repeats)
            if floor:
                before = proc.cpu_seconds(pid)
                measured = [asyncio.run(_measure_floor(base_url, bundle, clients, repeats, client))]
                rows += _with_server_cpu(measured, proc.cpu_seconds(pid) - before, repeats)
    return rows


def _with_server_cpu(rows: list[Row], spent: float, repeats: int) -> list[Row]:
    """``rows`` with the enforcer's CPU time (``spent`` seconds, every thread) per request sent.

    Every client sends ``WARMUP`` unmeasured rounds before its ``repeats`` measured ones, and the
    CPU time covers both, so the requests counted are the rows' times ``(WARMUP + repeats) / repeats``.
    CPU time is what a shared machine changes least: other processes delay the enforcer, they do not
    make it compute more (cache and frequency effects aside)."""
    sent = sum(r.requests for r in rows) * (WARMUP + repeats) / repeats
    return [dataclasses.replace(r, server_cpu_ms=spent / sent * 1000) for r in rows]


@dataclass(frozen=True)
class HeldCurve:
    """Allocation latency (seconds) of each of ``HELD_PODS`` pods allocated in turn and all kept, per run.

    A window pools the same pods of every run (``--held-repeats``), so its p99 is not just one
    sample: the p99 of 25 samples is their maximum, which one stall of a shared machine decides.
    """

    runs: tuple[tuple[float, ...], ...]

    @property
    def pods(self) -> int:
        return len(self.runs[0])

    def window(self, start: int) -> Row:
        samples = [x for run in self.runs for x in (run[start : start + HELD_WINDOW] if start >= 0 else run[start:])]
        return _row(1, "allocate", samples, sum(samples))

    @property
    def first(self) -> Row:
        return self.window(0)

    @property
    def last(self) -> Row:
        return self.window(-HELD_WINDOW)

    @property
    def p99_ratio(self) -> float:
        return self.last.p99_ms / self.first.p99_ms


async def _hold(
    base_url: str,
    bundle: certs.Bundle,
    pods: int,
    *,
    after_warmup: Callable[[], None] | None = None,
    phases: list[dict[str, float]] | None = None,
) -> tuple[float, ...]:
    """Allocate ``pods`` pods in turn, keeping each: the round trips (s).

    ``phases``, when given, receives each measured answer's Server-Timing phases (ms)."""
    identity = "webhook-client"
    context = tls.client_context(bundle.cert("ca"), cert=bundle.cert(identity), key=bundle.key(identity))
    client = await RawHTTPS.connect(base_url, context)
    latencies: list[float] = []
    try:
        for index in range(-WARMUP, 0):  # warm the connection and the server's caches; nothing stays held
            pod = _pod(index)
            status, answer = await client.request(
                "POST", "/allocations", json.dumps({"pod": pod, "nodeName": "node-a"}).encode()
            )
            status, answer = await client.request("DELETE", f"/allocations/{pod['metadata']['uid']}")
            if status != 200:
                raise RuntimeError(f"warm-up failed: {status} {answer!r}")
        if after_warmup is not None:
            await asyncio.to_thread(after_warmup)
        for index in range(pods):
            latencies.append(await _allocate_timed(client, _pod(index)))
            if phases is not None:
                phases.append(server_timing(client.last_headers.get("server-timing", "")))
    finally:
        await client.close()
    return tuple(latencies)


def held_curve(pods: int = HELD_PODS, *, repeats: int = 1, root: Path = ROOT) -> HeldCurve:
    """Allocate ``pods`` pods one after another on the 1,024-CPU machine, keeping every one; ``repeats`` runs."""
    runs = []
    for _ in range(repeats):  # a fresh enforcer and state each run
        with tempfile.TemporaryDirectory(prefix="bench-enforcer-held-") as workdir:
            topology = _synthetic_topology(Path(workdir))
            with enforcer_process(Path(workdir), topology=topology, root=root) as (base_url, bundle, _):
                runs.append(asyncio.run(_hold(base_url, bundle, pods)))
    return HeldCurve(tuple(runs))


@dataclass(frozen=True)
class NodeMix:
    """What one enforcer of a side-by-side comparison holds: Guaranteed one-CPU pods, and Burstable pods.

    The Burstable pods run on the node's default set, so every exclusive allocation or release
    changes what their cgroups must hold (they *follow* the default set)."""

    guaranteed: int
    shared: int = 0

    def __str__(self) -> str:
        held = f"{self.guaranteed} pods held"
        return held if not self.shared else f"{held} + {self.shared} shared-pool pods"


@dataclass(frozen=True)
class Paired:
    """Allocation round trips (s) on two enforcers of the same 1,024-CPU machine holding different mixes.

    Measured side by side, in turns of ``PAIR_BLOCK`` samples per enforcer (the order of the two
    alternating), each sample one new one-CPU pod allocated and then one of the held Guaranteed pods
    chosen at random released: both hold their mix throughout, their states keep changing as a
    churning node's do, a turn is a burst of back-to-back bindings as one node gets them, and any
    disturbance of the shared machine falls on both alike.  The enforcer whose turn it is not is frozen
    (SIGSTOP, :func:`_turns`), so its background work lands in its own turns, not in the other's.
    A frozen enforcer's clocks run on, so a cgroup pass that was stepping aside when frozen may find
    its budget spent when it thaws and run through its own turn's allocations: that overstates the
    tail of a node with much background work (the shared-pool mix), it never flatters it.
    This is what "cost flat in pods held"
    asks, and unlike windows of one filling run (the ``--held`` curve) every sample is taken at the
    same count."""

    mixes: tuple[NodeMix, NodeMix]
    samples: tuple[tuple[float, ...], tuple[float, ...]]

    def row(self, side: int) -> Row:
        return _row(1, "allocate", list(self.samples[side]), sum(self.samples[side]))

    @property
    def p99_ratio(self) -> float:
        return self.row(1).p99_ms / self.row(0).p99_ms

    @property
    def p50_ratio(self) -> float:
        return self.row(1).p50_ms / self.row(0).p50_ms


def _shared_pod(index: int) -> dict[str, Any]:
    """A Burstable pod of the node's shared pool (100m CPU, no limits)."""
    pod = _pod(index)
    pod["metadata"]["name"] = f"shared-{index}"
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    return pod


async def _allocate_timed(client: RawHTTPS, pod: dict[str, Any]) -> float:
    """``pod`` allocated: the round trip (s)."""
    body = json.dumps({"pod": pod, "nodeName": "node-a"}).encode()
    started = time.perf_counter()
    status, answer = await client.request("POST", "/allocations", body)
    elapsed = time.perf_counter() - started
    if status != 201:
        raise RuntimeError(f"allocation of {pod['metadata']['name']} failed: {status} {answer!r}")
    return elapsed


async def _release(client: RawHTTPS, uid: str) -> None:
    status, answer = await client.request("DELETE", f"/allocations/{uid}")
    if status != 200:
        raise RuntimeError(f"release of {uid} failed: {status} {answer!r}")


@contextlib.contextmanager
def _turns(pids: tuple[int, int]) -> Iterator[Callable[[int], None]]:
    """``turn(side)``: run that side's enforcer and freeze the other (SIGSTOP), so neither one's background
    work (cgroup passes, GC) runs during the other's measured turn; its own turn then carries it, as a node
    would.  Both run again afterwards, however the block ends."""

    def turn(side: int) -> None:
        os.kill(pids[1 - side], signal.SIGSTOP)
        os.kill(pids[side], signal.SIGCONT)

    try:
        yield turn
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


async def _pair(
    servers: list[tuple[str, certs.Bundle]], mixes: tuple[NodeMix, NodeMix], samples: int, pids: tuple[int, int]
) -> Paired:
    identity = "webhook-client"
    clients = []
    for base_url, bundle in servers:
        context = tls.client_context(bundle.cert("ca"), cert=bundle.cert(identity), key=bundle.key(identity))
        clients.append(await RawHTTPS.connect(base_url, context))
    measured: tuple[list[float], list[float]] = ([], [])
    held: tuple[list[str], list[str]] = ([], [])  # the Guaranteed pods, which the samples release
    choose = random.Random(PAIR_SEED)
    try:
        for side, mix in enumerate(mixes):  # fill, not timed
            for index in range(mix.shared):
                await _allocate_timed(clients[side], _shared_pod(index))
            for index in range(mix.guaranteed):
                pod = _pod(index)
                await _allocate_timed(clients[side], pod)
                held[side].append(pod["metadata"]["uid"])
        with _turns(pids) as turn:
            for block in range(-(-(WARMUP + samples) // PAIR_BLOCK)):
                for side in (0, 1) if block % 2 == 0 else (1, 0):
                    turn(side)
                    for offset in range(PAIR_BLOCK):
                        index = block * PAIR_BLOCK + offset
                        pod = _pod(1_000_000 + index)
                        elapsed = await _allocate_timed(clients[side], pod)
                        # release a pod chosen at random, not the new one: the node keeps its count, but its
                        # free CPUs and memory move, so no decision meets a state an earlier one left (whose
                        # hints the engine would have kept: a churning node's decisions rarely repeat one)
                        gone = held[side].pop(choose.randrange(len(held[side])))
                        held[side].append(pod["metadata"]["uid"])
                        await _release(clients[side], gone)
                        if WARMUP <= index < WARMUP + samples:
                            measured[side].append(elapsed)
    finally:
        for client in clients:
            await client.close()
    return Paired(mixes, (tuple(measured[0]), tuple(measured[1])))


def side_by_side(
    mixes: tuple[NodeMix, NodeMix], *, samples: int = 300, root: Path = ROOT, roots: tuple[Path, Path] | None = None
) -> Paired:
    """Allocation latency on two enforcers of the 1,024-CPU machine holding ``mixes``, side by side (see Paired).

    ``roots``: each side's enforcer from its own checkout (a before/after measured in one run; the
    mixes then usually equal), instead of both from ``root``."""
    with contextlib.ExitStack() as stack:
        servers, pids = [], []
        for side, tree in zip(("a", "b"), roots or (root, root), strict=True):
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-enforcer-{side}-")))
            topology = _synthetic_topology(workdir)
            base_url, bundle, pid = stack.enter_context(enforcer_process(workdir, topology=topology, root=tree))
            servers.append((base_url, bundle))
            pids.append(pid)
        return asyncio.run(_pair(servers, mixes, samples, (pids[0], pids[1])))


HELD_MIXES = (NodeMix(HELD_WINDOW), NodeMix(HELD_PODS))
"""Cost against pods held: 25 against 250 (the issue's goal: the p99 at 250 within 1.2x the p99 at 25)."""
SHARED_MIXES = (NodeMix(HELD_WINDOW), NodeMix(HELD_WINDOW, SHARED_PODS))
"""Cost against the pods that follow the default set: none against 100 (each allocation changes their cpusets)."""


SERVER_SERIES = {
    "in the app (request)": (
        "numaguard_enforcer_request_duration_seconds",
        {"method": "POST", "route": "/allocations"},
    ),
    "decision (lock held)": ("numaguard_enforcer_decision_duration_seconds", {"operation": "allocate"}),
    "durable write": ("numaguard_enforcer_state_write_duration_seconds", {}),
}
"""The enforcer's own histograms an allocation passes through, outermost first (``enforcer.service.metrics``)."""
WHERE_BOUNDS_MS = (1.0, 2.5, 5.0, 10.0, 25.0)
WHERE_SLOWEST = 5


def server_timing(header: str) -> dict[str, float]:
    """A ``Server-Timing`` header's phases (ms), in order: ``read;dur=0.4, decide;dur=1.5`` -> {"read": 0.4, ...}."""
    phases = {}
    for entry in filter(None, (part.strip() for part in header.split(","))):
        name, _, params = entry.partition(";")
        duration = next((p.split("=", 1)[1] for p in params.split(";") if p.strip().startswith("dur=")), "0")
        phases[name.strip()] = float(duration)
    return phases


@dataclass(frozen=True)
class HeldWhere:
    """Where the held curve's time goes: the client's latencies and, over the same allocations, the server's buckets.

    ``server[name][bound]`` counts the observations of that series at or under ``bound`` ms
    (the histograms' own buckets, so no finer than they are); the warm-up is excluded by
    scraping ``/metrics`` (read-only identity) after it and after the run.
    """

    client_ms: tuple[float, ...]
    server: dict[str, dict[float, int]]
    phases: tuple[dict[str, float], ...]  # each allocation's Server-Timing (ms), in the order of client_ms

    def slowest(self, count: int) -> list[tuple[float, dict[str, float]]]:
        """The ``count`` slowest round trips with their phases, plus ``outside`` (round trip - the phases' sum)."""
        pairs = sorted(zip(self.client_ms, self.phases, strict=True), key=lambda pair: pair[0], reverse=True)
        return [(ms, {**phases, "outside": ms - sum(phases.values())}) for ms, phases in pairs[:count]]

    def medians(self) -> dict[str, float]:
        """The median round trip and the median of each phase (and of ``outside``), each over every allocation."""
        pairs = zip(self.client_ms, self.phases, strict=True)
        split = [{**phases, "outside": ms - sum(phases.values())} for ms, phases in pairs]
        names = list(split[0]) if split else []
        return {"round trip": statistics.median(self.client_ms)} | {
            name: statistics.median(each[name] for each in split) for name in names
        }


def _scrape_buckets(base_url: str, bundle: certs.Bundle) -> dict[str, dict[float, int]]:
    identity = "metrics-client"
    context = tls.client_context(bundle.cert("ca"), cert=bundle.cert(identity), key=bundle.key(identity))
    with httpx.Client(verify=context) as client:
        response = client.get(f"{base_url}/metrics")
    response.raise_for_status()
    wanted = {metric: (name, labels) for name, (metric, labels) in SERVER_SERIES.items()}
    counts: dict[str, dict[float, int]] = {name: {} for name in SERVER_SERIES}
    for family in text_string_to_metric_families(response.text):
        if family.name not in wanted:
            continue
        name, labels = wanted[family.name]
        for sample in family.samples:
            if sample.name.endswith("_bucket") and all(sample.labels.get(k) == v for k, v in labels.items()):
                bound = float(sample.labels["le"]) * 1000
                counts[name][bound] = counts[name].get(bound, 0) + int(sample.value)
    return counts


def held_where(pods: int = 100, *, root: Path = ROOT) -> HeldWhere:
    """One run of the held curve on the 1,024-CPU machine, with the server's histograms over the same allocations."""
    with tempfile.TemporaryDirectory(prefix="bench-enforcer-where-") as workdir:
        topology = _synthetic_topology(Path(workdir))
        with enforcer_process(Path(workdir), topology=topology, root=root) as (base_url, bundle, _):
            before: dict[str, dict[float, int]] = {}

            def scrape_before() -> None:
                before.update(_scrape_buckets(base_url, bundle))

            phases: list[dict[str, float]] = []
            latencies = asyncio.run(_hold(base_url, bundle, pods, after_warmup=scrape_before, phases=phases))
            after = _scrape_buckets(base_url, bundle)
    server = {
        name: {bound: count - before[name].get(bound, 0) for bound, count in after[name].items()} for name in after
    }
    return HeldWhere(tuple(x * 1000 for x in latencies), server, tuple(phases))


def pair_rows(pair: Paired) -> list[dict[str, str]]:
    """Lines for ``python -m bench``: allocation latency on the two mixes, side by side, and the ratio."""
    first, second = pair.row(0), pair.row(1)
    section = "enforcer allocation, 1,024 CPUs, 1 client, two nodes side by side"
    single = max(first.p99_ms, second.p99_ms) <= TARGET_HELD_P99_MS
    return [
        {
            "section": section,
            "case": f"{pair.mixes[0]}, {first.requests} allocations",
            "ours": f"{first.p50_ms:.2f} ms (p99 {first.p99_ms:.2f} ms)",
            "reference": f"target p99 <= {TARGET_HELD_P99_MS:g} ms",
            "ratio": "-",
            "check": "meets target" if first.p99_ms <= TARGET_HELD_P99_MS else "over target",
        },
        {
            "section": section,
            "case": f"{pair.mixes[1]}, {second.requests} allocations",
            "ours": f"{second.p50_ms:.2f} ms (p99 {second.p99_ms:.2f} ms)",
            "reference": f"target p99 <= {TARGET_HELD_RATIO:g}x the row above, <= {TARGET_HELD_P99_MS:g} ms",
            "ratio": f"p99 {pair.p99_ratio:.2f}x, p50 {pair.p50_ratio:.2f}x",
            "check": "meets target" if pair.p99_ratio <= TARGET_HELD_RATIO and single else "over target",
        },
    ]


def table_rows(*, quick: bool = False) -> list[dict[str, str]]:
    """Lines for ``python -m bench``: allocation latency at 1 and 16 clients against the p99 target."""
    rows = run(repeats=30 if quick else 200)
    lines = []
    for row in rows:
        if row.operation != "allocate":
            continue
        at_target = row.clients == 16
        lines.append(
            {
                "section": "enforcer allocation over mTLS, durable",
                "case": f"{row.clients} client{'s' if row.clients > 1 else ''}, {row.requests} allocations",
                "ours": f"{row.p50_ms:.2f} ms (p99 {row.p99_ms:.2f} ms)",
                "reference": f"target p99 <= {TARGET_P99_MS_AT_16:g} ms" if at_target else "-",
                "ratio": "-",
                "check": (
                    ("meets target" if row.p99_ms <= TARGET_P99_MS_AT_16 else "over target")
                    if at_target
                    else f"{row.per_second:.0f} round trips/s"
                ),
            }
        )
    samples = QUICK_HELD_SAMPLES if quick else HELD_SAMPLES
    return (
        lines
        + pair_rows(side_by_side(HELD_MIXES, samples=samples))
        + pair_rows(side_by_side(SHARED_MIXES, samples=samples))
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=200, help="allocations per client (after a warm-up)")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="raw", help="HTTP client (see the docstring)")
    parser.add_argument("--held", type=int, metavar="PODS", help=f"only the cost-vs-pods-held curve (e.g. {HELD_PODS})")
    parser.add_argument("--held-repeats", type=int, default=1, metavar="N", help="runs of the curve to pool")
    parser.add_argument(
        "--held-pair",
        type=int,
        metavar="SAMPLES",
        help=f"allocations at {HELD_WINDOW} and at {HELD_PODS} pods held, side by side (two enforcers)",
    )
    parser.add_argument(
        "--shared-pair",
        type=int,
        metavar="SAMPLES",
        help=f"allocations with no and with {SHARED_PODS} shared-pool pods on the node, side by side",
    )
    parser.add_argument(
        "--against",
        type=Path,
        metavar="CHECKOUT",
        help="with --held-pair/--shared-pair: both nodes hold the larger mix, the first runs CHECKOUT's enforcer "
        "(before) and the second --enforcer-root's (after), side by side in one run",
    )
    parser.add_argument("--enforcer-root", type=Path, default=ROOT, help="run the enforcer from this checkout")
    parser.add_argument(
        "--held-where", type=int, metavar="PODS", help="the curve's client latencies next to the server's histograms"
    )
    parser.add_argument("--held-split", type=int, metavar="PODS", help="the curve's CPU time by part, in-process")
    parser.add_argument("--no-freeze", action="store_true", help="--held-split without the start-up gc.freeze()")
    parser.add_argument(
        "--floor", action="store_true", help="also re-send a held pod's allocation (no decision, no write)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="what `python -m bench --quick` measures here: 30 allocations per client, then --held-pair 200",
    )
    parser.add_argument(
        "--repost-in-process", action="store_true", help="function calls and CPU per re-sent allocation, in-process"
    )
    parser.add_argument(
        "--pairs-in-process", type=int, metavar="N", help="event-loop CPU per allocation + release, in-process"
    )
    parser.add_argument("--large", action="store_true", help="--pairs-in-process on the 1,024-CPU machine")
    parser.add_argument("--journal-appends", type=int, metavar="N", help="journal append, growing vs pre-zeroed")
    parser.add_argument("--journal-line", type=int, default=1300, metavar="BYTES", help="--journal-appends line size")
    parser.add_argument("--journal-dir", type=Path, help="--journal-appends directory (default: the temp directory)")
    parser.add_argument(
        "--journal-fs",
        choices=JOURNAL_FILESYSTEMS,
        default="dir",
        help="--journal-appends on the directory's filesystem, or on a fresh journaled ext4 loop image (root)",
    )
    args = parser.parse_args(argv)
    if args.journal_appends:
        try:
            result = journal_appends_on(
                args.journal_fs, args.journal_appends, line=args.journal_line, directory=args.journal_dir
            )
        except Ext4LoopUnavailable as err:
            print(f"bench_enforcer: --journal-fs ext4-loop: {err}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM during --journal-fs ext4-loop: cleaned up on the way here
            print("bench_enforcer: interrupted", file=sys.stderr)
            return 130
        return _print_journal(result)
    if args.repost_in_process:
        calls, cpu_ms = repost_in_process()
        print(f"re-sent allocation through the ASGI app: {calls:.0f} function calls, {cpu_ms:.3f} ms CPU per request")
        return 0
    if args.pairs_in_process:
        cpu_ms = pairs_in_process(args.pairs_in_process, large=args.large)
        print(f"allocation + release through the ASGI app: {cpu_ms:.3f} ms event-loop CPU per pair")
        return 0
    if args.held_where:
        return _print_where(
            [held_where(args.held_where, root=args.enforcer_root.resolve()) for _ in range(args.held_repeats)]
        )
    if args.held_split:
        return _print_split(held_split(args.held_split, freeze=not args.no_freeze))
    if args.held:
        return _print_held(held_curve(args.held, repeats=args.held_repeats, root=args.enforcer_root.resolve()))
    if args.held_pair or args.shared_pair:
        mixes, samples = (HELD_MIXES, args.held_pair) if args.held_pair else (SHARED_MIXES, args.shared_pair)
        if args.against is None:
            return _print_pair(side_by_side(mixes, samples=samples, root=args.enforcer_root.resolve()))
        roots = (args.against.resolve(), args.enforcer_root.resolve())
        pair = side_by_side((mixes[1], mixes[1]), samples=samples, roots=roots)
        print(f"first: {roots[0]}; second: {roots[1]}")
        return _print_pair(pair)
    repeats = 30 if args.quick else args.repeats
    rows = run(repeats, args.client, root=args.enforcer_root.resolve(), floor=args.floor)
    print(
        f"{'clients':>7} {'operation':>9} {'requests':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'per s':>8} "
        f"{'server CPU ms/request':>22}"
    )
    for row in rows:
        print(
            f"{row.clients:>7} {row.operation:>9} {row.requests:>8} {row.p50_ms:>8.2f} {row.p99_ms:>8.2f} "
            f"{row.max_ms:>8.2f} {row.per_second:>8.0f} {row.server_cpu_ms or 0:>22.3f}"
        )
    at_16 = next(r for r in rows if r.clients == 16 and r.operation == "allocate")
    verdict = "meets" if at_16.p99_ms <= TARGET_P99_MS_AT_16 else "misses"
    print(f"allocation p99 at 16 clients: {at_16.p99_ms:.2f} ms ({verdict} the {TARGET_P99_MS_AT_16:g} ms target)")
    if args.quick:
        return _print_pair(side_by_side(HELD_MIXES, samples=QUICK_HELD_SAMPLES, root=args.enforcer_root.resolve()))
    return 0


_PEER = {
    "common_name": certs.WEBHOOK_CLIENT_IDENTITY, "subject": {}, "issuer": {}, "serial_number": "1",
    "not_before": "", "not_after": "", "dns_names": [], "extended_key_usages": [tls.CLIENT_AUTH_USAGE],
}  # fmt: skip


async def _asgi_call(app: Any, method: str, path: str, body: bytes = b"") -> int:
    """One request through ``app`` in this process, as the webhook's client certificate; its status."""
    headers = [(b"host", b"localhost"), (b"content-length", str(len(body)).encode())]
    if body:
        headers.append((b"content-type", b"application/json"))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "https",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8443), "extensions": {tls.SCOPE_PEER_EXTENSION: _PEER},
    }  # fmt: skip
    delivered = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:
            await asyncio.Event().wait()  # the request has no more body; nothing disconnects
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


def _in_process_app(workdir: Path, topology: Path) -> Any:
    """The enforcer's app as ``numaguard enforcer --standalone --dry-run-cgroups`` builds it, state in ``workdir``."""
    from enforcer.cgroups import recording
    from enforcer.service import main as service_main
    from enforcer.service import settings as service_settings

    node = yaml.safe_load(SEED_SCENARIO.read_text())["node"]
    settings = service_settings.load(
        env={},
        overrides={
            "node_name": "node-a", "kubelet": node["kubelet"], "topology_file": topology,
            "state_dir": workdir / "state", "standalone": True, "dry_run_cgroups": True, "reconcile_interval": 0,
        },
    )  # fmt: skip
    return service_main.create_app(settings, cgroup_driver=recording.RecordingCgroupDriver(auto_create=True))


def repost_in_process(requests: int = 2000, passes: int = 5) -> tuple[float, float]:
    """A held pod's allocation re-sent through the enforcer's ASGI app in this process (no TLS, no uvicorn):
    Python function calls per request (deterministic, from ``cProfile``) and CPU ms per request (min of
    ``passes``).  The framework, authentication (a webhook certificate in the scope), parsing, the
    lock and the answer: what the allocation routes cost before the decision and the write.

    Runs whatever ``enforcer`` this interpreter imports: ``PYTHONPATH=<other checkout> python
    bench/bench_enforcer.py --repost-in-process`` measures another build with the same driver."""
    import cProfile
    import pstats

    body = json.dumps({"pod": _pod(0), "nodeName": "node-a"}).encode()

    async def measure(workdir: Path) -> tuple[float, float]:
        app = _in_process_app(workdir, TOPOLOGY)
        async with app.router.lifespan_context(app):
            if await _asgi_call(app, "POST", "/allocations", body) != 201:
                raise RuntimeError("the first allocation was refused")
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(100):
                await _asgi_call(app, "POST", "/allocations", body)
            profile.disable()
            calls = pstats.Stats(profile).total_calls / 100  # type: ignore[attr-defined]
            best = float("inf")
            for _ in range(passes):
                started = time.process_time()
                for _ in range(requests):
                    if await _asgi_call(app, "POST", "/allocations", body) != 200:
                        raise RuntimeError("a re-sent allocation was not answered 200")
                best = min(best, (time.process_time() - started) / requests)
            return calls, best * 1000

    with tempfile.TemporaryDirectory(prefix="bench-enforcer-repost-") as workdir:
        return asyncio.run(measure(Path(workdir)))


def pairs_in_process(pairs: int, *, large: bool = False) -> float:
    """``pairs`` allocations of new pods, each released again, through the ASGI app in this process, after
    50 unmeasured ones: the event loop thread's CPU ms per pair (the durable write included, on its
    executor thread; the cgroup reconciler is stopped, so it takes no turns in between).

    ``large``: on the 1,024-CPU machine of the held curve instead of the seed node.  Under ``valgrind
    --tool=callgrind`` two runs with different ``pairs`` give instructions per pair (their difference
    over the difference of ``pairs``), a figure other processes on the machine cannot move; with
    ``PYTHONPATH=<other checkout>`` (run from there) it counts another build with the same driver."""

    async def measure(workdir: Path) -> float:
        app = _in_process_app(workdir, _synthetic_topology(workdir) if large else TOPOLOGY)
        async with app.router.lifespan_context(app):
            app.state.service.reconciler.stop()

            async def pair(index: int) -> None:
                pod = _pod(index)
                body = json.dumps({"pod": pod, "nodeName": "node-a"}).encode()
                if await _asgi_call(app, "POST", "/allocations", body) != 201:
                    raise RuntimeError(f"allocation {index} was refused")
                if await _asgi_call(app, "DELETE", f"/allocations/{pod['metadata']['uid']}") != 200:
                    raise RuntimeError(f"release {index} failed")

            for index in range(50):
                await pair(index)
            started = time.thread_time()
            for index in range(pairs):
                await pair(50 + index)
            return (time.thread_time() - started) / pairs * 1000

    with tempfile.TemporaryDirectory(prefix="bench-enforcer-pairs-") as workdir:
        return asyncio.run(measure(Path(workdir)))


def held_split(pods: int = HELD_PODS, *, freeze: bool = True) -> dict[str, tuple[float, float]]:
    """In one process, CPU time per allocation (first and last window medians, ms): engine, the rest, reconcile.

    ``time.process_time`` over the service's synchronous path (decide, journal append) and one
    reconcile pass of what the change queued, with a recording cgroup driver; less sensitive
    to other processes on the machine than wall time.
    """
    from enforcer.cgroups import recording
    from enforcer.engine import config as engine_config
    from enforcer.engine.node import NodeEngine
    from enforcer.service import runtime, startup
    from enforcer.service.metrics import EnforcerMetrics
    from enforcer.service.node_service import NodeService
    from enforcer.service.reconciler import CgroupLayout
    from enforcer.state import journal
    from enforcer.topology import synthetic
    from shared.resources import ContainerResources, PodResources, Resources

    config = engine_config.from_kubelet(yaml.safe_load(SEED_SCENARIO.read_text())["node"]["kubelet"])
    topology = synthetic.regular(HELD_MACHINE[0], cores_per_numa=HELD_MACHINE[1])
    engine_seconds = [0.0]
    admit = NodeEngine.admit

    def timed_admit(engine: NodeEngine, pod: PodResources) -> Any:
        started = time.process_time()
        try:
            return admit(engine, pod)
        finally:
            engine_seconds[0] += time.process_time() - started

    one_cpu = Resources({"cpu": 1000, "memory": 256 << 20}, {"cpu": 1000, "memory": 256 << 20})
    totals: list[float] = []
    engine: list[float] = []
    reconcile: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-enforcer-split-") as workdir:
        store = journal.JournaledStore(Path(workdir) / "state.json")
        service = NodeService(
            node_name="node-a",
            topology=topology,
            config=config,
            store=store,
            loaded=startup.load_state(store, topology, config),
            driver=recording.RecordingCgroupDriver(auto_create=True),
            layout=CgroupLayout(driver="systemd", runtime="containerd", all_numa_nodes=tuple(topology.numa_ids)),
            metrics=EnforcerMetrics(),
        )
        if freeze:
            runtime.freeze_startup_heap()  # as the enforcer does once it is up
        pauses: list[float] = []
        began = [0.0]

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                began[0] = time.perf_counter()
            elif info["generation"] == 2:
                pauses.append(time.perf_counter() - began[0])

        gc.callbacks.append(on_gc)
        NodeEngine.admit = timed_admit  # type: ignore[method-assign]
        try:
            for index in range(pods):
                pod = PodResources(
                    uid=f"held-{index}", namespace="bench", name=f"held-{index}",
                    containers=(ContainerResources("main", "app", one_cpu),),
                )  # fmt: skip
                engine_seconds[0] = 0.0
                started = time.process_time()
                service.allocate(pod)
                decided = time.process_time()
                service.reconciler.run_requested()
                totals.append(decided - started)
                engine.append(engine_seconds[0])
                reconcile.append(time.process_time() - decided)
        finally:
            NodeEngine.admit = admit  # type: ignore[method-assign]
            gc.callbacks.remove(on_gc)
            if freeze:
                gc.unfreeze()

    def medians(samples: list[float]) -> tuple[float, float]:
        first, last = samples[:HELD_WINDOW], samples[-HELD_WINDOW:]
        return statistics.median(first) * 1000, statistics.median(last) * 1000

    rest = [t - e for t, e in zip(totals, engine, strict=True)]
    return {
        "engine admit": medians(engine),
        "service (rest)": medians(rest),
        "reconcile pass": medians(reconcile),
        "full GC passes": (float(len(pauses)), max(pauses, default=0.0) * 1000),
    }


def journal_appends(appends: int = 1000, *, line: int = 1300, directory: Path | None = None) -> dict[str, Any]:
    """Per-append wall times (ms), growing against pre-zeroed, interleaved; see the module docstring."""
    from enforcer.state import journal

    with tempfile.TemporaryDirectory(prefix="bench-journal-", dir=directory) as workdir:
        store = journal.JournaledStore(Path(workdir) / "state.json")
        small = journal.JournaledStore(Path(workdir) / "small.json", chunk_bytes=journal.TORN_UNIT)
        store.load(), small.load()
        saves: dict[str, list[float]] = {"first chunk": [], "header only": []}
        for _ in range(5):  # a compaction: the base, the new journal's header and its first chunk of zeros
            for kind, saving in (("first chunk", store), ("header only", small)):
                started = time.perf_counter()
                saving.save({"node": "bench"})
                saves[kind].append((time.perf_counter() - started) * 1000)
        growing_path = Path(workdir) / "growing.journal"
        header, prev = journal.header_line(1)
        growing_path.write_bytes(header)
        fd = os.open(growing_path, os.O_WRONLY | os.O_CLOEXEC)
        os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_END)
        note = "x" * max(0, line - len(journal.record_line(1, prev, [journal.set_op(["pods", "p"], "")])[0]))

        def grow(seq: int, ops: list[dict[str, Any]]) -> str:
            data, checksum = journal.record_line(seq, prev, ops)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fdatasync(fd)
            _reachable = (os.stat(growing_path).st_ino, os.fstat(fd).st_ino)  # as the old append checked
            return checksum

        times: dict[str, list[float]] = {"growing": [], "pre-zeroed": []}
        requests = {kind: [0, 0, 0] for kind in times}  # the device's write requests, sectors written, flushes
        device = _block_device_stat(Path(workdir))
        extended: list[float] = []
        try:
            for index in range(WARMUP + appends):
                ops = [journal.set_op(["pods", f"p{index:06d}"], note)]
                size = store.journal_path.stat().st_size
                for kind in ("growing", "pre-zeroed") if index % 2 == 0 else ("pre-zeroed", "growing"):
                    before = _io_counts(device)
                    started = time.perf_counter()
                    if kind == "growing":
                        prev = grow(index + 1, ops)
                    else:
                        store.append(ops)
                    elapsed = (time.perf_counter() - started) * 1000
                    after = _io_counts(device)
                    if index < WARMUP:
                        continue
                    if kind == "pre-zeroed" and store.journal_path.stat().st_size != size:
                        extended.append(elapsed)
                    else:
                        times[kind].append(elapsed)
                        for slot in range(3):
                            requests[kind][slot] += after[slot] - before[slot]
            line_bytes = store.journal_bytes // (WARMUP + appends)
        finally:
            os.close(fd)
            store.close()
        filesystem = describe(Path(workdir))
    return {
        "times": times, "extended": extended, "saves": saves, "line": line_bytes,
        "requests": requests if device else None, "device": device, "filesystem": filesystem,
    }  # fmt: skip


JOURNAL_FILESYSTEMS = ("dir", "ext4-loop")
JOURNAL_APPENDS, QUICK_JOURNAL_APPENDS = 1000, 200  # each way, for ``python -m bench`` [--quick]


def journal_appends_on(
    filesystem: str, appends: int, *, line: int = 1300, directory: Path | None = None
) -> dict[str, Any]:
    """:func:`journal_appends` in ``directory`` (``dir``) or on a fresh ext4 loop image under it (``ext4-loop``)."""
    if filesystem == "dir":
        result = journal_appends(appends, line=line, directory=directory)
        result["where"] = str(directory or tempfile.gettempdir())
        return result
    if filesystem != "ext4-loop":
        raise ValueError(f"unknown journal filesystem {filesystem!r}, not one of {JOURNAL_FILESYSTEMS}")
    with ext4_loop(directory) as mountpoint:
        result = journal_appends(appends, line=line, directory=mountpoint)
    result["where"] = f"fresh {IMAGE_BYTES >> 20} MiB loop image"
    return result


def journal_rows(result: dict[str, Any]) -> list[dict[str, str]]:
    """Two lines for ``python -m bench``: growing and pre-zeroed appends, with device requests per append."""
    times, requests = result["times"], result["requests"]
    medians = {kind: statistics.median(samples) for kind, samples in times.items()}

    def devices(kind: str) -> str:
        if requests is None:
            return "no block device to count"
        writes, sectors, flushes = (count / len(times[kind]) for count in requests[kind])
        return f"{flushes:.2f} flushes, {writes:.2f} writes, {sectors:.1f} sectors per append"

    rows = []
    for kind, how in (("growing", "write at the end"), ("pre-zeroed", "JournaledStore.append")):
        samples = times[kind]
        rows.append(
            {
                "section": "journal append + fdatasync",
                "case": f"{result['where']} ({result['filesystem']}): {kind} ({how}), {len(samples)} x "
                f"{result['line']} B",
                "ours": f"{medians[kind]:.2f} ms (p99 {_percentile(samples, 0.99):.2f} ms)",
                "reference": "-" if kind == "growing" else f"growing {medians['growing']:.2f} ms",
                "ratio": "-" if kind == "growing" else f"{medians[kind] / medians['growing']:.2f}x",
                "check": devices(kind),
            }
        )
    return rows


def journal_table_rows(filesystem: str, *, quick: bool = False) -> list[dict[str, str]]:
    """The ``journal`` (``dir``: the temp directory, where the bench keeps its state) and ``journal-ext4`` rows."""
    return journal_rows(journal_appends_on(filesystem, QUICK_JOURNAL_APPENDS if quick else JOURNAL_APPENDS))


def _block_device_stat(directory: Path) -> Path | None:
    """The block device's ``stat`` file in sysfs for the filesystem holding ``directory`` (None if it has none)."""
    dev = os.stat(directory).st_dev
    stat = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat")
    return stat if stat.exists() else None


def _io_counts(stat: Path | None) -> tuple[int, int, int]:
    """Writes completed, sectors written, flushes completed (Documentation/admin-guide/iostats.rst), device-wide."""
    if stat is None:
        return 0, 0, 0
    fields = [int(field) for field in stat.read_text().split()]
    return fields[4], fields[6], fields[15] if len(fields) > 15 else 0


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _print_journal(result: dict[str, Any]) -> int:
    times, extended = result["times"], result["extended"]
    print(f"filesystem: {result['where']}: {result['filesystem']}")
    print(f"journal append of a {result['line']}-byte line, wall ms (after {WARMUP} warm-up appends each)")
    print(f"{'':<12} {'appends':>8} {'mean':>8} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    for kind, samples in times.items():
        row = [statistics.fmean(samples), *(_percentile(samples, q) for q in (0.5, 0.9, 0.99)), max(samples)]
        print(f"{kind:<12} {len(samples):>8} " + " ".join(f"{v:>8.3f}" for v in row))
    if result["requests"] is not None:
        print(f"device requests per append ({result['device']}, device-wide: other writers on it count too)")
        for kind, (writes, sectors, flushes) in result["requests"].items():
            count = len(times[kind])
            print(
                f"{kind:<12} writes {writes / count:.2f}, sectors {sectors / count:.1f}, flushes {flushes / count:.2f}"
            )
    grown = ", ".join(f"{v:.2f}" for v in extended) or "none"
    print(f"pre-zeroed appends that added a chunk (left out above): {len(extended)}: {grown} ms")
    chunk, header = (statistics.median(result["saves"][kind]) for kind in ("first chunk", "header only"))
    print(f"a compaction (base and new journal), medians of 5: {chunk:.2f} ms, {header:.2f} ms with the header only")
    return 0


def _print_split(split: dict[str, tuple[float, float]]) -> int:
    print(f"{'CPU ms per allocation':<22} {'first ' + str(HELD_WINDOW):>10} {'last ' + str(HELD_WINDOW):>10}")
    for name, (first, last) in split.items():
        if name == "full GC passes":
            print(f"full GC passes during the run: {first:.0f}, the longest {last:.1f} ms")
        else:
            print(f"{name:<22} {first:>10.2f} {last:>10.2f}")
    return 0


def _print_where(runs: list[HeldWhere]) -> int:
    print(f"allocations at or under each bound, per run ({len(runs[0].client_ms)} allocations, 1,024 CPUs, pods kept)")
    print(f"{'run':>3} {'where':<22} " + " ".join(f"{f'<={b:g} ms':>9}" for b in WHERE_BOUNDS_MS) + f" {'all':>5}")
    for number, run in enumerate(runs, 1):
        client = {bound: sum(x <= bound for x in run.client_ms) for bound in WHERE_BOUNDS_MS}
        for name, counts in [("client (round trip)", client), *run.server.items()]:
            total = len(run.client_ms) if name == "client (round trip)" else int(counts.get(float("inf"), 0))
            cells = " ".join(f"{counts.get(bound, 0):>9}" for bound in WHERE_BOUNDS_MS)
            print(f"{number:>3} {name:<22} {cells} {total:>5}")
    print("medians of each run (each phase's median over every allocation, so they need not add up), ms")
    for number, run in enumerate(runs, 1):
        print(f"{number:>3} " + ", ".join(f"{name} {value:.2f}" for name, value in run.medians().items()))
    print(f"the {WHERE_SLOWEST} slowest round trips of each run, by phase (Server-Timing; outside: not in the app), ms")
    for number, run in enumerate(runs, 1):
        for ms, phases in run.slowest(WHERE_SLOWEST):
            print(f"{number:>3} {ms:>7.2f} = " + " + ".join(f"{name} {value:.2f}" for name, value in phases.items()))
    return 0


def _print_pair(pair: Paired) -> int:
    print(f"{'node':>40} {'allocations':>11} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}   (side by side)")
    for side in (0, 1):
        row = pair.row(side)
        print(f"{pair.mixes[side]!s:>40} {row.requests:>11} {row.p50_ms:>8.2f} {row.p99_ms:>8.2f} {row.max_ms:>8.2f}")
    print(f"second / first: p99 {pair.p99_ratio:.2f}x, p50 {pair.p50_ratio:.2f}x")
    return 0


def _print_held(curve: HeldCurve) -> int:
    held = curve.pods
    print(f"{'pods held':>12} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for start in range(0, held, HELD_WINDOW):
        row, span = curve.window(start), f"{start + 1}-{min(held, start + HELD_WINDOW)}"
        print(f"{span:>12} {row.p50_ms:>8.2f} {row.p99_ms:>8.2f} {row.max_ms:>8.2f}")
    print(f"p99 of the last {HELD_WINDOW} / p99 of the first {HELD_WINDOW}: {curve.p99_ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
