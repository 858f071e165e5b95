"""External edits: the stage direction the user proxy turns into a rename, the rename behind the
agent's back, and n8n's check that it survived — each against n8n's rule (on a real lane in
``test_fidelity_units_e2e.py``)."""

from __future__ import annotations

from typing import Any

from orchestrator.builders.instance_ai.external_edits import (
    NOTHING_SAVED,
    external_edits,
    rename_behind_the_agents_back,
)
from orchestrator.builders.instance_ai.proxy_decision import ProxyDecision
from orchestrator.domain import Attribution, Verdict
from orchestrator.n8n.errors import N8nNotFound
from orchestrator.n8n.rest import N8nClient, N8nSession
from orchestrator.scripted import user_proxy as sp
from orchestrator.transcript import Transcript
from orchestrator.verify.expectations import conversation_metrics
from orchestrator.verify.external_edits import external_edit_rows, label


class _Owner(N8nSession):
    """The owner's session, answering the two calls an external edit makes from a dict of workflow
    names (its client points at the discard port: any other call fails)."""

    def __init__(self, names: dict[str, str]) -> None:
        super().__init__(N8nClient("http://127.0.0.1:9"), "", {})
        self.names = names
        self.patches: list[tuple[str, Any]] = []

    async def get_workflow(self, workflow_id: str) -> dict[str, Any]:
        if workflow_id not in self.names:
            raise N8nNotFound("GET", f"/rest/workflows/{workflow_id}", 404, "Not Found")
        return {"id": workflow_id, "name": self.names[workflow_id]}

    async def _send(self, method: str, path: str, json: Any = None, **kwargs: Any) -> Any:
        self.patches.append((path, json))
        self.names[path.rsplit("/", 1)[1]] = json["name"]
        return {}


def _saved(t: Transcript, workflow_id: str) -> None:
    t.add("tool_result", tool="build-workflow", result={"success": True, "workflowId": workflow_id})


async def test_the_last_saved_workflow_is_renamed_before_the_follow_up() -> None:
    """n8n ``harness/chat-loop.ts`` (d2e36f3e; ``__tests__/chat-loop-external-rename.test.ts``): the
    last successful ``build-workflow`` result's workflow is read, then renamed with
    ``PATCH /rest/workflows/:id {name}``; nothing saved yet, or already so named, is skipped with its
    reason; every edit is recorded (and listed in the conversation metrics, ``externalEdits``)."""
    owner = _Owner({"wf1": "First", "wf2": "Second"})
    with Transcript(None, builder="instance-ai") as t:
        t.user("build it", 0)
        skipped = await rename_behind_the_agents_back(owner, t, "Ops Name", 0)
        _saved(t, "wf1")
        _saved(t, "wf2")
        applied = await rename_behind_the_agents_back(owner, t, "Ops Name", 0)
        again = await rename_behind_the_agents_back(owner, t, "Ops Name", 1)
    assert (skipped["applied"], skipped["reason"]) == (False, NOTHING_SAVED)
    assert applied == {"turn": 0, "edit": "rename", "to": "Ops Name", "applied": True, "workflow_id": "wf2",
                       "from": "Second"}
    assert owner.patches == [("/rest/workflows/wf2", {"name": "Ops Name"})]
    assert (again["applied"], again["reason"]) == (False, 'it is already named "Ops Name"')
    assert [e["to"] for e in external_edits(t.entries)] == ["Ops Name"] * 3
    metrics = conversation_metrics(t.entries)
    assert [e["applied"] for e in metrics["externalEdits"]] == [False, True, False]
    assert metrics["externalEdits"][1]["workflowId"] == "wf2"


async def test_a_rename_survives_or_was_overwritten_or_was_never_made() -> None:
    """n8n ``harness/external-edit-checks.ts`` (bcc99b28): one verdict per edit, labelled by the name
    it set; still so named at the end → pass; renamed back → fail ("overwrote state it never read");
    an edit that never landed, or a workflow that cannot be read → ``incomplete``, the framework's."""
    owner = _Owner({"wf1": "Ops Name", "wf2": "Stale Copy"})
    edits = [{"turn": 0, "to": "Ops Name", "applied": True, "workflow_id": "wf1"},
             {"turn": 0, "to": "New Name", "applied": True, "workflow_id": "wf2"},
             {"turn": 1, "to": "Never", "applied": False, "reason": NOTHING_SAVED},
             {"turn": 1, "to": "Gone", "applied": True, "workflow_id": "wf9"}]
    rows = await external_edit_rows(owner, edits)
    assert [(r.kind, r.verdict) for r in rows] == [("external_edit", Verdict.passed), ("external_edit", Verdict.failed),
                                                   ("external_edit", Verdict.incomplete), ("external_edit", Verdict.incomplete)]
    assert rows[0].text == label("Ops Name") and rows[0].text.startswith('The external rename to "Ops Name" survived')
    assert "overwrote state it never read" in rows[1].reason and rows[1].attribution is None
    assert rows[2].attribution is Attribution.framework_issue and NOTHING_SAVED in rows[2].reason
    assert rows[3].attribution is Attribution.framework_issue


def test_a_stage_direction_renames_before_the_next_scripted_turn() -> None:
    """The proxy's ``renameWorkflowTo`` (n8n ``utils/user-proxy``: a follow-up decision, never a stop):
    our decision field ``rename_workflow_to``; the scripted proxy sets it with the turn that the
    direction renames before."""
    decision = ProxyDecision.model_validate({"action": "send", "text": "add a field", "rename_workflow_to": "X"})
    assert decision.rename_workflow_to == "X"
    state = {"situation": "reply", "conversation": [], "sent_messages": ["build it"],
             "pending_directions": [{"id": 1, "text": "Before this message goes out, a teammate renames the workflow "
                                                      "in the editor to 'Ops Status Check'."}],
             "script_turns_not_yet_sent": ["Please also set source."]}
    out = sp.decide(state)
    assert (out["action"], out["text"], out.get("rename_workflow_to")) == ("send", "Please also set source.",
                                                                           "Ops Status Check")
    assert 1 in out["directions_done"]
