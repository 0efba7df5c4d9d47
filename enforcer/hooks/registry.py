"""The containers programmed through the runtime hook, by cgroup path.

The pod watch learns container ids seconds after a start; the hook knows the
exact cgroup at the start.  Keeping it here lets the keeper re-apply a
container's values when a foreign writer (the kubelet, systemd) rewrites them
or when its pod's allocation changes, whether or not the watch has caught up.
With ``record_dir`` (``<socket dir>/containers``, on the host's ``/run``) each
container's request is also kept as a small file, so a restarted enforcer
re-programs and guards the running containers at once
(:func:`enforcer.hooks.spool.restore`) instead of waiting for their next start.

Thread-safe; must not touch cgroupfs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from enforcer.cgroups.reconcile import CgroupTarget
from enforcer.hooks.protocol import HookRequest, Pool

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HookedContainer:
    path: str
    request: HookRequest
    pool: Pool
    programmed: tuple[CgroupTarget, ...]
    """The targets last applied (container first, then its pod cgroup): what the keeper compares against."""


class HookRegistry:
    def __init__(self, record_dir: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._by_path: dict[str, HookedContainer] = {}
        self.record_dir = record_dir

    def put(self, entry: HookedContainer) -> None:
        with self._lock:
            new = entry.path not in self._by_path
            self._by_path[entry.path] = entry
        if new:
            self._record(entry.request)

    def drop(self, path: str) -> HookedContainer | None:
        with self._lock:
            entry = self._by_path.pop(path, None)
        if entry is not None and self.record_dir is not None:
            with contextlib.suppress(OSError):
                (self.record_dir / f"{entry.request.container_id}.json").unlink()
        return entry

    def _record(self, request: HookRequest) -> None:
        if self.record_dir is None:
            return
        try:
            self.record_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            final = self.record_dir / f"{request.container_id}.json"
            temporary = final.with_name("." + final.name + ".tmp")
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                json.dump(request.to_wire(), handle)
            os.replace(temporary, final)
        except OSError as err:  # only restart coverage is lost: the watch path still repairs the container
            log.warning("cannot record a hooked container", extra={"container": request.label, "error": str(err)})

    def get(self, path: str) -> HookedContainer | None:
        with self._lock:
            return self._by_path.get(path)

    def entries(self) -> list[HookedContainer]:
        with self._lock:
            return list(self._by_path.values())

    def of_pod(self, pod_uid: str) -> list[HookedContainer]:
        with self._lock:
            return [e for e in self._by_path.values() if e.request.pod_uid == pod_uid]

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_path)
