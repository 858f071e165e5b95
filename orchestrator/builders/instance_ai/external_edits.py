"""External edits: the harness renames the saved workflow behind the agent's back between turns.

As n8n's ``harness/chat-loop.ts`` (d2e36f3e; test ``__tests__/chat-loop-external-rename.test.ts``)
does when the user proxy's follow-up carries ``renameWorkflowTo`` (a stage direction asked for it):
after the proxy decided to send the follow-up and before it goes out — never at the end, so the
agent always has a turn to react — the last workflow the conversation saved (the last successful
``build-workflow`` result) is read and renamed (``PATCH /rest/workflows/:id {name}``; the save moves
its checksum, so the agent's next save of a stale copy conflicts). Nothing saved yet, or already so
named: skipped, with the reason. A failure is recorded, never raised. Each edit is a transcript
entry (``external_edit``: turn, workflow, from, to, applied, reason), which the conversation
metrics list and :mod:`orchestrator.verify.external_edits` checks at the end of the build.
"""

from __future__ import annotations

from typing import Any

from orchestrator.n8n.errors import N8nError
from orchestrator.n8n.rest import N8nSession
from orchestrator.redact import redact
from orchestrator.transcript import Transcript

BUILD_TOOL = "build-workflow"
NOTHING_SAVED = "this run has saved no workflow yet, so there is nothing to conflict"


def last_saved_workflow(entries: list[dict[str, Any]]) -> str | None:
    """The last workflow the conversation saved (a successful ``build-workflow`` result)."""
    for e in reversed(entries):
        result = e.get("result")
        if e.get("kind") == "tool_result" and e.get("tool") == BUILD_TOOL and isinstance(result, dict) \
                and result.get("success") is True and isinstance(workflow_id := result.get("workflowId"), str):
            return workflow_id
    return None


async def rename_behind_the_agents_back(owner: N8nSession, transcript: Transcript, to: str, after_turn: int) -> dict[str, Any]:
    """Rename the last saved workflow to ``to``; record and return the edit (module doc)."""
    edit: dict[str, Any] = {"turn": after_turn, "edit": "rename", "to": to, "applied": False}
    workflow_id = last_saved_workflow(transcript.entries)
    if workflow_id is None:
        edit["reason"] = NOTHING_SAVED
    else:
        edit["workflow_id"] = workflow_id
        try:
            current = await owner.get_workflow(workflow_id)
            edit["from"] = current.get("name")
            if current.get("name") == to:
                edit["reason"] = f'it is already named "{to}"'
            else:
                await owner._send("PATCH", f"/rest/workflows/{workflow_id}", {"name": to})
                edit["applied"] = True
        except N8nError as exc:
            edit["reason"] = redact(f"the rename failed: {exc}")[:500]
    transcript.add("external_edit", **edit)
    return edit


def external_edits(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The build's external edits, in order, from its transcript."""
    return [{k: v for k, v in e.items() if k not in ("kind", "seq", "t")} for e in entries
            if e.get("kind") == "external_edit"]
