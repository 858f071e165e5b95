"""``allowUserExecution``: the simulated user runs the saved workflow themselves, for real.

When the user proxy's decision carries a workflow to run, the harness runs it through n8n's normal
execution route — no mocks — and waits for the execution to end *before* the proxy's message ("I
ran it") goes out, so the message is true by the time the agent reads it and looks at the
executions list (the reference's ``applyUserExecution``, ``harness/chat-loop.ts``). Its rules:

- only a workflow this conversation saved (a successful ``build-workflow``) may be run;
- the workflow must carry no pinned data and no node credentials, and start from a Manual or a
  Schedule trigger (the one it is run from);
- the run is bounded by what is left of the conversation budget; an unfinished one is stopped.

Any broken rule ends the build with that error (a failed build, as in the reference).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import BuildError
from orchestrator.n8n.errors import N8nError
from orchestrator.n8n.rest import N8nSession

USER_RUN_TRIGGERS = ("n8n-nodes-base.manualTrigger", "n8n-nodes-base.scheduleTrigger")
TERMINAL_STATUSES = frozenset({"success", "error", "crashed", "canceled", "cancelled"})
POLL_S = 0.5


class UserRunRefused(BuildError):
    """The user run broke one of the reference's rules (the message names which)."""


@dataclass(frozen=True)
class UserRun:
    workflow_id: str
    execution_id: str
    status: str


def run_trigger(workflow: dict[str, Any]) -> str:
    """The trigger a user run starts from, after the reference's checks (:class:`UserRunRefused`)."""
    if workflow.get("pinData"):
        raise UserRunRefused("User-run evals require a workflow without pinned data")
    nodes = [n for n in workflow.get("nodes") or [] if isinstance(n, dict)]
    if any(n.get("credentials") for n in nodes):
        raise UserRunRefused("User-run evals require a workflow without credentials")
    trigger = next((n for n in nodes if n.get("type") in USER_RUN_TRIGGERS), None)
    if trigger is None:
        raise UserRunRefused("User-run evals require a manual or schedule trigger")
    return str(trigger.get("name"))


async def run_as_user(session: N8nSession, workflow_id: str, saved: list[str], budget_s: float) -> UserRun:
    """Run ``workflow_id`` (one of ``saved``) as a user would and wait for its end (``budget_s``)."""
    if workflow_id not in saved:
        raise UserRunRefused(f"User-run workflow {workflow_id} was not saved in this conversation")
    if budget_s <= 0:
        raise UserRunRefused("Case timed out before the user execution completed")
    end = time.monotonic() + budget_s
    workflow = await session.get(f"/rest/workflows/{workflow_id}")
    trigger = run_trigger(workflow if isinstance(workflow, dict) else {})
    started = await session._send("POST", f"/rest/workflows/{workflow_id}/run",
                                  {"triggerToStartFrom": {"name": trigger}})
    data = started.get("data", started) if isinstance(started, dict) else {}
    execution_id = str((data or {}).get("executionId") or "")
    if not execution_id:
        raise UserRunRefused(f"the lane started no execution of {workflow_id}: {started!r}"[:300])
    while True:
        execution = await session.get(f"/rest/executions/{execution_id}")
        status = str((execution or {}).get("status") or "") if isinstance(execution, dict) else ""
        if status in TERMINAL_STATUSES:
            return UserRun(workflow_id, execution_id, status)
        if time.monotonic() >= end:
            try:
                await session._send("POST", f"/rest/executions/{execution_id}/stop", {})
            except N8nError:
                pass  # the run outlived the budget either way; the lane's own timeout ends it
            raise UserRunRefused("Case timed out before the user execution completed")
        await asyncio.sleep(min(POLL_S, max(0.0, end - time.monotonic())))
