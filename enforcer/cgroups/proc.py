"""A process's cgroup, read from ``/proc/<pid>/cgroup``: exact for every cgroup driver and runtime.

The runtime hook knows the container's pid, not its cgroup name: naming it
from the pod (:mod:`enforcer.cgroups.naming`) would guess the runtime's
cgroup layout, while the kernel's own record is exact.  Each line is
``hierarchy-id:controllers:path`` (``man 7 cgroups``); cgroup v2 has the one
line ``0::<path>``, cgroup v1 one line per hierarchy (``3:cpuset:/kubepods/...``,
``4:cpu,cpuacct:/kubepods/...``).

The enforcer's drivers take one path for every controller, so on v1 the
cpuset, cpu and memory paths must agree (they always do under the kubelet).
A path beginning ``/..`` lies outside the reader's cgroup namespace: the
enforcer then does not run in the host's cgroup namespace and cannot name the
container's cgroup; that is a configuration error, reported as such.

Must not: write anything, or guess a path the kernel did not report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal

from enforcer.cgroups import errors

HOST_PROC: Final = Path("/proc")
V1_CONTROLLERS: Final = ("cpuset", "cpu", "memory")


class CgroupLookupError(errors.CgroupError):
    """A process's cgroup cannot be found or used (the process is gone, the namespaces differ, ...)."""

    reason = "CgroupLookupFailed"


def parse(text: str) -> dict[str, str]:
    """Controller (``""`` for the v2 line, ``name=systemd`` kept as written) -> cgroup path."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3:
            raise CgroupLookupError(f"unexpected /proc/<pid>/cgroup line {line!r}")
        _, controllers, path = parts
        if not path.startswith("/"):
            raise CgroupLookupError(f"unexpected cgroup path {path!r} in /proc/<pid>/cgroup")
        if not controllers:
            paths[""] = path
            continue
        for controller in controllers.split(","):
            paths[controller] = path
    return paths


def select_path(paths: dict[str, str], version: Literal["v1", "v2"]) -> str:
    """The one path the drivers take; raises CgroupLookupError when the kernel's answer cannot be one."""
    if version == "v2":
        path = paths.get("")
        if path is None:
            raise CgroupLookupError("the process is in no cgroup v2 group (no '0::' line): is this a v1 node?")
    else:
        found = {controller: paths.get(controller) for controller in V1_CONTROLLERS}
        missing = [c for c, p in found.items() if p is None]
        if missing:
            raise CgroupLookupError(f"no cgroup v1 {', '.join(missing)} hierarchy for the process: is this a v2 node?")
        distinct = set(found.values())
        if len(distinct) != 1:
            shown = ", ".join(f"{c}:{p}" for c, p in found.items())
            raise CgroupLookupError(f"the process's cpuset, cpu and memory cgroups differ ({shown})")
        path = distinct.pop() or ""
    if path == "/.." or path.startswith("/../"):
        raise CgroupLookupError(
            f"cgroup path {path!r} is outside the enforcer's cgroup namespace: run it in the host's cgroup namespace"
        )
    if path == "/":
        raise CgroupLookupError("the process is in the root cgroup: not a container")
    return path


def resolve(pid: int, version: Literal["v1", "v2"], *, reported: str = "", proc_root: Path = HOST_PROC) -> str:
    """The cgroup of ``pid``: the enforcer's own read, or the runtime hook's where the enforcer's is relative.

    In a private cgroup namespace (the default for an unprivileged pod on cgroup v2) the enforcer sees
    ``/../..``-relative paths; the hook runs in the host's namespace and sends what it read.  The
    process must still exist (checked through ``proc_root``).
    """
    try:
        return process_cgroup(pid, version, proc_root=proc_root)
    except CgroupLookupError as err:
        if not reported or "cgroup namespace" not in err.message:
            raise
    return select_path(parse(reported), version)


def process_cgroup(pid: int, version: Literal["v1", "v2"], *, proc_root: Path = HOST_PROC) -> str:
    """The cgroup path (leading ``/``, relative to the hierarchy root) of process ``pid``."""
    if pid <= 0:
        raise CgroupLookupError(f"invalid pid {pid}")
    file = proc_root / str(pid) / "cgroup"
    try:
        text = file.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        raise CgroupLookupError(f"process {pid} does not exist (no {file})") from None
    except OSError as err:
        raise CgroupLookupError(f"cannot read {file}: {err.strerror or err}") from None
    return select_path(parse(text), version)
