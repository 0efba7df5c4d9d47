"""Launchers for the services the benchmarks measure, each in its own process, all under one uvicorn set-up.

Child side, ``python -m bench.servers echo|webhook --port N --certs DIR [--log-level L]``:

* ``webhook``: the real app, ``webhook.main.create_app`` over settings built by
  ``webhook.settings.load`` exactly as ``numaguard webhook`` builds them (pod
  source ``seen``, a static enforcers file naming ``--enforcer-url`` for node
  ``node-a``, mutual TLS to the enforcer with the bundle's webhook client
  certificate);
* ``echo``: the reference, a bare FastAPI app whose ``POST /mutate`` answers
  the request body unchanged.

Both are served by :func:`serve_app`, so the comparison cannot drift apart:
one process, ``servicekit.serve.serve`` with uvicorn's ``auto`` loop (uvloop)
and its httptools protocol, TLS from the bundle's ``webhook.crt`` through
the same reloading context ``numaguard webhook`` uses, JSON logs on stderr at
the same level.  The enforcer needs no launcher of its own: the benchmarks
start the real ``numaguard enforcer`` command (:func:`enforcer_command`).

Parent side: :func:`launched` starts a command, waits until it answers over
TLS and stops it afterwards; :func:`enforcer_process` does that for the real
enforcer with the seed-1 node's kubelet settings (:func:`seed_kubelet`);
:func:`free_port`, :func:`issue_certs`.

This module is a measuring tool: product code and tests of product code must
not import it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from fastapi import FastAPI, Request, Response

from servicekit import certs, telemetry, tls

ROOT = Path(__file__).resolve().parents[1]
NODE_NAME = "node-a"
REVIEWS = ROOT / "tests" / "fixtures" / "reviews"
# The seed pods' CREATE reviews the /mutate loads send in turn: seed-1 tightly-coupled-database, seed-2 ml-workload
SEED_CREATE_BODIES = (
    REVIEWS / "create-mutate-tightly-coupled-database.json",
    REVIEWS / "create-mutate-ml-workload.json",
)
UNREACHABLE_ENFORCER = "https://localhost:9"  # /mutate of a pod CREATE never calls the enforcer
DEFAULT_LOG_LEVEL = "info"  # what numaguard webhook ships with: one JSON line per review
CERT_CHECK_INTERVAL = 30.0  # WebhookSettings.cert_check_interval's default
START_TIMEOUT = 60.0


# -- child side ------------------------------------------------------------------------------


def echo_app() -> FastAPI:
    """A FastAPI app that answers ``POST /mutate`` with the request body: the floor any webhook pays.

    Built with the services' FastAPI settings, telemetry included (``servicekit.telemetry``): an echo that paid
    FastAPI's per-request OpenTelemetry check while the webhook does not would flatter the webhook's ratio.
    """
    app = FastAPI(
        title="echo", docs_url=None, redoc_url=None, openapi_url=None, telemetry=telemetry.fastapi_telemetry()
    )

    @app.post("/mutate")
    async def mutate(request: Request) -> Response:
        return Response(await request.body(), media_type="application/json")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def webhook_app(certs_dir: Path, enforcers_file: Path, log_level: str) -> Any:
    """The webhook as ``numaguard webhook`` builds it (``WEBHOOK_*`` variables of this shell do not apply)."""
    from webhook import main, settings

    bundle = certs.Bundle(certs_dir, created_ca=False)
    config = settings.load(
        env={},
        overrides={
            "tls_cert": bundle.cert("webhook"),
            "tls_key": bundle.key("webhook"),
            "client_cert": bundle.cert("webhook-client"),
            "client_key": bundle.key("webhook-client"),
            "enforcer_ca": bundle.cert("ca"),
            "enforcers_file": enforcers_file,
            "pod_source": "seen",
            "log_level": log_level,
        },
    )
    return main.create_app(config)


def serve_app(app: Any, *, port: int, certs_dir: Path, log_level: str) -> int:
    """The one way both benchmarked servers run: what ``numaguard webhook`` does after building its app."""
    from servicekit import logging as json_logging
    from servicekit import serve

    reloader = tls.ReloadingServerContext(tls.TLSFiles.in_directory(certs_dir, "webhook", ca=None))
    json_logging.configure(log_level)
    return serve.serve(
        app,
        host="127.0.0.1",
        port=port,
        cert_reloader=reloader,
        cert_check_interval=CERT_CHECK_INTERVAL,
        log_level=log_level.lower(),
    )


def child_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="serve a benchmarked app (see bench/servers.py)")
    parser.add_argument("app", choices=("echo", "webhook"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--certs", type=Path, required=True, help="a servicekit.certs bundle directory")
    parser.add_argument("--enforcer-url", default=UNREACHABLE_ENFORCER, help=f"the enforcer of node {NODE_NAME}")
    parser.add_argument("--log-level", default=DEFAULT_LOG_LEVEL)
    args = parser.parse_args(argv)
    if args.app == "echo":
        return serve_app(echo_app(), port=args.port, certs_dir=args.certs, log_level=args.log_level)
    with tempfile.TemporaryDirectory(prefix="bench-webhook-") as workdir:
        enforcers_file = Path(workdir) / "enforcers.json"
        enforcers_file.write_text(json.dumps({NODE_NAME: args.enforcer_url}))
        app = webhook_app(args.certs, enforcers_file, args.log_level)
        return serve_app(app, port=args.port, certs_dir=args.certs, log_level=args.log_level)


# -- parent side -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Launched:
    """A server process the benchmark started: its pid (for /proc) and base URL."""

    name: str
    pid: int
    url: str


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def issue_certs(directory: Path) -> certs.Bundle:
    return certs.issue_bundle(directory)


def server_command(
    app: str, *, port: int, certs_dir: Path, enforcer_url: str | None = None, log_level: str
) -> list[str]:
    command = [sys.executable, "-m", "bench.servers", app, "--port", str(port), "--certs", str(certs_dir)]
    if enforcer_url is not None:
        command += ["--enforcer-url", enforcer_url]
    return [*command, "--log-level", log_level]


def enforcer_command(
    workdir: Path,
    bundle: certs.Bundle,
    *,
    port: int,
    topology_document: Mapping[str, Any],
    kubelet: Mapping[str, Any],
) -> list[str]:
    """``numaguard enforcer`` in standalone, dry-run-cgroup mode over a topology file written to ``workdir``."""
    topology_file = workdir / "topology.json"
    topology_file.write_text(json.dumps(topology_document))
    config = workdir / "enforcer.yaml"
    node = {"name": NODE_NAME, "kubelet": dict(kubelet), "topologyFile": str(topology_file)}
    config.write_text(yaml.safe_dump({"node": node, "reconcileInterval": 0}))
    return [
        sys.executable, "-m", "numaguard_cli.main", "enforcer", "--config", str(config),
        "--standalone", "--dry-run-cgroups", "--listen", f"127.0.0.1:{port}",
        "--state-dir", str(workdir / "state"), "--log-level", "warning",
        "--tls-cert", str(bundle.cert("enforcer")), "--tls-key", str(bundle.key("enforcer")),
        "--client-ca", str(bundle.cert("ca")),
    ]  # fmt: skip


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
) -> Iterator[Launched]:
    port = free_port()
    command = enforcer_command(workdir, bundle, port=port, topology_document=topology_document, kubelet=kubelet)
    with launched(
        "enforcer", command, port=port, bundle=bundle, ready_path="/readyz", log_file=workdir / "enforcer.log"
    ) as enforcer:
        yield enforcer


def _clean_env() -> dict[str, str]:
    """This shell's environment minus the services' own settings variables, which would override the flags."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("WEBHOOK_", "NUMAGUARD_"))}


@contextlib.contextmanager
def launched(
    name: str,
    command: list[str],
    *,
    port: int,
    bundle: certs.Bundle,
    ready_path: str,
    log_file: Path,
    cwd: Path = ROOT,
) -> Iterator[Launched]:
    """Run ``command`` in ``cwd`` until the block ends; yields once ``GET ready_path`` answers 200 over TLS.

    ``cwd`` is the checkout whose code ``python -m`` runs: another one measures another commit (a baseline).
    """
    url = f"https://localhost:{port}"
    with log_file.open("wb") as log:
        process = subprocess.Popen(command, cwd=cwd, env=_clean_env(), stdout=subprocess.DEVNULL, stderr=log)
        try:
            _wait_ready(name, url + ready_path, bundle, process, log_file)
            yield Launched(name, process.pid, url)
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(name: str, url: str, bundle: certs.Bundle, process: subprocess.Popen[bytes], log_file: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    with httpx.Client(verify=tls.client_context(bundle.cert("ca"))) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = log_file.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} exited with {process.returncode} before it was ready:\n{tail}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    return
            time.sleep(0.1)  # a benchmark's start-up poll, not test synchronisation
    raise RuntimeError(f"{name} did not become ready within {START_TIMEOUT:g}s")


if __name__ == "__main__":
    sys.exit(child_main())
