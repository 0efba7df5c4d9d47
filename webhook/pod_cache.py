"""The pods a binding may refer to, found by uid, by name, or by their ``generateName``.

A ``pods/binding`` review carries only the pod's name, namespace and uid
(the scheduler sets ``metadata.uid`` on the Binding); the enforcer needs the
pod's resources.  Sources, tried in order by :class:`ChainedLookup`:

* :class:`SeenPods`: the pods this replica admitted.  At ``/validate`` CREATE a
  pod has its uid and final name (R1.3), the best key.  At ``/mutate`` CREATE
  it has neither when ``generateName`` is used, so it is filed under
  namespace + ``generateName`` and matched later by the apiserver's naming rule
  (the base cut to 58 characters plus 5 random ones).  Pods created from one
  template share a ``generateName``; a match is accepted only when every
  candidate asks for the same resources, since then any of them is right.
* :class:`PodIndex`: unscheduled pods from a Kubernetes watch
  (:mod:`webhook.kube`), the only source that survives replicas and restarts.

Only what the pod models read is kept (:func:`shared.pod.parse_pod` then a
dump), as compact JSON rather than nested dicts: under a kilobyte for a
typical pod, decoded only when a binding needs it, and nothing for the
garbage collector to walk in a cache of thousands of pods.  The caches are
bounded (least recently used first out) and guarded by a lock: watch threads
write, the event loop reads.  This module must not import the Kubernetes client.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from shared import pod as pod_model
from shared.errors import PodModelError

Source = Literal["mutate", "validate", "watch", "api"]

# k8s.io/apiserver/pkg/storage/names: SimpleNameGenerator
MAX_GENERATED_BASE = 58
RANDOM_SUFFIX_LENGTH = 5


@dataclass(frozen=True, slots=True)
class SeenPod:
    """A pod as the enforcer will receive it: the trimmed Pod object, kept as compact JSON (``document``).

    ``fingerprint`` tells apart pods filed by ``generateName`` (the only ones
    compared); it is empty for the others.
    """

    namespace: str
    name: str
    generate_name: str
    uid: str
    document: bytes
    source: Source
    fingerprint: str
    node_name: str = ""  # spec.nodeName: set once the pod is bound (a pod read from the API)

    @property
    def obj(self) -> dict[str, Any]:
        """The trimmed Pod object, filed under :attr:`namespace` (a fresh copy at every call)."""
        obj: dict[str, Any] = json.loads(self.document)
        obj["metadata"]["namespace"] = self.namespace
        return obj

    def with_identity(self, *, name: str, uid: str) -> dict[str, Any]:
        """A copy of the object naming the pod as the binding does (mutate-time copies lack both)."""
        obj = self.obj
        metadata = obj.setdefault("metadata", {})
        metadata["name"] = name or metadata.get("name", "")
        metadata["uid"] = uid or metadata.get("uid", "")
        metadata["namespace"] = self.namespace
        return obj


class PodLookup(Protocol):
    async def find(self, *, namespace: str, name: str, uid: str) -> SeenPod | None:
        """The pod named by a binding, or None. Read-only and idempotent."""
        ...

    def is_ready(self) -> bool:
        """Whether the source has what it needs to answer (a watch that has listed once)."""
        ...


def trimmed(raw: Mapping[str, Any], *, namespace: str, source: Source) -> SeenPod:
    """Parse ``raw`` with the shared pod models and keep only what they read; ``PodModelError`` if it is no pod."""
    return from_pod(pod_model.parse_pod(raw), namespace=namespace, source=source)


def from_pod(parsed: pod_model.Pod, *, namespace: str, source: Source) -> SeenPod:
    """An already parsed pod, trimmed to what the pod models read (``namespace`` wins when given)."""
    ns = namespace or parsed.metadata.namespace or "default"
    name, generate_name = parsed.metadata.name, parsed.metadata.generate_name
    return SeenPod(
        namespace=ns,
        name=name,
        generate_name=generate_name,
        uid=parsed.metadata.uid,
        document=_document(parsed),
        source=source,
        fingerprint=_fingerprint_of(parsed) if generate_name and not name else "",
        node_name=parsed.spec.node_name or "",
    )


def _dump(parsed: pod_model.Pod) -> dict[str, Any]:
    return parsed.model_dump(mode="json", by_alias=True, exclude_none=True)


_DEFAULT_STATUS_JSON = pod_model.PodStatus().model_dump_json(by_alias=True, exclude_none=True)


def _document(parsed: pod_model.Pod) -> bytes:
    """The trimmed object as JSON: what ``json.dumps`` of :func:`_dump` reads back as, produced without the dicts.

    ``parsed.model_dump_json(by_alias=True, exclude_none=True)``, byte for byte, put together from its three
    fields so the spec's JSON is the one the plan memo already encoded for its key (:meth:`~shared.pod.Pod.spec_json`).
    """
    try:
        metadata = parsed.metadata.model_dump_json(by_alias=True, exclude_none=True)
        # a CREATE carries no status: a model with no field set is the default model, whose JSON is known
        status = (
            parsed.status.model_dump_json(by_alias=True, exclude_none=True)
            if parsed.status.model_fields_set
            else _DEFAULT_STATUS_JSON
        )
        return f'{{"metadata":{metadata},"spec":{parsed.spec_json()},"status":{status}}}'.encode()
    except ValueError:  # pydantic's serialisation error: a lone surrogate ("\ud800") is no UTF-8; json escapes it
        return json.dumps(_dump(parsed)).encode()


# Replicas share their spec, hence their fingerprint: kept per spec JSON, for specs up to this size (at most a few
# MB in all), like the plan memo's keys.
_FINGERPRINTS_KEPT = 512
_FINGERPRINT_KEY_CHARS = 16 * 1024


def _fingerprint_of(parsed: pod_model.Pod) -> str:
    """:func:`_fingerprint` of the trimmed pod: it reads only the spec, so it is a function of the spec's JSON."""
    try:
        spec = parsed.spec_json()
    except ValueError:  # pydantic cannot encode a lone surrogate; json can
        return _fingerprint(_dump(parsed))
    if len(spec) > _FINGERPRINT_KEY_CHARS:
        return _spec_fingerprint.__wrapped__(spec)
    return _spec_fingerprint(spec)


@functools.lru_cache(maxsize=_FINGERPRINTS_KEPT)
def _spec_fingerprint(spec_json: str) -> str:
    # the spec as _dump has it: the same values (strings, integers, lists, maps), read back from its JSON
    return _fingerprint({"spec": json.loads(spec_json)})


def _fingerprint(obj: Mapping[str, Any]) -> str:
    """What an allocation depends on: containers' names, roles and resources, pod-level resources, overhead.

    A digest of their canonical JSON: equal exactly when they are (up to a hash collision), in 32 characters.
    """
    spec = obj.get("spec", {})

    def containers(key: str) -> list[Any]:
        return [[c.get("name"), c.get("restartPolicy"), c.get("resources")] for c in spec.get(key, [])]

    doc = [containers("initContainers"), containers("containers"), spec.get("resources"), spec.get("overhead")]
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(canonical.encode("ascii"), digest_size=16).hexdigest()  # json.dumps escaped non-ASCII


def generated_base(generate_name: str) -> str:
    return generate_name[:MAX_GENERATED_BASE]


class SeenPods:
    """The pods this replica's ``/mutate`` and ``/validate`` admitted, newest kept, at most ``capacity``."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, SeenPod] = OrderedDict()
        self._by_uid: dict[str, int] = {}
        self._by_name: dict[tuple[str, str], int] = {}
        self._by_generate: dict[tuple[str, str], OrderedDict[int, None]] = {}
        self._next = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def remember(self, pod: SeenPod) -> None:
        with self._lock:
            self._next += 1
            key = self._next
            self._entries[key] = pod
            if pod.uid:
                self._by_uid[pod.uid] = key
            if pod.name:
                self._by_name[(pod.namespace, pod.name)] = key
            elif pod.generate_name:
                group = self._by_generate.setdefault((pod.namespace, generated_base(pod.generate_name)), OrderedDict())
                group[key] = None
            while len(self._entries) > self._capacity:
                old_key, old = self._entries.popitem(last=False)
                self._unindex(old_key, old)

    def forget(self, *, namespace: str, name: str, uid: str) -> None:
        with self._lock:
            keys = {self._by_uid.get(uid), self._by_name.get((namespace, name))} - {None}
            for key in keys:
                assert key is not None
                old = self._entries.pop(key, None)
                if old is not None:
                    self._unindex(key, old)

    def _unindex(self, key: int, pod: SeenPod) -> None:
        if self._by_uid.get(pod.uid) == key:
            del self._by_uid[pod.uid]
        if self._by_name.get((pod.namespace, pod.name)) == key:
            del self._by_name[(pod.namespace, pod.name)]
        group_key = (pod.namespace, generated_base(pod.generate_name))
        group = self._by_generate.get(group_key)
        if group is not None:
            group.pop(key, None)
            if not group:
                del self._by_generate[group_key]

    def find_now(self, *, namespace: str, name: str, uid: str) -> SeenPod | None:
        with self._lock:
            key = self._by_uid.get(uid) if uid else None
            if key is None and name:
                key = self._by_name.get((namespace, name))
            if key is not None and (not uid or self._entries[key].uid in ("", uid)):
                self._entries.move_to_end(key)
                return self._entries[key]
            return self._match_generated(namespace, name)

    def _match_generated(self, namespace: str, name: str) -> SeenPod | None:
        if len(name) <= RANDOM_SUFFIX_LENGTH:
            return None
        # the name is the base plus five random characters, so the base is known exactly
        group = self._by_generate.get((namespace, name[:-RANDOM_SUFFIX_LENGTH]))
        return _unambiguous([self._entries[k] for k in group or ()])

    async def find(self, *, namespace: str, name: str, uid: str) -> SeenPod | None:
        return self.find_now(namespace=namespace, name=name, uid=uid)

    def is_ready(self) -> bool:
        return True


def _unambiguous(candidates: Sequence[SeenPod]) -> SeenPod | None:
    """The newest candidate when all ask for the same resources; None when they differ (or there are none)."""
    if not candidates or len({c.fingerprint for c in candidates}) != 1:
        return None
    return candidates[-1]


class PodIndex:
    """Unscheduled pods from a watch (``spec.nodeName=`` field selector), by uid and by namespace/name.

    A pod leaving the selector (bound) arrives as ``DELETED``, so the index holds
    only pods that may still be bound: a cluster's pending pods, not all pods.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, SeenPod] = {}
        self._uid_by_name: dict[tuple[str, str], str] = {}
        self._synced = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_uid)

    def apply(self, event_type: str, raw: Mapping[str, Any]) -> None:
        """One watch event of a pod as a plain dict; unparseable pods are skipped (the binding will say so)."""
        try:
            seen = trimmed(raw, namespace="", source="watch")
        except PodModelError:
            return
        if not seen.uid:
            return
        with self._lock:
            if event_type == "DELETED":
                self._by_uid.pop(seen.uid, None)
                if self._uid_by_name.get((seen.namespace, seen.name)) == seen.uid:
                    del self._uid_by_name[(seen.namespace, seen.name)]
            else:
                self._by_uid[seen.uid] = seen
                self._uid_by_name[(seen.namespace, seen.name)] = seen.uid

    def replace_all(self, pods: Sequence[Mapping[str, Any]]) -> None:
        """A fresh LIST: the index becomes exactly these pods and counts as synced."""
        with self._lock:
            self._by_uid.clear()
            self._uid_by_name.clear()
        for raw in pods:
            self.apply("ADDED", raw)
        with self._lock:
            self._synced = True

    async def find(self, *, namespace: str, name: str, uid: str) -> SeenPod | None:
        with self._lock:
            if uid and uid in self._by_uid:
                return self._by_uid[uid]
            found = self._uid_by_name.get((namespace, name))
            pod = self._by_uid.get(found) if found is not None else None
            # a uid that does not match is another pod under a reused name
            return pod if pod is not None and (not uid or pod.uid == uid) else None

    def is_ready(self) -> bool:
        with self._lock:
            return self._synced


class ChainedLookup:
    """Ask each source in turn; the first answer wins."""

    def __init__(self, sources: Sequence[PodLookup]) -> None:
        self._sources = tuple(sources)

    async def find(self, *, namespace: str, name: str, uid: str) -> SeenPod | None:
        for source in self._sources:
            found = await source.find(namespace=namespace, name=name, uid=uid)
            if found is not None:
                return found
        return None

    def is_ready(self) -> bool:
        return all(source.is_ready() for source in self._sources)
