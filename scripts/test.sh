#!/usr/bin/env bash
# The test command (README and CI). Sets everything up, then runs pytest.
#
#   bash scripts/test.sh          default tier: everything but tests marked `slow` (~10–20 min)
#   bash scripts/test.sh --all    also the slow tier: docker images and lanes, faults, soak-like runs
#   bash scripts/test.sh --all -k docker   extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
tier=(-m "not slow")
if [ "${1:-}" = "--all" ]; then
  tier=()
  shift
fi
bash scripts/setup.sh
if [ ${#tier[@]} -eq 0 ]; then
  # the slow tier needs dockerd, debootstrap and chromium
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
     && ! { command -v dockerd && command -v debootstrap && command -v chromium; } >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap chromium >/dev/null
  fi
  if command -v dockerd >/dev/null 2>&1; then
    eval "$(bash scripts/dockerd.sh start | grep '^DOCKER_HOST=')"
    export DOCKER_HOST
  fi
fi
# the gates first: lint and types (seconds; mypy is strict, see pyproject.toml), then the tests
.venv/bin/ruff check orchestrator tests bench lanes
.venv/bin/mypy orchestrator lanes/image_tag.py bench
# the tests too, from their own folder (pytest imports them as top-level modules): every body is
# checked; a parameter may stay unannotated, as pytest fixtures are (hence untyped and incomplete defs,
# and calls to them); the rest of strict holds. pyproject.toml's mypy_path lets them see orchestrator's
# own types from there.
(cd tests && ../.venv/bin/mypy --config-file ../pyproject.toml --cache-dir ../.mypy_cache \
  --allow-untyped-defs --allow-incomplete-defs --allow-untyped-calls --check-untyped-defs .)
# --durations: the slowest tests are named at the end of every run (what to look at when the suite slows).
# Two workers (TEST_WORKERS=0: none): most of the suite waits on lanes and models rather than the CPU;
# tests/conftest.py keeps a module on one worker and every docker test on one.
set +e
.venv/bin/python -m pytest "${tier[@]}" -q -p no:cacheprovider --durations=30 \
  -n "${TEST_WORKERS:-2}" --dist loadgroup "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then
  echo "no tests collected" >&2
  exit 1
fi
exit $rc
