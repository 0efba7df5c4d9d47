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
* A state that belongs to another node or machine (:mod:`.state_identity`)
  is such a problem too (``StateForeignNode`` / ``StateForeignMachine``), with
  the recovery command in its message.
* A state directory that cannot be used at all (missing and not creatable,
  read-only, not a directory) is a ConfigError raised by
  :func:`check_state_dir` before anything else: one line, non-zero exit.

:func:`load_state` is also what ``numaguard recover-state --mode check
--config FILE`` runs, so the command and the enforcer agree on every file.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enforcer.cgroups import driver as cgdriver
from enforcer.cgroups import naming, recording, v1, v2
from enforcer.engine import builder
from enforcer.engine.config import NodeConfig
from enforcer.engine.node import NodeEngine
from enforcer.errors import ConfigError, EnforcerError
from enforcer.service import state_identity
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
    # fresh, although the directory once held state (a wiped or lost state file): logged and counted
    started_empty_after_state: bool = False


def check_state_dir(state_dir: Path) -> None:
    """The state directory exists (created if need be) and takes files; ConfigError in one line otherwise."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"state directory {state_dir} cannot be created: {err.strerror or err}") from None
    if not state_dir.is_dir():
        raise ConfigError(f"state directory {state_dir} is not a directory")
    probe = state_dir / f".numaguard-write-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ConfigError(
            f"state directory {state_dir} is not writable ({err.strerror or err}): "
            "the enforcer must persist every allocation before it answers"
        ) from None


def current_identity(settings: EnforcerSettings) -> state_identity.Identity:
    sysfs = settings.sysfs_root if settings.sysfs_root is not None else None
    return state_identity.Identity(settings.node_name, state_identity.machine_id(sysfs))


def load_topology(settings: EnforcerSettings) -> CPUTopology:
    source = settings.machine_source
    if isinstance(source, dict):
        return machine.from_document(source)
    if settings.topology_file is not None:
        return machine.load(source)
    meminfo = discovery.HOST_MEMINFO if Path(source) == discovery.HOST_SYSFS else None
    return discovery.discover(source, meminfo_fallback=meminfo)


def load_state(
    store: journal.JournaledStore,
    topology: CPUTopology,
    config: NodeConfig,
    *,
    identity: state_identity.Identity | None = None,
    record: bool = True,
) -> LoadedState:
    """The engine as the state file left it; raises ConfigError only when the configuration itself is impossible.

    With ``identity`` (this node and machine) the state must belong to it, and (``record``) a start records it.
    """
    fresh_engine = builder.build(topology, config)
    try:
        snapshot = store.load()
    except state_errors.CheckpointError as err:
        return LoadedState(None, StateProblem(err.reason, err.message), fresh=False)
    state_dir = store.path.parent
    if snapshot is None:
        lost = identity is not None and state_identity.started_empty(state_dir)
        if lost and record:
            log.warning(
                "state file missing in a directory that held numaguard state: starting empty; pods on this node "
                "may still hold CPUs and memory the enforcer no longer knows (drain the node)",
                extra={"state_file": str(store.path)},
            )
        if identity is not None and record:
            _record(state_dir, identity)
        return LoadedState(fresh_engine, None, fresh=True, started_empty_after_state=lost)
    if identity is not None:
        recorded = state_identity.read(state_dir)
        state_node = snapshot.get("node")
        mismatch = state_identity.problem(
            current=identity,
            recorded=recorded,
            state_node=state_node if isinstance(state_node, str) else None,
            state_dir=state_dir,
        )
        if mismatch is not None:
            return LoadedState(None, StateProblem(mismatch.reason, mismatch.message), fresh=False)
        if recorded is None and record:
            _record(state_dir, identity)  # state written before identities were recorded: adopt it
    try:
        engine = builder.restore(topology, config, snapshot)
    except ConfigError as err:
        message = f"{store.path}: {err.message}"
        return LoadedState(None, StateProblem(STATE_MISMATCH, message), fresh=False)
    except (EnforcerError, KeyError, TypeError, ValueError) as err:
        message = f"{store.path}: the saved state does not decode: {type(err).__name__}: {err}"
        return LoadedState(None, StateProblem(STATE_INVALID, message), fresh=False)
    return LoadedState(engine, None, fresh=False, snapshot=snapshot)


def _record(state_dir: Path, identity: state_identity.Identity) -> None:
    try:
        state_identity.write(state_dir, identity)
    except OSError as err:  # the state write that follows reports an unwritable directory with its own status
        log.warning("cannot record the state identity", extra={"state_dir": str(state_dir), "error": str(err)})


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
