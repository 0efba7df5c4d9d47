"""Requests a fail-open hook left behind (enforcer down or late): repaired as soon as the enforcer can.

The hook writes ``<socket dir>/pending/<container id>.json`` (its request plus
why it failed) when it lets a container start unpinned.  The keeper drains the
directory at start-up and then about once a second: a container still running
(its pid's cgroup still names the container id, so a reused pid is never
touched) is programmed like a fresh request; a container already gone is
dropped.  A request that fails for another reason (no usable state yet) is
retried until it is ``MAX_AGE_SECONDS`` old.  Each outcome is counted in
``numaguard_enforcer_hook_fail_open_repairs_total``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Final, Literal

from enforcer.cgroups import proc
from enforcer.hooks.metrics import HookMetrics
from enforcer.hooks.programmer import HookProgrammer
from enforcer.hooks.protocol import HookRequestError, parse_request

log = logging.getLogger(__name__)

SPOOL_DIR_NAME: Final = "pending"  # the hook's SPOOL_DIR_NAME
RECORD_DIR_NAME: Final = "containers"
MAX_AGE_SECONDS: Final = 600.0
MAX_FILE_BYTES: Final = 64 << 10


def spool_dir(socket_path: Path) -> Path:
    return socket_path.parent / SPOOL_DIR_NAME


def record_dir(socket_path: Path) -> Path:
    return socket_path.parent / RECORD_DIR_NAME


def restore(
    directory: Path, programmer: HookProgrammer, *, proc_root: Path = proc.HOST_PROC, cgroup_version: str = "v2"
) -> int:
    """At start-up: re-program the hooked containers a previous enforcer recorded; stale records go."""
    try:
        names = sorted(e.name for e in os.scandir(directory) if e.name.endswith(".json") and not e.name.startswith("."))
    except FileNotFoundError:
        return 0
    restored = 0
    for name in names:
        outcome = _repair(directory / name, programmer, proc_root=proc_root, cgroup_version=cgroup_version)
        if outcome == "repaired":
            restored += 1
        else:
            (directory / name).unlink(missing_ok=True)
    return restored


def drain(
    directory: Path,
    programmer: HookProgrammer,
    metrics: HookMetrics,
    *,
    proc_root: Path = proc.HOST_PROC,
    cgroup_version: str = "v2",
) -> int:
    """Handle every pending request once; returns how many files were settled (removed)."""
    try:
        names = sorted(e.name for e in os.scandir(directory) if e.name.endswith(".json") and not e.name.startswith("."))
    except FileNotFoundError:
        return 0
    settled = 0
    for name in names:
        file = directory / name
        outcome = _repair(file, programmer, proc_root=proc_root, cgroup_version=cgroup_version)
        if outcome == "retry":
            continue
        if outcome == "repaired":
            log.warning("a container a fail-open hook started unpinned is repaired", extra={"file": str(file)})
        metrics.fail_open_repairs.labels(outcome=outcome).inc()
        file.unlink(missing_ok=True)
        settled += 1
    return settled


def _repair(file: Path, programmer: HookProgrammer, *, proc_root: Path, cgroup_version: str) -> str:
    try:
        with open(file, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
        age = time.time() - file.stat().st_mtime
    except FileNotFoundError:
        return "gone"
    try:
        request = parse_request(json.loads(data))
    except (HookRequestError, UnicodeDecodeError, json.JSONDecodeError) as err:
        log.warning("unreadable fail-open spool file removed", extra={"file": str(file), "error": str(err)})
        return "failed"
    try:
        version: Literal["v1", "v2"] = "v1" if cgroup_version == "v1" else "v2"
        path = proc.resolve(request.pid, version, reported=request.cgroup_text, proc_root=proc_root)
    except proc.CgroupLookupError:
        return "gone"
    if request.container_id not in path:
        return "gone"  # the pid now belongs to another process
    answer = programmer.handle(request)
    if answer.ok:
        log.info("hooked container programmed again", extra={"container": request.label, "cgroup": answer.cgroup})
        return "repaired"
    if answer.reason == "CgroupGone":
        return "gone"
    return "failed" if age > MAX_AGE_SECONDS else "retry"
