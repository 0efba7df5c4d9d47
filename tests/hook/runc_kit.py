"""The runc kit (bench/runc_kit.py) for pytest: a runtime that skips, saying why, where runc cannot run."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a directory of measuring scripts, not an installed package
    sys.path.insert(0, str(ROOT))

from bench.runc_kit import (  # noqa: E402
    CGROUP_MOUNT,
    HOOK_SCRIPT,
    RuncRun,
    Runtime,
    allowed_of,
    containerd_annotations,
    crio_annotations,
    hook_args,
    remove_cgroup_tree,
    unique,
    unusable,
)

__all__ = [
    "CGROUP_MOUNT",
    "HOOK_SCRIPT",
    "RuncRun",
    "Runtime",
    "allowed_of",
    "containerd_annotations",
    "crio_annotations",
    "hook_args",
    "remove_cgroup_tree",
    "runtime",
    "unique",
    "unusable",
]


@contextlib.contextmanager
def runtime(work: Path) -> Iterator[Runtime]:
    """A runc runtime working in ``work``; everything it made is removed afterwards, also on failure."""
    reason = unusable()
    if reason is not None:
        pytest.skip(reason)
    rt = Runtime(work=work, cgroup_root=unique())
    try:
        yield rt
    finally:
        rt.cleanup()
