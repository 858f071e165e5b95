"""How a run marks what it starts, so ``cleanup`` can find it without a ledger.

Two mechanisms, named apart on purpose:

- *environment markers* on every process of a run (process lanes, builds): ``RUN_ENV`` holds the
  run id and ``LANE_INDEX_ENV`` the lane index; the process sweep reads ``/proc/<pid>/environ``;
- *object labels* on containers, pods and their companions (docker, kubernetes).
"""

from __future__ import annotations

RUN_ENV = "N8N_EVAL_RUN_ID"
LANE_INDEX_ENV = "N8N_EVAL_LANE_INDEX"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "n8n-eval-orchestrator"
RUN_LABEL = "n8n-eval/run-id"
LANE_INDEX_LABEL = "n8n-eval/lane-index"
