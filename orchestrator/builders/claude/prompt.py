"""The prompt ``claude -p`` gets for one build.

An MCP build has no user proxy: the builder gets one prompt. We send the opening turn verbatim
(as the reference harness does), then the later *user* turns with their ``[director notes]``
removed, as follow-up requirements in order (a director note is stage direction for a simulated
user, never words the user says). Assistant turns are reference for a proxy and are never sent.
A workflow the case attaches is named by its per-run id. The prompt ends by asking for the
``WORKFLOW_ID=<id>`` trailer the build stage parses.
"""

from __future__ import annotations

from orchestrator.cases import EvalCase, strip_director_notes

TRAILER_INSTRUCTION = (
    "When the workflow is saved, end your reply with one last line exactly of the form "
    "WORKFLOW_ID=<id> naming the id of the workflow you created or changed."
)


def build_prompt(case: EvalCase, *, id_map: dict[str, str] | None = None, project_id: str | None = None) -> str:
    """The prompt ``claude -p`` gets for ``case``: its opening prompt, the workflow the user has open (seed
    ids mapped to the lane's through ``id_map``) and the follow-up user turns without director notes."""
    id_map = id_map or {}
    parts = [case.opening_prompt().strip()]
    attach = case.opening_attachment
    if attach is not None and attach.kind == "workflow":
        wf = id_map.get(attach.ref, attach.ref)
        action = " and asked to run it from the setup panel" if attach.source == "setup-panel-execute" else ""
        parts.append(f"(The user has workflow {wf} open in the editor{action}.)")
    follow_ups = [strip_director_notes(t.text) for t in case.conversation[1:] if t.role == "user"]
    follow_ups = [t for t in follow_ups if t]
    if follow_ups:
        parts.append("Later in the conversation the user also says, in this order:")
        parts.extend(f"- {t}" for t in follow_ups)
    if project_id:
        parts.append(f"Create workflows in project {project_id} (pass projectId).")
    parts.append(TRAILER_INSTRUCTION)
    return "\n\n".join(p for p in parts if p)
