"""The one place the extender touches the engine: decode a replicated snapshot, dry-run an admission.

Everything the extender knows about alignment comes from here, and everything here is the
enforcer's own code called through its public entry points: ``machine.from_document`` and
``config.from_kubelet`` rebuild the machine and the kubelet configuration the snapshot names,
``builder.restore`` checks and decodes the manager states, and ``NodeEngine.admit`` decides.
There is no second implementation of any rule.  (Engine internals are being restructured in
parallel; if an entry point moves, this module is the only one to adjust.)

A dry run swaps a copy of the state in, admits, reads what it needs and swaps the original back:
the engine decides on a copy anyway (its admissions are atomic), so the replica is never changed.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from enforcer.engine import builder, podcodec
from enforcer.engine import config as node_config
from enforcer.engine.node import NodeEngine
from enforcer.errors import EnforcerError
from enforcer.topology import machine
from enforcer.topology.hints import mask_of
from shared.cpuset import CPUSet
from shared.resources import PodResources

DRY_RUN_UID = "numaguard-extender-dry-run"
"""The uid the candidate pod is admitted under: never a real pod's (real uids are RFC 4122 UUIDs)."""


class SnapshotError(Exception):
    """A replicated snapshot that cannot be turned into an engine (wrong version, inconsistent, unknown fields)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class NumaUsage:
    """Free exclusive capacity of one NUMA node: CPUs not reserved and not held, and split cores."""

    free_cpus: int
    allocatable_cpus: int
    partial_cores: int  # cores with some threads free and some held: what splitting a core leaves behind
    cores: int


@dataclass(frozen=True, slots=True)
class DryRun:
    """What the engine would do with the pod: admitted (and where) or refused with the kubelet's reason."""

    admitted: bool
    reason: str | None = None
    message: str | None = None
    numa_nodes: tuple[int, ...] = ()  # NUMA nodes the pod's exclusive CPUs and pinned memory landed on
    exclusive_cpus: int = 0
    usage_after: tuple[tuple[int, NumaUsage], ...] = ()  # per NUMA node, after the pod was placed


MACHINE_CACHE_ENTRIES = 256
"""Distinct machine models kept for reuse: far more than the node kinds of a cluster."""


class _Machines:
    """One :class:`~enforcer.topology.machine.CPUTopology` object per distinct topology document.

    Why: the engine's per-machine indexes (``cpumanager.topology_index``, :func:`_layout`) are cached
    by the topology object's identity, with a bound of a few dozen entries.  Decoding every replica
    into a topology object of its own made 100 replicas of 8 machine kinds 100 objects, so those
    caches thrashed and every dry run rebuilt the machine's index.  A topology is frozen, so replicas
    of the same machine kind can share one object; the document's canonical JSON is the key (its
    ``fingerprint``), and an unknown document is still checked by ``machine.from_document``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[str, machine.CPUTopology] = OrderedDict()
        self._lock = threading.Lock()  # the poller decodes on several threads

    def get(self, document: object) -> machine.CPUTopology:
        key = json.dumps(document, sort_keys=True, separators=(",", ":"))
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        topology = machine.from_document(document)  # raises TopologyError (an EnforcerError) when invalid
        with self._lock:
            self._items[key] = topology
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return topology


_MACHINES = _Machines(MACHINE_CACHE_ENTRIES)


def engine_from_snapshot(snapshot: dict[str, Any]) -> NodeEngine:
    """The node's engine holding the snapshot's state; raises SnapshotError with the reason."""
    try:
        topology = _MACHINES.get(snapshot["topology"])
        config = node_config.from_kubelet(
            snapshot["config"], name=str(snapshot.get("node", "node")), compatibility=str(snapshot["compatibility"])
        )
        return builder.restore(topology, config, snapshot)
    except EnforcerError as err:
        raise SnapshotError(err.message) from None
    except (KeyError, TypeError, ValueError) as err:
        raise SnapshotError(f"malformed engine snapshot: {type(err).__name__}: {err}") from None


def empty_twin(engine: NodeEngine) -> NodeEngine:
    """A fresh engine for the same machine and configuration: what the node could do if it were empty."""
    return builder.build(engine.topology, engine.config)


def config_digest(engine: NodeEngine) -> str:
    """Identity of machine + configuration: nodes with equal digests give equal answers on an empty node."""
    body = {
        "topology": engine.topology.to_document(),
        "config": engine.config.to_kubelet(),
        "compatibility": engine.config.compatibility,
    }
    return _digest(body)


def state_digest(engine: NodeEngine, snapshot: dict[str, Any]) -> str:
    """Identity of everything an admission depends on: machine, configuration, manager states, used requests.

    Pod identities, counters and pending resizes are left out (admission does not read them), so two
    nodes of one kind holding pods of the same shapes on the same CPUs share their answers."""
    body = {
        "config": config_digest(engine),
        "cpu": snapshot.get("cpu"),
        "memory": snapshot.get("memory"),
        "used": sorted(engine.used_requests().items()),
    }
    return _digest(body)


def pod_shape(pod: PodResources) -> str:
    """Identity of what a pod asks for, without who it is (name, namespace, uid, priority)."""
    body = podcodec.to_dict(pod)
    for key in ("uid", "name", "namespace", "priority"):
        body.pop(key, None)
    body["overhead"] = sorted(pod.overhead.items())
    return _digest(body)


def dry_run(engine: NodeEngine, pod: PodResources) -> DryRun:
    """Admit ``pod`` on a copy of the engine's state and report; the engine is left exactly as it was.

    ``pod`` may be a :func:`candidate` already: then that object is admitted as it is, so what the
    engine derives from the pod alone (``PodResources.memo``) is computed once for all the nodes it is
    dry-run on, not once per node."""
    candidate = _as_candidate(pod)
    trial = engine.trial(candidate)
    decision = trial.decision
    if not decision.admitted or decision.view is None:
        return DryRun(False, decision.reason or "UnexpectedAdmissionError", decision.message or "")
    view = decision.view
    mask = 0
    exclusive = CPUSet()
    for c in view.containers:
        if c.assignment in ("node_exclusive", "pod_exclusive"):
            exclusive = exclusive | c.cpus
        if c.memory_numa_nodes is not None and c.memory_assignment != "node_shared":
            mask |= mask_of(c.memory_numa_nodes)
    if view.pod_cpus is not None:
        exclusive = exclusive | view.pod_cpus
    if view.pod_shared_pool_memory_numa_nodes is not None:
        mask |= mask_of(view.pod_shared_pool_memory_numa_nodes)
    if exclusive:
        mask |= mask_of(engine.topology.numa_nodes_of(exclusive))
    numa = tuple(i for i in engine.topology.numa_ids if mask >> i & 1)
    after = usage(engine, trial.state.cpu.default)
    return DryRun(True, numa_nodes=numa, exclusive_cpus=len(exclusive), usage_after=after)


def usage(engine: NodeEngine, default_cpus: CPUSet | None = None) -> tuple[tuple[int, NumaUsage], ...]:
    """Free exclusive capacity per NUMA node (CPUs outside the reserved set that no container or pod
    bubble holds, and the cores split between free and held threads), as the engine is now or, given
    ``default_cpus``, with that shared pool (a dry run's)."""
    layout = _layout(engine)
    shared = engine.default_cpus() if default_cpus is None else default_cpus
    free = shared.mask & ~layout.reserved
    result = []
    for numa_id, numa_mask, allocatable, cores in layout.numa:
        mine = free & numa_mask
        partial = 0
        for threads in cores:
            left = mine & threads
            if left and left != threads:
                partial += 1
        result.append((numa_id, NumaUsage(mine.bit_count(), allocatable, partial, len(cores))))
    return tuple(result)


@dataclass(frozen=True, slots=True)
class _Layout:
    topology: machine.CPUTopology  # held, so the id in the cache key cannot be reused while the entry lives
    reserved: int
    numa: tuple[tuple[int, int, int, tuple[int, ...]], ...]  # (id, cpu mask, allocatable CPUs, core masks)


_LAYOUTS: dict[tuple[int, int], _Layout] = {}


def _layout(engine: NodeEngine) -> _Layout:
    """Bit masks of the machine, computed once per (machine, reserved set)."""
    reserved: CPUSet = engine.cpu_policy.reserved_cpus
    key = (id(engine.topology), reserved.mask)
    found = _LAYOUTS.get(key)
    if found is not None and found.topology is engine.topology:
        return found
    topology = engine.topology
    numa = []
    for numa_id in topology.numa_ids:
        cpus = topology.cpus_in_numa_nodes([numa_id])
        cores = []
        for core in topology.cores_of(cpus):
            threads = topology.cpus_in_cores([core]).mask & ~reserved.mask
            if threads:
                cores.append(threads)
        numa.append((numa_id, cpus.mask, len(cpus - reserved), tuple(cores)))
    layout = _Layout(topology, reserved.mask, tuple(numa))
    if len(_LAYOUTS) > 1024:
        _LAYOUTS.clear()
    _LAYOUTS[key] = layout
    return layout


def candidate(pod: PodResources) -> PodResources:
    """The pod as a dry run admits it (under :data:`DRY_RUN_UID`): build it once per pod and dry-run it
    on every node (:func:`dry_run` admits the same answer for the pod and for its candidate)."""
    return _as_candidate(pod)


def _as_candidate(pod: PodResources) -> PodResources:
    if pod.uid == DRY_RUN_UID:
        return pod  # a candidate already (real uids are RFC 4122 UUIDs)
    return PodResources(
        uid=DRY_RUN_UID,
        namespace=pod.namespace,
        name=pod.name,
        containers=pod.containers,
        pod=pod.pod,
        qos_class=pod.qos_class,
        priority=pod.priority,
        overhead=pod.overhead,
    )


def _digest(body: object) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()
