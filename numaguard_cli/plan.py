"""``numaguard plan SCENARIO``: the what-if simulator (contracts/plan.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

HELP = "run the node allocation engine over a scenario file and print each step's decision"

DEFAULT_SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", nargs="?", help="scenario file (YAML or JSON); default: the bundled seed scenarios")
    parser.add_argument(
        "-o", "--output", choices=("json", "table"), default=None, help="json (default for a file) or table"
    )


def load_document(path: Path) -> Any:
    text = path.read_text()
    if path.suffix == ".json":
        return json.loads(text)
    return yaml.safe_load(text)


def run(args: argparse.Namespace) -> int:
    from enforcer.engine import scenario
    from numaguard_cli import plan_table

    paths = [Path(args.scenario)] if args.scenario else sorted(DEFAULT_SCENARIOS.glob("*.yaml"))
    output = args.output or ("json" if args.scenario else "table")
    for path in paths:
        try:
            doc = load_document(path)
            topology_doc = None
            node = doc.get("node") if isinstance(doc, dict) else None
            if isinstance(node, dict) and node.get("topologyFile"):
                topo_path = (path.parent / str(node["topologyFile"])).resolve()
                try:
                    topology_doc = load_document(topo_path)
                except FileNotFoundError:
                    raise scenario.ScenarioError(f"node.topologyFile: {topo_path} does not exist") from None
            result = scenario.run(doc, topology_doc=topology_doc)
        except (OSError, ValueError, yaml.YAMLError) as err:
            print(f"numaguard plan: {path}: {err}", file=sys.stderr)
            return 2
        except scenario.ScenarioError as err:
            print(f"numaguard plan: {path}: {err.message}", file=sys.stderr)
            return 2
        try:
            if output == "table":
                if len(paths) > 1:
                    print(f"== {path.name}")
                print(plan_table.render(result))
            else:
                json.dump(result, sys.stdout, indent=2 if sys.stdout.isatty() else None)
                sys.stdout.write("\n")
            sys.stdout.flush()
        except BrokenPipeError:  # `numaguard plan ... | head`: the reader left, which is not an error
            sys.stderr.close()
            return 0
    return 0
