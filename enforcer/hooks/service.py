"""Start and stop the enforcer's hook side: programmer, socket server, keeper (watch + spool)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from prometheus_client import CollectorRegistry

from enforcer.cgroups import proc
from enforcer.hooks import spool
from enforcer.hooks.keeper import Keeper, WatchMode
from enforcer.hooks.metrics import HookMetrics
from enforcer.hooks.programmer import HookProgrammer
from enforcer.hooks.registry import HookRegistry
from enforcer.hooks.server import HookSocketServer
from enforcer.service.reconciler import DesiredSource, Reconciler

log = logging.getLogger(__name__)


@dataclass
class HookService:
    programmer: HookProgrammer
    server: HookSocketServer
    keeper: Keeper

    def stop(self) -> None:
        self.server.stop()
        self.keeper.stop()


def start(
    *,
    socket_path: Path,
    deadline: float,
    reconciler: Reconciler,
    desired: DesiredSource,
    cgroup_version: Literal["v1", "v2"],
    registry: CollectorRegistry,
    watch_mode: WatchMode = "auto",
    proc_root: Path = proc.HOST_PROC,
) -> HookService:
    """Serve the hook on ``socket_path``; fail-open leftovers are repaired before the first request is served."""
    metrics = HookMetrics(registry)
    programmer = HookProgrammer(
        desired=desired,
        program=reconciler.program,
        driver=reconciler.driver,
        layout=reconciler.layout,
        cgroup_version=cgroup_version,
        registry=HookRegistry(spool.record_dir(socket_path)),
        metrics=metrics,
        proc_root=proc_root,
    )
    keeper = Keeper(
        programmer,
        reconciler.driver,
        metrics,
        spool_dir=spool.spool_dir(socket_path),
        mode=watch_mode,
        cgroup_version=cgroup_version,
        proc_root=proc_root,
    )
    programmer.on_programmed = keeper.track
    restored = spool.restore(
        spool.record_dir(socket_path), programmer, proc_root=proc_root, cgroup_version=cgroup_version
    )
    repaired = keeper.drain_spool()
    server = HookSocketServer(socket_path, programmer.handle, deadline=deadline)
    server.start()
    keeper.start()
    log.info(
        "runtime hook serving",
        extra={
            "socket": str(socket_path),
            "rewrite_watch": keeper.mode,
            "spool_settled": repaired,
            "containers_restored": restored,
        },
    )
    return HookService(programmer, server, keeper)
