#!/usr/bin/env bash
# The main job on the embedded default: set up, then `orchestrator run` on 2 local process lanes.
# Without ANTHROPIC_API_KEY the run uses the embedded scripted model (offline; it exercises the
# whole pipeline but measures no model). Extra arguments go to `orchestrator run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/orchestrator run --backend process --lanes 2 --tier smoke "$@"
