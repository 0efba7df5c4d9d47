"""Which nodes are enforced, and at which URL: a static map, or the enforcer DaemonSet's pods.

:class:`EnforcerDirectory` (static) reads ``manifests/base/config/enforcers.yaml``'s format:
``nodes: {name: url}``, where the key ``"*"`` is a template for every node not listed (``{node}``
replaced by the node's name).  A node the map does not name (and no template) is not enforced by
numaguard: the extender has no opinion on it.  Node names are learned from the scheduler's own
requests, so the static form needs no Kubernetes API access.

:class:`PodDirectory` (``enforcerDiscovery: daemonset``, what the base manifests deploy: the
enforcers do not use the host network) maps each node to its ready enforcer pod's IP, from a list of
the enforcer pods the assembler refreshes every few seconds (the Kubernetes client stays out of
this module).  The pod IP is not in the enforcers' certificate: the poller sends the configured
server name as SNI and verifies the certificate against it, as the webhook does.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

TEMPLATE = "*"


class DirectoryError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class EnforcerDirectory:
    def __init__(self, nodes: Mapping[str, str]) -> None:
        for name, url in nodes.items():
            if not isinstance(url, str) or not url.startswith(("https://", "http://")):
                raise DirectoryError(f"nodes[{name}]: expected an https:// URL, got {url!r}")
        self._nodes = {k: v.rstrip("/") for k, v in nodes.items() if k != TEMPLATE}
        self._template = nodes.get(TEMPLATE)

    @classmethod
    def load(cls, path: Path) -> EnforcerDirectory:
        try:
            raw = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise DirectoryError(f"{path}: {err}") from None
        nodes = raw.get("nodes") if isinstance(raw, Mapping) else None
        if not isinstance(nodes, Mapping):
            raise DirectoryError(f"{path}: expected a map `nodes: {{node name: enforcer URL}}`")
        return cls({str(k): v for k, v in nodes.items()})

    def url_for(self, node: str) -> str | None:
        """The enforcer's base URL for ``node``, or None when numaguard does not enforce it."""
        url = self._nodes.get(node)
        if url is not None:
            return url
        if self._template is not None:
            return self._template.replace("{node}", node).rstrip("/")
        return None

    def listed(self) -> tuple[str, ...]:
        """The nodes named explicitly (polled from the start; template nodes once the scheduler names them)."""
        return tuple(sorted(self._nodes))


class PodDirectory(EnforcerDirectory):
    """Node -> ``https://<ready enforcer pod IP>:<port>``, replaced wholesale by :meth:`replace_all`."""

    def __init__(self, port: int) -> None:
        super().__init__({})
        self.port = port
        self._lock = threading.Lock()
        self._by_node: dict[str, str] = {}

    def replace_all(self, pods: Iterable[Mapping[str, Any]]) -> None:
        by_node: dict[str, str] = {}
        for pod in pods:
            spec, status = pod.get("spec") or {}, pod.get("status") or {}
            node, ip = str(spec.get("nodeName") or ""), str(status.get("podIP") or "")
            conditions = status.get("conditions") or []
            ready = status.get("phase") == "Running" and any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
            )
            if node and ip and ready:
                host = f"[{ip}]" if ":" in ip else ip
                by_node[node] = f"https://{host}:{self.port}"
        with self._lock:
            self._by_node = by_node

    def url_for(self, node: str) -> str | None:
        with self._lock:
            return self._by_node.get(node)

    def listed(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(sorted(self._by_node))
