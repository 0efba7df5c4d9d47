"""Builds fixture cgroup trees on disk: the files the kernel would expose, with kernel defaults.

v2: one unified tree.  v1: one tree per controller (``cpuset/``, ``cpu/``,
``memory/``) under a mount root, as ``/sys/fs/cgroup`` looks on a v1 host.
Only the files the drivers read or write (plus a few neighbours, so a driver
writing the wrong file is caught by content checks, not by luck).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

V1_UNLIMITED_MEMORY = 9223372036854771712  # PAGE_COUNTER_MAX * 4KiB, what v1 shows for "no limit"

# The paths the shared fixtures (conftest.py) create.
POD = "kubepods/burstable/pod1234"
CONTAINER_A = f"{POD}/aaa"
CONTAINER_B = f"{POD}/bbb"


@dataclass(frozen=True)
class V2Group:
    cpus: str = ""
    mems: str = ""
    cpu_max: str = "max 100000"
    memory_max: str = "max"
    memory_current: int = 0


@dataclass(frozen=True)
class V1Group:
    cpus: str = ""
    mems: str = ""
    cfs_quota_us: int = -1
    cfs_period_us: int = 100_000
    limit_in_bytes: int = V1_UNLIMITED_MEMORY
    usage_in_bytes: int = 0


def _write(directory: Path, files: Mapping[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / name).write_text(content + "\n")


def build_v2_tree(root: Path, groups: Mapping[str, V2Group]) -> Path:
    """Create ``root`` with one directory per group path (parents first); returns ``root``."""
    for path in sorted(groups, key=lambda p: p.count("/")):
        group = groups[path]
        _write(
            root / path.strip("/"),
            {
                "cgroup.controllers": "cpuset cpu io memory pids",
                "cgroup.procs": "",
                "cpuset.cpus": group.cpus,
                "cpuset.cpus.effective": group.cpus,
                "cpuset.mems": group.mems,
                "cpuset.mems.effective": group.mems,
                "cpu.max": group.cpu_max,
                "cpu.weight": "100",
                "memory.max": group.memory_max,
                "memory.high": "max",
                "memory.current": str(group.memory_current),
            },
        )
    root.mkdir(parents=True, exist_ok=True)
    return root


def build_v1_tree(mount_root: Path, groups: Mapping[str, V1Group]) -> Path:
    """Create ``mount_root/{cpuset,cpu,memory}/<group>`` for every group; returns ``mount_root``."""
    for controller in ("cpuset", "cpu", "memory"):
        (mount_root / controller).mkdir(parents=True, exist_ok=True)
    for path in sorted(groups, key=lambda p: p.count("/")):
        group = groups[path]
        relative = path.strip("/")
        _write(
            mount_root / "cpuset" / relative,
            {"cgroup.procs": "", "tasks": "", "cpuset.cpus": group.cpus, "cpuset.mems": group.mems},
        )
        _write(
            mount_root / "cpu" / relative,
            {
                "cgroup.procs": "",
                "cpu.cfs_quota_us": str(group.cfs_quota_us),
                "cpu.cfs_period_us": str(group.cfs_period_us),
                "cpu.shares": "1024",
            },
        )
        _write(
            mount_root / "memory" / relative,
            {
                "cgroup.procs": "",
                "memory.limit_in_bytes": str(group.limit_in_bytes),
                "memory.usage_in_bytes": str(group.usage_in_bytes),
                "memory.soft_limit_in_bytes": str(V1_UNLIMITED_MEMORY),
            },
        )
    return mount_root


def read(root: Path, path: str, name: str) -> str:
    """A fixture file's content without the trailing newline."""
    return (root / path.strip("/") / name).read_text().strip()
