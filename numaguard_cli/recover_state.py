"""``numaguard recover-state``: inspect or repair the enforcer's state file after damage.

Stop the enforcer first.  The state is the state file (a base snapshot), its
journal ``<file>.journal`` and the backup ``<file>.bak`` (see
:mod:`enforcer.state.journal`, which does all the work; this module parses and
prints).  Modes:

* ``check``: say whether the state file with its journal, and the backup,
  verify; changes nothing.  Exit 0 when the state is valid or absent, 1 otherwise.
  With ``--config`` (the enforcer's own settings file, and ``--node-name`` as the
  DaemonSet passes it) it also runs the enforcer's start-up checks on the state
  (:func:`enforcer.service.startup.load_state`: machine topology, kubelet
  configuration, consistency, and that the state belongs to this node and
  machine), so it says "valid" exactly when the enforcer would use it.
* ``quarantine``: move the state file, its journal and its backup aside as
  ``<file>.corrupt-<UTC time>``; the enforcer then starts from an empty state.
  Drain the node first (pods keep their cgroups but the enforcer forgets what
  they hold).  Refuses a valid state unless ``--force``.
* ``from-backup``: restore ``<file>.bak`` (the base the last compaction
  replaced: every change journaled since is lost) after moving the damaged
  files aside.  Refuses a valid state unless ``--force``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from enforcer.state import checkpoint, errors, journal

HELP = "check the enforcer's state file, quarantine it, or restore it from its backup"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        default=checkpoint.DEFAULT_STATE_DIR,
        metavar="DIR",
        help=f"the enforcer's state directory (default {checkpoint.DEFAULT_STATE_DIR})",
    )
    parser.add_argument(
        "--state-file",
        default=checkpoint.DEFAULT_STATE_FILE,
        metavar="FILE",
        help=f"state file name inside --state-dir, or an absolute path (default {checkpoint.DEFAULT_STATE_FILE})",
    )
    parser.add_argument(
        "--mode",
        required=True,
        choices=["check", "quarantine", "from-backup"],
        help="check: report only; quarantine: move the file aside; from-backup: restore <file>.bak",
    )
    parser.add_argument("--force", action="store_true", help="act even when the state file is valid")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="the enforcer's settings file: check the state as the enforcer would (topology, kubelet, node identity)",
    )
    parser.add_argument("--node-name", help="this node's name, as the enforcer gets it (default: from --config)")


def run(args: argparse.Namespace) -> int:
    path = Path(args.state_dir) / args.state_file  # an absolute --state-file wins over --state-dir
    try:
        result = journal.recover(path, mode=args.mode, force=args.force)
    except errors.StateError as error:
        print(f"numaguard recover-state: {error.message}", file=sys.stderr)
        return 1
    for line in result.actions:
        print(line)
    if args.mode == "check":
        if result.status not in ("valid", "missing"):
            return 1
        if args.config is not None:
            return _check_as_the_enforcer(args, path)
        return 0
    return 0


def _check_as_the_enforcer(args: argparse.Namespace, path: Path) -> int:
    from enforcer.errors import ConfigError
    from enforcer.service import settings as settings_module
    from enforcer.service import startup

    try:
        overrides = {"node_name": args.node_name, "state_dir": path.parent, "state_file": path.name}
        settings = settings_module.load(args.config, env={}, overrides=overrides)
        topology = startup.load_topology(settings)
        loaded = startup.load_state(
            journal.JournaledStore(path),
            topology,
            settings.node_config,
            identity=startup.current_identity(settings),
            record=False,
        )
    except ConfigError as error:
        print(f"numaguard recover-state: {error.message}", file=sys.stderr)
        return 2
    if loaded.problem is not None:
        print(f"enforcer: refuses the state: {loaded.problem.reason}: {loaded.problem.message}")
        return 1
    if loaded.started_empty_after_state:
        print("enforcer: would start empty although this directory held state (drain the node first)")
    else:
        print(f"enforcer: would use the state as node {settings.node_name!r}")
    return 0
