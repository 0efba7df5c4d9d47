#!/usr/bin/env bash
# The main job on an embedded default: see README.md.
set -euo pipefail
cd "$(dirname "$0")"
scripts/ensure-venv.sh
exec .venv/bin/numaguard demo "$@"
