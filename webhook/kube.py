"""The webhook's only use of the Kubernetes API (and of the ``kubernetes`` client library).

In a cluster the webhook keeps two list+watch loops, each in a daemon thread:

* unscheduled pods (field selector ``spec.nodeName=``) into a
  :class:`webhook.pod_cache.PodIndex`, so a binding finds its pod whichever
  replica admitted it;
* the enforcer DaemonSet's pods (namespace + label selector) into a
  :class:`webhook.discovery.DaemonSetDirectory`, so a node name maps to its
  enforcer's address.

A loop lists (``replace_all``, which also marks the sink synced), then
watches from the list's resourceVersion and applies each event; an expired
watch (410 Gone) or any API error starts over with a fresh list after a short
pause.  Objects stay plain JSON dicts (the list is read raw and watch events
carry ``raw_object``), the same shape the admission path sees.

:class:`ApiPodReader` is the last resort for a binding whose pod no cache
holds: one GET of the pod, bounded by a timeout.

Importing this module needs no cluster; :func:`api_client` needs one (or a
kubeconfig).  Nothing here is exercised against a real API server in tests:
the loops are driven with fake list functions and fake watches.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from shared.errors import PodModelError
from webhook import errors, pod_cache

log = logging.getLogger("webhook.kube")

HTTP_GONE = 410
WATCH_TIMEOUT_SECONDS = 300
# Client-side bounds, so a stalled API server connection cannot hang a loop forever.
LIST_REQUEST_TIMEOUT = 60
WATCH_REQUEST_TIMEOUT = WATCH_TIMEOUT_SECONDS + 30


class WatchSink(Protocol):
    def replace_all(self, objs: list[Mapping[str, Any]]) -> None: ...

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None: ...


class WatchStream(Protocol):
    def stream(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]: ...

    def stop(self) -> None: ...


def api_client() -> Any:
    """An ApiClient from the in-cluster service account, else the local kubeconfig; ``ConfigError`` without either."""
    try:
        k8s_config.load_incluster_config()
    except k8s_config.ConfigException:
        try:
            k8s_config.load_kube_config()
        except (k8s_config.ConfigException, OSError) as err:
            raise errors.ConfigError(f"no Kubernetes configuration (in-cluster or kubeconfig): {err}") from None
    return k8s_client.ApiClient()


def _list_raw(list_fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], str]:
    response = list_fn(_preload_content=False, _request_timeout=LIST_REQUEST_TIMEOUT, **kwargs)
    document = json.loads(response.data)
    items: list[Mapping[str, Any]] = [item for item in document.get("items") or [] if isinstance(item, dict)]
    return items, str((document.get("metadata") or {}).get("resourceVersion") or "")


class ListWatch:
    """One list+watch loop feeding a sink, in a daemon thread; ``stop()`` ends it.

    ``stop()`` takes effect at the watch's next event or timeout; it waits a
    bounded time for the thread, which is a daemon and never blocks process exit.
    """

    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Any],
        sink: WatchSink,
        *,
        list_kwargs: Mapping[str, Any] | None = None,
        watch_factory: Callable[[], WatchStream] = k8s_watch.Watch,
        retry_seconds: float = 2.0,
    ) -> None:
        self.name = name
        self._list_fn = list_fn
        self._sink = sink
        self._kwargs = dict(list_kwargs or {})
        self._watch_factory = watch_factory
        self._retry = retry_seconds
        self._stopped = threading.Event()
        self._current: WatchStream | None = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)

    def start(self) -> ListWatch:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopped.set()
        current = self._current
        if current is not None:
            current.stop()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.run_once()
            except Exception as err:  # the loop must outlive any API hiccup
                log.warning("watch failed, listing again", extra={"watch": self.name, "error": str(err)})
            self._stopped.wait(self._retry)

    def run_once(self) -> None:
        """List, then watch until the watch ends (timeout, 410 Gone, stop)."""
        items, resource_version = _list_raw(self._list_fn, self._kwargs)
        self._sink.replace_all(items)
        log.info("watch listed", extra={"watch": self.name, "items": len(items)})
        stream = self._watch_factory()
        self._current = stream
        try:
            for event in stream.stream(
                self._list_fn,
                resource_version=resource_version,
                timeout_seconds=WATCH_TIMEOUT_SECONDS,
                _request_timeout=WATCH_REQUEST_TIMEOUT,
                allow_watch_bookmarks=True,
                **self._kwargs,
            ):
                if self._stopped.is_set():
                    return
                kind, obj = event.get("type"), event.get("raw_object")
                if kind == "ERROR":
                    code = obj.get("code") if isinstance(obj, dict) else None
                    if code == HTTP_GONE:
                        return  # expired: a fresh list follows
                    raise RuntimeError(f"watch error event: {obj}")
                if kind in ("ADDED", "MODIFIED", "DELETED") and isinstance(obj, dict):
                    self._sink.apply(str(kind), obj)
        finally:
            self._current = None


def pending_pods_watch(api: Any, index: pod_cache.PodIndex) -> ListWatch:
    """Pods not yet bound to a node, cluster-wide (RBAC: list/watch pods)."""
    core = k8s_client.CoreV1Api(api)
    return ListWatch(
        "pending-pods",
        core.list_pod_for_all_namespaces,
        index,
        list_kwargs={"field_selector": "spec.nodeName="},
    )


def enforcer_pods_watch(api: Any, sink: WatchSink, *, namespace: str, selector: str) -> ListWatch:
    """The enforcer DaemonSet's pods (RBAC: list/watch pods in ``namespace``)."""
    core = k8s_client.CoreV1Api(api)
    return ListWatch(
        "enforcer-pods",
        core.list_namespaced_pod,
        sink,
        list_kwargs={"namespace": namespace, "label_selector": selector},
    )


class ApiPodReader:
    """GET one pod from the API server (RBAC: get pods), for a binding no cache could answer."""

    def __init__(self, api: Any, *, timeout_seconds: float = 1.0) -> None:
        self._core = k8s_client.CoreV1Api(api)
        self._timeout = timeout_seconds

    def _get(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            response = self._core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=self._timeout
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        document = json.loads(response.data)
        return document if isinstance(document, dict) else None

    async def find(self, *, namespace: str, name: str, uid: str) -> pod_cache.SeenPod | None:
        if not name:
            return None
        try:
            raw = await asyncio.wait_for(asyncio.to_thread(self._get, namespace, name), self._timeout + 0.5)
        except (TimeoutError, ApiException, OSError, ValueError) as err:
            log.warning("pod read failed", extra={"pod": f"{namespace}/{name}", "error": str(err)})
            return None
        if raw is None:
            return None
        try:
            seen = pod_cache.trimmed(raw, namespace=namespace, source="api")
        except PodModelError:
            return None
        return seen if not uid or seen.uid == uid else None

    def is_ready(self) -> bool:
        return True


def start_all(watches: Sequence[ListWatch]) -> None:
    for w in watches:
        w.start()


def stop_all(watches: Sequence[ListWatch]) -> None:
    for w in watches:
        w.stop()
