#!/usr/bin/env bash
# Run every check and test: lint, types, architecture contracts, then pytest.
# Usage: ./run-tests.sh [extra pytest args]      (long suites: ./run-tests.sh -m slow)
set -euo pipefail
cd "$(dirname "$0")"
scripts/ensure-venv.sh
scripts/install-test-deps.sh   # runc, busybox-static, wrk from Debian (as root, when missing)
SOURCES=(shared enforcer webhook extender servicekit numaguard_cli tests bench conftest.py)
echo "== ruff";          .venv/bin/ruff check "${SOURCES[@]}"
echo "== ruff format";   .venv/bin/ruff format --check "${SOURCES[@]}"
echo "== mypy --strict"; .venv/bin/mypy
echo "== import-linter"; .venv/bin/lint-imports
echo "== pytest";        exec .venv/bin/pytest "$@"
