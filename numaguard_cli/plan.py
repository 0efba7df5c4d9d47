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


EXIT_INVALID = 2  # contracts/plan.md: the scenario file itself is invalid
EXIT_MISMATCH = 1  # --check: the plan differs from the scenario's expect


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenario",
        nargs="*",
        help="scenario files (YAML or JSON), each run on its own node; default: the bundled seed scenarios",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("json", "yaml", "table"),
        default=None,
        help="json (default for a file), yaml, or table (default for the bundled scenarios)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare each step with the scenario's expect: list; print the differences on stderr and exit 1 "
        "if there are any (exit 2 when a scenario has no expect:)",
    )


def load_document(path: Path) -> Any:
    text = path.read_text()
    if path.suffix == ".json":
        return json.loads(text)
    return yaml.safe_load(text)


def run(args: argparse.Namespace) -> int:
    from enforcer.engine import scenario
    from numaguard_cli import plan_check, plan_table, scenario_schema

    paths = [Path(s) for s in args.scenario or ()] or sorted(DEFAULT_SCENARIOS.glob("*.yaml"))
    output = args.output or ("json" if args.scenario else "table")
    mismatched = 0
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
            scenario_schema.check_scenario(doc)
            if args.check and not (isinstance(doc, dict) and "expect" in doc):
                raise scenario.ScenarioError("expect: required by --check (the steps to compare with)")
            result = scenario.run(doc, topology_doc=topology_doc)
        except (OSError, ValueError, yaml.YAMLError) as err:
            print(f"numaguard plan: {path}: {err}", file=sys.stderr)
            return EXIT_INVALID
        except scenario.ScenarioError as err:
            print(f"numaguard plan: {path}: {err.message}", file=sys.stderr)
            return EXIT_INVALID
        try:
            if output == "table":
                if len(paths) > 1:
                    print(f"== {path.name}")
                print(plan_table.render(result))
            elif output == "yaml":
                sys.stdout.write(("---\n" if len(paths) > 1 else "") + yaml.safe_dump(result, sort_keys=False))
            else:
                json.dump(result, sys.stdout, indent=2 if sys.stdout.isatty() else None)
                sys.stdout.write("\n")
            sys.stdout.flush()
        except BrokenPipeError:  # `numaguard plan ... | head`: the reader left, which is not an error
            sys.stderr.close()
            return 0
        if args.check:
            problems = list(plan_check.differences(doc["expect"], result["steps"]))
            for problem in problems:
                print(f"numaguard plan: {path}: {problem}", file=sys.stderr)
            if problems:
                mismatched += 1
            else:
                print(f"numaguard plan: {path}: matches expect ({len(doc['expect'])} steps)", file=sys.stderr)
    return EXIT_MISMATCH if mismatched else 0
