"""Which nodes are enforced, and at which URL: the same static map the webhook reads.

The file is ``manifests/base/config/enforcers.yaml``'s format: ``nodes: {name: url}``, where the key
``"*"`` is a template for every node not listed (``{node}`` replaced by the node's name).  A node the
map does not name (and no template) is not enforced by numaguard: the extender has no opinion on it.
Node names are learned from the scheduler's own requests, so the extender needs no Kubernetes API
access to discover nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

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
