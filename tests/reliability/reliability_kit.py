"""Building blocks of the reliability suites: certificates, real service processes, pods, cgroup trees, figures.

The suites drive the *real* services: ``numaguard enforcer`` and ``numaguard
webhook`` run as child processes over TLS on loopback ports picked here, their
JSON logs captured in files (the security suite searches them for secrets).
The node is seed scenario 1's (two sockets x 8 cores x 2 threads, static CPU
and Static memory managers, single-numa-node alignment at pod scope, pod-level
resource managers on), described by a config file whose ``node:`` section has
the shape of a scenario file's.  Pods are the recorded ``kubectl`` JSON under
``tests/fixtures/pods/`` with a name and uid added, plus small generated pods.

Nothing here synchronises with sleeps: a process is waited for by polling
``/readyz`` in a bounded loop whose pause is ``Popen.wait`` (so a process that
dies while starting is noticed at once).  Product code must never import this
module.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import math
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from enforcer.cgroups import naming
from enforcer.service import requests
from servicekit import certs, tls
from shared import contract
from shared.cpuset import CPUSet

ROOT = Path(__file__).resolve().parents[2]
PODS = ROOT / "tests" / "fixtures" / "pods"
REVIEWS = ROOT / "tests" / "fixtures" / "reviews"
TOPOLOGY = ROOT / "tests" / "fixtures" / "cpumanager" / "dual-socket-ht-32.json"
RESULTS = Path(__file__).resolve().parent / "results"
NUMAGUARD = Path(sys.executable).with_name("numaguard")
NODE = "node-a"
NUMA_NODES = (0, 1)
RESERVED_CPUS = frozenset({0, 16})

# Seed scenario 1's node (shared/scenarios/seed-1-tightly-coupled-database.yaml), in KubeletConfiguration names.
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

# The recorded pods this node admits (the others are invalid, Windows, or ask for hugepages-2Mi it lacks).
SEED_PODS = ("tightly-coupled-database", "ml-workload", "burstable-web", "besteffort-batch", "generate-name-train")

START_TIMEOUT = 60.0
POLL_PAUSE = 0.05


# -- certificates ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """Our bundle, plus the credentials an attacker might hold: another CA's client pair, an expired pair."""

    bundle: certs.Bundle
    token: str
    token_file: Path
    foreign_client: tuple[Path, Path]
    expired_client: tuple[Path, Path]

    @property
    def ca(self) -> Path:
        return self.bundle.cert("ca")

    def operator(self) -> tuple[Path, Path]:
        return self.bundle.cert("operator-client"), self.bundle.key("operator-client")


def issue_pki(directory: Path) -> Pki:
    bundle = certs.issue_bundle(directory / "bundle", namespace="numaguard")
    foreign_ca = certs.create_ca("someone-elses-ca")
    foreign = certs.issue_client_certificate(foreign_ca, certs.OPERATOR_CLIENT_IDENTITY)
    ca = certs.load_pair(bundle.cert("ca"), bundle.key("ca"))
    now = datetime.datetime.now(datetime.UTC)
    day = datetime.timedelta(days=1)
    last_month = certs.Validity(not_before=now - 30 * day, not_after=now - day)
    expired = certs.issue_client_certificate(ca, certs.OPERATOR_CLIENT_IDENTITY, validity=last_month)
    pairs = {}
    for name, issued in (("foreign-client", foreign), ("expired-client", expired)):
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        certs.write_pair(issued, cert, key)
        pairs[name] = (cert, key)
    token = "rt-" + secrets.token_urlsafe(24)  # random: the log search cannot match by accident
    token_file = directory / "token"
    token_file.write_text(token + "\n")
    return Pki(bundle, token, token_file, pairs["foreign-client"], pairs["expired-client"])


def https_client(
    base_url: str,
    ca: Path,
    *,
    cert: tuple[Path, Path] | None = None,
    token: str | None = None,
    timeout: float = 10.0,
) -> httpx.Client:
    """An HTTPS client trusting only ``ca``; presents ``cert`` and/or a bearer ``token`` when given."""
    context = tls.client_context(ca, cert=cert[0], key=cert[1]) if cert else tls.client_context(ca)
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    return httpx.Client(base_url=base_url, verify=context, headers=headers, timeout=timeout, trust_env=False)


def free_port() -> int:
    """A loopback port nobody listens on right now (the OS's next ephemeral port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# -- service processes ----------------------------------------------------------------------


class ServiceExited(RuntimeError):
    """The process ended while it was expected to serve; the message carries its log's tail."""


@dataclass
class ServiceProcess:
    """One ``numaguard <subcommand>`` child process serving HTTPS on ``port``; stderr (JSON logs) in ``log``."""

    argv: list[str]
    port: int
    log: Path
    ca: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> ServiceProcess:
        with open(self.log, "ab") as out:
            out.write(f"--- start {' '.join(self.argv[1:3])} port {self.port}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                self.argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, cwd=self.log.parent, env=_child_env()
            )
        return self

    def wait_serving(self, timeout: float = START_TIMEOUT) -> httpx.Response:
        """Poll ``/readyz`` until the server answers at all (200 ready, or 503 with the reason); bounded."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        with httpx.Client(verify=tls.client_context(self.ca), timeout=2.0, trust_env=False) as probe:
            while time.monotonic() < deadline:
                try:
                    response = probe.get(f"{self.base_url}/readyz")
                except httpx.TransportError:
                    pass
                else:
                    if response.status_code in (200, 503):
                        return response
                try:  # the pause between polls doubles as the check that the process still runs
                    self.process.wait(timeout=POLL_PAUSE)
                except subprocess.TimeoutExpired:
                    continue
                raise ServiceExited(f"{self.argv[1]} exited with {self.process.returncode}:\n{self.log_tail()}")
        raise ServiceExited(f"{self.argv[1]} did not serve within {timeout}s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as when a node loses power or the OOM killer strikes."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        if self.process is not None:
            self.process.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM and wait for the graceful exit (SIGKILL after 20 s); the exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.process.returncode)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> ServiceProcess:
        return self

    def __exit__(self, *_: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.stop()


def _child_env() -> dict[str, str]:
    """The test's environment without settings that would change the services (no cluster, no overrides)."""
    return {
        key: value for key, value in os.environ.items() if not key.startswith(("NUMAGUARD_", "WEBHOOK_", "KUBERNETES_"))
    }


# -- the enforcer node ----------------------------------------------------------------------------


@dataclass
class EnforcerNode:
    """Everything one enforcer needs on disk: config, state dir, cgroup tree; starts it as a process."""

    directory: Path
    pki: Pki
    cgroups: CgroupTree = field(init=False)
    config_file: Path = field(init=False)
    state_dir: Path = field(init=False)
    starts: int = 0

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.state_dir = self.directory / "state"
        self.cgroups = CgroupTree(self.directory / "cgroup")
        self.config_file = self.directory / "enforcer.yaml"
        document = {"node": {"name": NODE, "kubelet": SEED_KUBELET, "topologyFile": str(TOPOLOGY)}}
        self.config_file.write_text(yaml.safe_dump(document))

    @property
    def state_path(self) -> Path:
        return self.state_dir / "numaguard_state.json"

    @property
    def log(self) -> Path:
        return self.directory / "enforcer.log"

    def process(self, *, log_level: str = "info") -> ServiceProcess:
        """A new enforcer process (not started) on a fresh port, over this node's state and cgroups."""
        port = free_port()
        self.starts += 1
        argv = [
            str(NUMAGUARD),
            "enforcer",
            "--standalone",
            "--config",
            str(self.config_file),
            "--listen",
            f"127.0.0.1:{port}",
            "--tls-cert",
            str(self.pki.bundle.cert("enforcer")),
            "--tls-key",
            str(self.pki.bundle.key("enforcer")),
            "--client-ca",
            str(self.pki.ca),
            "--token-file",
            str(self.pki.token_file),
            "--state-dir",
            str(self.state_dir),
            "--cgroup-root",
            str(self.cgroups.root),
            "--cgroup-version",
            "v2",
            "--cgroup-driver",
            "cgroupfs",
            "--reconcile-interval",
            "0",
            "--log-level",
            log_level,
        ]
        return ServiceProcess(argv, port, self.log, self.pki.ca)

    @contextlib.contextmanager
    def running(self, *, log_level: str = "info") -> Iterator[ServiceProcess]:
        """A started enforcer that answers ``/readyz``; stopped gracefully on exit."""
        with self.process(log_level=log_level).start() as enforcer:
            enforcer.wait_serving()
            yield enforcer

    def writer(self, service: ServiceProcess) -> httpx.Client:
        return https_client(service.base_url, self.pki.ca, cert=self.pki.operator())

    def recover_state(self, mode: str) -> subprocess.CompletedProcess[str]:
        """The documented recovery command, as an operator types it."""
        argv = [str(NUMAGUARD), "recover-state", "--state-dir", str(self.state_dir), "--mode", mode]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_child_env(), check=False)


# -- the webhook ----------------------------------------------------------------------------------


@dataclass
class WebhookNode:
    """The webhook's config: serving certificate, client certificate to the enforcers, the enforcers file."""

    directory: Path
    pki: Pki
    enforcer_url: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def log(self) -> Path:
        return self.directory / "webhook.log"

    def process(self, *, log_level: str = "info") -> ServiceProcess:
        self.directory.mkdir(parents=True, exist_ok=True)
        enforcers = self.directory / "enforcers.json"
        enforcers.write_text(json.dumps({NODE: self.enforcer_url}))
        config = self.directory / "webhook.yaml"
        config.write_text(yaml.safe_dump(dict(self.settings)))
        bundle = self.pki.bundle
        port = free_port()
        argv = [
            str(NUMAGUARD),
            "webhook",
            "--config",
            str(config),
            "--listen",
            f"127.0.0.1:{port}",
            "--tls-cert",
            str(bundle.cert("webhook")),
            "--tls-key",
            str(bundle.key("webhook")),
            "--client-cert",
            str(bundle.cert("webhook-client")),
            "--client-key",
            str(bundle.key("webhook-client")),
            "--enforcer-ca",
            str(self.pki.ca),
            "--enforcers-file",
            str(enforcers),
            "--log-level",
            log_level,
        ]
        return ServiceProcess(argv, port, self.log, self.pki.ca)

    @contextlib.contextmanager
    def running(self, *, log_level: str = "info") -> Iterator[ServiceProcess]:
        with self.process(log_level=log_level).start() as webhook:
            ready = webhook.wait_serving()
            assert ready.status_code == 200, ready.text
            yield webhook


# -- pods ---------------------------------------------------------------------------------------------


def uid_for(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"numaguard-reliability/{name}"))


def fixture_pod(fixture: str, *, name: str, uid: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    """A recorded pod renamed to ``name`` with a uid, as it looks once created."""
    raw: dict[str, Any] = json.loads((PODS / f"{fixture}.json").read_text())
    metadata = raw.setdefault("metadata", {})
    metadata.pop("generateName", None)
    metadata["name"] = name
    metadata["uid"] = uid or uid_for(name)
    if namespace is not None:
        metadata["namespace"] = namespace
    return raw


def guaranteed_pod(name: str, cpus: int, memory: str = "256Mi", *, uid: str | None = None) -> dict[str, Any]:
    """One container, Guaranteed with ``cpus`` exclusive CPUs; resizable without a restart."""
    return _one_container_pod(name, {"cpu": str(cpus), "memory": memory}, {"cpu": str(cpus), "memory": memory}, uid)


def burstable_pod(name: str, cpu_millis: int, *, uid: str | None = None) -> dict[str, Any]:
    """One container on the node's shared pool (requests below limits)."""
    requests_ = {"cpu": f"{cpu_millis}m", "memory": "128Mi"}
    limits = {"cpu": f"{2 * cpu_millis}m", "memory": "256Mi"}
    return _one_container_pod(name, requests_, limits, uid)


def _one_container_pod(name: str, requests_: dict[str, str], limits: dict[str, str], uid: str | None) -> dict[str, Any]:
    resize_policy = [
        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
        {"resourceName": "memory", "restartPolicy": "NotRequired"},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "reliability", "uid": uid or uid_for(name)},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resizePolicy": resize_policy,
                    "resources": {"requests": requests_, "limits": limits},
                }
            ]
        },
    }


def with_main_resources(raw: Mapping[str, Any], requests_: dict[str, str], limits: dict[str, str]) -> dict[str, Any]:
    changed: dict[str, Any] = copy.deepcopy(dict(raw))
    changed["spec"]["containers"][0]["resources"] = {"requests": requests_, "limits": limits}
    return changed


def allocation_request(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {"pod": raw, "nodeName": NODE}


def spec_hash(raw: Mapping[str, Any]) -> str:
    """The hash the enforcer records for ``raw`` (what an allocation of exactly this spec carries)."""
    return contract.spec_hash(requests.pod_resources(raw, pod_level_resources=True))


def qos_of(raw: Mapping[str, Any]) -> Any:
    return requests.pod_resources(raw, pod_level_resources=True).qos_class


def cpus_of(text: str | None) -> set[int]:
    return set(CPUSet.parse(text)) if text else set()


def exclusive_cpus(allocation: Mapping[str, Any]) -> set[int]:
    """Every CPU an allocation holds for itself: its exclusive containers and its pod shared pool."""
    held: set[int] = set()
    for container in allocation["containers"].values():
        if container["assignment"].endswith("_exclusive"):
            held |= cpus_of(container["cpus"])
    pool = allocation.get("podSharedPool")
    if pool:
        held |= cpus_of(pool["cpus"])
    return held


def cpus_assigned_twice(allocations: Sequence[Mapping[str, Any]]) -> dict[int, list[str]]:
    """CPU -> the pods holding it, for every CPU more than one allocation holds exclusively (or a reserved one)."""
    holders: dict[int, list[str]] = {}
    for allocation in allocations:
        for cpu in exclusive_cpus(allocation):
            holders.setdefault(cpu, []).append(allocation["uid"])
    return {cpu: uids for cpu, uids in holders.items() if len(uids) > 1 or cpu in RESERVED_CPUS}


# -- a cgroup v2 fixture tree ---------------------------------------------------------------------------


@dataclass
class CgroupTree:
    """A cgroup v2 tree on disk (the files the kernel shows, kernel defaults) with the kubelet's cgroupfs names.

    The enforcer's v2 driver never creates cgroups, so a pod's directory is
    made here before its allocation is requested, as the kubelet makes it when
    the pod starts.
    """

    root: Path

    def __post_init__(self) -> None:
        for parent in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
            self._make(self.root / parent)

    @staticmethod
    def _make(directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        defaults = {
            "cgroup.controllers": "cpuset cpu io memory pids",
            "cgroup.procs": "",
            "cpuset.cpus": "",
            "cpuset.mems": "",
            "cpu.max": "max 100000",
            "cpu.weight": "100",
            "memory.max": "max",
            "memory.current": "0",
        }
        for name, content in defaults.items():
            target = directory / name
            if not target.exists():
                target.write_text(content + "\n")

    def pod_dir(self, raw: Mapping[str, Any]) -> Path:
        path = naming.pod_cgroup_path(qos_of(raw), raw["metadata"]["uid"], driver="cgroupfs")
        return self.root / path.strip("/")

    def add_pod(self, raw: Mapping[str, Any]) -> Path:
        directory = self.pod_dir(raw)
        self._make(directory)
        return directory

    def read(self, directory: Path, name: str) -> str:
        return (directory / name).read_text().strip()


def cgroup_mismatches(tree: CgroupTree, allocation: Mapping[str, Any], raw: Mapping[str, Any]) -> list[str]:
    """How the pod cgroup of ``allocation`` differs from it: cpuset.cpus and cpuset.mems (empty when in step)."""
    directory = tree.pod_dir(raw)
    containers = allocation["containers"].values()
    want_cpus: set[int] = set().union(*(cpus_of(c["cpus"]) for c in containers))
    want_mems: set[int] = set()
    for c in containers:
        want_mems |= set(c["memoryNUMANodes"]) if c.get("memoryNUMANodes") else set(NUMA_NODES)
    problems = []
    found_cpus = cpus_of(tree.read(directory, "cpuset.cpus"))
    if found_cpus != want_cpus:
        problems.append(f"{directory.name} cpuset.cpus {sorted(found_cpus)} != allocation {sorted(want_cpus)}")
    found_mems = cpus_of(tree.read(directory, "cpuset.mems"))
    if found_mems != want_mems:
        problems.append(f"{directory.name} cpuset.mems {sorted(found_mems)} != allocation {sorted(want_mems)}")
    return problems


# -- figures --------------------------------------------------------------------------------------------


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in 0..1) of ``samples``; NaN when there are none."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def latency_summary(samples_seconds: Sequence[float]) -> dict[str, float | int]:
    """Count and p50/p90/p99/max in milliseconds, rounded for a document."""
    return {
        "requests": len(samples_seconds),
        "p50_ms": round(percentile(samples_seconds, 0.50) * 1000, 2),
        "p90_ms": round(percentile(samples_seconds, 0.90) * 1000, 2),
        "p99_ms": round(percentile(samples_seconds, 0.99) * 1000, 2),
        "max_ms": round(max(samples_seconds, default=math.nan) * 1000, 2),
    }


def write_results(path: Path, name: str, figures: Mapping[str, Any]) -> Path:
    """Merge ``figures`` under ``name`` into the JSON file ``path`` (created when missing); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    document[name] = {
        **figures,
        "recorded_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
    }
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    print(f"\n{name}: {json.dumps(figures, sort_keys=True)}\n(written to {path})")
    return path
