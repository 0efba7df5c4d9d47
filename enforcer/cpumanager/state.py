"""The CPU manager's assignment state: one plain, copyable value owned by the engine.

It mirrors the kubelet's ``cpumanager/state`` (``state_mem.go`` plus the V4 checkpoint fields):

- ``default``: the shared pool ("defaultCpuSet"); every container without an entry runs here;
- ``entries``: pod UID -> container name -> cpuset.  Node-level exclusive slices, and under KEP-5526
  pod scope every container of the pod (exclusive slice or the pod shared pool, explicitly);
- ``pod_entries``: pod UID -> the KEP-5526 bubble (pod scope); while it exists no CPU of the
  bubble returns to the node;
- ``originals``: pod UID -> container -> the first exclusive cpuset the container was given
  (KEP-5554 "promised" CPUs, kept for resize);
- ``reusable``: the kubelet's ``cpusToReuse`` (init-container CPUs reusable by later containers of
  the pod being admitted).  Like the kubelet, it is never persisted: it is scratch for the pod that
  is being admitted and is left out of :meth:`CPUState.to_dict` and of equality.

Policies mutate only the state object they are given; the engine copies it (:meth:`copy`) for
transactional admission.  The per-pod maps of ``entries`` and ``originals`` are shared between a state
and its copies and are copy-on-write: the methods below replace a pod's map, never change it in place,
so change them only through those methods.  This module knows nothing about pods, hints or CPU
selection, and does no file I/O (the checkpoint writer wraps :meth:`to_dict`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from enforcer.errors import ConfigError
from enforcer.topology.machine import CPUTopology
from shared.cpuset import EMPTY, CPUSet
from shared.errors import CPUSetParseError


class CPUStateView(Protocol):
    """What code outside the CPU manager may read of a :class:`CPUState`: no setter, no mutable map.

    The service, the NRT exporter and the persistence layer see the engine's state through this, so a
    reader cannot change an assignment behind the engine's back (mypy holds it: the maps are ``Mapping``).
    """

    @property
    def policy_name(self) -> str: ...

    @property
    def default(self) -> CPUSet: ...

    @property
    def entries(self) -> Mapping[str, Mapping[str, CPUSet]]: ...

    @property
    def pod_entries(self) -> Mapping[str, CPUSet]: ...

    @property
    def originals(self) -> Mapping[str, Mapping[str, CPUSet]]: ...

    def container_cpus(self, pod_uid: str, container_name: str) -> CPUSet | None: ...

    def pod_cpus(self, pod_uid: str) -> CPUSet | None: ...

    def pod_uids(self) -> list[str]: ...

    def assigned_cpus(self) -> CPUSet: ...

    def pod_footprint(self, pod_uid: str) -> CPUSet: ...

    def to_dict(self) -> dict[str, Any]: ...

    def restricted_to(self, pod_uids: Collection[str]) -> CPUState: ...


@dataclass(eq=True)
class CPUState:
    """A policy's assignments on one machine (see the module docstring for each field)."""

    policy_name: str
    default: CPUSet = EMPTY
    entries: dict[str, dict[str, CPUSet]] = field(default_factory=dict)
    pod_entries: dict[str, CPUSet] = field(default_factory=dict)
    originals: dict[str, dict[str, CPUSet]] = field(default_factory=dict)
    reusable: dict[str, CPUSet] = field(default_factory=dict, compare=False)

    # -- container entries ------------------------------------------------------------
    def container_cpus(self, pod_uid: str, container_name: str) -> CPUSet | None:
        """``GetCPUSet``: the container's entry, or None when it runs in the default set."""
        pod = self.entries.get(pod_uid)
        return None if pod is None else pod.get(container_name)

    def cpus_or_default(self, pod_uid: str, container_name: str) -> CPUSet:
        """``GetCPUSetOrDefault``: what the container's cgroup cpuset should hold."""
        cpus = self.container_cpus(pod_uid, container_name)
        return self.default if cpus is None else cpus

    def set_container_cpus(self, pod_uid: str, container_name: str, cpus: CPUSet) -> None:
        _put(self.entries, pod_uid, container_name, cpus)

    def delete_container(self, pod_uid: str, container_name: str) -> None:
        """``Delete``: drop the entry and its original; a pod with no entries left disappears."""
        _drop(self.entries, pod_uid, container_name)
        _drop(self.originals, pod_uid, container_name)

    def record_original(self, pod_uid: str, container_name: str, cpus: CPUSet) -> None:
        """Remember the first exclusive set only: later calls (restarts, resizes) keep the promise."""
        if self.original_cpus(pod_uid, container_name) is None:
            _put(self.originals, pod_uid, container_name, cpus)

    def original_cpus(self, pod_uid: str, container_name: str) -> CPUSet | None:
        pod = self.originals.get(pod_uid)
        return None if pod is None else pod.get(container_name)

    # -- pod entries (KEP-5526) ---------------------------------------------------------
    def pod_cpus(self, pod_uid: str) -> CPUSet | None:
        return self.pod_entries.get(pod_uid)

    def set_pod_cpus(self, pod_uid: str, cpus: CPUSet) -> None:
        self.pod_entries[pod_uid] = cpus

    def delete_pod(self, pod_uid: str) -> None:
        """``DeletePod``: forget every trace of the pod."""
        self.pod_entries.pop(pod_uid, None)
        self.entries.pop(pod_uid, None)
        self.originals.pop(pod_uid, None)
        self.reusable.pop(pod_uid, None)

    # -- views ------------------------------------------------------------------------
    def pod_uids(self) -> list[str]:
        """Every pod with a container entry or a bubble, sorted."""
        return sorted(set(self.entries) | set(self.pod_entries))

    def assigned_cpus(self) -> CPUSet:
        """Every CPU outside the default set that some container or bubble holds."""
        mask = 0
        for containers in self.entries.values():
            for cpus in containers.values():
                mask |= cpus.mask
        for cpus in self.pod_entries.values():
            mask |= cpus.mask
        return CPUSet.from_mask(mask)

    def pod_footprint(self, pod_uid: str) -> CPUSet:
        """The CPUs the pod keeps away from the node: its bubble plus every entry it has."""
        mask = self.pod_entries[pod_uid].mask if pod_uid in self.pod_entries else 0
        for cpus in self.entries.get(pod_uid, {}).values():
            mask |= cpus.mask
        return CPUSet.from_mask(mask)

    def copy(self) -> CPUState:
        """An independent copy at the cost of the outer maps' pointer copies.

        Cpusets are immutable and the per-pod maps are copy-on-write (every write replaces the pod's
        map, see :func:`_put`), so sharing those maps with the copy cannot let a change to one state
        show in the other, and copying them one by one would cost per pod held on every decision.
        """
        return CPUState(
            policy_name=self.policy_name,
            default=self.default,
            entries=dict(self.entries),
            pod_entries=dict(self.pod_entries),
            originals=dict(self.originals),
            reusable=dict(self.reusable),
        )

    def restricted_to(self, pod_uids: Collection[str]) -> CPUState:
        """This state with only these pods' entries (the node-wide default set kept): the part of a
        checkpoint a change to these pods rewrites; per-pod values are shared, as in :meth:`copy`."""
        wanted = set(pod_uids)
        return CPUState(
            policy_name=self.policy_name,
            default=self.default,
            entries={u: self.entries[u] for u in wanted if u in self.entries},
            pod_entries={u: self.pod_entries[u] for u in wanted if u in self.pod_entries},
            originals={u: self.originals[u] for u in wanted if u in self.originals},
        )

    # -- serialisation ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-able form with the checkpoint's key names; empty maps are omitted (Go ``omitempty``)."""
        doc: dict[str, Any] = {"policyName": self.policy_name, "defaultCpuSet": str(self.default)}
        if self.entries:
            doc["entries"] = {
                uid: {name: str(cpus) for name, cpus in sorted(containers.items())}
                for uid, containers in sorted(self.entries.items())
            }
        if self.pod_entries:
            doc["podEntries"] = {uid: {"cpuSet": str(cpus)} for uid, cpus in sorted(self.pod_entries.items())}
        if self.originals:
            doc["originals"] = {
                uid: {name: {"original": str(cpus)} for name, cpus in sorted(containers.items())}
                for uid, containers in sorted(self.originals.items())
            }
        return doc

    @classmethod
    def from_dict(cls, doc: object) -> CPUState:
        """Read :meth:`to_dict` output back; malformed documents raise :class:`ConfigError`."""
        if not isinstance(doc, Mapping):
            raise ConfigError("cpu manager state: expected an object")
        policy_name = doc.get("policyName")
        if not isinstance(policy_name, str) or not policy_name:
            raise ConfigError("cpu manager state.policyName: expected a non-empty string")
        entries: dict[str, dict[str, CPUSet]] = {}
        for uid, containers in _mapping(doc.get("entries"), "entries").items():
            entries[uid] = {
                name: _cpuset(text, f"entries.{uid}.{name}")
                for name, text in _mapping(containers, f"entries.{uid}").items()
            }
        pod_entries: dict[str, CPUSet] = {}
        for uid, body in _mapping(doc.get("podEntries"), "podEntries").items():
            body_map = _mapping(body, f"podEntries.{uid}")
            pod_entries[uid] = _cpuset(body_map.get("cpuSet"), f"podEntries.{uid}.cpuSet")
        originals: dict[str, dict[str, CPUSet]] = {}
        for uid, containers in _mapping(doc.get("originals"), "originals").items():
            originals[uid] = {}
            for name, body in _mapping(containers, f"originals.{uid}").items():
                path = f"originals.{uid}.{name}"
                originals[uid][name] = _cpuset(_mapping(body, path).get("original"), f"{path}.original")
        return cls(
            policy_name=policy_name,
            default=_cpuset(doc.get("defaultCpuSet", ""), "defaultCpuSet"),
            entries=entries,
            pod_entries=pod_entries,
            originals=originals,
        )

    # -- consistency ------------------------------------------------------------------
    def check(
        self, topology: CPUTopology, *, reserved: CPUSet | None = None, strict_reservation: bool = False
    ) -> list[str]:
        """Every broken invariant, as readable sentences (empty when the state is consistent).

        Exclusive sets may overlap inside one pod (init-container reuse, the pod shared pool) but
        never across pods; nothing assigned may sit in the default set; default, entries and
        bubbles together cover exactly the machine (minus reserved CPUs under strict reservation).
        """
        problems: list[str] = []
        all_cpus = topology.all_cpus
        owner_of_cpu: dict[int, str] = {}
        for uid in sorted(set(self.entries) | set(self.pod_entries)):
            footprint = self.pod_footprint(uid)
            for cpu in footprint:
                other = owner_of_cpu.setdefault(cpu, uid)
                if other != uid:
                    problems.append(f"cpu {cpu} is exclusive to both pod {other} and pod {uid}")
            overlap = footprint & self.default
            if overlap:
                problems.append(f"pod {uid}: cpus {overlap} are also in the default cpuset {self.default}")
            unknown = footprint - all_cpus
            if unknown:
                problems.append(f"pod {uid}: cpus {unknown} are not on this machine")
            bubble = self.pod_entries.get(uid)
            if bubble is not None:
                for name, cpus in sorted(self.entries.get(uid, {}).items()):
                    if not cpus.is_subset_of(bubble):
                        problems.append(
                            f"pod {uid}, container {name}: cpuset {cpus} is outside the pod cpuset {bubble}"
                        )
        for uid, containers in sorted(self.originals.items()):
            for name in sorted(containers):
                if self.container_cpus(uid, name) is None:
                    problems.append(f"pod {uid}, container {name}: original cpuset recorded without an assignment")
        unknown_default = self.default - all_cpus
        if unknown_default:
            problems.append(f"default cpuset holds cpus {unknown_default} that are not on this machine")
        expected = all_cpus
        if reserved is not None:
            if strict_reservation:
                expected = all_cpus - reserved
                if reserved & self.default:
                    problems.append(f"strictly reserved cpus {reserved & self.default} are in the default cpuset")
            elif not reserved.is_subset_of(self.default):
                problems.append(f"reserved cpus {reserved - self.default} are missing from the default cpuset")
            assigned_reserved = reserved & self.assigned_cpus()
            if assigned_reserved:
                problems.append(f"reserved cpus {assigned_reserved} are assigned exclusively")
        known = self.default | self.assigned_cpus()
        if known != expected:
            problems.append(f"default cpuset and assignments cover {known}, expected {expected}")
        return problems


def _put(table: dict[str, dict[str, CPUSet]], pod_uid: str, container_name: str, cpus: CPUSet) -> None:
    """Set one container's value as copy-on-write: the pod gets a new map, the old one may be shared."""
    table[pod_uid] = {**table.get(pod_uid, {}), container_name: cpus}


def _drop(table: dict[str, dict[str, CPUSet]], pod_uid: str, container_name: str) -> None:
    """Drop one container's value as copy-on-write; a pod left without values leaves the table."""
    containers = table.get(pod_uid)
    if containers is None:
        return
    rest = {name: cpus for name, cpus in containers.items() if name != container_name}
    if not rest:
        del table[pod_uid]
    elif len(rest) != len(containers):
        table[pod_uid] = rest


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"cpu manager state.{path}: expected an object")
    return value


def _cpuset(value: object, path: str) -> CPUSet:
    if not isinstance(value, str):
        raise ConfigError(f"cpu manager state.{path}: expected a cpuset string")
    try:
        return CPUSet.parse(value)
    except CPUSetParseError as err:
        raise ConfigError(f"cpu manager state.{path}: {err}") from None
