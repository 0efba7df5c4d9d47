"""``numaguard demo``: the local demo on an embedded default.

Runs the ``plan`` simulator over the bundled seed scenarios (the two pods of
the Pod-level Resource Managers article, the pod-scope rejections and the
in-place resize walk-through) and prints each step as a table.
"""

from __future__ import annotations

import argparse

HELP = "run the local demo on the bundled seed scenarios"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=("json", "table"), default="table")


def run(args: argparse.Namespace) -> int:
    from numaguard_cli import plan

    return plan.run(argparse.Namespace(scenario=None, output=args.output))
