"""The data of ``numaguard demo``: what kube-apiserver would send, what comes back, and the machine to run on.

:mod:`numaguard_cli.demo` starts the servers and talks HTTPS; this module
builds and reads what travels:

* AdmissionReview v1 requests shaped as kube-apiserver sends them (a Pod
  CREATE, a ``pods/binding`` CREATE carrying the pod's uid and target node, a
  ``pods/resize`` UPDATE with the old object), and the answer's envelope
  (allowed, warnings, status, the base64 JSONPatch) with an RFC 6902 applier
  so the demo shows the pod as the apiserver would store it;
* the seed scenarios bundled in ``numaguard_cli/scenarios`` (their ``node``
  section is the enforcer's kubelet configuration, their ``add`` steps the
  pods, their ``expect`` section the kubelet's answer);
* the machine: this host's sysfs when it can hold the seed pods (checked by
  running the offline engine over the seed scenarios), the bundled
  ``dual-socket-ht-32`` topology otherwise, with the reason;
* text columns for people.

Must not: open sockets, start servers or print.  The only files it reads are
the bundled scenarios and the sysfs tree it is pointed at.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from enforcer.engine import scenario
from enforcer.errors import EnforcerError
from enforcer.topology import discovery, machine
from enforcer.topology.machine import MEMORY, CPUTopology
from shared import contract, quantity
from shared.cpuset import CPUSet
from shared.errors import DomainError

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
BUNDLED_TOPOLOGY_FILE = SCENARIOS / "dual-socket-ht-32.json"
BUNDLED_TOPOLOGY_NAME = "dual-socket-ht-32"
SEED_FILES = ("seed-1-tightly-coupled-database.yaml", "seed-2-ml-workload-container-scope.yaml")

ADMISSION_API_VERSION = "admission.k8s.io/v1"
MISSING = "-"
# Who sends what: a user creates and resizes pods, the scheduler binds them.
_USER = {"username": "kubernetes-admin", "uid": "demo-admin", "groups": ["system:masters", "system:authenticated"]}
_SCHEDULER = {"username": "system:kube-scheduler", "uid": "demo-scheduler", "groups": ["system:authenticated"]}

TopologyPreference = Literal["auto", "host", "bundled"]


class DemoError(Exception):
    """The demo cannot go on: a server did not start, or an answer is not what the protocol promises."""


# -- the bundled scenarios ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """A bundled scenario file: the node it describes, the pods it adds and what the kubelet answers."""

    file_name: str
    node: Mapping[str, Any]
    pods: tuple[Mapping[str, Any], ...]
    expect: tuple[Mapping[str, Any], ...]

    @property
    def kubelet(self) -> Mapping[str, Any]:
        kubelet = self.node.get("kubelet")
        return kubelet if isinstance(kubelet, Mapping) else {}

    def pod(self, name: str) -> dict[str, Any]:
        """A deep copy of the added pod called ``name``: callers fill in uids and node names."""
        for pod in self.pods:
            if pod_name(pod) == name:
                return copy.deepcopy(dict(pod))
        raise DemoError(f"scenario {self.file_name} adds no pod named {name!r}")

    def expected(self, pod_key: str) -> Mapping[str, Any] | None:
        """The ``expect`` entry of the ``add`` of ``namespace/name``, if the scenario has one."""
        for entry in self.expect:
            if entry.get("op") == "add" and entry.get("pod") == pod_key:
                return entry
        return None


def load_scenario(file_name: str) -> Scenario:
    path = SCENARIOS / file_name
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise DemoError(f"cannot read the bundled scenario {path}: {err}") from None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("node"), Mapping):
        raise DemoError(f"bundled scenario {path} has no node section")
    steps = doc.get("steps") or []
    pods = tuple(step["add"] for step in steps if isinstance(step, Mapping) and isinstance(step.get("add"), Mapping))
    expect = tuple(entry for entry in doc.get("expect") or [] if isinstance(entry, Mapping))
    return Scenario(file_name, doc["node"], pods, expect)


def pod_name(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata")
    return str(metadata.get("name") or "") if isinstance(metadata, Mapping) else ""


def pod_namespace(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata")
    return str(metadata.get("namespace") or "default") if isinstance(metadata, Mapping) else "default"


def pod_key(pod: Mapping[str, Any]) -> str:
    return f"{pod_namespace(pod)}/{pod_name(pod)}"


# -- AdmissionReview requests, as kube-apiserver sends them -------------------------------------------------


def _review(
    *,
    request_uid: str,
    kind: str,
    operation: str,
    namespace: str,
    name: str,
    obj: Mapping[str, Any],
    user: Mapping[str, Any],
    sub_resource: str = "",
    old: Mapping[str, Any] | None = None,
    options_kind: str = "CreateOptions",
) -> dict[str, Any]:
    gvk = {"group": "", "version": "v1", "kind": kind}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    request: dict[str, Any] = {
        "uid": request_uid,
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": name,
        "namespace": namespace,
        "operation": operation,
        "userInfo": dict(user),
        "object": dict(obj),
        "oldObject": None if old is None else dict(old),
        "dryRun": False,
        "options": {"kind": options_kind, "apiVersion": "meta.k8s.io/v1"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
        request["requestSubResource"] = sub_resource
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "request": request}


def pod_create_review(pod: Mapping[str, Any], *, request_uid: str) -> dict[str, Any]:
    """``pods`` CREATE; the mutating call sees no ``metadata.uid`` yet, the validating one does."""
    return _review(
        request_uid=request_uid,
        kind="Pod",
        operation="CREATE",
        namespace=pod_namespace(pod),
        name=pod_name(pod),
        obj=pod,
        user=_USER,
    )


def binding_review(*, namespace: str, name: str, pod_uid: str, node: str, request_uid: str) -> dict[str, Any]:
    """``pods/binding`` CREATE: the scheduler's Binding, carrying the pod's uid and the chosen node."""
    binding = {
        "kind": "Binding",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "uid": pod_uid, "creationTimestamp": None},
        "target": {"kind": "Node", "name": node},
    }
    return _review(
        request_uid=request_uid,
        kind="Binding",
        operation="CREATE",
        namespace=namespace,
        name=name,
        obj=binding,
        user=_SCHEDULER,
        sub_resource="binding",
    )


def resize_review(old: Mapping[str, Any], new: Mapping[str, Any], *, request_uid: str) -> dict[str, Any]:
    """``pods/resize`` UPDATE: the pod as stored, and the pod as the resize would leave it."""
    return _review(
        request_uid=request_uid,
        kind="Pod",
        operation="UPDATE",
        namespace=pod_namespace(new),
        name=pod_name(new),
        obj=new,
        old=old,
        user=_USER,
        sub_resource="resize",
        options_kind="UpdateOptions",
    )


# -- AdmissionReview answers ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReviewAnswer:
    """``AdmissionReview.response``, read."""

    allowed: bool
    patch: tuple[Mapping[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    code: int | None = None
    reason: str | None = None
    message: str | None = None

    def patched_keys(self) -> list[str]:
        """The annotation keys the patch sets, in patch order (a whole-map ``add`` lists its keys)."""
        keys: list[str] = []
        for op in self.patch:
            path = str(op.get("path", ""))
            value = op.get("value")
            if path == "/metadata/annotations" and isinstance(value, Mapping):
                keys += [str(k) for k in value]
            elif path.startswith("/metadata/annotations/") and op.get("op") != "remove":
                keys.append(_unescape(path.removeprefix("/metadata/annotations/")))
        return keys

    def denial(self) -> str:
        parts = [str(self.code) if self.code is not None else "", self.reason or "", self.message or ""]
        return " ".join(p for p in parts[:2] if p) + (f": {parts[2]}" if parts[2] else "")


def read_answer(body: object, *, request_uid: str) -> ReviewAnswer:
    """The answer to the review ``request_uid``; DemoError when the body is not one (the protocol says it must be)."""
    if not isinstance(body, Mapping) or body.get("apiVersion") != ADMISSION_API_VERSION:
        raise DemoError(f"the webhook did not answer with an {ADMISSION_API_VERSION} AdmissionReview: {body!r:.200}")
    response = body.get("response")
    if not isinstance(response, Mapping) or response.get("uid") != request_uid:
        raise DemoError(f"the webhook answered another request than {request_uid}: {response!r:.200}")
    ops: tuple[Mapping[str, Any], ...] = ()
    if response.get("patch"):
        if response.get("patchType") != "JSONPatch":
            raise DemoError(f"unexpected patchType {response.get('patchType')!r}")
        try:
            decoded = json.loads(base64.b64decode(str(response["patch"]), validate=True))
        except ValueError as err:
            raise DemoError(f"the webhook's patch is not base64 JSON: {err}") from None
        if not isinstance(decoded, list) or not all(isinstance(op, Mapping) for op in decoded):
            raise DemoError("the webhook's patch is not a JSONPatch (a list of operations)")
        ops = tuple(decoded)
    status = response.get("status")
    status = status if isinstance(status, Mapping) else {}
    code = status.get("code")
    return ReviewAnswer(
        allowed=bool(response.get("allowed")),
        patch=ops,
        warnings=tuple(str(w) for w in response.get("warnings") or ()),
        code=code if isinstance(code, int) else None,
        reason=str(status["reason"]) if status.get("reason") else None,
        message=str(status["message"]) if status.get("message") else None,
    )


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(document: Mapping[str, Any], ops: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """RFC 6902 ``add``/``replace``/``remove``/``test`` on a copy of ``document``, as the apiserver applies them."""
    result: dict[str, Any] = copy.deepcopy(dict(document))
    for op in ops:
        name, path = op.get("op"), str(op.get("path", ""))
        tokens = [_unescape(t) for t in path.split("/")[1:]] if path else []
        if not tokens:
            raise DemoError(f"JSONPatch {name} of the whole document is not supported: {op!r}")
        parent: Any = result
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent.get(token)
            if parent is None:
                raise DemoError(f"JSONPatch path {path} does not exist")
        last = tokens[-1]
        if name in ("add", "replace"):
            value = copy.deepcopy(op.get("value"))
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if name == "add":
                    parent.insert(index, value)
                else:
                    parent[index] = value
            else:
                if name == "replace" and last not in parent:
                    raise DemoError(f"JSONPatch replace of a missing member {path}")
                parent[last] = value
        elif name == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                parent.pop(last)
        elif name == "test":
            actual = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if actual != op.get("value"):
                raise DemoError(f"JSONPatch test failed at {path}")
        else:
            raise DemoError(f"unsupported JSONPatch operation {name!r}")
    return result


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    metadata = obj.get("metadata")
    raw = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def allocation_of(annotations: Mapping[str, str]) -> contract.Allocation:
    """The node's allocation recorded on the pod at binding (``numaguard.io/allocation``)."""
    raw = annotations.get(contract.ALLOCATION_ANNOTATION)
    if raw is None:
        raise DemoError(f"the binding recorded no {contract.ALLOCATION_ANNOTATION} annotation")
    try:
        return contract.Allocation.model_validate_json(raw)
    except ValueError as err:
        raise DemoError(f"{contract.ALLOCATION_ANNOTATION} is not an allocation: {err}") from None


# -- a resize ---------------------------------------------------------------------------------------------------


def _add_cpus(resources: Mapping[str, Any], extra_millis: int) -> dict[str, Any]:
    grown: dict[str, Any] = copy.deepcopy(dict(resources))
    for part in ("requests", "limits"):
        values = grown.get(part)
        if isinstance(values, dict) and "cpu" in values:
            values["cpu"] = quantity.format_millicores(quantity.cpu_millis(values["cpu"]) + extra_millis)
    return grown


def grow_cpus(pod: Mapping[str, Any], container: str, extra_cpus: int) -> dict[str, Any]:
    """The pod with ``extra_cpus`` more CPU for ``container`` and, when the pod has a budget, for the budget too.

    Growing both keeps a pod-level pod Guaranteed and its shared pool the
    same size: the resize only widens the container's exclusive slice.
    """
    grown: dict[str, Any] = copy.deepcopy(dict(pod))
    spec = grown.get("spec")
    if not isinstance(spec, dict):
        raise DemoError(f"pod {pod_key(pod)} has no spec")
    found = False
    for entry in spec.get("containers") or []:
        if isinstance(entry, dict) and entry.get("name") == container:
            entry["resources"] = _add_cpus(entry.get("resources") or {}, extra_cpus * 1000)
            found = True
    if not found:
        raise DemoError(f"pod {pod_key(pod)} has no container {container!r}")
    if isinstance(spec.get("resources"), Mapping):
        spec["resources"] = _add_cpus(spec["resources"], extra_cpus * 1000)
    return grown


def with_pod_cpus(pod: Mapping[str, Any], cpus: int) -> dict[str, Any]:
    """The pod with a budget of at least ``cpus`` CPUs (requests and limits): a pod wider than any NUMA node."""
    wider: dict[str, Any] = copy.deepcopy(dict(pod))
    resources = wider.get("spec", {}).get("resources")
    if not isinstance(resources, dict):
        raise DemoError(f"pod {pod_key(pod)} has no pod-level resources")
    for part in ("requests", "limits"):
        values = resources.get(part)
        if isinstance(values, dict) and quantity.cpu_millis(values.get("cpu", "0")) < cpus * 1000:
            values["cpu"] = str(cpus)
    return wider


def cpu_of(pod: Mapping[str, Any], container: str | None = None) -> str:
    """The CPU request of ``container`` (or of the pod budget when None), as written; ``-`` when not set."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return MISSING
    resources: object = spec.get("resources")
    if container is not None:
        entries = [c for c in spec.get("containers") or [] if isinstance(c, Mapping) and c.get("name") == container]
        resources = entries[0].get("resources") if entries else None
    requests = resources.get("requests") if isinstance(resources, Mapping) else None
    return str(requests.get("cpu", MISSING)) if isinstance(requests, Mapping) else MISSING


# -- the machine ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MachineChoice:
    """The topology the enforcers run on, where it came from and why."""

    topology: CPUTopology
    source: Literal["host", "bundled"]
    reason: str
    host: CPUTopology | None  # what discovery found, when it found anything
    sysfs_root: Path | None  # the host's sysfs (the enforcer discovers it again itself)
    holds_seed_pods: bool  # the offline engine admitted every seed pod on this topology

    @property
    def name(self) -> str:
        if self.source == "host":
            return f"this host ({self.sysfs_root})"
        return f"bundled topology {BUNDLED_TOPOLOGY_NAME}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def describe(topology: CPUTopology) -> str:
    """``2 sockets, 16 cores, 32 CPUs (2 threads per core), 2 NUMA nodes of 64Gi``."""
    memory = [quantity.human_bytes(node.memory.get(MEMORY, 0)) for node in topology.numa_nodes]
    sizes = memory[0] if len(set(memory)) == 1 else "/".join(memory)
    threads = topology.cpus_per_core()
    return (
        f"{_plural(topology.num_sockets, 'socket')}, {_plural(topology.num_cores, 'core')}, "
        f"{_plural(topology.num_cpus, 'CPU')} ({_plural(threads, 'thread')} per core), "
        f"{_plural(topology.num_numa_nodes, 'NUMA node')} of {sizes}"
    )


def node_kubelet(kubelet: Mapping[str, Any], topology: CPUTopology) -> dict[str, Any]:
    """The scenario's kubelet configuration made to fit ``topology``.

    The seeds reserve CPUs ``0,16`` (core 0 of the bundled machine) and memory
    on NUMA node 0; on another machine the same intent is the threads of its
    first core and that core's NUMA node.  On the bundled machine nothing changes.
    """
    first = topology.cpus[0]
    adapted: dict[str, Any] = copy.deepcopy(dict(kubelet))
    if "reservedSystemCPUs" in adapted:
        adapted["reservedSystemCPUs"] = str(topology.cpus_in_cores([first.core]))
    reserved_memory = adapted.get("reservedMemory")
    if isinstance(reserved_memory, list) and len(reserved_memory) == 1 and isinstance(reserved_memory[0], dict):
        reserved_memory[0]["numaNode"] = first.numa
    return adapted


def seed_refusals(topology: CPUTopology, scenarios: Sequence[Scenario]) -> list[str]:
    """Why the offline engine would refuse a seed pod on ``topology`` (empty: every seed pod fits)."""
    refusals: list[str] = []
    for seed in scenarios:
        node = {key: value for key, value in seed.node.items() if key not in ("topologyFile", "topology")}
        node["kubelet"] = node_kubelet(seed.kubelet, topology)
        doc = {"node": node, "steps": [{"add": dict(pod)} for pod in seed.pods]}
        try:
            result = scenario.run(doc, topology_doc=topology.to_document())
        except scenario.ScenarioError as err:
            refusals.append(f"{seed.file_name}: {err.message}")
            continue
        for step in result["steps"]:
            if not step["admitted"]:
                refusals.append(f"{step['pod']}: {step['reason']}: {step['message']}")
    return refusals


def load_bundled_topology() -> CPUTopology:
    try:
        return machine.load(BUNDLED_TOPOLOGY_FILE)
    except (OSError, EnforcerError) as err:
        raise DemoError(f"cannot load the bundled topology {BUNDLED_TOPOLOGY_FILE}: {err}") from None


def choose_machine(
    preference: TopologyPreference,
    *,
    scenarios: Sequence[Scenario],
    sysfs_root: Path = discovery.HOST_SYSFS,
    meminfo: Path | None = discovery.HOST_MEMINFO,
) -> MachineChoice:
    """This host when it can hold the seed pods (or when asked for), else the bundled topology, with the reason."""
    if preference == "bundled":
        bundled = load_bundled_topology()
        fits = not seed_refusals(bundled, scenarios)
        return MachineChoice(bundled, "bundled", "asked for with --topology bundled", None, None, fits)
    try:
        host = discovery.discover(sysfs_root, meminfo_fallback=meminfo)
    except (EnforcerError, DomainError, OSError) as err:
        if preference == "host":
            raise DemoError(f"cannot discover this host's topology from {sysfs_root}: {err}") from None
        bundled = load_bundled_topology()
        reason = f"sysfs offers too little ({err})"
        return MachineChoice(bundled, "bundled", reason, None, None, not seed_refusals(bundled, scenarios))
    refusals = seed_refusals(host, scenarios)
    if not refusals:
        return MachineChoice(host, "host", "it holds every seed pod", host, sysfs_root, True)
    why = f"the seed pods need 8 CPUs and 16Gi on one NUMA node; the engine refuses {refusals[0]}"
    if preference == "host":
        return MachineChoice(host, "host", f"asked for with --topology host, although {why}", host, sysfs_root, False)
    bundled = load_bundled_topology()
    fits = not seed_refusals(bundled, scenarios)
    return MachineChoice(bundled, "bundled", f"this host is too small: {why}", host, None, fits)


def numa_nodes_of(topology: CPUTopology, cpus: str | None) -> str:
    """The NUMA nodes a CPU list lies on (``0`` or ``0,1``)."""
    if not cpus:
        return MISSING
    try:
        nodes = topology.numa_nodes_of(CPUSet.parse(cpus))
    except (DomainError, EnforcerError, KeyError):
        return "?"
    return ",".join(str(n) for n in nodes) or MISSING


def expectation_mismatches(allocation: contract.Allocation, expected: Mapping[str, Any]) -> list[str]:
    """Where the allocation differs from a scenario's ``expect`` entry (CPUs, assignment, CFS quota level)."""
    mismatches: list[str] = []
    containers = expected.get("containers")
    for name, want in containers.items() if isinstance(containers, Mapping) else ():
        got = allocation.containers.get(str(name))
        if got is None:
            mismatches.append(f"{name}: no allocation")
            continue
        for key, actual in (("assignment", got.assignment), ("cpus", got.cpus), ("cfsQuota", got.cfs_quota)):
            if isinstance(want, Mapping) and key in want and str(want[key]) != str(actual):
                mismatches.append(f"{name}.{key}: {actual} (kubelet: {want[key]})")
    return mismatches


# -- text ---------------------------------------------------------------------------------------------------------


def columns(rows: Sequence[Sequence[str]], *, indent: str = "", gap: str = "  ") -> list[str]:
    """Left-aligned columns as wide as their widest cell, trailing blanks removed."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + gap.join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
