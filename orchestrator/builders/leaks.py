"""Build isolation leaks: the agent read a workflow its build neither created nor seeded.

Each build runs in an empty project with its credential view pinned, so the only workflows the
agent may see are the ones its build created (successful ``build-workflow`` results) and the ones
the harness seeded into it. Reading any other one means the harness failed to isolate the build:
the reference charges it to the harness (``framework_issue``, rows failed) unless the build also
timed out (a timeout stays neutral).

A *read* is a ``workflows`` or ``executions`` tool call naming a ``workflowId`` (n8n 2.41.1's
``workflows`` actions ``get``, ``get-as-code``, ``setup``, ``validate``, ``publish``,
``list-versions`` … and ``executions run``/``run-step`` all take one) whose tool result came back
without an error: a call on an id that does not exist, or that n8n refused, showed the agent nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

BUILD_TOOL = "build-workflow"
READING_TOOLS = frozenset({"workflows", "executions"})


def _failed(result: Any) -> bool:
    if isinstance(result, dict):
        return result.get("success") is False or bool(result.get("error"))
    return isinstance(result, str) and result.lower().startswith("error")


def built_workflow_ids(entries: Iterable[dict[str, Any]]) -> set[str]:
    """Workflow ids of the successful ``build-workflow`` results in a transcript."""
    out: set[str] = set()
    for entry in entries:
        result = entry.get("result")
        if entry.get("kind") == "tool_result" and entry.get("tool") == BUILD_TOOL and isinstance(result, dict):
            if result.get("success") is True and isinstance(result.get("workflowId"), str):
                out.add(result["workflowId"])
    return out


def foreign_workflow_reads(entries: Iterable[dict[str, Any]], created_ids: Iterable[str] = (),
                           seeded_ids: Iterable[str] = ()) -> list[str]:
    """Ids of workflows the agent read that are neither created (``created_ids`` plus every
    successful ``build-workflow`` result in ``entries``) nor seeded, in first-read order.

    ``entries`` are transcript entries (:mod:`orchestrator.transcript`): ``tool_call`` with
    ``call_id``/``args`` and ``tool_result``/``tool_error`` with the same ``call_id``.
    """
    entries = list(entries)
    allowed = set(created_ids) | set(seeded_ids) | built_workflow_ids(entries)
    candidates: dict[str, str] = {}  # call id → workflow id
    order: list[str] = []
    succeeded: set[str] = set()
    for entry in entries:
        kind, call_id = entry.get("kind"), str(entry.get("call_id") or "")
        if kind == "tool_call" and entry.get("tool") in READING_TOOLS:
            args = entry.get("args")
            wf = args.get("workflowId") if isinstance(args, dict) else None
            if isinstance(wf, str) and wf and wf not in allowed and call_id:
                candidates[call_id] = wf
                order.append(call_id)
        elif kind == "tool_result" and call_id in candidates and not _failed(entry.get("result")):
            succeeded.add(call_id)
        elif kind == "tool_error" and call_id in candidates:
            succeeded.discard(call_id)
    leaked: list[str] = []
    for call_id in order:
        wf = candidates[call_id]
        if call_id in succeeded and wf not in leaked:
            leaked.append(wf)
    return leaked


def leak_reason(workflow_ids: list[str]) -> str:
    """The one-line reason the unit's rows carry (and the log prints)."""
    names = ", ".join(workflow_ids)
    return (f"harness leak: the agent read workflow(s) {names} that this build neither created nor seeded "
            "(build isolation failed)")
