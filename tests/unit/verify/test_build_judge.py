"""The expectation judge and the artifact context, rule by rule as n8n's harness has them (each
test names the n8n file and function it follows). The judge is the real ``anthropic`` client
talking to the embedded scripted model over loopback HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.cases import EvalCase
from orchestrator.domain import Verdict
from orchestrator.handoff import ArtifactRef, agent_ref, config_eval_ref
from orchestrator.n8n.mock_execution import MockExecutionResult
from orchestrator.n8n.rest import N8nClient, N8nSession, RetryPolicy
from orchestrator.results.model import ExpectationResult
from orchestrator.scripted.scripts import judge, verdict_list
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.transcript import Transcript
from orchestrator.verify.artifacts import artifact_context, render_agent, render_config_eval
from orchestrator.verify.expectations import (
    MCP_FAILED_NOT_JUDGED,
    MCP_PROCESS_SKIPPED,
    NO_AGENT_OUTPUT,
    NO_TRANSCRIPT_PROCESS,
    JudgeScope,
    conversation_metrics,
    judge_build_expectations,
)
from orchestrator.verify.judge import JUDGE_PRODUCED_NOTHING, NO_VERDICT_RETURNED, Judge, JudgeConfig
from orchestrator.verify.verifier import scenario_evidence

CASE = EvalCase.model_validate({
    "conversation": [{"role": "user", "text": "Post the weather to Slack every morning"}],
    "complexity": "simple", "tags": ["t"],
    "processExpectations": ["The agent asked which channel to use."],
    "outcomeExpectations": ["The workflow posts to Slack.", "The workflow runs every morning."],
})


def _judge(server: ScriptedModelServer) -> Judge:
    return Judge(JudgeConfig(api_key="sk-ant-judge-test-000000", base_url=server.base_url, effort="low", backoff_s=0))


def _transcript(tmp_path: Path, *, output: bool = True) -> Path:
    path = tmp_path / "u.jsonl"
    with Transcript(path, builder="instance-ai") as t:
        t.user("Post the weather to Slack every morning", 0)
        if output:
            t.add("assistant", text="Which Slack channel?")
            t.add("tool_call", tool="build-workflow", call_id="c1", args={})
            t.add("run", status="completed")
    return path


async def _judged(tmp_path: Path, *verdicts: Any, output: bool = True, succeeded: bool = True,
                  scope: JudgeScope = JudgeScope(), artifacts: str | None = None) -> tuple[list[ExpectationResult], list[str]]:
    with ScriptedModelServer(judge(*verdicts)) as srv:
        j = _judge(srv)
        rows = await judge_build_expectations(CASE, j, transcript_path=_transcript(tmp_path, output=output),
                                              workflow={"nodes": []} if succeeded else None, build_succeeded=succeeded,
                                              scope=scope, artifact_context=artifacts)
        await j.aclose()
        prompts = [r.body["messages"][0]["content"] for r in srv.message_requests]
    return rows, prompts


async def test_process_and_outcome_are_judged_in_one_call_process_first(tmp_path: Path) -> None:
    """n8n: ``build-expectations/collect.ts`` ``collectExpectations`` (process first, then outcome) and
    ``build-expectations/verifier.ts`` ``verifyBuildExpectations`` (one judge call with the workflow,
    the transcript and the conversation metrics)."""
    rows, prompts = await _judged(tmp_path, verdict_list([True, False, True]))
    assert [(r.kind, r.verdict) for r in rows] == [("process", Verdict.passed), ("outcome", Verdict.failed),
                                                   ("outcome", Verdict.passed)]
    [prompt] = prompts
    listing = prompt.split("## Expectations\n", 1)[1]
    assert listing.startswith("0. The agent asked which channel to use.\n1. The workflow posts to Slack.")
    assert "## Conversation transcript" in prompt and "Which Slack channel?" in prompt
    assert '"turnCount": 1' in prompt and "ground truth" in prompt
    assert "turn 0: build-workflow ×1" in prompt
    assert rows[0].judge_input is not None and rows[0].judge_input["kinds"] == ["process", "outcome", "outcome"]


async def test_an_omitted_verdict_is_incomplete_and_out_of_range_indices_are_ignored(tmp_path: Path) -> None:
    """n8n: ``build-expectations/assertion-judge.ts`` ``judgeExpectations`` — an expectation the
    judge leaves out is incomplete ("no verdict returned"), not a fail; indices out of range are
    dropped."""
    reply = {"verdicts": [{"index": 0, "pass": True, "reason": "ok"}, {"index": 2, "pass": False, "reason": "no"},
                          {"index": 7, "pass": True, "reason": "phantom"}]}
    rows, prompts = await _judged(tmp_path, reply)
    assert len(prompts) == 1
    assert [(r.verdict, r.reason) for r in rows] == [(Verdict.passed, "ok"), (Verdict.incomplete, NO_VERDICT_RETURNED),
                                                     (Verdict.failed, "no")]


async def test_an_unparseable_reply_is_retried_and_a_dead_judge_leaves_every_row_incomplete(tmp_path: Path) -> None:
    """n8n: ``build-expectations/assertion-judge.ts`` ``judgeExpectations`` / ``allFailVerdicts`` —
    two attempts; a reply with no usable verdict is retried; when none comes every expectation is
    incomplete ("judge produced no result"), never a fail."""
    rows, prompts = await _judged(tmp_path, "not json at all", verdict_list(True))
    assert len(prompts) == 2 and {r.verdict for r in rows} == {Verdict.passed}
    rows, prompts = await _judged(tmp_path, "still not json")
    assert len(prompts) == 2
    assert {r.verdict for r in rows} == {Verdict.incomplete}
    assert all(r.reason.startswith(f"not judged: {JUDGE_PRODUCED_NOTHING}") for r in rows)


async def test_a_failed_build_is_judged_when_the_agent_produced_output(tmp_path: Path) -> None:
    """n8n: ``build-expectations/select.ts`` ``selectAuthorExpectations`` — a failed build with
    agent output is judged (process + outcome) against "(no workflow built)"; without any agent
    output every expectation is recorded incomplete and the judge is not called."""
    rows, prompts = await _judged(tmp_path, verdict_list(False), succeeded=False)
    assert [r.verdict for r in rows] == [Verdict.failed] * 3 and "(no workflow built)" in prompts[0]
    rows, prompts = await _judged(tmp_path, output=False, succeeded=False)
    assert prompts == [] and {(r.verdict, r.reason) for r in rows} == {(Verdict.incomplete, NO_AGENT_OUTPUT)}


async def test_a_build_without_agent_output_judges_outcome_only_against_the_authored_request(tmp_path: Path) -> None:
    """n8n: ``build-expectations/select.ts`` ``selectAuthorExpectations`` — no transcript but a saved
    workflow (prebuilt/MCP path): only outcome expectations, with the authored user turns as the
    conversation; the process expectations are not judged."""
    rows, prompts = await _judged(tmp_path, verdict_list(True), output=False)
    assert [(r.kind, r.verdict, r.reason) for r in rows][0] == ("process", Verdict.incomplete, NO_TRANSCRIPT_PROCESS)
    assert [r.verdict for r in rows if r.kind == "outcome"] == [Verdict.passed, Verdict.passed]
    [prompt] = prompts
    assert "[user, turn 0] Post the weather to Slack every morning" in prompt
    assert "The agent asked which channel" not in prompt


async def test_mcp_builds_skip_process_expectations_unless_opted_in_and_then_never_score_them(tmp_path: Path) -> None:
    """n8n: ``build-expectations/select.ts`` ``selectAuthorExpectations`` and the reference README
    ("processExpectations … are skipped in prebuilt/MCP runs"). ``--judge-mcp-process`` judges them
    as an extra that stays out of every count (``incomplete``, the verdict kept in the reason)."""
    mcp = JudgeScope(process_gradable=False)
    rows, prompts = await _judged(tmp_path, verdict_list(False), scope=mcp)
    assert (rows[0].kind, rows[0].verdict, rows[0].reason) == ("process", Verdict.incomplete, MCP_PROCESS_SKIPPED)
    assert "The agent asked which channel" not in prompts[0]
    rows, prompts = await _judged(tmp_path, verdict_list(False), scope=JudgeScope(False, judge_process_anyway=True))
    assert "The agent asked which channel" in prompts[0]
    assert rows[0].verdict is Verdict.incomplete and rows[0].reason.startswith("[--judge-mcp-process extra, not scored: fail]")
    assert [r.verdict for r in rows if r.kind == "outcome"] == [Verdict.failed, Verdict.failed]


async def test_a_failed_mcp_build_leaves_every_expectation_incomplete(tmp_path: Path) -> None:
    """n8n: ``run/build-orchestrator.ts`` (``isPrebuilt`` for ``--build-via-mcp``, commit 03f3eed1)
    and ``build-expectations/select.ts`` (0666e421): an MCP build carries no transcript, so a
    failed one has no agent output and every authored expectation is recorded incomplete — not
    judged against "(no workflow built)" with claude's stream, whatever it printed; the opt-in
    extra changes nothing there."""
    for scope in (JudgeScope(process_gradable=False), JudgeScope(False, judge_process_anyway=True)):
        rows, prompts = await _judged(tmp_path, verdict_list(False), succeeded=False, scope=scope)
        assert prompts == []
        assert {(r.verdict, r.reason) for r in rows} == {(Verdict.incomplete, MCP_FAILED_NOT_JUDGED)}
        assert [r.kind for r in rows] == ["process", "outcome", "outcome"]


async def test_the_artifact_sections_join_the_workflow_block(tmp_path: Path) -> None:
    """n8n: ``__tests__/build-expectations-verifier.test.ts`` — the artifact context is appended to
    the build block beside the workflow (or its "(no workflow built)" fallback)."""
    _, prompts = await _judged(tmp_path, verdict_list(True), succeeded=False,
                               artifacts="## Agent\n\n(no agent produced)")
    head = prompts[0].split("## Conversation transcript", 1)[0]
    assert "(no workflow built)" in head and "## Agent\n\n(no agent produced)" in head


def test_conversation_metrics_are_measured_from_the_transcript(tmp_path: Path) -> None:
    """n8n: ``types.ts`` ``ConversationMetrics`` (turnCount, perTurn, confirmationAskedTotal,
    confirmationAskedByKind, reachedRunFinishCleanly), given to the judge as ground truth."""
    with Transcript(None, builder="instance-ai") as t:
        t.user("a", 0)
        t.add("confirmation", tool="ask-user", input_type="questions")
        t.add("run", status="completed")
        t.user("b", 1)
        t.add("tool_call", tool="build-workflow", call_id="x", args={})
        t.add("run", status="error")
    m = conversation_metrics(t.entries)
    assert m["turnCount"] == 2 and m["confirmationAskedTotal"] == 1 and m["confirmationAskedByKind"] == {"questions": 1}
    assert [p["toolCalls"] for p in m["perTurn"]] == [0, 1] and m["reachedRunFinishCleanly"] is False


# ------------------------------------------------------------------------------------------------ artifacts


def test_discovery_takes_the_spawned_agent_and_a_created_config_eval() -> None:
    """Reference README "Artifact types" and n8n ``outcome/event-parser.ts``: an Agent is the
    ``agent-spawned`` targetResource ``{type: agent, id}``; a config-eval is an ``eval-config``
    ``create`` whose result holds ``config``, referenced by the owning workflow id of its args."""
    assert agent_ref({"targetResource": {"type": "agent", "id": "ag1", "projectId": "p1"}}) == ArtifactRef("agent", "ag1", "p1")
    assert agent_ref({"targetResource": {"type": "workflow", "id": "wf"}}) is None
    created = {"action": "create", "workflowId": "wf9", "name": "x"}
    assert config_eval_ref("eval-config", created, {"config": {"id": "c"}}) == ArtifactRef("config-eval", "wf9")
    assert config_eval_ref("eval-config", {**created, "action": "list"}, {"configs": []}) is None
    assert config_eval_ref("eval-config", created, {"denied": True}) is None
    assert config_eval_ref("workflows", created, {"config": {}}) is None


def test_the_agent_renders_its_sanitized_config_and_every_skill() -> None:
    """n8n: ``harness/artifacts/render-agent.ts`` ``renderAgentArtifact`` and ``agent-artifact.ts``
    (credential-shaped values sanitized) — config JSON, then each skill's name, id, description,
    allowed tools, instructions and references; "(no skills authored)" without skills."""
    from orchestrator.verify.artifacts import sanitize

    text = render_agent(sanitize({"config": {"name": "Helper", "apiKey": "sk-live-abcdef0123456789"},
                                  "skills": {"s1": {"name": "Tone", "description": "how to talk", "allowedTools": ["t1"],
                                                    "instructions": "Be kind.",
                                                    "references": [{"path": "ref.md", "content": "# ref"}]}}}))
    assert '"name": "Helper"' in text and "sk-live-abcdef0123456789" not in text
    assert "Tone (`s1`)" in text and "Be kind." in text and "t1" in text and "ref.md" in text and "# ref" in text
    assert "(no skills authored)" in render_agent({"config": {}, "skills": {}})


def test_the_config_eval_renders_configs_without_the_workflow_id_and_a_table_sample() -> None:
    """n8n: ``harness/artifacts/render-config-eval.ts`` ``renderConfigEvalArtifact`` — configs without
    ``workflowId``, then the data table's columns and sample rows, or a note when the dataset is
    not a data table."""
    config = {"id": "c1", "workflowId": "wf-secret-ref", "name": "Accuracy", "datasetSource": "data_table",
              "datasetRef": {"dataTableId": "dt1"}}
    text = render_config_eval({"configs": [config], "dataTable": {"columns": [{"name": "question"}],
                                                                  "rows": {"count": 1, "data": [{"question": "q?"}]}}})
    assert "wf-secret-ref" not in text and '"Accuracy"' in text and '"question"' in text and "q?" in text
    assert "(no data-table dataset" in render_config_eval({"configs": [], "dataTable": None})


async def test_the_context_has_both_sections_with_fallbacks_and_says_when_a_fetch_failed() -> None:
    """n8n: ``harness/artifacts/artifact-context.ts`` ``resolveArtifactContext`` — one section per
    type, "(no agent produced)" / "(no config-eval produced)" when none was found, and "produced but
    could not be rendered" when discovery found one the fetch could not read."""
    async with N8nClient("http://127.0.0.1:9", timeout=2, retry=RetryPolicy(attempts=1)) as client:
        session = N8nSession(client, "cookie-not-used", {"id": "u"})
        empty = await artifact_context([], session, "p1")
        assert empty == "## Agent\n\n(no agent produced)\n\n## Config-eval\n\n(no config-eval produced)"
        broken = await artifact_context([ArtifactRef("agent", "ag1")], session, "p1")
    assert broken.startswith("## Agent\n\n(agent produced but could not be rendered: ")
    assert broken.endswith("## Config-eval\n\n(no config-eval produced)")


def test_the_scenario_judge_sees_the_intercepted_requests() -> None:
    """n8n's scenario verifier grades what a node sent as well as what came back: the evidence of
    a mock execution keeps every node's ``interceptedRequests`` beside its outputs."""
    result = MockExecutionResult.model_validate({
        "executionId": "1", "success": True,
        "nodeResults": {"Slack": {"outputs": {"main": [[{"json": {"ok": True}}]]}, "executionMode": "mocked",
                                  "interceptedRequests": [{"method": "POST", "url": "https://slack.com/api/chat.postMessage",
                                                           "body": {"channel": "#general"}}]}},
    })
    evidence = scenario_evidence(result)
    assert evidence["nodeResults"]["Slack"]["interceptedRequests"][0]["body"] == {"channel": "#general"}
    assert json.dumps(evidence)


async def test_rejudge_replays_the_one_call_batch_by_kind_and_text(tmp_path: Path) -> None:
    """The recorded build-expectations call (process + outcome, n8n's one call) is replayed with the
    same partial-verdict rules (``assertion-judge.ts`` ``judgeExpectations``) and each verdict lands
    on the row of its kind and text."""
    from orchestrator.results.model import EvalResults, ExpectationResult
    from orchestrator.verify.judge import BUILD_JUDGE_SYSTEM
    from orchestrator.verify.rejudge import rejudge

    rows = [ExpectationResult(kind="process", text="Asked first.", verdict=Verdict.passed),
            ExpectationResult(kind="outcome", text="Posts to Slack.", verdict=Verdict.passed)]
    from support.eval_results_factory import unit

    u = unit("c", 0)
    u.expectations = rows
    res = EvalResults(run_id="r", started_at=1.0, config={"iterations": 1}, units=[u])
    item = {"case": "c", "iteration": 0, "target": "expectations", "system": BUILD_JUDGE_SYSTEM,
            "prompt": "## Expectations\n0. Asked first.\n1. Posts to Slack.\n", "count": 2,
            "names": ["Asked first.", "Posts to Slack."], "kinds": ["process", "outcome"], "partial": True}
    with ScriptedModelServer(judge({"verdicts": [{"index": 1, "pass": False, "reason": "no Slack"}]})) as srv:
        j = _judge(srv)
        out = await rejudge(res, [item], j)
        await j.aclose()
    got = {(e.kind, e.text): (e.verdict, e.reason) for e in out.results.units[0].expectations}
    assert got[("process", "Asked first.")] == (Verdict.incomplete, NO_VERDICT_RETURNED)
    assert got[("outcome", "Posts to Slack.")] == (Verdict.failed, "no Slack")
