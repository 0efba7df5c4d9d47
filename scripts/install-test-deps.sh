#!/usr/bin/env bash
# Install the real parts the tests run: runc and busybox-static (tests/hook), wrk (the webhook bench's smoke
# test in tests/bench), all from Debian.
# NUMAGUARD_TEST_PODMAN=1 also installs podman (about a minute) for the hooks.d test, which otherwise
# skips saying so; where podman installs but cannot run containers, that test skips with podman's error.
# Needs root and apt-get; elsewhere it says what is missing and the tests skip with that reason.
# Usage: scripts/install-test-deps.sh            (called by ./run-tests.sh; a no-op once installed)
set -euo pipefail
want=()
command -v runc >/dev/null 2>&1 || want+=(runc)
command -v busybox >/dev/null 2>&1 || want+=(busybox-static)
command -v wrk >/dev/null 2>&1 || want+=(wrk)
if [ "${NUMAGUARD_TEST_PODMAN:-}" = "1" ] && ! command -v podman >/dev/null 2>&1; then
  optional=(podman)
else
  optional=()
fi
if [ ${#want[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "== test deps: not root or no apt-get; missing: ${want[*]} ${optional[*]} (those tests skip)" >&2
  exit 0
fi
stamp=/var/lib/apt/periodic/numaguard-test-deps-updated
if [ ! -f "$stamp" ] || [ -n "$(find "$stamp" -mmin +1440 2>/dev/null)" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  mkdir -p "$(dirname "$stamp")" && touch "$stamp"
fi
if [ ${#want[@]} -gt 0 ]; then
  echo "== test deps: apt-get install ${want[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
fi
if [ ${#optional[@]} -gt 0 ]; then
  echo "== test deps: apt-get install ${optional[*]} (optional)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${optional[@]}" >/dev/null 2>&1 \
    || echo "== test deps: ${optional[*]} did not install; its tests skip" >&2
fi
