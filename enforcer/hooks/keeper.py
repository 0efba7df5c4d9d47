"""Keep hooked containers on their values: foreign rewrites undone within a second, without a busy loop.

One thread.  With inotify (the default where the kernel offers it) it sleeps
in ``select`` on the programmed files of every hooked container and its pod
cgroup (:mod:`enforcer.cgroups.watch`); a write by anyone else wakes it and the
container is re-applied at once (reads of a few files, writes only where a
value differs).  Its own writes wake it too and find nothing to do.  Once per
``tick`` (1 s) it also drains the fail-open spool, drops containers whose
cgroup is gone and re-applies containers whose desired values changed (a
resize, a node shared pool that grew or shrank) -- that check compares values
in memory and reads no cgroup file.

Without inotify (``rewriteWatch: poll``, or no inotify) it re-reads the
programmed containers' files every ``poll_interval`` (0.5 s); the cost is a
handful of small reads per container per tick (measured in bench/bench_hook.py).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Literal

from enforcer.cgroups import driver as cgdriver
from enforcer.cgroups import proc, watch
from enforcer.hooks import spool
from enforcer.hooks.metrics import HookMetrics
from enforcer.hooks.programmer import HookProgrammer
from enforcer.hooks.registry import HookedContainer

log = logging.getLogger(__name__)

WatchMode = Literal["auto", "inotify", "poll"]
TICK_SECONDS = 1.0
POLL_SECONDS = 0.5


class Keeper:
    def __init__(
        self,
        programmer: HookProgrammer,
        driver: cgdriver.CgroupDriver,
        metrics: HookMetrics,
        *,
        spool_dir: Path,
        mode: WatchMode = "auto",
        tick: float = TICK_SECONDS,
        poll_interval: float = POLL_SECONDS,
        cgroup_version: str = "v2",
        proc_root: Path = proc.HOST_PROC,
    ) -> None:
        self._programmer = programmer
        self._registry = programmer.registry
        self._driver = driver
        self._metrics = metrics
        self._spool_dir = spool_dir
        self._tick = tick
        self._poll = poll_interval
        self._version = cgroup_version
        self._proc_root = proc_root
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.watch: watch.FileWatch | None = None
        if mode != "poll":
            try:
                self.watch = watch.FileWatch()
            except watch.WatchUnavailable as err:
                if mode == "inotify":
                    raise
                log.warning("inotify unavailable: re-reading hooked cgroups on a timer", extra={"error": str(err)})
        self.mode: Literal["inotify", "poll"] = "inotify" if self.watch is not None else "poll"

    def track(self, entry: HookedContainer) -> None:
        """Watch a freshly programmed container's files (and its pod cgroup's)."""
        if self.watch is None:
            return
        for target in entry.programmed:
            self.watch.add(entry.path, watch.watched_files(self._driver, target.path))

    def drain_spool(self) -> int:
        return spool.drain(
            self._spool_dir, self._programmer, self._metrics, proc_root=self._proc_root, cgroup_version=self._version
        )

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="hook-keeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.watch is not None:
            self.watch.wake()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        if self.watch is not None:
            self.watch.close()

    def _loop(self) -> None:
        period = self._tick if self.watch is not None else self._poll
        next_tick = time.monotonic()
        while not self._stop.is_set():
            timeout = max(0.0, next_tick - time.monotonic())
            if self.watch is not None:
                events = self.watch.wait(timeout)
            else:
                self._stop.wait(timeout)
                events = watch.WatchEvents()
            if self._stop.is_set():
                return
            try:
                self._on_events(events)
                if time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + period
                    self._on_tick()
            except Exception:  # the keeper must outlive any one failure; the next tick retries
                log.exception("hook keeper pass crashed")

    def _on_events(self, events: watch.WatchEvents) -> None:
        for key in events.removed:
            if not self._driver.exists(key):
                self._forget(key)
        changed = [e for e in (self._registry.get(k) for k in events.changed - events.removed) if e is not None]
        if changed:
            self._programmer.reapply(changed, trigger="rewrite")

    def _on_tick(self) -> None:
        self.drain_spool()
        entries = self._registry.entries()
        for entry in entries:
            if not self._driver.exists(entry.path):
                self._forget(entry.path)
        entries = [e for e in entries if self._registry.get(e.path) is not None]
        if not entries:
            return
        if self.watch is None:
            self._programmer.reapply(entries, trigger="rewrite")
            return
        watched = self.watch.watched_keys()
        for entry in entries:
            if entry.path not in watched:
                self.track(entry)
        state = self._programmer.desired(sorted({e.request.pod_uid for e in entries}))
        fresh = {e.path: e for e in self._programmer.reapply_targets(entries, state)}
        moved = [e for e in entries if e.path in fresh and fresh[e.path].programmed != e.programmed]
        if moved:
            self._programmer.reapply(moved, trigger="change")

    def _forget(self, path: str) -> None:
        self._registry.drop(path)
        if self.watch is not None:
            self.watch.remove(path)
        self._metrics.hooked_containers.set(len(self._registry))
