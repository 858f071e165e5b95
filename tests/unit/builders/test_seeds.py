"""The inline-seed restore plan (orchestrator.builders.seeds): every rule of the reference, without n8n."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.builders import seeds
from orchestrator.cases import EvalCase
from orchestrator.cases.model import Attachment
from orchestrator.cases.seed import InlineSeed, SeedFolder, seed_slot
from orchestrator.deletion import in_delete_order
from orchestrator.ledger import Entry, Ledger

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
CASES = Path(__file__).resolve().parents[3] / "cases"


def _seed(**body) -> InlineSeed:
    return InlineSeed.model_validate({"mode": "inline", **body})


def _ids():
    counter = iter(range(1000))
    return lambda: f"NEWID{next(counter):011d}"


def _envelope(i: int, stamp: str, text: str = "hi", role: str = "user") -> dict:
    return {"id": f"msg-{i:04d}", "role": role, "type": "llm", "createdAt": stamp,
            "content": [{"type": "text", "text": text}]}


WF = {"id": "invVat7Qk2Lm9P0x", "name": "Invoice VAT", "nodes": [
    {"id": "n1", "name": "Slack", "type": "n8n-nodes-base.slack", "typeVersion": 2, "position": [0, 0],
     "parameters": {"workflowId": "invVat7Qk2Lm9P0x"}, "credentials": {"slackApi": {"id": "cred1234", "name": "Slack"}}}],
    "connections": {}}


# ------------------------------------------------------------------------------------------------
# messages


def test_ascending_past_stamps_are_kept_as_authored() -> None:
    seed = _seed(messages=[_envelope(1, "2025-03-02T10:00:00Z"), _envelope(2, "2025-03-02T10:01:00Z", role="assistant")])
    plan = seeds.plan_restore(seed, nonce="0a1b2c3d", now=NOW, new_id=_ids())
    assert [m["createdAt"] for m in plan.messages] == ["2025-03-02T10:00:00Z", "2025-03-02T10:01:00Z"]


def test_stamps_that_do_not_ascend_restamp_the_whole_sequence_onto_the_slots() -> None:
    stamps = [datetime(2025, 3, 2, 10, 1, tzinfo=UTC), datetime(2025, 3, 2, 10, 0, tzinfo=UTC),
              datetime(2025, 3, 2, 10, 5, tzinfo=UTC)]
    assert seeds.restamped(stamps, NOW) == [seed_slot(0), seed_slot(1), seed_slot(2)]


def test_a_future_stamp_restamps_every_message_not_only_the_offender() -> None:
    stamps = [datetime(2025, 1, 1, tzinfo=UTC), NOW + timedelta(days=1)]
    assert seeds.restamped(stamps, NOW) == [seed_slot(0), seed_slot(1)]
    # the plan re-checks against its own clock (a case loaded long ago may now hold a future stamp)
    seed = _seed(messages=[_envelope(1, "2025-03-02T10:00:00Z"), _envelope(2, "2025-03-02T10:01:00Z")])
    plan = seeds.plan_restore(seed, nonce="0a1b2c3d", now=datetime(2025, 3, 2, 10, 0, 30, tzinfo=UTC), new_id=_ids())
    assert [m["createdAt"] for m in plan.messages] == ["2024-01-01T00:00:00Z", "2024-01-01T00:01:00Z"]


def test_shorthand_becomes_full_envelopes_on_fixed_ascending_past_slots() -> None:
    seed = _seed(messages=[{"role": "user", "text": ["We agreed:", "digests at 9am."]},
                           {"role": "assistant", "text": "Noted."}])
    plan = seeds.plan_restore(seed, nonce="0a1b2c3d", now=NOW, new_id=_ids())
    first, second = plan.messages
    assert first["role"] == "user" and first["type"] == "llm"
    assert first["content"] == [{"type": "text", "text": "We agreed:\ndigests at 9am."}]
    assert (first["createdAt"], second["createdAt"]) == ("2024-01-01T00:00:00Z", "2024-01-01T00:01:00Z")
    # ids are fresh per restore (n8n upserts messages on a global id) and stable within one
    assert re.fullmatch(r"[0-9a-f-]{36}", first["id"])
    again = seeds.plan_restore(seed, nonce="0a1b2c3d", now=NOW, new_id=_ids())
    other = seeds.plan_restore(seed, nonce="ffffffff", now=NOW, new_id=_ids())
    assert again.messages[0]["id"] == first["id"] != other.messages[0]["id"]


def test_a_custom_message_is_stored_as_authored_with_its_payload_as_data() -> None:
    custom = {"id": "vatmsg-0003", "type": "custom", "createdAt": "2025-03-02T10:01:31Z",
              "content": {"kind": "workflow-saved", "note": "x"}}
    plan = seeds.plan_restore(_seed(messages=[_envelope(1, "2025-03-02T10:00:00Z"), custom]), nonce="0a1b2c3d",
                              now=NOW, new_id=_ids())
    stored = plan.messages[1]
    assert stored["type"] == "custom" and "role" not in stored and "content" not in stored
    assert stored["data"] == {"kind": "workflow-saved", "note": "x"}
    assert stored["id"] != "vatmsg-0003" and stored["createdAt"] == "2025-03-02T10:01:31Z"


# ------------------------------------------------------------------------------------------------
# workflows, remap


def test_workflows_get_fresh_ids_a_seed_suffixed_name_and_no_credentials() -> None:
    plan = seeds.plan_restore(_seed(workflows=[WF]), nonce="0a1b2c3d", now=NOW, new_id=_ids())
    (wf,) = plan.workflows
    assert wf["id"] == "NEWID00000000000" != WF["id"]
    assert wf["name"] == "Invoice VAT [seed 0a1b2c3d]"
    assert "credentials" not in wf["nodes"][0]
    assert wf["nodes"][0]["parameters"]["workflowId"] == wf["id"]  # self-references remapped too
    assert plan.workflow_ids == {WF["id"]: wf["id"]}


def test_the_suffix_is_per_restore_and_fits_n8ns_name_limit() -> None:
    a = seeds.plan_restore(_seed(workflows=[WF]), now=NOW)
    b = seeds.plan_restore(_seed(workflows=[WF]), now=NOW)
    assert a.workflows[0]["name"] != b.workflows[0]["name"] and a.workflows[0]["id"] != b.workflows[0]["id"]
    assert re.fullmatch(r"Invoice VAT \[seed [0-9a-f]{8}\]", a.workflows[0]["name"])
    long = seeds.seed_name("x" * 300, "0a1b2c3d")
    assert len(long) == 255 and seeds.base_name(long) == "x" * (255 - len(" [seed 0a1b2c3d]"))


def test_old_ids_are_remapped_through_the_whole_history_including_build_workflow_output() -> None:
    """n8n ``harness/conversation-seed.ts`` ``remapSeedArtifactIds``: every id follows through the
    history; a workflow's name follows in prose and ``workflowName`` fields only (a recorded tool
    payload such as a call's ``name`` argument stays as recorded)."""
    case = EvalCase.model_validate(json.loads((CASES / "seeded-repair-vat-code-attach.json").read_text()))
    assert case.inline_seed is not None
    plan = seeds.plan_restore(case.inline_seed, nonce="0a1b2c3d", now=NOW, new_id=_ids())
    new = plan.workflow_ids["invVat7Qk2Lm9P0x"]
    history = json.dumps(plan.messages)
    assert "invVat7Qk2Lm9P0x" not in history
    call = next(b for b in plan.messages[1]["content"] if b.get("type") == "tool-call")
    assert call["output"]["workflowId"] == new
    assert call["args"]["name"] == "Invoice VAT"  # a recorded tool payload is left as recorded
    assert plan.messages[2]["data"]["workflowId"] == new  # the custom message too
    assert "I built 'Invoice VAT [seed 0a1b2c3d]'" in plan.messages[1]["content"][0]["text"]  # prose follows


def test_attachments_carry_the_remapped_ids_as_the_editor_sends_them() -> None:
    agent = {"id": "AgHelpdeskTriage01", "config": {"name": "Helpdesk Triage", "model": "anthropic/claude-sonnet-4-5",
                                                    "instructions": "triage"}}
    plan = seeds.plan_restore(_seed(workflows=[WF], agents=[agent]), nonce="0a1b2c3d", now=NOW, new_id=_ids())
    items, context = plan.attachment(Attachment(workflow=WF["id"]), "proj12345")
    assert items == [{"type": "workflow", "id": plan.workflow_ids[WF["id"]], "name": "Invoice VAT [seed 0a1b2c3d]"}]
    assert context is None
    items, context = plan.attachment(Attachment(workflow=WF["id"], source="setup-panel-execute"), "proj12345")
    assert context == {"source": "setup-panel-execute", "workflowId": plan.workflow_ids[WF["id"]]}
    items, context = plan.attachment(Attachment(agent="AgHelpdeskTriage01"), "proj12345")
    new_agent = plan.agent_ids["AgHelpdeskTriage01"]
    assert items == [{"type": "agent", "id": new_agent, "projectId": "proj12345", "name": "Helpdesk Triage"}]
    assert plan.agents[0]["id"] == new_agent and new_agent != "AgHelpdeskTriage01"


def test_an_agents_workflow_tool_follows_the_renamed_workflow() -> None:
    agent = {"id": "AgToolUser000001", "config": {"name": "A", "model": "anthropic/claude-sonnet-4-5", "instructions": "i",
                                                  "tools": [{"type": "workflow", "workflow": "Invoice VAT"}]}}
    plan = seeds.plan_restore(_seed(workflows=[WF], agents=[agent]), nonce="0a1b2c3d", now=NOW, new_id=_ids())
    assert plan.agents[0]["config"]["tools"][0]["workflow"] == "Invoice VAT [seed 0a1b2c3d]"


# ------------------------------------------------------------------------------------------------
# data tables, folders, projects, prior runs


def test_data_tables_are_schema_only_and_row_values_are_redacted_from_history() -> None:
    table = {"id": "tblCustomers01", "name": "Customers", "columns": [{"name": "email", "type": "string"}],
             "rows": [{"email": "ada@example.com"}, {"email": "bob@example.com"}]}
    msg = _envelope(1, "2025-01-01T00:00:00Z", text="Rows: ada@example.com and bob@example.com in tblCustomers01")
    plan = seeds.plan_restore(_seed(dataTables=[table], messages=[msg]), nonce="0a1b2c3d", now=NOW, new_id=_ids())
    assert plan.data_tables == [{"id": "tblCustomers01", "name": "Customers", "columns": [{"name": "email", "type": "string"}]}]
    text = plan.messages[0]["content"][0]["text"]
    assert "example.com" not in text and text.count(seeds.REDACTED) == 2
    assert plan.data_tables_body("t")["messages"] == [] and "dataTables" not in plan.body("t")
    plan.with_data_tables({"tblCustomers01": "srvTable0000001"})  # n8n generated the real id
    assert "srvTable0000001" in json.dumps(plan.messages) and "tblCustomers01" not in json.dumps(plan.messages)


def test_folders_go_parents_first_with_verbatim_names_and_seed_ids() -> None:
    child = SeedFolder(id="odwArchive001", name="Archive", parent_folder_id="odwFolder0001")
    root = SeedFolder(id="odwFolder0001", name="ODW")
    grandchild = SeedFolder(id="odwOld0000001", name="Old", parent_folder_id="odwArchive001")
    assert [f.id for f in seeds.folders_parents_first([grandchild, child, root])] == [
        "odwFolder0001", "odwArchive001", "odwOld0000001"]
    wf = {**WF, "parentFolderId": "odwArchive001"}
    plan = seeds.plan_restore(_seed(folders=[child.model_dump(by_alias=True), root.model_dump(by_alias=True)],
                                    workflows=[wf]), nonce="0a1b2c3d", now=NOW, new_id=_ids())
    assert plan.folders == [{"id": "odwFolder0001", "name": "ODW"},
                            {"id": "odwArchive001", "name": "Archive", "parentFolderId": "odwFolder0001"}]
    assert plan.workflows[0]["parentFolderId"] == "odwArchive001"  # n8n maps seed folder ids itself
    assert plan.root_folder_names == ["ODW"]


def test_seeded_projects_are_refused_on_this_n8n() -> None:
    with pytest.raises(seeds.SeedUnsupported, match="projects"):
        seeds.plan_restore(_seed(projects=[{"id": "projOps0001", "name": "Ops"}]), now=NOW)


def test_prior_runs_target_the_restored_workflow() -> None:
    plan = seeds.plan_restore(_seed(workflows=[WF], priorRuns=[{"workflow": WF["id"], "hints": "HTTP 500"}]),
                              now=NOW, new_id=_ids())
    assert plan.prior_runs == [(plan.workflow_ids[WF["id"]], "HTTP 500")]


# ------------------------------------------------------------------------------------------------
# eviction and cleanup order


def test_leftover_selection_takes_only_seed_suffixed_names_of_seeded_bases() -> None:
    rows = [{"id": "a", "name": "Invoice VAT [seed 0a1b2c3d]"},  # a leftover
            {"id": "b", "name": "Invoice VAT"},  # a real workflow: never touched
            {"id": "c", "name": "Invoice VAT [seed 0A1B2C3D]"},  # not our suffix
            {"id": "d", "name": "Other [seed 0a1b2c3d]"},  # another base name
            {"id": "e", "name": "Invoice VAT [seed 11111111]"},  # this run's own, still live
            {"id": "f", "name": "Invoice VAT [seed 0a1b2c3d] copy"}]
    assert seeds.leftover_workflows(rows, ["Invoice VAT"], keep={"e"}) == ["a"]


def test_leftover_folders_are_same_named_root_folders_only() -> None:
    rows = [{"id": "1", "name": "ODW", "parentFolderId": None}, {"id": "2", "name": "ODW", "parentFolderId": "9"},
            {"id": "3", "name": "ODW2", "parentFolderId": None}, {"id": "4", "name": "ODW"}, {"id": "5", "name": "ODW"}]
    assert seeds.leftover_root_folders(rows, ["ODW"], keep={"5"}) == ["1", "4"]


def test_cleanup_order_deletes_workflows_before_folders() -> None:
    entries = [Entry("folder", "f1"), Entry("data_table", "d1"), Entry("workflow", "w1"), Entry("agent", "a1"),
               Entry("thread", "t1")]
    assert [e.kind for e in in_delete_order(entries)] == ["thread", "agent", "workflow", "data_table", "folder"]


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def delete_workflow(self, i: str) -> bool:
        self.calls.append(f"workflow {i}")
        return True

    async def delete_folder(self, i: str) -> bool:
        self.calls.append(f"folder {i}")
        return True

    async def delete_agent(self, i: str) -> bool:
        self.calls.append(f"agent {i}")
        return True

    async def delete_data_table(self, i: str) -> bool:
        self.calls.append(f"data_table {i}")
        return True


async def test_cleanup_deletes_this_users_seed_artifacts_in_order_and_closes_the_ledger(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    ledger = Ledger(tmp_path)
    ledger.created("folder", "f1", lane="L", user="u1")
    ledger.created("workflow", "w1", lane="L", user="u1", source="seed")
    ledger.created("workflow", "built", lane="L", user="u1", source="instance-ai")  # the user pool's
    ledger.created("data_table", "d1", lane="L", user="u1")
    ledger.created("folder", "f2", lane="L", user="u2")  # another build's
    recorder = _Recorder()
    monkeypatch.setattr(seeds, "SeedDeleter", lambda session, project: recorder)
    failures = await seeds.cleanup(ledger, None, "p1", lane="L", user="u1")
    assert failures == []
    assert recorder.calls == ["workflow w1", "data_table d1", "folder f1"]
    assert {e.id for e in ledger.open_entries()} == {"built", "f2"}


def test_seeded_turns_join_the_transcript_as_prior_context() -> None:
    from orchestrator.transcript import Transcript, render_for_judge

    plan = seeds.plan_restore(_seed(messages=[{"role": "user", "text": "digests at 9am"},
                                              {"role": "assistant", "text": "Noted."}]), now=NOW)
    transcript = Transcript(None, builder="instance-ai")
    seeds.seeded_transcript(transcript, plan)
    transcript.user("go", 0)
    text = render_for_judge(transcript.entries)
    assert text.splitlines() == ["[seeded prior context, user] digests at 9am",
                                 "[seeded prior context, assistant] Noted.", "[user, turn 0] go"]


# ------------------------------------------------------------------------------------------------
# the scripted agent's seeded behaviours (orchestrator.scripted.instance_ai)


def _agent_request(text: str, calls: list[tuple[str, dict, dict]] = ()) -> dict:  # type: ignore[assignment]
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": text}]}]
    for n, (tool, args, result) in enumerate(calls):
        messages.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"c{n}", "name": tool, "input": args}]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"c{n}",
                                                      "content": json.dumps(result)}]})
    tools = [{"name": n} for n in ("build-workflow", "workflows", "executions", "workspace_write_file")]
    return {"messages": messages, "tools": tools}


def _artifacts(items: list[dict]) -> str:
    return "<thread-artifacts>\n" + json.dumps(items) + "\n\nThe user opened this conversation from the editor\n</thread-artifacts>"


def _first_tool(action) -> tuple[str, dict]:
    block = next(b for b in action.blocks if hasattr(b, "name"))
    return block.name, block.input


def test_the_scripted_agent_lists_a_named_folder_one_level_deep() -> None:
    from orchestrator.scripted import instance_ai as ia

    script = ia.instance_ai_agent(load_skill=False)
    text = "Which workflows are in my Quarterly Ops folder? Only the ones directly inside it."
    assert _first_tool(script(_agent_request(text))) == (
        "workflows", {"action": "list", "folderPath": "Quarterly Ops", "recursive": False})
    done = script(_agent_request(text, [("workflows", {"action": "list", "folderPath": "Quarterly Ops"},
                                         {"workflows": [{"id": "w1", "name": "Vendor Invoice Intake [seed 0a1b2c3d]"}]})]))
    assert "Vendor Invoice Intake [seed 0a1b2c3d]" in done.blocks[0].text


def test_the_scripted_agent_runs_an_attached_workflow_and_edits_one_in_place() -> None:
    from orchestrator.scripted import instance_ai as ia

    script = ia.instance_ai_agent(load_skill=False)
    attached = _artifacts([{"type": "workflow", "id": "NEWID00000000001", "name": "Quotes [seed 0a1b2c3d]"}])
    run = script(_agent_request(attached + "\nRun a test execution of this workflow and tell me how it went."))
    assert _first_tool(run) == ("executions", {"action": "run", "workflowId": "NEWID00000000001"})
    fix = "\nThis fails every time I run it. Please fix it."
    write = script(_agent_request(attached + fix))
    assert _first_tool(write)[0] == "workspace_write_file"
    build = script(_agent_request(attached + fix, [("workspace_write_file", _first_tool(write)[1], {"success": True})]))
    name, args = _first_tool(build)
    assert name == "build-workflow" and args["workflowId"] == "NEWID00000000001" and args["name"] == "Quotes [seed 0a1b2c3d]"
    silent = script(_agent_request(attached))
    assert "What would you like me to change" in silent.blocks[0].text


def test_cleanup_addresses_folders_tables_and_agents_through_their_project() -> None:
    session = object()
    folder = seeds.deleter_for(session, "folder", {"project": "p1"})
    assert isinstance(folder, seeds.SeedDeleter) and folder.project_id == "p1"
    assert isinstance(seeds.deleter_for(session, "agent", {"project": "p2"}), seeds.SeedDeleter)
    assert seeds.deleter_for(session, "workflow", {"project": "p1"}) is session
    assert seeds.deleter_for(session, "folder", {}) is session


def test_a_build_request_naming_a_folder_is_still_built() -> None:
    from orchestrator.scripted import instance_ai as ia

    script = ia.instance_ai_agent(load_skill=False)
    action = script(_agent_request("Build a workflow that uploads the daily report to the Reports folder."))
    assert _first_tool(action)[0] == "workspace_write_file"


def test_workflow_names_in_seeded_prose_follow_the_seed_names_longest_first() -> None:
    """n8n ``harness/conversation-seed.ts`` ``remapSeedArtifactIds`` / ``renameMentions``: one pass
    over each ``text`` block, longest original name first (so "Order" never eats "Order Sync"), and
    every ``workflowName`` field; node contents and other payloads untouched; an agent's workflow
    tool target renamed by exact lookup; two seed workflows of one name are refused."""
    order = {"id": "wfOrder00001", "name": "Order", "nodes": [{"name": "Order", "type": "n8n-nodes-base.set",
                                                                 "parameters": {"note": "Order Sync"}}], "connections": {}}
    sync = {"id": "wfOrderSync01", "name": "Order Sync", "nodes": [], "connections": {}}
    messages = [
        {"id": "m1", "type": "llm", "createdAt": "2026-11-01T09:59:00Z", "role": "user",
         "content": [{"type": "text", "text": "Order Sync broke; Order is fine."}]},
        {"id": "m2", "type": "llm", "createdAt": "2026-11-01T10:00:00Z", "role": "assistant", "content": [
            {"type": "text", "text": "I looked at Order Sync and at Order."},
            {"type": "tool-call", "toolCallId": "c1", "toolName": "workflows", "input": {"query": "Order"},
             "output": {"workflowName": "Order Sync", "name": "Order"}}]},
    ]
    agent = {"id": "AgOrderHelper01", "config": {"name": "Helper", "model": "anthropic/claude-sonnet-4-5",
                                                 "instructions": "Use the Order tool.",
                                                 "tools": [{"type": "workflow", "workflow": "Order"}]}}
    plan = seeds.plan_restore(_seed(workflows=[order, sync], messages=messages, agents=[agent]), nonce="0a1b2c3d",
                              now=NOW, new_id=_ids())
    o, s_ = "Order [seed 0a1b2c3d]", "Order Sync [seed 0a1b2c3d]"
    assert seeds.message_text(plan.messages[0]) == f"{s_} broke; {o} is fine."
    text, call = plan.messages[1]["content"]
    assert text["text"] == f"I looked at {s_} and at {o}."
    assert call["input"] == {"query": "Order"} and call["output"] == {"workflowName": s_, "name": "Order"}
    assert plan.workflows[0]["nodes"][0]["name"] == "Order" and plan.workflows[0]["nodes"][0]["parameters"]["note"] == "Order Sync"
    assert plan.agents[0]["config"]["tools"] == [{"type": "workflow", "workflow": o}]
    assert plan.agents[0]["config"]["instructions"] == "Use the Order tool."  # agent prose is not renamed
    twin = {**sync, "id": "wfOrderTwin01", "name": "Order Sync"}
    with pytest.raises(seeds.SeedUnsupported, match="two workflows named"):
        seeds.plan_restore(_seed(workflows=[sync, twin]), nonce="0a1b2c3d", now=NOW, new_id=_ids())
