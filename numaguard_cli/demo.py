"""``numaguard demo``: the README's main job, the whole path of a pod through numaguard on this machine.

Everything runs in this one process (server threads on loopback, a few seconds):

1. The machine: this host's sysfs when it can hold the seed pods (the offline
   engine is asked), otherwise the bundled ``dual-socket-ht-32`` topology;
   which one and why is printed.
2. Fresh certificates from one new CA (``servicekit.certs``) in a temp dir.
3. Per seed scenario of the Pod-level Resource Managers article: an enforcer
   (the scenario's kubelet configuration, a temp state dir, the dry-run
   recording cgroup writer) over mutual TLS on ``127.0.0.1:<ephemeral>``, and
   the webhook over TLS with a static node map pointing at it.  The article's
   two examples need two Topology Manager scopes, a per-node kubelet setting,
   so each example gets its own node (``node-a``: pod scope, ``node-b``:
   container scope).
4. Each seed pod as kube-apiserver would send it: ``pods`` CREATE through
   ``/mutate`` and ``/validate``, then the scheduler's ``pods/binding``
   through ``/mutate``.  Printed: the plan annotation, the binding decision,
   every container's CPUs, NUMA nodes, assignment and CFS quota level, the
   cgroup writes once its containers run, and whether that matches the
   kubelet's answer recorded in the scenario.
5. One refusal at binding (``TopologyAffinityError``: the scheduler can try
   another node) and one in-place resize through ``pods/resize``.
6. Shutdown: clients closed, servers stopped, their ports checked closed, the
   temp dir removed (``--keep`` keeps it), on success, error or Ctrl-C.

``--plan-only`` is the offline what-if instead: the plan simulator over the
bundled scenarios, no servers.

The demo stands in for the kubelet in one place: when a pod's containers
"start" it reports their runtime ids to the enforcer, as the enforcer's pod
watch would in a cluster, so the dry-run writer records container cgroups too.
Must not: reach beyond loopback, touch the host's cgroups, or leave a server,
a thread or (without ``--keep``) a temp dir behind.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Literal, cast

import httpx
import yaml
from pydantic import ValidationError

from enforcer.cgroups import driver as cgdriver
from enforcer.cgroups.recording import CgroupWrite, RecordingCgroupDriver
from enforcer.service import main as enforcer_main
from enforcer.service import models
from enforcer.service.node_service import NodeService
from enforcer.service.settings import EnforcerSettings
from enforcer.topology.machine import MEMORY, CPUTopology
from numaguard_cli import demo_steps
from numaguard_cli.demo_steps import DemoError, MachineChoice, Scenario
from servicekit import certs, serve, tls
from shared import contract, quantity
from shared.cpuset import CPUSet
from webhook import errors as webhook_errors
from webhook import main as webhook_main
from webhook.plan import PLAN_ANNOTATION
from webhook.settings import WebhookSettings

HELP = "run the local demo: fresh certificates, an enforcer, the webhook, the seed pods through admission and binding"

LOOPBACK = "127.0.0.1"
HTTP_TIMEOUT_SECONDS = 10.0
RESIZE_EXTRA_CPUS = 2
REFUSAL_SCENARIO = "pod-scope-rejections.yaml"
REFUSAL_POD = "wider-than-a-numa-node"
# cgroup v2 file names of the fields the recording writer records
_CGROUP_FILES: Mapping[str, str] = {
    "cpus": "cpuset.cpus",
    "mems": "cpuset.mems",
    "cpu_quota": "cpu.max",
    "memory_limit": "memory.max",
}
_CONTAINER_HEADER = ("CONTAINER", "ASSIGNMENT", "CPUS", "CPU NUMA", "MEMORY", "MEMORY NUMA", "CFS QUOTA")
_INDENT = "           "


@dataclass(frozen=True)
class Act:
    """One example of the article: a scenario's node and pods, plus the extra steps shown on that node."""

    title: str
    scenario_file: str
    node: str
    show_refusal: bool = False
    resize: tuple[str, str] | None = None  # (pod, container) given RESIZE_EXTRA_CPUS more CPUs in place


ACTS = (
    Act(
        "a tightly coupled database, Topology Manager scope pod",
        demo_steps.SEED_FILES[0],
        "node-a",
        show_refusal=True,
        resize=("tightly-coupled-database", "database"),
    ),
    Act(
        "ML training with a service-mesh sidecar, Topology Manager scope container",
        demo_steps.SEED_FILES[1],
        "node-b",
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plan-only",
        action="store_true",
        help="only the offline what-if: the plan simulator over the bundled scenarios (no servers)",
    )
    parser.add_argument(
        "-o", "--output", choices=("json", "table"), default="table", help="with --plan-only: json or table (default)"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the temporary directory (certificates, state files) and print its path",
    )
    parser.add_argument(
        "--topology",
        choices=("auto", "host", "bundled"),
        default="auto",
        help="the enforcers' machine: this host when it can hold the seed pods (auto, default), "
        "this host regardless (host), or the bundled dual-socket-ht-32 topology (bundled)",
    )


def run(args: argparse.Namespace) -> int:
    if args.plan_only:
        from numaguard_cli import plan

        return plan.run(argparse.Namespace(scenario=None, output=args.output, check=False))
    try:
        with _sigterm_as_interrupt():
            Demo(keep=args.keep, preference=args.topology).run()
    except KeyboardInterrupt:
        print("numaguard demo: interrupted; every server started was stopped", file=sys.stderr)
        return 130
    except DemoError as err:
        print(f"numaguard demo: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader went away (``| head``): everything was stopped on the way out
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 1
    return 0


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so servers stop and the temp dir goes away (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def say(text: str = "") -> None:
    print(text, flush=True)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=1.0):
            return True
    except OSError:
        return False


# -- one node: an enforcer and the webhook in front of it ----------------------------------------------------


@dataclass
class Node:
    """The servers of one act, and the clients that play kube-apiserver (to the webhook) and an operator."""

    name: str
    machine: MachineChoice
    recorder: RecordingCgroupDriver  # the enforcer's dry-run cgroup writer
    service: NodeService  # the enforcer's service, for what a cluster's pod watch would report
    enforcer_url: str
    webhook_url: str
    apiserver: httpx.Client  # trusts the CA, as the webhook configurations' caBundle does
    operator: httpx.Client  # presents the operator client certificate to the enforcer
    written: int = 0  # cgroup writes already shown

    # -- HTTP --------------------------------------------------------------------------------------------
    def review(self, path: str, document: Mapping[str, Any]) -> demo_steps.ReviewAnswer:
        request_uid = str(document["request"]["uid"])
        try:
            response = self.apiserver.post(path, json=document)
        except httpx.HTTPError as err:
            raise DemoError(f"POST {self.webhook_url}{path} failed: {type(err).__name__}: {err}") from None
        if response.status_code != 200:
            raise DemoError(f"POST {self.webhook_url}{path}: HTTP {response.status_code}: {response.text[:300]}")
        return demo_steps.read_answer(response.json(), request_uid=request_uid)

    def _get(self, path: str) -> httpx.Response:
        try:
            response = self.operator.get(path)
        except httpx.HTTPError as err:
            raise DemoError(f"GET {self.enforcer_url}{path} failed: {type(err).__name__}: {err}") from None
        if response.status_code != 200:
            raise DemoError(f"GET {self.enforcer_url}{path}: HTTP {response.status_code}: {response.text[:300]}")
        return response

    def allocation(self, uid: str) -> models.AllocationStatus:
        return models.AllocationStatus.model_validate_json(self._get(f"/allocations/{uid}").content)

    def allocations(self) -> models.AllocationListStatus:
        return models.AllocationListStatus.model_validate_json(self._get("/allocations").content)

    def metrics(self) -> str:
        return self._get("/metrics").text

    # -- the node's side ----------------------------------------------------------------------------------
    def settle(self) -> None:
        """Return once the reconciler has applied every queued change (it empties the queue under its run lock)."""
        self.service.reconciler.run_requested()

    def start_containers(self, allocation: contract.Allocation) -> dict[str, str]:
        """What the pod watch reports once the runtime created the containers: their ids, which name their cgroups."""
        ids = {
            name: "containerd://" + hashlib.sha256(f"{allocation.uid}/{name}".encode()).hexdigest()
            for name in allocation.containers
        }
        self.service.observe_pod(allocation.uid, allocation.qos_class, ids)
        self.settle()
        return ids

    def new_writes(self) -> list[CgroupWrite]:
        writes = self.recorder.writes[self.written :]
        self.written += len(writes)
        return list(writes)


def _start(server: serve.BackgroundServer, what: str) -> int:
    try:
        server.start()
    except serve.ServerStartError as err:
        raise DemoError(f"{what} did not start: {err}") from None
    return server.port


def _plan_numa_size(topology: CPUTopology) -> dict[str, Any]:
    """The webhook's NUMA node size for the plan: the node with the most CPUs (nothing when it has no memory)."""
    widest = max(topology.numa_ids, key=lambda n: len(topology.cpus_in_numa_nodes([n])))
    memory = topology.memory_capacity(widest).get(MEMORY, 0)
    if memory <= 0:
        return {}
    return {"numa_cpus": len(topology.cpus_in_numa_nodes([widest])), "numa_memory": quantity.format_bytes(memory)}


def start_node(
    stack: contextlib.ExitStack,
    act: Act,
    seed: Scenario,
    machine: MachineChoice,
    bundle: certs.Bundle,
    workdir: Path,
    *,
    leaks: list[str],
) -> Node:
    """Start the act's enforcer and webhook; ``stack`` stops them (and checks their ports closed) on the way out."""
    ports: dict[str, int] = {}
    stack.callback(_report_stopped, ports, leaks)  # registered first: runs after everything below has stopped
    kubelet = demo_steps.node_kubelet(seed.kubelet, machine.topology)
    scope: Literal["pod", "container"] = "pod" if kubelet.get("topologyManagerScope") == "pod" else "container"
    source: dict[str, Any] = (
        {"sysfs_root": machine.sysfs_root}
        if machine.source == "host"
        else {"topology_file": demo_steps.BUNDLED_TOPOLOGY_FILE}
    )
    recorder = RecordingCgroupDriver(auto_create=True, v1_hierarchy=False)
    try:
        enforcer_settings = EnforcerSettings(
            node_name=act.node,
            kubelet=kubelet,
            listen=f"{LOOPBACK}:0",
            tls_cert=bundle.cert("enforcer"),
            tls_key=bundle.key("enforcer"),
            client_ca=bundle.cert("ca"),
            state_dir=workdir / act.node,
            dry_run_cgroups=True,
            standalone=True,
            reconcile_interval=0,
            **source,
        )
        enforcer_app = enforcer_main.create_app(enforcer_settings, cgroup_driver=recorder)
        reloader = tls.ReloadingServerContext(
            tls.TLSFiles(bundle.cert("enforcer"), bundle.key("enforcer"), bundle.cert("ca"))
        )
    except (ValidationError, tls.TLSConfigError) as err:
        raise DemoError(f"the enforcer of {act.node} cannot be configured: {err}") from None
    enforcer = serve.BackgroundServer(enforcer_app, host=LOOPBACK, cert_reloader=reloader)
    stack.callback(enforcer.stop)
    ports[f"enforcer {act.node}"] = _start(enforcer, f"the enforcer of {act.node}")
    enforcer_url = f"https://{LOOPBACK}:{enforcer.port}"

    enforcers_file = workdir / f"enforcers-{act.node}.yaml"  # the static node map, as deploy/compose has it
    enforcers_file.write_text(yaml.safe_dump({"nodes": {act.node: enforcer_url}}))
    try:
        webhook_settings = WebhookSettings(
            listen=f"{LOOPBACK}:0",
            tls_cert=bundle.cert("webhook"),
            tls_key=bundle.key("webhook"),
            client_cert=bundle.cert("webhook-client"),
            client_key=bundle.key("webhook-client"),
            enforcer_ca=bundle.cert("ca"),
            enforcer_discovery="static",
            enforcers_file=enforcers_file,
            topology_manager_scope=scope,
            **_plan_numa_size(machine.topology),
        )
        webhook_app = webhook_main.create_app(webhook_settings)
        webhook_context = tls.server_context(tls.TLSFiles(bundle.cert("webhook"), bundle.key("webhook")))
        apiserver_context = tls.client_context(bundle.cert("ca"))
        operator_context = tls.client_context(
            bundle.cert("ca"), cert=bundle.cert("operator-client"), key=bundle.key("operator-client")
        )
    except (ValidationError, tls.TLSConfigError, webhook_errors.ConfigError) as err:
        raise DemoError(f"the webhook for {act.node} cannot be configured: {err}") from None
    webhook = serve.BackgroundServer(webhook_app, host=LOOPBACK, ssl_context=webhook_context)
    stack.callback(webhook.stop)
    ports["webhook"] = _start(webhook, f"the webhook of {act.node}")
    webhook_url = f"https://{LOOPBACK}:{webhook.port}"

    apiserver = stack.enter_context(
        httpx.Client(base_url=webhook_url, verify=apiserver_context, timeout=HTTP_TIMEOUT_SECONDS)
    )
    operator = stack.enter_context(
        httpx.Client(base_url=enforcer_url, verify=operator_context, timeout=HTTP_TIMEOUT_SECONDS)
    )
    say(f"enforcer  {act.node}  {enforcer_url}  mutual TLS, dry-run cgroups, state in {workdir / act.node}")
    say(f"{_INDENT}kubelet: {_kubelet_summary(kubelet)}")
    say(f"webhook   {webhook_url}  TLS, enforcers {act.node} -> {enforcer_url}, plan scope {scope}")
    service = cast(NodeService, enforcer_app.state.service)  # set by the app's lifespan, which has run
    return Node(act.node, machine, recorder, service, enforcer_url, webhook_url, apiserver, operator)


def _kubelet_summary(kubelet: Mapping[str, Any]) -> str:
    """The KubeletConfiguration fields the seed article lists as prerequisites, in its words."""
    parts = [
        f"{kubelet.get('cpuManagerPolicy', 'none')} CPU manager",
        f"{kubelet.get('memoryManagerPolicy', 'None')} memory manager",
        f"topology manager {kubelet.get('topologyManagerPolicy', 'none')}",
        f"scope {kubelet.get('topologyManagerScope', 'container')}",
        f"reserved CPUs {kubelet.get('reservedSystemCPUs', '-')}",
    ]
    return ", ".join(parts)


def _report_stopped(ports: Mapping[str, int], leaks: list[str]) -> None:
    """After the act's servers stopped: prove their ports are closed (a leak fails the demo at its end)."""
    servers = [f"{what} :{port}" for what, port in ports.items()]
    still = [name for name, port in zip(servers, ports.values(), strict=True) if _listening(port)]
    stopped = [name for name in servers if name not in still]
    if stopped:
        say(f"stopped   {', '.join(stopped)} (ports closed)")
    if still:
        say(f"LEAK      still listening: {', '.join(still)}")
        leaks.extend(still)


# -- what is printed per pod --------------------------------------------------------------------------------


def _plan_lines(annotation: str) -> list[str]:
    plan = json.loads(annotation)
    summary = [f"{plan.get('scope')} scope", str(plan.get("qosClass"))]
    alignment = plan.get("alignment")
    if alignment:
        numa = alignment.get("numaNodes")
        where = f" on {numa} NUMA node{'s' if numa != 1 else ''}" if numa else ""
        who = f" ({alignment['container']})" if alignment.get("container") else ""
        summary.append(f"aligned {alignment['cpus']} CPUs + {alignment['memory']}{where}{who}")
    pool = plan.get("podSharedPool")
    if pool:
        summary.append(f"pod shared pool {pool['cpus']} CPUs + {pool['memory']}")
    rows: list[tuple[str, ...]] = [("CONTAINER", "KIND", "CPU", "MEMORY")]
    for name, entry in plan.get("containers", {}).items():
        cpu = entry["cpu"] + (f" x{entry['exclusiveCPUs']}" if entry.get("exclusiveCPUs") else "")
        memory = entry["memory"] + (f" {entry['exclusiveMemory']}" if entry.get("exclusiveMemory") else "")
        rows.append((name, entry["kind"], cpu, memory))
    return [f"  plan     {'; '.join(summary)}", *demo_steps.columns(rows, indent=_INDENT)]


def _container_lines(node: Node, allocation: contract.Allocation) -> list[str]:
    topology = node.machine.topology
    rows: list[tuple[str, ...]] = [_CONTAINER_HEADER]
    for name, c in allocation.containers.items():
        memory_numa = "-" if c.memory_numa_nodes is None else ",".join(map(str, c.memory_numa_nodes))
        rows.append(
            (
                name,
                c.assignment,
                c.cpus or "-",
                demo_steps.numa_nodes_of(topology, c.cpus),
                c.memory_assignment,
                memory_numa,
                c.cfs_quota,
            )
        )
    return demo_steps.columns(rows, indent=_INDENT)


def _write_lines(writes: Sequence[CgroupWrite], uid: str, ids: Mapping[str, str]) -> list[str]:
    """The recorded writes, one line per cgroup (last value per file), the pod's containers named by name."""
    if not writes:
        return ["  cgroups  no writes recorded"]
    by_path: dict[str, dict[str, str]] = {}
    for write in writes:
        value = cgdriver.format_value(write.field, write.value)
        if write.field == "memory_limit" and isinstance(write.value, int):
            value = quantity.human_bytes(write.value)
        by_path.setdefault(write.path, {})[_CGROUP_FILES.get(write.field, write.field)] = value
    names = {container_id.split("://", 1)[-1]: name for name, container_id in ids.items()}
    # the pod's own cgroup is named after its uid: pod<uid> (cgroupfs), kubepods-pod<uid with _ for ->.slice (systemd)
    marks = ("pod" + uid, "pod" + uid.replace("-", "_"))
    pod_paths = [path for path in by_path if any(mark in path.rstrip("/").rsplit("/", 1)[-1] for mark in marks)]
    rows: list[tuple[str, ...]] = []
    for path, files in by_path.items():
        label = next((name for cid, name in names.items() if cid in path), "pod" if path in pod_paths else path)
        rows.append((label, "  ".join(f"{k}={v}" for k, v in files.items())))
    count = len(writes)
    where = f" under {pod_paths[0]}" if pod_paths else ""
    head = f"  cgroups  {count} write{'s' if count != 1 else ''} recorded (dry run){where}"
    return [head, *demo_steps.columns(rows, indent=_INDENT)]


@dataclass
class Bound:
    """A pod as the apiserver stores it after its binding, with the node's allocation."""

    pod: dict[str, Any]
    uid: str
    allocation: contract.Allocation
    container_ids: dict[str, str]


class Demo:
    """The live demo; :meth:`run` prints as it goes and raises DemoError when the demo cannot go on."""

    def __init__(self, *, keep: bool, preference: demo_steps.TopologyPreference) -> None:
        self.keep = keep
        self.preference = preference
        self.differences: list[str] = []
        self.leaks: list[str] = []

    def run(self) -> None:
        started = time.monotonic()
        seeds = {name: demo_steps.load_scenario(name) for name in demo_steps.SEED_FILES}
        say("numaguard demo: Kubernetes v1.36 Pod-level Resource Managers, through the webhook and an enforcer")
        say()
        machine = demo_steps.choose_machine(self.preference, scenarios=list(seeds.values()))
        self._print_machine(machine)
        with contextlib.ExitStack() as stack:
            workdir = Path(tempfile.mkdtemp(prefix="numaguard-demo-"))
            stack.callback(self._remove_workdir, workdir)
            bundle = certs.issue_bundle(workdir / "tls")
            say("certs     a fresh CA, serving certificates for the webhook and the enforcers, client certificates")
            say(f"{_INDENT}for the webhook and an operator, in {bundle.directory}")
            for number, act in enumerate(ACTS, start=1):
                say()
                say(f"== {number}/{len(ACTS)}  {act.title} ({act.scenario_file})")
                with contextlib.ExitStack() as act_stack:
                    seed = seeds[act.scenario_file]
                    node = start_node(act_stack, act, seed, machine, bundle, workdir, leaks=self.leaks)
                    self._play(act, seed, node, machine)
        say()
        if self.leaks:
            raise DemoError(f"servers still listening after shutdown: {', '.join(self.leaks)}")
        if self.differences:
            differences = "; ".join(self.differences)
            raise DemoError(f"allocations differ from the kubelet's answers recorded in the scenarios: {differences}")
        say(f"done in {time.monotonic() - started:.1f}s. What-if without servers: numaguard demo --plan-only")

    # -- set-up lines -----------------------------------------------------------------------------------------
    @staticmethod
    def _print_machine(machine: MachineChoice) -> None:
        def wrapped(text: str) -> None:
            for line in textwrap.wrap(text, width=110, initial_indent=_INDENT, subsequent_indent=_INDENT + "  "):
                say(line)

        if machine.host is not None and machine.source == "bundled":
            say(f"machine   this host: {demo_steps.describe(machine.host)}")
            wrapped(machine.reason)
            say(f"{_INDENT}-> the enforcers run on the bundled topology {demo_steps.BUNDLED_TOPOLOGY_NAME}:")
            say(f"{_INDENT}   {demo_steps.describe(machine.topology)}")
        else:
            say(f"machine   {machine.name}: {demo_steps.describe(machine.topology)}")
            wrapped(f"({machine.reason})")

    def _remove_workdir(self, workdir: Path) -> None:
        if self.keep:
            say(f"kept      {workdir} (certificates, state files, node maps)")
            return
        shutil.rmtree(workdir, ignore_errors=True)
        say(f"removed   {workdir}")

    # -- an act -----------------------------------------------------------------------------------------------
    def _play(self, act: Act, seed: Scenario, node: Node, machine: MachineChoice) -> None:
        bound: dict[str, Bound] = {}
        for raw in seed.pods:
            pod = copy.deepcopy(dict(raw))
            result = self._admit(node, pod, expect_admitted=machine.holds_seed_pods)
            if result is None:
                continue
            bound[demo_steps.pod_name(pod)] = result
            self._compare_with_kubelet(seed, machine, result)
        if act.show_refusal:
            self._refusal(node, machine)
        if act.resize is not None and act.resize[0] in bound:
            self._resize(node, bound[act.resize[0]], act.resize[1])
        self._metrics(node)

    def _admit(self, node: Node, pod: dict[str, Any], *, expect_admitted: bool) -> Bound | None:
        key = demo_steps.pod_key(pod)
        say()
        say(f"pod {key}")
        mutated = node.review("/mutate", demo_steps.pod_create_review(pod, request_uid=str(uuid.uuid4())))
        if not mutated.allowed:
            raise DemoError(f"the CREATE of pod {key} was denied: {mutated.denial()}")
        created = demo_steps.apply_patch(pod, mutated.patch)
        uid = str(uuid.uuid4())  # the apiserver assigns it after the mutating webhooks ran
        created.setdefault("metadata", {}).update(
            uid=uid, creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        )
        validated = node.review("/validate", demo_steps.pod_create_review(created, request_uid=str(uuid.uuid4())))
        if not validated.allowed:
            raise DemoError(f"the CREATE of pod {key} was denied by /validate: {validated.denial()}")
        patched = ", ".join(mutated.patched_keys()) or "nothing"
        say(f"  CREATE   /mutate: allowed, patch sets {patched}; /validate: allowed; uid {uid}")
        for warning in dict.fromkeys((*mutated.warnings, *validated.warnings)):
            say(f"  warning  {warning}")
        plan = demo_steps.annotations_of(created).get(PLAN_ANNOTATION)
        if plan is not None:
            for line in _plan_lines(plan):
                say(line)

        binding_uid = str(uuid.uuid4())
        binding = demo_steps.binding_review(
            namespace=demo_steps.pod_namespace(pod),
            name=demo_steps.pod_name(pod),
            pod_uid=uid,
            node=node.name,
            request_uid=binding_uid,
        )
        answer = node.review("/mutate", binding)
        if not answer.allowed:
            say(f"  BINDING  to {node.name}: DENIED {answer.denial()}")
            for warning in answer.warnings:
                say(f"  warning  {warning}")
            if expect_admitted:
                raise DemoError(f"the binding of seed pod {key} to {node.name} was denied: {answer.denial()}")
            return None
        binding_obj = demo_steps.apply_patch(binding["request"]["object"], answer.patch)
        stored = copy.deepcopy(created)  # the apiserver copies the Binding's annotations onto the pod (K4)
        stored["metadata"].setdefault("annotations", {}).update(demo_steps.annotations_of(binding_obj))
        stored.setdefault("spec", {})["nodeName"] = node.name
        allocation = demo_steps.allocation_of(demo_steps.annotations_of(stored))
        facts = [f"NUMA affinity {','.join(map(str, allocation.numa_affinity or [])) or '-'}"]
        if allocation.pod_shared_pool is not None:
            pool = allocation.pod_shared_pool
            facts.append(f"pod shared pool {pool.cpus or '-'} (memory NUMA {pool.memory_numa_nodes or '-'})")
        say(f"  BINDING  to {node.name}: allowed, patch sets {', '.join(answer.patched_keys())}")
        say(f"{_INDENT}{'; '.join(facts)}")
        for line in _container_lines(node, allocation):
            say(line)

        ids = node.start_containers(allocation)
        for line in _write_lines(node.new_writes(), uid, ids):
            say(line)
        held = node.allocation(uid)
        same = held.containers == allocation.containers and held.spec_hash == allocation.spec_hash
        cgroups = "cgroups in sync" if held.cgroups is not None and held.cgroups.in_sync else "cgroups NOT in sync"
        verdict = "the same allocation" if same else "a DIFFERENT allocation"
        say(f"  node     GET /allocations/{uid}: {verdict}, {cgroups}")
        if not same:
            self.differences.append(f"{key}: the enforcer holds another allocation than the binding recorded")
        return Bound(stored, uid, allocation, ids)

    def _compare_with_kubelet(self, seed: Scenario, machine: MachineChoice, bound: Bound) -> None:
        expected = seed.expected(demo_steps.pod_key(bound.pod))
        if expected is None or machine.source != "bundled":
            return  # the scenario's answers are for the bundled machine
        mismatches = demo_steps.expectation_mismatches(bound.allocation, expected)
        if mismatches:
            say(f"  kubelet  DIFFERS from the kubelet's answer in {seed.file_name}: {'; '.join(mismatches)}")
            self.differences += [f"{demo_steps.pod_key(bound.pod)} {m}" for m in mismatches]
        else:
            say(f"  kubelet  same CPUs, assignments and CFS quota levels as the kubelet ({seed.file_name} expect)")

    def _refusal(self, node: Node, machine: MachineChoice) -> None:
        rejections = demo_steps.load_scenario(REFUSAL_SCENARIO)
        widest = max(len(machine.topology.cpus_in_numa_nodes([n])) for n in machine.topology.numa_ids)
        pod = demo_steps.with_pod_cpus(rejections.pod(REFUSAL_POD), widest + 1)
        say()
        say(f"a pod wider than any NUMA node ({REFUSAL_SCENARIO}): {demo_steps.cpu_of(pod)} CPUs")
        before = len(node.allocations().items)
        result = self._admit(node, pod, expect_admitted=False)
        if result is not None:
            say(f"  note     {node.name} admitted it")
            return
        after = len(node.allocations().items)
        say(f"{_INDENT}the scheduler tries another node; without numaguard the kubelet fails the pod after binding")
        trace = "left no trace" if after == before else f"changed the node's allocations ({before} -> {after})"
        say(f"  node     GET /allocations: {after} pod{'s' if after != 1 else ''} held; the refusal {trace}")

    def _resize(self, node: Node, bound: Bound, container: str) -> None:
        old = copy.deepcopy(bound.pod)
        old["status"] = {"phase": "Running", "qosClass": bound.allocation.qos_class}
        new = demo_steps.grow_cpus(old, container, RESIZE_EXTRA_CPUS)
        key = demo_steps.pod_key(old)
        say()
        change = f"{container} cpu {demo_steps.cpu_of(old, container)} -> {demo_steps.cpu_of(new, container)}"
        if demo_steps.cpu_of(old) != demo_steps.MISSING:
            change += f", pod cpu {demo_steps.cpu_of(old)} -> {demo_steps.cpu_of(new)}"
        say(f"resize {key} in place through pods/resize: {change}")
        before = node.allocation(bound.uid)
        answers = [
            (path, node.review(path, demo_steps.resize_review(old, new, request_uid=str(uuid.uuid4()))))
            for path in ("/mutate", "/validate")
        ]
        say("  RESIZE   " + "; ".join(f"{p}: {'allowed' if a.allowed else 'DENIED ' + a.denial()}" for p, a in answers))
        for warning in dict.fromkeys(w for _, a in answers for w in a.warnings):
            say(f"  warning  {warning}")
        node.settle()
        after = node.allocation(bound.uid)
        if after.spec_hash == before.spec_hash:
            state = after.resize.state if after.resize is not None else "not applied"
            say(f"{_INDENT}{node.name} did not resize the pod ({state})")
            return
        rows: list[tuple[str, ...]] = [("CONTAINER", "ASSIGNMENT", "CPUS BEFORE", "CPUS AFTER")]
        for name, c in after.containers.items():
            was = before.containers.get(name)
            rows.append((name, c.assignment, (was.cpus if was else None) or "-", c.cpus or "-"))
        for line in demo_steps.columns(rows, indent=_INDENT):
            say(line)
        kept = before.containers.get(container)
        now = after.containers.get(container)
        if kept and now and kept.cpus and now.cpus and CPUSet.parse(kept.cpus).is_subset_of(CPUSet.parse(now.cpus)):
            say(f"{_INDENT}{node.name} resized it without a restart; {container} keeps its CPUs {kept.cpus}")
        for line in _write_lines(node.new_writes(), bound.uid, bound.container_ids):
            say(line)

    def _metrics(self, node: Node) -> None:
        counts: list[str] = []
        for line in node.metrics().splitlines():
            if line.startswith("resource_manager_container_assignments{") and 'resource_name="cpu"' in line:
                labels, _, value = line.rpartition(" ")
                kind = labels.split('assignment_type="', 1)[-1].split('"', 1)[0]
                counts.append(f"{kind} {float(value):g}")
        if counts:
            say()
            say(f"metrics   resource_manager_container_assignments (cpu) on {node.name}: {', '.join(counts)}")
