"""The containers programmed through the runtime hook, by cgroup path.

The pod watch learns container ids seconds after a start; the hook knows the
exact cgroup at the start.  Keeping it here lets the keeper re-apply a
container's values when a foreign writer (the kubelet, systemd) rewrites them
or when its pod's allocation changes, whether or not the watch has caught up.
In memory only: after an enforcer restart the watch path (container ids in pod
status) and the next start of each container fill it again.

Thread-safe; must not touch cgroupfs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from enforcer.cgroups.reconcile import CgroupTarget
from enforcer.hooks.protocol import HookRequest, Pool


@dataclass(frozen=True, slots=True)
class HookedContainer:
    path: str
    request: HookRequest
    pool: Pool
    programmed: tuple[CgroupTarget, ...]
    """The targets last applied (container first, then its pod cgroup): what the keeper compares against."""


class HookRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_path: dict[str, HookedContainer] = {}

    def put(self, entry: HookedContainer) -> None:
        with self._lock:
            self._by_path[entry.path] = entry

    def drop(self, path: str) -> HookedContainer | None:
        with self._lock:
            return self._by_path.pop(path, None)

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
