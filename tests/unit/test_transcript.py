"""Build transcripts: redaction, the file, claude's stream-json, and process expectations judged
against a transcript (by the scripted judge over real HTTP)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from support.stand_ins import unused_session

from orchestrator.cases import EvalCase
from orchestrator.domain import Verdict
from orchestrator.redact import MASK, register_secret
from orchestrator.scripted.scripts import judge, verdict_list
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.transcript import (
    MAX_STRING_CHARS,
    ClaudeStreamTranscript,
    Transcript,
    gradable,
    read_transcript,
    render_for_judge,
)
from orchestrator.verify.judge import Judge, JudgeConfig
from orchestrator.verify.verifier import (
    PROCESS_NO_OUTPUT,
    PROCESS_NOT_JUDGED,
    judge_process_expectations,
)

SECRET = "sk-ant-transcript-secret-0123456789"


def test_transcript_redacts_masks_and_cuts(tmp_path: Path) -> None:
    register_secret("lane-password-Zq81x")
    path = tmp_path / "t" / "case.0.jsonl"
    with Transcript(path, builder="instance-ai", model="anthropic/claude-sonnet-4-6") as t:
        t.user("my key is lane-password-Zq81x, keep it", 0)
        t.add("tool_call", tool="credentials", call_id="c1",
              args={"name": "Slack", "data": {"accessToken": "xoxb-abcdef", "apiKey": "plain-key-123", "channel": "#ops"}})
        t.add("tool_result", tool="nodes", call_id="c2", result="x" * (MAX_STRING_CHARS + 500))
        t.add("assistant", text=f"Authorization: Bearer {SECRET}")
    raw = path.read_text()
    assert "lane-password-Zq81x" not in raw and "xoxb-abcdef" not in raw and "plain-key-123" not in raw and SECRET not in raw
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    entries = read_transcript(path)
    assert [e["kind"] for e in entries] == ["meta", "user", "tool_call", "tool_result", "assistant"]
    assert entries[0]["builder"] == "instance-ai" and [e["seq"] for e in entries] == [0, 1, 2, 3, 4]
    assert entries[2]["args"]["data"] == {"accessToken": "***", "apiKey": "***", "channel": "#ops"}
    assert entries[3]["result"].endswith("[500 more characters]") and len(entries[3]["result"]) < MAX_STRING_CHARS + 40


def test_broken_lines_are_skipped_and_a_missing_file_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"kind": "user", "text": "hi"}\nnot json\n[1]\n{"kind": "assistant", "text": "ok"}\n')
    assert [e["kind"] for e in read_transcript(path)] == ["user", "assistant"]
    assert read_transcript(tmp_path / "missing.jsonl") == [] and read_transcript(None) == []


def test_claude_stream_json_becomes_transcript_entries() -> None:
    t = Transcript(None, builder="mcp")
    sink = ClaudeStreamTranscript(t)
    sink({"type": "system", "subtype": "init", "tools": ["mcp__n8n-local__search_nodes"]})
    sink({"type": "assistant", "message": {"id": "m1", "content": [
        {"type": "text", "text": "Let me search."},
        {"type": "tool_use", "id": "tu1", "name": "mcp__n8n-local__search_nodes", "input": {"query": "slack"}}]}})
    sink({"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "tu1", "content": [{"type": "text", "text": "[\"slack\"]"}]}]}})
    sink({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "tu9", "is_error": True, "content": "boom"}]}})
    sink({"type": "result", "subtype": "success", "is_error": False, "num_turns": 3, "result": "WORKFLOW_ID=abc"})
    kinds = [(e["kind"], e.get("tool")) for e in t.entries]
    assert kinds == [("meta", None), ("assistant", None), ("tool_call", "mcp__n8n-local__search_nodes"),
                     ("tool_result", "mcp__n8n-local__search_nodes"), ("tool_error", None), ("run", None)]
    assert t.entries[3]["result"] == '["slack"]' and t.entries[-1]["status"] == "completed" and t.has_agent_output()


def test_render_for_judge_reads_like_a_conversation() -> None:
    entries: list[dict[str, Any]] = [
        {"kind": "meta"}, {"kind": "user", "text": "Post to Slack", "turn": 0},
        {"kind": "confirmation", "tool": "ask-user", "input_type": "questions", "message": None,
         "questions": [{"id": "q", "question": "Which channel?"}]},
        {"kind": "answer", "answer": {"kind": "questions"}},
        {"kind": "tool_call", "tool": "build-workflow", "args": {"filePath": "a.json"}},
        {"kind": "tool_result", "tool": "build-workflow", "result": {"success": True}},
        {"kind": "assistant", "text": "Done."}, {"kind": "run", "status": "completed"},
    ]
    text = render_for_judge(entries)
    assert text.splitlines()[0] == "[user, turn 0] Post to Slack"
    assert "[agent asks the user (ask-user)] questions questions:" in text and "Which channel?" in text
    assert "[tool call build-workflow]" in text and text.endswith("[run finished: completed]")
    assert gradable(entries) and not gradable(entries[:2])


CASE = EvalCase.model_validate({
    "conversation": [{"role": "user", "text": "Post the weather to Slack every morning"}],
    "complexity": "simple", "tags": ["t"],
    "processExpectations": ["The agent asked which Slack channel to use.", "The agent built before asking anything else."],
})


def _judge(server: ScriptedModelServer) -> Judge:
    return Judge(JudgeConfig(api_key="sk-ant-judge-test-000000", base_url=server.base_url, effort="low", backoff_s=0, attempts=1))


async def test_process_expectations_are_judged_against_the_transcript(tmp_path: Path) -> None:
    path = tmp_path / "u.jsonl"
    with Transcript(path, builder="mcp") as t:
        t.user("Post the weather to Slack every morning", 0)
        t.add("confirmation", tool="ask-user", input_type="questions", questions=[{"id": "q", "question": "Which channel?"}])
        t.add("assistant", text="Built it for #general.")
    with ScriptedModelServer(judge(verdict_list([True, False]))) as srv:
        j = _judge(srv)
        out = await judge_process_expectations(CASE, path, j, {"nodes": []})
        await j.aclose()
        (request,) = srv.message_requests
    assert [r.verdict for r in out] == [Verdict.passed, Verdict.failed] and {r.kind for r in out} == {"process"}
    prompt = request.body["messages"][0]["content"]
    assert "Which channel?" in prompt and "Built it for #general." in prompt and "## Expectations\n0. The agent asked" in prompt


async def test_process_expectations_without_a_transcript_or_agent_output_stay_incomplete(tmp_path: Path) -> None:
    silent = tmp_path / "silent.jsonl"
    with Transcript(silent, builder="instance-ai") as t:
        t.user("hello", 0)
        t.add("error", message="Agent error: 529 overloaded")
    with ScriptedModelServer(judge()) as srv:
        j = _judge(srv)
        none = await judge_process_expectations(CASE, None, j)
        empty = await judge_process_expectations(CASE, silent, j)
        await j.aclose()
        assert srv.message_requests == []  # nothing was sent to the judge
    assert {(r.verdict, r.reason) for r in none} == {(Verdict.incomplete, PROCESS_NOT_JUDGED)}
    assert {(r.verdict, r.reason) for r in empty} == {(Verdict.incomplete, PROCESS_NO_OUTPUT)}
    assert json.dumps([r.model_dump(mode="json") for r in empty])  # results stay serialisable


async def test_a_build_only_case_without_a_workflow_is_still_graded(tmp_path: Path) -> None:
    """n8n: ``build-expectations/verifier.ts`` ``verifyBuildExpectations`` — process and outcome
    expectations in ONE call, with "(no workflow built)" when the build saved none."""
    from orchestrator.verify.verifier import verify_workflow

    case = CASE.model_copy(update={"outcome_expectations": ["A workflow posts the weather."]})
    path = tmp_path / "u.jsonl"
    with Transcript(path, builder="instance-ai") as t:
        t.user("Post the weather to Slack every morning", 0)
        t.add("assistant", text="Which Slack channel should I use?")
    with ScriptedModelServer(judge(verdict_list(False))) as srv:
        j = _judge(srv)
        v = await verify_workflow(case, None, unused_session(), j, timeout_ms=60_000, transcript_path=path)
        await j.aclose()
        prompts = [r.body["messages"][0]["content"] for r in srv.message_requests]
    assert v.workflow is None and v.structural == [] and v.scenarios == []
    assert [(e.kind, e.verdict) for e in v.expectations] == [("process", Verdict.failed), ("process", Verdict.failed),
                                                             ("outcome", Verdict.failed)]
    assert len(prompts) == 1 and "(no workflow built)" in prompts[0] and "## Conversation transcript" in prompts[0]


def test_transcript_path_defaults_into_the_run_folder(tmp_path: Path) -> None:
    from orchestrator.builders.builder import BuildRequest
    from orchestrator.transcript import transcript_path_for

    chosen = BuildRequest(CASE, 1, 0, 1000, tmp_path / "x.jsonl")
    assert transcript_path_for(chosen, tmp_path) == tmp_path / "x.jsonl"
    a = transcript_path_for(BuildRequest(CASE, 1, 0, 1000), tmp_path)
    b = transcript_path_for(BuildRequest(CASE, 1, 1, 1000), tmp_path)
    assert a.parent == tmp_path / "transcripts" and a.name.endswith(".1.0.jsonl") and a != b
    assert a == transcript_path_for(BuildRequest(CASE, 1, 0, 1000), tmp_path)


def test_final_narration_is_the_root_agents_last_turn(tmp_path: Path) -> None:
    """The Instance AI builder's narration (the communication check grades it): the root agent's
    text after the last user turn; a sub-agent's chatter and earlier turns are not part of it."""
    from orchestrator.transcript import final_narration

    path = tmp_path / "ia.jsonl"
    root, sub = "orchestrator-run_abc", "builder-xyz"
    register_secret(SECRET)
    with Transcript(path, builder="instance-ai") as t:
        t.user("Build a greeter", 0)
        t.add("assistant", text="Which names?", agent=root)
        t.user("Ana and Bruno", 1)
        t.add("assistant", text="I'll write the workflow file.", agent=root)
        t.add("assistant", text="sub-agent working notes", agent=sub)
        t.add("tool_call", tool="build-workflow", call_id="c1", args={}, agent=root)
        t.add("assistant", text=f"Built 'Greeter' (key {SECRET})", agent=root)
    narration = final_narration(read_transcript(path))
    assert narration == f"I'll write the workflow file.\n\nBuilt 'Greeter' (key {MASK})"  # redacted on write
    # no root agent id (claude's stream): every assistant text of the last turn
    assert final_narration([{"kind": "user", "text": "x"}, {"kind": "assistant", "text": "done", "agent": "claude"}]) == "done"
    assert final_narration([{"kind": "user", "text": "x"}, {"kind": "tool_call", "tool": "t"}]) is None
    assert final_narration([]) is None


def test_mcp_narration_is_claudes_result_without_the_trailer() -> None:
    from orchestrator.builders.claude.mcp import narration_of
    from orchestrator.builders.claude.runner import AttemptResult

    def attempt(text: str | None) -> AttemptResult:
        return AttemptResult(workflow_id="W1", cost_usd=0, turns=1, duration_s=1, exit_code=0, timed_out=False,
                             is_error=False, error_text=None, outage=None, raw_result_text=text)

    assert narration_of(attempt("Created a Manual Trigger → Code workflow.\nWORKFLOW_ID=W1")) == \
        "Created a Manual Trigger → Code workflow."
    assert narration_of(attempt("WORKFLOW_ID=W1")) is None
    assert narration_of(attempt(None)) is None
