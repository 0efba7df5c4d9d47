"""Fixtures of the runtime-hook tests: a real enforcer with its hook socket, and a runc runtime."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hook_kit import HookNode  # noqa: E402
from runc_kit import runtime  # noqa: E402

from bench.runc_kit import enforcer_settings  # noqa: E402
from enforcer.service import runtime as enforcer_runtime  # noqa: E402
from enforcer.service.metrics import EnforcerMetrics  # noqa: E402


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


__all__ = ["hook_node"]
