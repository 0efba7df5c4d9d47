"""Drive an HTTP server with wrk, the independent load generator, and read back what it measured.

wrk (Debian package ``wrk``; ``scripts/install-bench-tools.sh`` installs it) is
a C load generator on epoll: one connection costs it a small fraction of what
one costs the server, so unlike the bench's own Python client it saturates a
Python server even on two cores.  It is the tool the throughput figures of
``python -m bench`` are measured with; the bench's own client (:mod:`bench.load`)
still measures latency at a fixed rate, which wrk 4 cannot pace.

A Lua script (written next to the bodies) makes wrk ``POST`` the given bodies in
turn over keep-alive connections, optionally with one token replaced by a
different value in every request (:class:`Vary`: every request a new pod
spec), and, when the run ends, print one line
``WRK-JSON {...}`` with the totals and latency percentiles, which
:func:`parse_report` reads.  wrk speaks TLS for ``https://`` URLs (without
checking the certificate: the bench checks the answers itself before it loads
the server).

The server's CPU time over the run is read from ``/proc/<pid>/stat`` before and
after, so a run also says how many CPU microseconds the server spent per
request, a figure that does not depend on who else is using the machine as
much as requests per second does.

This module is a measuring tool: product code and tests of product code must
not import it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import proc

ROOT = Path(__file__).resolve().parents[1]
INSTALL_SCRIPT = "scripts/install-bench-tools.sh"
REPORT_MARKER = "WRK-JSON "
# wrk's own deadline per request; a request slower than this counts as a timeout error
REQUEST_TIMEOUT_S = 10

_LUA = r"""
-- written by bench/wrk.py.  Arguments: path, token, format, start, count, step, bodies...
-- POST the bodies in turn.  When token is not "-", each request replaces token in its body by
-- string.format(format, start + v % count), v = thread number, then + step (the number of threads)
-- per request: the threads never send the same value at once.
local bodies = {}
local index = 0
local path, token, format = "/", "-", ""
local start, count, step, value = 0, 1, 1, 0
local threads = 0

function setup(thread)
  thread:set("thread_number", threads)
  threads = threads + 1
end

function init(args)
  path, token, format = args[1], args[2], args[3]
  start, count, step = tonumber(args[4]), tonumber(args[5]), tonumber(args[6])
  for i = 7, #args do
    local file = assert(io.open(args[i], "rb"))
    bodies[#bodies + 1] = file:read("*a")
    file:close()
  end
  if token ~= "-" then token = token:gsub("%p", "%%%0") end
  value = thread_number or 0
  index = value % #bodies
end

function request()
  index = index % #bodies + 1
  local body = bodies[index]
  if token ~= "-" then
    body = body:gsub(token, string.format(format, start + value % count))
    value = value + step
  end
  return wrk.format("POST", path, {["Content-Type"] = "application/json"}, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '%s{"duration_us":%d,"requests":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"mean":%.1f,"max":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d}}\n',
    "WRK-JSON ", summary.duration, summary.requests, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.max, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
end
"""


@dataclass(frozen=True)
class Vary:
    """Replace ``token`` in every body by ``format % (start + i)``, ``i`` cycling through ``range(count)``."""

    token: str
    format: str
    start: int
    count: int

    def applied(self, body: bytes, index: int) -> bytes:
        """``body`` with the token replaced as the script replaces it in request number ``index``."""
        return body.replace(self.token.encode(), (self.format % (self.start + index % self.count)).encode())


class WrkMissing(RuntimeError):
    """wrk is not on PATH; the message says how to install it."""

    def __init__(self) -> None:
        super().__init__(f"wrk is not installed: run {INSTALL_SCRIPT} as root (apt-get install wrk)")


@dataclass(frozen=True)
class WrkRun:
    """What wrk measured against one server in one run, plus the server's CPU time meanwhile."""

    target: str
    connections: int
    threads: int
    seconds: float
    requests: int
    errors: int  # connect + read + write + timeout + non-2xx/3xx answers
    latency_p50_ms: float
    latency_p99_ms: float
    server_cpu_seconds: float

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_request(self) -> float:
        return self.server_cpu_seconds / self.requests * 1e6 if self.requests else 0.0


def executable() -> str:
    """The path of wrk, or :class:`WrkMissing`."""
    found = shutil.which("wrk")
    if found is None:
        raise WrkMissing()
    return found


def ensure() -> str:
    """The path of wrk, installed first by :data:`INSTALL_SCRIPT` when missing and this process may (root)."""
    if shutil.which("wrk") is None and os.geteuid() == 0:
        subprocess.run(["bash", str(ROOT / INSTALL_SCRIPT)], check=False, timeout=900)
    return executable()


def write_script(directory: Path) -> Path:
    script = directory / "post-bodies.lua"
    script.write_text(_LUA)
    return script


def parse_report(output: str) -> dict[str, object]:
    """The ``WRK-JSON`` line of wrk's output, decoded; ValueError when wrk printed none."""
    for line in output.splitlines():
        if line.startswith(REPORT_MARKER):
            report: dict[str, object] = json.loads(line[len(REPORT_MARKER) :])
            return report
    raise ValueError(f"wrk printed no report:\n{output[-2000:]}")


def run(
    *,
    target: str,
    url: str,
    path: str,
    bodies: Sequence[Path],
    vary: Vary | None = None,
    pid: int,
    script: Path,
    connections: int,
    threads: int,
    seconds: float,
) -> WrkRun:
    """One bounded wrk run (``-d seconds``) of ``POST path`` with ``bodies`` (``vary`` applied) against ``url``."""
    varied = ("-", "", "0", "1") if vary is None else (vary.token, vary.format, str(vary.start), str(vary.count))
    command = [
        executable(), f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s", f"--timeout={REQUEST_TIMEOUT_S}s",
        "-s", str(script), url, "--", path, *varied, str(threads), *(str(b) for b in bodies),
    ]  # fmt: skip
    cpu_before = proc.cpu_seconds(pid)
    finished = subprocess.run(command, capture_output=True, text=True, check=False, timeout=seconds + 60)
    cpu_after = proc.cpu_seconds(pid)
    if finished.returncode != 0:
        raise RuntimeError(f"wrk failed ({finished.returncode}): {finished.stderr[-2000:]}")
    report = parse_report(finished.stdout)
    errors = report["errors"]
    latency = report["latency_us"]
    assert isinstance(errors, dict) and isinstance(latency, dict)
    duration_us = report["duration_us"]
    requests = report["requests"]
    assert isinstance(duration_us, int) and isinstance(requests, int)
    return WrkRun(
        target=target,
        connections=connections,
        threads=threads,
        seconds=duration_us / 1e6,
        requests=requests,
        errors=sum(int(v) for v in errors.values()),
        latency_p50_ms=int(latency["p50"]) / 1000,
        latency_p99_ms=int(latency["p99"]) / 1000,
        server_cpu_seconds=cpu_after - cpu_before,
    )
