"""Building blocks for the enforcer service tests: the seed node, seed pods, settings, a TLS server.

The node is seed scenario 1's (``../shared/scenarios/seed-1-tightly-coupled-database.yaml``):
two sockets x 8 cores x 2 threads, static CPU and Static memory managers,
single-numa-node alignment at pod scope, pod-level resource managers on.
Pods are the recorded ``kubectl`` JSON under ``tests/fixtures/pods/`` with a
uid added, as the webhook sends them at binding time.
"""

from __future__ import annotations

import contextlib
import copy
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from enforcer.cgroups import recording
from enforcer.service import main, settings
from enforcer.service.node_service import NodeService
from servicekit import certs, serve, tls

ROOT = Path(__file__).resolve().parents[3]
PODS = ROOT / "tests" / "fixtures" / "pods"
TOPOLOGY = ROOT / "tests" / "fixtures" / "cpumanager" / "dual-socket-ht-32.json"
NODE = "node-a"

SEED_KUBELET: dict[str, Any] = {
    "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
    "cpuManagerPolicy": "static",
    "reservedSystemCPUs": "0,16",
    "systemReserved": {"cpu": "1", "memory": "1Gi"},
    "evictionHard": {"memory.available": "100Mi"},
    "memoryManagerPolicy": "Static",
    "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}}],
    "topologyManagerPolicy": "single-numa-node",
    "topologyManagerScope": "pod",
}

# The seed pods the node admits (the others are invalid, Windows, or need hugepages-2Mi it lacks).
SEED_PODS = ("tightly-coupled-database", "ml-workload", "burstable-web", "besteffort-batch", "generate-name-train")


def uid_of(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"numaguard-test/{name}"))


def pod(fixture: str, *, uid: str | None = None, name: str | None = None) -> dict[str, Any]:
    """A recorded pod with a uid (and a name for ``generateName`` pods), as it looks once bound."""
    raw: dict[str, Any] = json.loads((PODS / f"{fixture}.json").read_text())
    metadata = raw.setdefault("metadata", {})
    metadata["name"] = name or metadata.get("name") or metadata.get("generateName", "pod-") + "x7k2"
    metadata["uid"] = uid or uid_of(metadata["name"])
    return raw


def guaranteed_pod(name: str, cpus: int, memory: str = "1Gi", *, uid: str | None = None) -> dict[str, Any]:
    """A one-container Guaranteed pod asking for ``cpus`` exclusive CPUs."""
    resources = {"requests": {"cpu": str(cpus), "memory": memory}, "limits": {"cpu": str(cpus), "memory": memory}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid or uid_of(name)},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": resources}]},
    }


def with_container_resources(raw: dict[str, Any], container: str, cpu: str, memory: str) -> dict[str, Any]:
    changed = copy.deepcopy(raw)
    for c in changed["spec"].get("initContainers", []) + changed["spec"]["containers"]:
        if c["name"] == container:
            c["resources"] = {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}
    return changed


def allocation_request(raw: dict[str, Any], node: str = NODE) -> dict[str, Any]:
    return {"pod": raw, "nodeName": node}


def make_settings(state_dir: Path, **overrides: Any) -> settings.EnforcerSettings:
    values: dict[str, Any] = {
        "node_name": NODE,
        "kubelet": SEED_KUBELET,
        "topology_file": TOPOLOGY,
        "state_dir": state_dir,
        "standalone": True,
        "dry_run_cgroups": True,
        "reconcile_interval": 0,
    }
    values.update(overrides)
    return settings.load(env={}, overrides=values)


def exclusive_cpus(allocation: dict[str, Any]) -> set[int]:
    """Every CPU an allocation holds exclusively (its exclusive containers and its pod shared pool)."""
    found: set[int] = set()
    sets = [c["cpus"] for c in allocation["containers"].values() if c["assignment"].endswith("_exclusive")]
    if allocation.get("podSharedPool"):
        sets.append(allocation["podSharedPool"]["cpus"])
    for text in sets:
        for part in filter(None, text.split(",")):
            first, _, last = part.partition("-")
            found.update(range(int(first), int(last or first) + 1))
    return found


@dataclass(frozen=True)
class Clients:
    """The kinds of callers: the webhook/operator with a client certificate, a token holder, nobody."""

    writer: httpx.Client
    reader: httpx.Client
    anonymous: httpx.Client
    wrong_token: httpx.Client


@dataclass
class RunningEnforcer:
    server: serve.BackgroundServer
    app: Any
    base_url: str

    @property
    def service(self) -> NodeService:
        service: NodeService = self.app.state.service
        return service


TOKEN = "s3cret-read-token"


def bundle_files(bundle: certs.Bundle, token_dir: Path) -> dict[str, Any]:
    token = token_dir / "token"
    token.write_text(TOKEN + "\n")
    return {
        "tls_cert": bundle.cert("enforcer"),
        "tls_key": bundle.key("enforcer"),
        "client_ca": bundle.cert("ca"),
        "token_file": token,
    }


@contextlib.contextmanager
def running_enforcer(
    config: settings.EnforcerSettings, *, driver: Any = None, pod_source: Any = None
) -> Iterator[RunningEnforcer]:
    """The real app under uvicorn with its TLS context (client certificates optional), on a loopback port."""
    assert config.tls_cert is not None and config.tls_key is not None
    app = main.create_app(
        config,
        cgroup_driver=driver if driver is not None else recording.RecordingCgroupDriver(auto_create=True),
        pod_source=pod_source,
    )
    context = tls.server_context(tls.TLSFiles(config.tls_cert, config.tls_key, config.client_ca))
    with serve.BackgroundServer(app, ssl_context=context) as server:
        yield RunningEnforcer(server, app, f"https://localhost:{server.port}")


@contextlib.contextmanager
def clients(bundle: certs.Bundle, base_url: str) -> Iterator[Clients]:
    ca = bundle.cert("ca")
    made = Clients(
        writer=httpx.Client(
            base_url=base_url,
            verify=tls.client_context(ca, cert=bundle.cert("operator-client"), key=bundle.key("operator-client")),
        ),
        reader=httpx.Client(
            base_url=base_url, verify=tls.client_context(ca), headers={"Authorization": f"Bearer {TOKEN}"}
        ),
        anonymous=httpx.Client(base_url=base_url, verify=tls.client_context(ca)),
        wrong_token=httpx.Client(
            base_url=base_url, verify=tls.client_context(ca), headers={"Authorization": "Bearer not-the-token"}
        ),
    )
    try:
        yield made
    finally:
        for client in (made.writer, made.reader, made.anonymous, made.wrong_token):
            client.close()
