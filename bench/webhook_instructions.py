"""Instructions per ``/mutate`` review inside the app, counted by valgrind: a figure a shared machine cannot move.

Run: ``.venv/bin/python -m bench.webhook_instructions [--compare-with CHECKOUT] [--requests N]``.

Requests per second and CPU time per request depend on who else uses the
cores (caches, frequency, the other hyperthread); the number of instructions
the app executes for a review does not.  This tool counts them with
``valgrind --tool=callgrind`` (Debian package ``valgrind``): the app is
called in process through its ASGI interface (the bench's webhook and echo
apps, :mod:`bench.servers`, JSON logs at ``info`` to a file as there; no TLS,
no uvicorn, which cost the webhook and the echo alike), 300 reviews to warm
it up, then ``N`` more; the count of a short run is subtracted from the count
of a long one, so start-up and warm-up cancel out.  Workloads are the
webhook bench's (:mod:`bench.bench_webhook`, computed there and handed to the child): *replicas* (the
seed-1 and seed-2 CREATE reviews in turn, each a new name and uid, plan memo hits) and *new specs* (seed-1 with a
different memory size each time, plan memo misses); the echo answers the
replica bodies.  Every answer must be HTTP 200 (and the echo's the body).

``--compare-with CHECKOUT`` counts the webhook of another checkout the same
way (its packages first on ``sys.path``), for a before/after that holds on
any machine load.  Instructions are not time: a cache miss costs more than an
add, so this complements the wrk figures, it does not replace them.

This module is a measuring tool: product code and tests of product code must
not import it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 300
SHORT = 100  # reviews in the short run; the long one adds --requests
DEFAULT_REQUESTS = 300
BODIES = 1000  # distinct requests of a workload, sent in turn: more than a run sends by default (300 + 100 + 300)
_COLLECTED = re.compile(r"Collected : (\d+)")

Message = MutableMapping[str, Any]


# -- child side: drive one app in process ------------------------------------------------------------


def _own_module(name: str) -> Any:
    """This checkout's ``bench/<name>.py``, loaded by path: the measured checkout's ``bench`` package may differ."""
    spec = importlib.util.spec_from_file_location(f"_own_bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


async def _post(app: Callable[..., Awaitable[None]], body: bytes) -> tuple[int, bytes]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https",
        "path": "/mutate",
        "raw_path": b"/mutate",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8443),
        "extensions": {},
        "state": {},
    }
    sent = False
    status, chunks = 0, []

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


async def _drive(app: Any, bodies: list[bytes], count: int, echo: bool) -> None:
    started, stopping = asyncio.Event(), asyncio.Event()

    async def receive() -> Message:
        if not started.is_set():
            return {"type": "lifespan.startup"}
        await stopping.wait()
        return {"type": "lifespan.shutdown"}

    async def send(message: Message) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()
        elif message["type"].endswith(".failed"):
            raise RuntimeError(f"lifespan failed: {message}")

    lifespan = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send))
    await started.wait()
    for i in range(WARMUP + count):
        body = bodies[i % len(bodies)]
        status, answer = await _post(app, body)
        if status != 200 or (echo and answer != body):
            raise RuntimeError(f"review {i} answered {status}: {answer[:200]!r}")
    stopping.set()
    await lifespan


def child_main(tree: Path, app_name: str, bodies_file: Path, count: int) -> int:
    sys.path.insert(0, str(tree))  # the measured checkout's packages (webhook, servicekit, shared) first
    servers = _own_module("servers")
    import servicekit  # noqa: PLC0415
    import webhook  # noqa: PLC0415

    for package in (webhook, servicekit):  # an editable install must not win over the measured checkout
        if not Path(package.__file__ or "").resolve().is_relative_to(tree):
            raise RuntimeError(f"{package.__name__} comes from {package.__file__}, not from {tree}")
    from servicekit import logging as json_logging  # noqa: PLC0415 - the measured checkout's

    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as workdir:
        work = Path(workdir)
        with (work / "server.log").open("w") as log:
            json_logging.configure("info", log)  # as the servers log: one JSON line per review, to a file
            if app_name == "echo":
                app = servers.echo_app()
            else:
                from servicekit import certs  # noqa: PLC0415

                bundle = certs.issue_bundle(work / "certs")
                enforcers = work / "enforcers.json"
                enforcers.write_text(json.dumps({servers.NODE_NAME: servers.UNREACHABLE_ENFORCER}))
                app = servers.webhook_app(bundle.directory, enforcers, "info")
            bodies = [text.encode() for text in json.loads(bodies_file.read_text())]
            asyncio.run(_drive(app, bodies, count, echo=app_name == "echo"))
    return 0


# -- parent side: count ----------------------------------------------------------------------------------


def valgrind() -> str:
    found = shutil.which("valgrind")
    if found is None:
        raise RuntimeError("valgrind is not installed: apt-get install valgrind")
    return found


def workload_bodies(workload: str) -> list[str]:
    """The first :data:`BODIES` requests of a webhook bench workload, as wrk sends them (this checkout's bench)."""
    from bench import bench_webhook  # noqa: PLC0415 - parent side only: the child must not import this checkout

    chosen = bench_webhook.REPLICAS if workload == "replicas" else bench_webhook.NEW_SPECS
    return [chosen.body(i).decode() for i in range(BODIES)]


def _instructions(tree: Path, app_name: str, workload: str, count: int) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-instructions-bodies-") as workdir:
        bodies_file = Path(workdir) / f"{workload}.json"
        bodies_file.write_text(json.dumps(workload_bodies(workload)))
        command = [
            valgrind(), "--tool=callgrind", "--callgrind-out-file=/dev/null",
            sys.executable, str(Path(__file__).resolve()), "drive",
            "--tree", str(tree), "--app", app_name, "--bodies", str(bodies_file), "--count", str(count),
        ]  # fmt: skip
        finished = subprocess.run(command, capture_output=True, text=True, check=False, cwd=tree, timeout=3600)
    found = _COLLECTED.search(finished.stderr)
    if finished.returncode != 0 or found is None:
        raise RuntimeError(f"{app_name} in {tree} failed ({finished.returncode}):\n{finished.stderr[-3000:]}")
    return int(found.group(1))


def per_review(tree: Path, app_name: str, workload: str, requests: int) -> float:
    """Instructions per review: (long run - short run) / the reviews the long run adds."""
    short = _instructions(tree, app_name, workload, SHORT)
    long = _instructions(tree, app_name, workload, SHORT + requests)
    return (long - short) / requests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command")
    drive = sub.add_parser("drive", help="(child) serve reviews in process; run under valgrind by the parent")
    drive.add_argument("--tree", type=Path, required=True)
    drive.add_argument("--app", choices=("webhook", "echo"), required=True)
    drive.add_argument("--bodies", type=Path, required=True, help="a JSON list of the request bodies, sent in turn")
    drive.add_argument("--count", type=int, required=True)
    parser.add_argument("--compare-with", type=Path, metavar="CHECKOUT", help="also count this checkout's webhook")
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS, help="reviews the long run adds")
    args = parser.parse_args(argv)
    if args.command == "drive":
        return child_main(args.tree.resolve(), args.app, args.bodies, args.count)
    targets = [("echo", ROOT, "echo", "replicas")]
    trees = [("this tree", ROOT)] + ([("baseline", args.compare_with.resolve())] if args.compare_with else [])
    for label, tree in trees:
        targets += [(label, tree, "webhook", "replicas"), (label, tree, "webhook", "new")]
    counts: dict[tuple[str, str], float] = {}
    for label, tree, app_name, workload in targets:
        counts[(label, workload)] = per_review(tree, app_name, workload, args.requests)
    echo = counts[("echo", "replicas")]
    print(f"echo (replica bodies): {echo:,.0f} instructions per request")
    for label, _ in trees:
        for workload, name in (("replicas", "replica pods"), ("new", "every pod a new spec")):
            value = counts[(label, workload)]
            print(f"{label}, {name}: {value:,.0f} instructions per review ({value / echo:.2f}x echo)")
    if args.compare_with:
        for workload in ("replicas", "new"):
            before, after = counts[("baseline", workload)], counts[("this tree", workload)]
            print(f"{workload}: this tree / baseline = {after / before:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
