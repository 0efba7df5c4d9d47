"""Where each node's enforcer listens.

Two directories behind one Protocol:

* :class:`StaticDirectory`: a file mapping node names to enforcer base URLs
  (YAML or JSON), for clusters without in-cluster discovery, docker-compose
  and tests.  A ``"*"`` entry is a template for every other node, with
  ``{node}`` replaced by the node name (``https://{node}.enforcers.example:8443``).
* :class:`DaemonSetDirectory`: the enforcer DaemonSet's pods, one per node,
  fed by :mod:`webhook.kube` watch events (``apply``); a node's URL is its
  enforcer pod's IP and the configured port, known once that pod is ready.

A node is *enforced* when numaguard runs an enforcer there (a static entry,
or an enforcer pod of the DaemonSet, ready or not).  Only enforced nodes are
numaguard's business: a binding or resize on any other node is allowed
without asking anyone (the node's own kubelet decides).  An enforced node
whose enforcer is not ready is an outage, judged by the pod's needs.  A
DaemonSet pod that disappears (rolling update, crash loop being recreated)
keeps its node enforced for ``absent_grace_seconds``: an unlabelled node stops
counting only after that, so a rollout never opens a window in which pods
bind unallocated.

Lookups are synchronous dictionary reads (the event loop never waits on the
Kubernetes API); updates come from the watch thread under a lock.  Only
``https`` URLs are accepted: the webhook talks to enforcers over mutual TLS.
This module must not import the Kubernetes client.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import yaml

from webhook import errors

WILDCARD = "*"


class EnforcerDirectory(Protocol):
    def url_for(self, node: str) -> str | None:
        """The enforcer base URL for ``node`` (no trailing slash), or None when none is known. Idempotent."""
        ...

    def is_enforced(self, node: str) -> bool:
        """Whether numaguard enforces ``node`` at all (its enforcer may still be down: ``url_for`` is None)."""
        ...

    def is_ready(self) -> bool:
        """Whether the directory has loaded what it needs to answer (a watch that has listed once)."""
        ...


def _check_url(url: object, where: str) -> str:
    if not isinstance(url, str):
        raise errors.ConfigError(f"{where}: an enforcer URL must be a string, got {type(url).__name__}")
    parts = urlsplit(url.replace("{node}", "node"))
    if parts.scheme != "https" or not parts.hostname:
        raise errors.ConfigError(f"{where}: enforcer URLs must be https://HOST[:PORT], got {url!r}")
    if parts.query or parts.fragment or parts.username:
        raise errors.ConfigError(f"{where}: an enforcer URL takes no user, query or fragment: {url!r}")
    return url.rstrip("/")


class StaticDirectory:
    """A fixed node -> URL map, with an optional ``"*"`` template."""

    def __init__(self, urls: Mapping[str, str]) -> None:
        self._urls = {str(node): _check_url(url, f"node {node!r}") for node, url in urls.items()}

    @classmethod
    def from_file(cls, path: Path) -> StaticDirectory:
        try:
            text = path.read_text()
        except OSError as err:
            raise errors.ConfigError(f"cannot read the enforcers file {path}: {err}") from None
        try:
            document: Any = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as err:
            raise errors.ConfigError(f"the enforcers file {path} does not parse: {err}") from None
        if isinstance(document, dict) and isinstance(document.get("nodes"), dict):
            document = document["nodes"]
        if not isinstance(document, dict):
            raise errors.ConfigError(f"the enforcers file {path} must map node names to URLs")
        return cls({str(k): v for k, v in document.items()})

    def url_for(self, node: str) -> str | None:
        url = self._urls.get(node)
        if url is not None:
            return url
        template = self._urls.get(WILDCARD)
        return None if template is None or not node else template.replace("{node}", node)

    def is_enforced(self, node: str) -> bool:
        return self.url_for(node) is not None

    def is_ready(self) -> bool:
        return True


def _section(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _pod_is_ready(pod: Mapping[str, Any]) -> bool:
    status = _section(pod, "status")
    if status.get("phase") != "Running":
        return False
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


class DaemonSetDirectory:
    """Node -> ``https://<enforcer pod IP>:<port>``, kept current from watch events of the DaemonSet's pods.

    During a rolling update a node briefly has two enforcer pods; the ready one
    wins, and among ready ones the one seen last (the new pod).
    """

    def __init__(
        self, port: int, *, absent_grace_seconds: float = 600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._port = port
        self._absent_grace = absent_grace_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._pods: dict[str, tuple[str, str, bool]] = {}  # pod uid -> (node, ip, ready)
        self._by_node: dict[str, str] = {}
        self._nodes: frozenset[str] = frozenset()  # nodes with an enforcer pod now, ready or not
        self._last_seen: dict[str, float] = {}  # node -> when it last had an enforcer pod (any state)
        self._synced = False

    def apply(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """One watch event (``ADDED`` / ``MODIFIED`` / ``DELETED``) of an enforcer pod, as a plain dict."""
        metadata, spec, status = _section(pod, "metadata"), _section(pod, "spec"), _section(pod, "status")
        uid = str(metadata.get("uid") or metadata.get("name") or "")
        if not uid:
            return
        with self._lock:
            if event_type == "DELETED":
                self._forget(uid)
            else:
                node, ip = str(spec.get("nodeName") or ""), str(status.get("podIP") or "")
                self._pods.pop(uid, None)  # re-insert: the latest event goes last
                if node:
                    self._pods[uid] = (node, ip, bool(ip) and _pod_is_ready(pod))
            self._rebuild()

    def replace_all(self, pods: list[Mapping[str, Any]]) -> None:
        """A fresh LIST (watch start or re-list after a 410): forget everything, then apply each pod."""
        with self._lock:
            for uid in list(self._pods):
                self._forget(uid)
        for pod in pods:
            self.apply("ADDED", pod)
        with self._lock:
            self._synced = True
            self._rebuild()

    def _forget(self, uid: str) -> None:
        removed = self._pods.pop(uid, None)
        if removed is not None:
            self._last_seen[removed[0]] = self._clock()  # the grace runs from the pod's disappearance

    def _rebuild(self) -> None:
        by_node: dict[str, tuple[bool, str]] = {}
        for node, ip, ready in self._pods.values():
            best = by_node.get(node)
            if best is None or ready or not best[0]:
                by_node[node] = (ready, ip)
        self._by_node = {node: self._url(ip) for node, (ready, ip) in by_node.items() if ready}
        self._nodes = frozenset(by_node)

    def _url(self, ip: str) -> str:
        host = f"[{ip}]" if ":" in ip else ip
        return f"https://{host}:{self._port}"

    def url_for(self, node: str) -> str | None:
        with self._lock:
            return self._by_node.get(node)

    def is_enforced(self, node: str) -> bool:
        with self._lock:
            if node in self._nodes:
                return True
            seen = self._last_seen.get(node)
            return seen is not None and self._clock() - seen < self._absent_grace

    def is_ready(self) -> bool:
        with self._lock:
            return self._synced
