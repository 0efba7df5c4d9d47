"""Entry point of the ``numaguard`` console script.

Each subcommand lives in its own module of this package exposing
``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; modules are
imported only when their subcommand runs, so ``numaguard plan`` never pays for
uvicorn and ``numaguard --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Sequence

DESCRIPTION = (
    "Pod-level resource managers and safe in-place resize for Kubernetes: the admission webhook, the per-node "
    "enforcer, and the tools to plan, inspect and repair them."
)
EPILOG = "Run 'numaguard COMMAND --help' for a command's options. Docs: README.md, docs/operations.md."

# One line per subcommand: name -> module (``HELP``, ``add_arguments``, ``run``).  Add new ones here.
SUBCOMMANDS: dict[str, str] = {
    "plan": "numaguard_cli.plan",
    "enforcer": "numaguard_cli.enforcer_cmd",
    "webhook": "numaguard_cli.webhook_cmd",
    "extender": "numaguard_cli.extender_cmd",
    "certs": "numaguard_cli.certs",
    "allocations": "numaguard_cli.allocations",
    "recover-state": "numaguard_cli.recover_state",
    "demo": "numaguard_cli.demo",
    "oci-hook": "numaguard_cli.oci_hook",
    "install-hook": "numaguard_cli.install_hook",
}


def package_version() -> str:
    """The installed distribution's version (pyproject.toml ``[project] version``)."""
    try:
        return importlib.metadata.version("numaguard")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser(selected: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="numaguard", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"numaguard {package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, module_name in SUBCOMMANDS.items():
        if selected is not None and name != selected:
            sub.add_parser(name)
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:
                raise
            continue
        child = sub.add_parser(name, help=getattr(module, "HELP", None), description=getattr(module, "HELP", None))
        module.add_arguments(child)
        child.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in args_list if a in SUBCOMMANDS), None)
    parser = build_parser(selected)
    args = parser.parse_args(args_list)
    module = getattr(args, "_module", None)
    if module is None:
        parser.print_help()
        return 2
    result: int = module.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
