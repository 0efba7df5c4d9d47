"""The enforcer's only link to the Kubernetes API: a watch of the pods bound to this node.

What the watch does for the node (in a cluster; ``--standalone`` turns it off):

* releases the allocation of a pod that was deleted, or that finished
  (``Succeeded`` / ``Failed``: its containers will not run again);
* learns each container's runtime id (``status.containerStatuses[].containerID``),
  which names its cgroup, and hands it to the service so the reconciler can
  program that container;
* releases allocations whose pod is not bound to this node after a grace
  period: the webhook allocates at binding time, and a binding that then fails
  leaves an allocation no pod will ever use.  The grace period covers the time
  between the allocation and the pod showing up in this node's watch.
* says when the node's state has lost allocations: a pod running here that carries the
  binding's ``numaguard.io/allocation`` annotation while the node holds nothing for it
  (a wiped or replaced state directory; the identity file cannot tell when it went too).
  Such pods keep running on CPUs the node may now give to others: it is logged and
  counted (``numaguard_enforcer_allocations_missing_total``) so the node is drained.

Layers: :class:`PodWatcher` holds the logic and talks to a :class:`PodSource`
(list + watch of raw pod dicts) and a :class:`PodSink` (the service).
:class:`KubernetesPodSource` is the one implementation that imports the
``kubernetes`` client (lazily: the import is slow and only clusters need it);
tests drive :class:`PodWatcher` with a fake source.

Must not: decide allocations or write cgroups; it only reports what the API says.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from enforcer.errors import EnforcerError
from enforcer.service import models
from shared import contract, qos
from shared import pod as pod_model
from shared.errors import DomainError
from shared.resources import QOSClass

log = logging.getLogger(__name__)

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
MAX_BACKOFF_SECONDS = 30.0
MIN_WATCH_SECONDS = 1.0

RawPod = Mapping[str, Any]


class ResourceVersionExpired(Exception):
    """The watch's resource version is too old (HTTP 410): list again."""


class PodSource(Protocol):
    """The pods bound to this node, as raw API dicts (camelCase, as ``kubectl get -o json`` shows them)."""

    def list_pods(self) -> tuple[list[RawPod], str]:
        """Every pod bound to the node, and the list's resource version."""
        ...

    def watch_pods(self, resource_version: str, timeout_seconds: int) -> Iterable[tuple[str, RawPod]]:
        """Events (``ADDED``/``MODIFIED``/``DELETED``/``BOOKMARK``) after ``resource_version``, for at most
        ``timeout_seconds``; raises ResourceVersionExpired when it is too old."""
        ...


class PodSink(Protocol):
    """What the watch tells the service (``NodeService`` implements it)."""

    def observe_pod(self, uid: str, qos: QOSClass, container_ids: Mapping[str, str]) -> None: ...

    def forget_pod(self, uid: str) -> None: ...

    def release(self, uid: str, *, cause: Any = "api") -> models.ReleaseResult: ...

    def allocated_uids(self) -> set[str]: ...


def _uid(raw: RawPod) -> str:
    metadata = raw.get("metadata")
    return str(metadata.get("uid") or "") if isinstance(metadata, Mapping) else ""


def _annotations(raw: RawPod) -> Mapping[str, Any]:
    metadata = raw.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def _phase(raw: RawPod) -> str:
    status = raw.get("status")
    return str(status.get("phase") or "") if isinstance(status, Mapping) else ""


def container_ids(raw: RawPod) -> dict[str, str]:
    """Container name -> CRI id (``containerd://<id>``) for every container the runtime has created."""
    status = raw.get("status")
    if not isinstance(status, Mapping):
        return {}
    found: dict[str, str] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for entry in status.get(key) or ():
            if isinstance(entry, Mapping) and entry.get("name") and entry.get("containerID"):
                found[str(entry["name"])] = str(entry["containerID"])
    return found


def pod_qos(raw: RawPod, *, pod_level_resources: bool = True) -> QOSClass | None:
    """``status.qosClass`` (set by the API server), else computed; None when the pod cannot be read."""
    status = raw.get("status")
    if isinstance(status, Mapping) and status.get("qosClass") in ("Guaranteed", "Burstable", "BestEffort"):
        value: QOSClass = status["qosClass"]
        return value
    try:
        resources = pod_model.parse_pod(raw).to_resources(pod_level_resources=pod_level_resources)
    except DomainError as err:
        log.warning("pod not readable", extra={"pod_uid": _uid(raw), "error": str(err)})
        return None
    return qos.qos_class(resources, pod_level_resources_gate=pod_level_resources)


class PodWatcher:
    """Applies the rules of the module docstring to a stream of pod events."""

    def __init__(
        self,
        sink: PodSink,
        source: PodSource,
        *,
        grace_seconds: float,
        pod_level_resources: bool = True,
        clock: Callable[[], float] = time.monotonic,
        watch_timeout_seconds: int | None = None,
        on_missing_allocations: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.sink = sink
        self.on_missing_allocations = on_missing_allocations
        self._reported_missing: set[str] = set()
        self.source = source
        self.grace_seconds = grace_seconds
        self.pod_level_resources = pod_level_resources
        self.clock = clock
        # the sweep for unbound allocations runs between watch windows, so the window bounds its delay
        self.watch_timeout_seconds = watch_timeout_seconds or int(max(5.0, min(60.0, grace_seconds / 4)))
        self._present: set[str] = set()
        self._missing_since: dict[str, float] = {}

    # -- events ----------------------------------------------------------------------------
    def handle(self, event_type: str, raw: RawPod) -> None:
        uid = _uid(raw)
        if not uid or event_type in ("BOOKMARK", "ERROR"):
            return
        if event_type == "DELETED":
            self._present.discard(uid)
            self.sink.forget_pod(uid)
            self._release(uid, "pod_deleted")
            return
        self._present.add(uid)
        self._missing_since.pop(uid, None)
        if _phase(raw) in FINISHED_PHASES:
            self.sink.forget_pod(uid)
            self._release(uid, "pod_finished")
            return
        pod_class = pod_qos(raw, pod_level_resources=self.pod_level_resources)
        if pod_class is not None:
            self.sink.observe_pod(uid, pod_class, container_ids(raw))

    def resync(self, pods: Iterable[RawPod]) -> None:
        """A full list: every pod is (re)observed, pods gone since the last list are forgotten and released."""
        listed = {_uid(raw): raw for raw in pods if _uid(raw)}
        for uid in self._present - listed.keys():
            self.handle("DELETED", {"metadata": {"uid": uid}})
        self._present = set()
        for raw in listed.values():
            self.handle("MODIFIED", raw)
        self._report_missing_allocations(listed)
        self.sweep()

    def _report_missing_allocations(self, listed: Mapping[str, RawPod]) -> None:
        """Pods bound here with a numaguard allocation the node's state does not hold (each reported once)."""
        allocated = self.sink.allocated_uids()
        missing = sorted(
            uid
            for uid, raw in listed.items()
            if uid not in allocated
            and uid not in self._reported_missing
            and _phase(raw) not in FINISHED_PHASES
            and contract.ALLOCATION_ANNOTATION in _annotations(raw)
        )
        if not missing:
            return
        self._reported_missing.update(missing)
        log.warning(
            "pods on this node hold a numaguard allocation the node's state does not: the state was lost or "
            "wiped; drain the node so their CPUs are not given to other pods",
            extra={"pod_uids": missing, "count": len(missing)},
        )
        if self.on_missing_allocations is not None:
            self.on_missing_allocations(missing)

    def sweep(self) -> list[str]:
        """Release allocations whose pod has not been seen on this node for the grace period; returns their uids."""
        now = self.clock()
        released = []
        allocated = self.sink.allocated_uids()
        for uid in list(self._missing_since):
            if uid not in allocated:
                del self._missing_since[uid]
        for uid in sorted(allocated - self._present):
            first = self._missing_since.setdefault(uid, now)
            if now - first >= self.grace_seconds:
                log.warning(
                    "allocation released: pod not bound to this node",
                    extra={"pod_uid": uid, "grace_seconds": self.grace_seconds},
                )
                if self._release(uid, "not_bound"):
                    released.append(uid)
                self._missing_since.pop(uid, None)
        return released

    def _release(self, uid: str, cause: str) -> bool:
        try:
            return self.sink.release(uid, cause=cause).released
        except EnforcerError as err:  # state unavailable or not durable: the next sweep or relist retries
            log.error("release failed", extra={"pod_uid": uid, "cause": cause, "error": err.message})
            return False

    # -- the loop --------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """List, then watch until ``stop`` is set; relists on expiry, backs off on errors."""
        backoff = 1.0
        while not stop.is_set():
            try:
                pods, version = self.source.list_pods()
                self.resync(pods)
                backoff = 1.0
                while not stop.is_set():
                    opened, events = time.monotonic(), 0
                    for event_type, raw in self.source.watch_pods(version, self.watch_timeout_seconds):
                        events += 1
                        if stop.is_set():
                            return
                        metadata = raw.get("metadata")
                        if isinstance(metadata, Mapping) and metadata.get("resourceVersion"):
                            version = str(metadata["resourceVersion"])
                        self.handle(event_type, raw)
                    self.sweep()
                    if not events and time.monotonic() - opened < MIN_WATCH_SECONDS:
                        stop.wait(MIN_WATCH_SECONDS)  # a server closing empty watches at once must not make us spin
            except ResourceVersionExpired:
                log.info("pod watch expired; listing again")
            except Exception:  # the API server restarts, the network drops: keep trying
                log.exception("pod watch failed", extra={"retry_in_seconds": backoff})
                stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)


class KubernetesPodSource:
    """:class:`PodSource` over the Kubernetes API (in-cluster service account, or a kubeconfig outside)."""

    def __init__(self, node_name: str, *, kubeconfig: str | None = None) -> None:
        from kubernetes import client, config

        if kubeconfig is None:
            config.load_incluster_config()
        else:
            config.load_kube_config(config_file=kubeconfig)
        self._api = client.CoreV1Api()
        self._selector = f"spec.nodeName={node_name}"

    def list_pods(self) -> tuple[list[RawPod], str]:
        response = self._api.list_pod_for_all_namespaces(field_selector=self._selector, _preload_content=False)
        document = json.loads(response.data)
        items = [item for item in document.get("items") or () if isinstance(item, Mapping)]
        return items, str(document.get("metadata", {}).get("resourceVersion") or "")

    def watch_pods(self, resource_version: str, timeout_seconds: int) -> Iterable[tuple[str, RawPod]]:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        stream = watch.Watch().stream(
            self._api.list_pod_for_all_namespaces,
            field_selector=self._selector,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            allow_watch_bookmarks=True,
            deserialize=False,
        )
        try:
            for event in stream:
                if not isinstance(event, Mapping):
                    continue
                raw = event.get("object")
                if event.get("type") == "ERROR":
                    if isinstance(raw, Mapping) and raw.get("code") == 410:
                        raise ResourceVersionExpired(str(raw.get("message") or "resource version expired"))
                    raise RuntimeError(f"pod watch error: {raw}")
                if isinstance(raw, Mapping):
                    yield str(event.get("type")), raw
        except ApiException as err:
            if err.status == 410:
                raise ResourceVersionExpired(str(err.reason)) from None
            raise


def in_cluster(env: Mapping[str, str]) -> bool:
    """Whether this process runs in a pod (the service account's API endpoint is in the environment)."""
    return bool(env.get("KUBERNETES_SERVICE_HOST"))
