"""Whose state is this: the node and the machine a state directory belongs to.

The state file records the node it was saved for (the engine snapshot's
``node``); next to it, :data:`IDENTITY_FILE` records that node and the machine
it was created on (the SMBIOS product UUID, else ``/etc/machine-id``) when the
directory first held state.  Two nodes of one pool have the same topology and
kubelet configuration, so those checks alone accept another node's file (a
disk image cloned, a hostPath volume copied, a node renamed): its pods would be
served and re-saved under this node's name.  :func:`problem` refuses that with
an explicit recovery path, and the enforcer then starts refusing changes, like
for any unusable state (``startup.StateProblem``).

The identity file also tells a wiped or lost state file from a new node: a
directory that held state but has no state file now means the enforcer starts
empty on a node whose pods may still hold CPUs; :func:`started_empty` says so,
and the service logs it and counts it
(``numaguard_enforcer_state_started_empty_total``).

Framework-free; the only writer of :data:`IDENTITY_FILE` (atomically, like the
state file).  Must not interpret the state itself.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

IDENTITY_FILE = "numaguard_identity.json"
STATE_FOREIGN_NODE = "StateForeignNode"
STATE_FOREIGN_MACHINE = "StateForeignMachine"
_MACHINE_ID_FILES = ("class/dmi/id/product_uuid",)  # under the sysfs root
_ETC_MACHINE_ID = Path("/etc/machine-id")


@dataclass(frozen=True, slots=True)
class Identity:
    node: str
    machine: str | None  # None: this host offers no stable machine id (then only the node is compared)

    def to_json(self) -> str:
        return json.dumps({"node": self.node, "machine": self.machine}, sort_keys=True) + "\n"


@dataclass(frozen=True, slots=True)
class Mismatch:
    reason: str  # STATE_FOREIGN_NODE or STATE_FOREIGN_MACHINE
    message: str


def machine_id(sysfs_root: Path | None) -> str | None:
    """This machine's stable id: the SMBIOS product UUID (host sysfs), else ``/etc/machine-id``, else None."""
    candidates = [(sysfs_root or Path("/sys")) / name for name in _MACHINE_ID_FILES] + [_ETC_MACHINE_ID]
    for path in candidates:
        try:
            value = path.read_text().strip().lower()
        except OSError:
            continue
        if value and set(value) != {"0", "-"}:
            return value
    return None


def read(state_dir: Path) -> Identity | None:
    """The recorded identity, or None when the directory never recorded one (or the file does not parse)."""
    try:
        document = json.loads((state_dir / IDENTITY_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or not isinstance(document.get("node"), str):
        return None
    machine = document.get("machine")
    return Identity(document["node"], machine if isinstance(machine, str) else None)


def write(state_dir: Path, identity: Identity) -> None:
    """Record ``identity`` atomically (temp file, fsync, rename)."""
    target = state_dir / IDENTITY_FILE
    temp = state_dir / f".{IDENTITY_FILE}.tmp-{os.getpid()}"
    with open(temp, "w") as out:
        out.write(identity.to_json())
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, target)


def recovery_hint(state_dir: Path) -> str:
    return (
        f"if this node's disk really carries another node's state, drain the node, then run "
        f"`numaguard recover-state --state-dir {state_dir} --mode quarantine --force` and restart the enforcer"
    )


def problem(
    *, current: Identity, recorded: Identity | None, state_node: str | None, state_dir: Path
) -> Mismatch | None:
    """Why the state in ``state_dir`` is not this node's, or None when nothing says it belongs elsewhere."""
    for owner in (state_node, recorded.node if recorded is not None else None):
        if owner and owner != current.node:
            return Mismatch(
                STATE_FOREIGN_NODE,
                f"{state_dir}: the state belongs to node {owner!r}, not to this node {current.node!r}; "
                + recovery_hint(state_dir),
            )
    if recorded is not None and recorded.machine and current.machine and recorded.machine != current.machine:
        return Mismatch(
            STATE_FOREIGN_MACHINE,
            f"{state_dir}: the state was made on machine {recorded.machine}, this is machine {current.machine} "
            f"(node {current.node!r}); " + recovery_hint(state_dir),
        )
    return None


def started_empty(state_dir: Path) -> bool:
    """Whether the directory recorded an identity, i.e. once held state (the caller found no state file)."""
    return (state_dir / IDENTITY_FILE).exists()
