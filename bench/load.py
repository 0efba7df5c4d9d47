"""The bench's own load generator: keep-alive httpx clients in a separate process, closed loop or at a fixed rate.

``python -m bench.load drive ...`` is the load process; :func:`run_load` starts it
against servers the caller launched and returns what it measured, one
:class:`Window` per server and round.  Two kinds of window:

* ``closed``: ``clients`` concurrent workers, each sending its next request as
  soon as the previous answer arrived, for a fixed window after a warm-up.  On a
  2-core machine httpx costs more per request than a Python server does, so a
  closed loop of this client measures the client, not the server's capacity:
  throughput claims come from wrk (:mod:`bench.wrk`); this mode is kept as a
  steady load (e.g. for the RSS benchmark).
* ``open``: requests start on a schedule (``rate`` per second) whatever the
  server does, and latency counts from the scheduled start, so a stalled server
  cannot hide its queue (no coordinated omission); how late the load process
  itself started each request is recorded too (``send_lag_ms``).  Its client is
  :class:`KeepAlivePool`, a minimal HTTP/1.1 client far cheaper than httpx, so
  the load process stays on schedule on a busy machine.

Every window also records the server's CPU seconds and its RSS meanwhile
(:mod:`bench.proc`) and the machine's CPU pressure.  Servers alternate within
every round and the order flips each round, so medians over rounds compare
them under the same conditions.  This module is a measuring tool: product code
and tests of product code must not import it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import ssl
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from bench import proc, wrk
from servicekit import certs, tls

ROOT = Path(__file__).resolve().parents[1]
OPEN_LOOP_CONNECTIONS = 32
JSON_HEADERS = {"Content-Type": "application/json"}
VARIED_REQUESTS = 4096
"""Distinct bodies a ``--vary`` run prepares: more than an open-loop window sends (200 req/s x 10.5 s = 2,100)."""
# what a failed exchange of KeepAlivePool raises (a refused or reset connection, a short or garbled answer)
_EXCHANGE_ERRORS = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError)


@dataclass(frozen=True)
class LoadEffort:
    """How long the load process measures each server, and how hard."""

    rounds: int
    clients: int
    warmup: float
    throughput_seconds: float
    rate: float
    latency_seconds: float


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
            self.rss.append(proc.memory_kib(self.pid)[0])
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._cpu_start = proc.cpu_seconds(self.pid)
        self._stall_start = proc.cpu_stall_seconds()
        self._started_at = time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def stop(self, window: Window) -> None:
        window.server_cpu_seconds = proc.cpu_seconds(self.pid) - self._cpu_start
        stall = proc.cpu_stall_seconds()
        if stall is not None and self._stall_start is not None:
            window.cpu_pressure = (stall - self._stall_start) / (time.perf_counter() - self._started_at)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        window.rss_kib = self.rss
        window.hwm_kib = proc.memory_kib(self.pid)[1]


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


class KeepAlivePool:
    """At most ``size`` keep-alive HTTP/1.1 connections over TLS, each sending prebuilt requests one at a time.

    The open loop's client: a few dozen lines of asyncio instead of httpx, so that the load process spends
    a small fraction of what the server does per request and, on a busy 2-core machine, starts requests on
    time.  It speaks just what the servers answer: a status line, headers with ``Content-Length``, a body.
    """

    def __init__(self, url: str, context: ssl.SSLContext, size: int, timeout: float = 30.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "localhost", parsed.port or 443
        self.context, self.size, self.timeout = context, size, timeout
        self._idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        self._open = 0

    def request(self, path: str, body: bytes) -> bytes:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode("ascii") + body

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._idle.empty() and self._open < self.size:  # one was dropped after a failure: replace it
            await self.warm()
        return await self._idle.get()

    async def warm(self) -> None:
        """Open every connection now (TLS handshakes cost the server milliseconds: not in a measured window)."""
        while self._open < self.size:
            self._open += 1
            try:
                connection = await asyncio.open_connection(
                    "127.0.0.1", self.port, ssl=self.context, server_hostname=self.host
                )
            except BaseException:
                self._open -= 1
                raise
            self._idle.put_nowait(connection)

    async def send(self, request: bytes) -> int:
        """The status of the answer to ``request``; waits for a free connection first (that wait is latency)."""
        reader, writer = await self._connection()
        try:
            status = await asyncio.wait_for(self._exchange(reader, writer, request), self.timeout)
        except BaseException:
            self._open -= 1
            writer.close()
            raise
        self._idle.put_nowait((reader, writer))
        return status

    @staticmethod
    async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> int:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = next(
            (int(line.split(":", 1)[1]) for line in lines[1:] if line.lower().startswith("content-length:")), None
        )
        if length is None:
            raise ConnectionError("an answer without Content-Length")
        await reader.readexactly(length)
        return status

    async def close(self) -> None:
        while not self._idle.empty():
            _, writer = self._idle.get_nowait()
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()


async def open_loop(
    pool: KeepAlivePool, target: Target, bodies: Sequence[bytes], rate: float, warmup: float, seconds: float
) -> Window:
    """Requests start every ``1/rate`` seconds whatever the server does; latency counts from the scheduled start."""
    window = Window(target.name, "open", seconds, 0, 0)
    requests_bytes = [pool.request("/mutate", body) for body in bodies]
    await pool.warm()
    begin = time.perf_counter() + 0.05
    start = begin + warmup
    total = int((warmup + seconds) * rate)

    async def one(index: int, scheduled: float) -> None:
        lag = time.perf_counter() - scheduled
        try:
            ok = await pool.send(requests_bytes[index % len(requests_bytes)]) == 200
        except (
            OSError,
            ssl.SSLError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ValueError,
        ):
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
    targets: Sequence[Target], ca: Path, bodies: Sequence[bytes], effort: LoadEffort, modes: str
) -> list[Window]:
    context = tls.client_context(ca)
    windows: list[Window] = []
    for mode in modes.split(","):
        for round_ in range(effort.rounds):
            order = targets if round_ % 2 == 0 else list(reversed(targets))
            for target in order:
                if mode == "closed":
                    limits = httpx.Limits(max_connections=effort.clients, max_keepalive_connections=effort.clients)
                    async with httpx.AsyncClient(verify=context, limits=limits, timeout=30) as client:
                        windows.append(
                            await closed_loop(
                                client, target, bodies, effort.clients, effort.warmup, effort.throughput_seconds
                            )
                        )
                else:
                    pool = KeepAlivePool(target.url, context, OPEN_LOOP_CONNECTIONS)
                    try:
                        windows.append(
                            await open_loop(pool, target, bodies, effort.rate, effort.warmup, effort.latency_seconds)
                        )
                    finally:
                        await pool.close()
    return windows


def drive_main(argv: list[str]) -> int:
    """The load process: ``python -m bench.load drive ...``; prints its windows as JSON."""
    parser = argparse.ArgumentParser(prog="bench.load drive")
    parser.add_argument("--target", action="append", type=Target.parse, required=True, help="NAME=URL@PID")
    parser.add_argument("--ca", type=Path, required=True)
    parser.add_argument("--body", action="append", type=Path, required=True)
    parser.add_argument("--effort", required=True, help="a LoadEffort as JSON")
    parser.add_argument("--modes", default="closed,open")
    parser.add_argument("--vary", help="a bench.wrk.Vary as JSON: the token replaced in each request")
    args = parser.parse_args(argv)
    bodies = [path.read_bytes() for path in args.body]
    if args.vary:
        vary = wrk.Vary(**json.loads(args.vary))
        bodies = [vary.applied(bodies[i % len(bodies)], i) for i in range(VARIED_REQUESTS)]
    effort = LoadEffort(**json.loads(args.effort))
    windows = asyncio.run(_drive(args.target, args.ca, bodies, effort, args.modes))
    json.dump([asdict(w) for w in windows], sys.stdout)
    return 0


def run_load(
    targets: Sequence[Target],
    bundle: certs.Bundle,
    effort: LoadEffort,
    modes: str,
    bodies: Sequence[Path],
    *,
    vary: wrk.Vary | None = None,
) -> list[Window]:
    """Run the load process against ``targets`` (``POST /mutate`` of ``bodies`` in turn) and return its windows.

    ``vary``: the token replaced in each request as wrk replaces it (:class:`bench.wrk.Vary`), over the first
    :data:`VARIED_REQUESTS` requests, then again from the first.
    """
    command = [sys.executable, "-m", "bench.load", "drive", "--ca", str(bundle.cert("ca"))]
    command += [arg for t in targets for arg in ("--target", t.arg())]
    command += [arg for body in bodies for arg in ("--body", str(body))]
    if vary is not None:
        command += ["--vary", json.dumps(asdict(vary))]
    command += ["--effort", json.dumps(asdict(effort)), "--modes", modes]
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, check=False)
    if finished.returncode != 0:
        raise RuntimeError(f"the load process failed:\n{finished.stderr.decode(errors='replace')[-2000:]}")
    return [Window(**w) for w in json.loads(finished.stdout)]


def percentile(samples: Sequence[float], share: float) -> float:
    """The nearest-rank percentile (``share`` in [0, 1]) of ``samples``."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, int(round(share * (len(ordered) - 1)))))]


def latency_p50(w: Window) -> float:
    return percentile(w.latencies_ms, 0.5) if w.latencies_ms else 0.0


def latency_p99(w: Window) -> float:
    return percentile(w.latencies_ms, 0.99) if w.latencies_ms else 0.0


def send_lag_p99(w: Window) -> float:
    return percentile(w.send_lag_ms, 0.99) if w.send_lag_ms else 0.0


def window_summary(w: Window) -> dict[str, object]:
    """One window's figures, without its samples (for ``--json``)."""
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
    if sys.argv[1:2] != ["drive"]:
        sys.exit("usage: python -m bench.load drive --target NAME=URL@PID ... (started by bench.load.run_load)")
    sys.exit(drive_main(sys.argv[2:]))
