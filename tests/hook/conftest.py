"""Fixtures of the runtime-hook tests: a real enforcer with its hook socket, and a runc runtime."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from runc_kit import Runtime, runtime  # noqa: E402

from bench.runc_kit import enforcer_settings, guaranteed, pod_level  # noqa: E402
from enforcer.service import requests  # noqa: E402
from enforcer.service import runtime as enforcer_runtime  # noqa: E402
from enforcer.service.metrics import EnforcerMetrics  # noqa: E402


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


@pytest.fixture
def hook_node(tmp_path: Path) -> Iterator[HookNode]:
    with runtime(tmp_path / "bundles") as rt:
        (tmp_path / "bundles").mkdir(exist_ok=True)
        config = enforcer_settings(tmp_path, rt.cgroup_root)
        metrics = EnforcerMetrics()
        running = enforcer_runtime.start(config, metrics)
        try:
            assert config.hook_socket is not None
            yield HookNode(running, config.hook_socket, rt, metrics)
        finally:
            running.stop()


__all__ = ["HookNode", "guaranteed", "hook_node", "pod_level"]
