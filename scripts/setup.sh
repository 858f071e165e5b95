#!/usr/bin/env bash
# Set up a fresh machine for the orchestrator: a venv with the package, then the pinned n8n,
# Node 24 and claude CLI in the cache (~/.cache/n8n-eval-orchestrator). Idempotent: a second run
# takes seconds. Needs python3 (3.11+), npm and a C/C++ toolchain (n8n's sqlite3 is compiled).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm g++ make python3-venv >/dev/null
  else
    echo "setup: npm and g++ are needed (apt-get install nodejs npm g++ make)" >&2; exit 1
  fi
fi
# the Instance AI sandbox isolates commands with bubblewrap (and prlimit from util-linux)
if ! command -v bwrap >/dev/null 2>&1 || ! command -v prlimit >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap util-linux >/dev/null
  else
    echo "setup: bubblewrap is needed for the Instance AI sandbox (apt-get install bubblewrap)" >&2
  fi
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -e ".[test]"
.venv/bin/orchestrator lanes install
