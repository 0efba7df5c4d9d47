"""The runtime-hook tests' node: a real enforcer with its hook socket on this machine's cgroup v1 hierarchy.

A module of its own (not conftest.py) so the tests can import it by a name no other test folder uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runc_kit import Runtime

from bench.runc_kit import guaranteed, pod_level
from enforcer.service import requests
from enforcer.service import runtime as enforcer_runtime
from enforcer.service.metrics import EnforcerMetrics


@dataclass
class HookNode:
    """An enforcer on this machine's real cgroup v1 hierarchy, serving the hook on ``socket``."""

    running: enforcer_runtime.RunningNode
    socket: Path
    runtime: Runtime
    metrics: EnforcerMetrics

    def allocate(self, raw: dict[str, Any]) -> None:
        self.running.service.allocate(requests.pod_resources(raw, pod_level_resources=True))

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


__all__ = ["HookNode", "guaranteed", "pod_level"]
