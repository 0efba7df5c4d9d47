"""The JSON document a benchmark writes next to its table (``--json PATH``): figures per round, machine, command."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any


def write_json(path: Path, benchmark: str, quick: bool, results: dict[str, Any]) -> None:
    document = {
        "benchmark": benchmark,
        "command": " ".join([Path(sys.executable).name, "-m", f"bench.{benchmark}", *sys.argv[1:]]),
        "quick": quick,
        "machine": {
            "system": f"{platform.system()} {platform.machine()}",
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_average": os.getloadavg(),
        },
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
