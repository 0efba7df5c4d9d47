"""Notice foreign rewrites of the cgroup files the enforcer programmed, without polling them.

The kubelet (``cpuManagerPolicy: none``) writes ``cpu.cfs_quota_us`` /
``cpu.max`` at container create and on every resize; systemd may reset
attributes on ``daemon-reload``.  Each such write is a ``write(2)`` on a
cgroupfs file, and the VFS reports every successful ``write(2)`` to inotify as
``IN_MODIFY`` (``fsnotify_modify`` in ``vfs_write``) -- checked on this
machine's cgroup v1 ``cpu.cfs_quota_us`` and ``cpuset.cpus``
(tests/hook/test_rewrite_watch.py).  What inotify does not see are changes the
kernel makes itself (a CPU going offline, a v2 parent narrowing a child's
*effective* set); the reconciler's periodic pass still covers those.  Nor does
kernfs report a removed cgroup (no ``IN_DELETE_SELF``/``IN_IGNORED`` when the
directory goes, checked here too): callers notice removal by other means (the
keeper's once-a-second ``exists`` check).

:class:`FileWatch` is a thin ``ctypes`` binding of ``inotify(7)`` (standard
library only): keys (the enforcer's cgroup paths) map to watched files; many
keys may share a file (a pod cgroup's files belong to each of its containers).
:meth:`FileWatch.wait` blocks in ``select`` until a watched file changes, the
timeout passes or :meth:`FileWatch.wake` is called: no busy loop.

:func:`watched_files` names the files per driver.  Must not: read or write the
files (callers reconcile), or hold the lock while blocking.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import select
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from enforcer.cgroups import driver as cgdriver
from enforcer.cgroups import v1, v2

IN_MODIFY: Final = 0x00000002
IN_DELETE_SELF: Final = 0x00000400
IN_IGNORED: Final = 0x00008000
IN_NONBLOCK: Final = os.O_NONBLOCK
IN_CLOEXEC: Final = os.O_CLOEXEC
_EVENT: Final = struct.Struct("iIII")


class WatchUnavailable(Exception):
    """inotify cannot be used here (no libc symbol, or the kernel refused): callers fall back to a timer."""


@dataclass(slots=True)
class WatchEvents:
    changed: set[str] = field(default_factory=set)
    """Keys one of whose files was written."""
    removed: set[str] = field(default_factory=set)
    """Keys one of whose files disappeared (the cgroup was removed)."""


def _libc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError) as err:
        raise WatchUnavailable(f"no inotify in libc: {err}") from None
    return libc


class FileWatch:
    def __init__(self) -> None:
        self._libc = _libc()
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise WatchUnavailable(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        self._fd = fd
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._keys_of_wd: dict[int, set[str]] = {}
        self._wds_of_key: dict[str, set[int]] = {}
        self._closed = False

    def add(self, key: str, files: Sequence[Path]) -> int:
        """Watch ``files`` for ``key``; returns how many could be watched (missing files are skipped)."""
        watched = 0
        with self._lock:
            for file in files:
                wd = self._libc.inotify_add_watch(self._fd, os.fsencode(file), IN_MODIFY | IN_DELETE_SELF)
                if wd < 0:
                    code = ctypes.get_errno()
                    if code in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                        continue
                    raise WatchUnavailable(f"inotify_add_watch {file}: {os.strerror(code)}")
                self._keys_of_wd.setdefault(wd, set()).add(key)
                self._wds_of_key.setdefault(key, set()).add(wd)
                watched += 1
        return watched

    def remove(self, key: str) -> None:
        with self._lock:
            for wd in self._wds_of_key.pop(key, set()):
                keys = self._keys_of_wd.get(wd)
                if keys is None:
                    continue
                keys.discard(key)
                if not keys:
                    del self._keys_of_wd[wd]
                    self._libc.inotify_rm_watch(self._fd, wd)

    def watched_keys(self) -> set[str]:
        with self._lock:
            return set(self._wds_of_key)

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # a wake already pending (BlockingIOError), or closing
            os.write(self._wake_w, b"x")

    def wait(self, timeout: float | None) -> WatchEvents:
        """Events since the last call; blocks up to ``timeout`` seconds (None: until an event or a wake)."""
        events = WatchEvents()
        try:
            ready, _, _ = select.select([self._fd, self._wake_r], [], [], timeout)
        except (OSError, ValueError):
            return events  # closed under us
        if self._wake_r in ready:
            try:
                while os.read(self._wake_r, 512):
                    pass
            except (BlockingIOError, OSError):
                pass
        if self._fd in ready:
            self._read_events(events)
        return events

    def _read_events(self, events: WatchEvents) -> None:
        while True:
            try:
                data = os.read(self._fd, 65536)
            except (BlockingIOError, OSError):
                return
            if not data:
                return
            offset = 0
            with self._lock:
                while offset + _EVENT.size <= len(data):
                    wd, mask, _, name_len = _EVENT.unpack_from(data, offset)
                    offset += _EVENT.size + name_len
                    keys = self._keys_of_wd.get(wd, set())
                    if mask & (IN_IGNORED | IN_DELETE_SELF):
                        events.removed.update(keys)
                        if mask & IN_IGNORED:
                            self._forget_wd(wd)
                    elif mask & IN_MODIFY:
                        events.changed.update(keys)

    def _forget_wd(self, wd: int) -> None:
        for key in self._keys_of_wd.pop(wd, set()):
            wds = self._wds_of_key.get(key)
            if wds is not None:
                wds.discard(wd)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fd in (self._fd, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def watched_files(driver: cgdriver.CgroupDriver, path: str) -> list[Path]:
    """The files holding the four programmed fields of cgroup ``path`` ([] for drivers without files)."""
    if isinstance(driver, v1.V1CgroupDriver):
        cpuset = v2.cgroup_dir(driver.cpuset_root, path)
        cpu = v2.cgroup_dir(driver.cpu_root, path)
        return [
            cpuset / "cpuset.cpus",
            cpuset / "cpuset.mems",
            cpu / "cpu.cfs_quota_us",
            cpu / "cpu.cfs_period_us",
            v2.cgroup_dir(driver.memory_root, path) / "memory.limit_in_bytes",
        ]
    if isinstance(driver, v2.V2CgroupDriver):
        directory = v2.cgroup_dir(driver.root, path)
        return [directory / name for name in ("cpuset.cpus", "cpuset.mems", "cpu.max", "memory.max")]
    return []
