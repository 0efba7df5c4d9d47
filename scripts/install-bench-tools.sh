#!/usr/bin/env bash
# The tools `python -m bench` drives servers with, from Debian's packages: wrk (the HTTP load generator).
# Run as root (apt-get). Idempotent: does nothing when every tool is already on PATH.
set -euo pipefail
missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-bench-tools: need root for apt-get install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
