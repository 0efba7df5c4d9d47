"""What the enforcer needs before it can answer: the machine, the engine with its saved state, a cgroup driver.

Two kinds of failure, handled differently on purpose:

* A configuration that cannot work (no topology, impossible kubelet fields, a
  cgroup root that is not there) raises :class:`~enforcer.errors.ConfigError`:
  the process refuses to start and says why.
* A state file that cannot be used (damaged, foreign version, saved on another
  machine or under another kubelet configuration, inconsistent) is a
  :class:`StateProblem`: the service starts, reports it (log, ``/readyz``, a
  metric) and refuses state-changing calls until an operator runs
  ``numaguard recover-state`` and restarts.  It never silently starts empty:
  pods may still hold the CPUs the file records.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enforcer.cgroups import driver as cgdriver
from enforcer.cgroups import naming, recording, v1, v2
from enforcer.engine import builder
from enforcer.engine.config import NodeConfig
from enforcer.engine.node import NodeEngine
from enforcer.errors import ConfigError, EnforcerError
from enforcer.service.reconciler import CgroupLayout
from enforcer.service.settings import EnforcerSettings
from enforcer.state import errors as state_errors
from enforcer.state import journal
from enforcer.topology import discovery, machine
from enforcer.topology.machine import CPUTopology

log = logging.getLogger(__name__)

STATE_MISMATCH = "StateMismatch"
STATE_INVALID = "StateInvalid"


@dataclass(frozen=True, slots=True)
class StateProblem:
    """Why the saved state cannot be used; ``reason`` is stable (metrics label, API bodies)."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class LoadedState:
    engine: NodeEngine | None
    problem: StateProblem | None
    fresh: bool  # nothing was ever saved: the engine is new and must be saved before the first answer
    snapshot: dict[str, Any] | None = None  # what the engine was restored from (the rollback point)


def load_topology(settings: EnforcerSettings) -> CPUTopology:
    source = settings.machine_source
    if isinstance(source, dict):
        return machine.from_document(source)
    if settings.topology_file is not None:
        return machine.load(source)
    meminfo = discovery.HOST_MEMINFO if Path(source) == discovery.HOST_SYSFS else None
    return discovery.discover(source, meminfo_fallback=meminfo)


def load_state(store: journal.JournaledStore, topology: CPUTopology, config: NodeConfig) -> LoadedState:
    """The engine as the state file left it; raises ConfigError only when the configuration itself is impossible."""
    fresh_engine = builder.build(topology, config)
    try:
        snapshot = store.load()
    except state_errors.CheckpointError as err:
        return LoadedState(None, StateProblem(err.reason, err.message), fresh=False)
    if snapshot is None:
        return LoadedState(fresh_engine, None, fresh=True)
    try:
        engine = builder.restore(topology, config, snapshot)
    except ConfigError as err:
        message = f"{store.path}: {err.message}"
        return LoadedState(None, StateProblem(STATE_MISMATCH, message), fresh=False)
    except (EnforcerError, KeyError, TypeError, ValueError) as err:
        message = f"{store.path}: the saved state does not decode: {type(err).__name__}: {err}"
        return LoadedState(None, StateProblem(STATE_INVALID, message), fresh=False)
    return LoadedState(engine, None, fresh=False, snapshot=snapshot)


def cgroup_driver(settings: EnforcerSettings) -> cgdriver.CgroupDriver:
    """The configured driver; dry-run records and logs every write instead of touching the host."""
    if settings.dry_run_cgroups:
        return recording.RecordingCgroupDriver(auto_create=True, log_writes=True, v1_hierarchy=False)
    if not settings.cgroup_root.is_dir():
        raise ConfigError(f"cgroup_root {settings.cgroup_root} is not a directory (use dry_run_cgroups off-node)")
    if settings.cgroup_version == "v1":
        return v1.V1CgroupDriver.under(settings.cgroup_root)
    return v2.V2CgroupDriver(settings.cgroup_root)


def cgroup_layout(settings: EnforcerSettings, topology: CPUTopology) -> CgroupLayout:
    try:
        root = naming.parse_cgroup_root(settings.kubelet_cgroup_root, settings.cgroup_driver)
    except EnforcerError as err:
        raise ConfigError(f"kubelet_cgroup_root: {err.message}") from None
    return CgroupLayout(
        driver=settings.cgroup_driver,
        runtime=settings.container_runtime,
        cgroup_root=root,
        cpu_period_us=settings.node_config.cpu_cfs_quota_period_us,
        all_numa_nodes=tuple(topology.numa_ids),
    )


def describe(settings: EnforcerSettings, topology: CPUTopology) -> dict[str, Any]:
    """Start-up facts for the log line operators look for first."""
    return {
        "node": settings.node_name,
        "topology": repr(topology),
        "state_file": str(settings.state_path),
        "cgroups": "dry-run" if settings.dry_run_cgroups else f"{settings.cgroup_version} {settings.cgroup_root}",
        "cgroup_driver": settings.cgroup_driver,
        "standalone": settings.standalone,
    }
