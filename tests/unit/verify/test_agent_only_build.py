"""A build whose artifact is an Agent: its scenarios run against the Agent when the build was driven
through the chat (n8n's ``agentRunnable``: an Agent and a transcript; on a real lane in
``test_agent_scenarios_e2e.py``), else they wait, naming why; n8n's draft-Agent rule and the scenario
judge's input, without a lane. The judge is the real ``anthropic`` client talking to the embedded
scripted model over loopback HTTP."""

from __future__ import annotations

from pathlib import Path

from support.stand_ins import unused_session

from orchestrator.cases import EvalCase
from orchestrator.domain import Verdict
from orchestrator.handoff import ArtifactRef
from orchestrator.scripted.scripts import judge, verdict_list
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.transcript import Transcript
from orchestrator.verify.agent_scenarios import (
    NO_MODEL,
    SEED_MODEL_WITHOUT_CREDENTIAL,
    agent_scenario_prompt,
    draft_reason,
)
from orchestrator.verify.expectations import JudgeScope
from orchestrator.verify.judge import Judge, JudgeConfig
from orchestrator.verify.verifier import AGENT_SCENARIO_NOT_RUN, verify_workflow

CASE = EvalCase.model_validate({
    "conversation": [{"role": "user", "text": "Create an n8n agent called 'Release Crier' that announces releases."}],
    "complexity": "medium", "tags": ["agent"],
    "outcomeExpectations": ["A first-class n8n Agent artifact was created."],
    "executionScenarios": [{"name": "announces", "description": "d", "dataSetup": "s", "successCriteria": "c"}],
})


async def test_an_agent_build_without_a_transcript_is_graded_on_its_expectations_and_its_scenarios_wait(
        tmp_path: Path) -> None:
    """n8n ``run/case-pipeline.ts`` (a92ceee3): ``agentRunnable = agentRef && build.transcript`` — an
    Agent built by a build n8n keeps no transcript of (MCP, prebuilt) does not run its scenarios.
    The expectations are still judged; the scenarios are incomplete, naming why."""
    path = tmp_path / "u.jsonl"
    with Transcript(path, builder="instance-ai") as t:
        t.user(CASE.opening_prompt(), 0)
        t.add("assistant", text="I created the agent 'Release Crier'.", agent="orchestrator")
        t.add("run", status="completed")
    with ScriptedModelServer(judge(verdict_list([True]))) as srv:
        j = Judge(JudgeConfig(api_key="sk-ant-judge-test-000000", base_url=srv.base_url, effort="low", backoff_s=0))
        v = await verify_workflow(CASE, None, unused_session(), j, timeout_ms=1000, transcript_path=path,
                                  artifact_refs=[ArtifactRef("agent", "AgEnT0000000001")],
                                  scope=JudgeScope(process_gradable=False))
        await j.aclose()
    assert [(s.name, s.verdict, s.reason) for s in v.scenarios] == [("announces", Verdict.incomplete, AGENT_SCENARIO_NOT_RUN)]
    assert [(e.kind, e.verdict) for e in v.expectations] == [("outcome", Verdict.passed)]


def test_a_draft_agent_is_not_run() -> None:
    """n8n ``run/case-pipeline.ts`` ``draftAgentVerdict``: no model → "Agent has no model configured";
    still on the seed's model with no declared credential of that provider → "Seeded Agent model has
    no declared credential"; a model the build chose (or a seed model with its provider's
    credential declared) runs."""
    body = {
        "conversation": [{"role": "user", "text": "Add a refund rule to the Support Triage agent."}],
        "complexity": "simple", "tags": ["agent"], "outcomeExpectations": ["x"],
        "seed": {"mode": "inline", "messages": [{"role": "user", "text": "Build it."}],
                 "agents": [{"id": "AgEnT12345678901", "config": {"name": "Support Triage",
                                                                  "model": "anthropic/claude-sonnet-4-5",
                                                                  "instructions": "Triage."}}]}}
    seeded = EvalCase.model_validate(body)
    with_key = EvalCase.model_validate({**body, "credentials": [{"type": "anthropicApi"}]})
    assert draft_reason(CASE, {"model": ""}) == NO_MODEL
    assert draft_reason(seeded, {"model": "anthropic/claude-sonnet-4-5"}) == SEED_MODEL_WITHOUT_CREDENTIAL
    assert draft_reason(with_key, {"model": "anthropic/claude-sonnet-4-5"}) is None
    assert draft_reason(seeded, {"model": "openai/gpt-5-mini"}) is None


def test_the_agent_scenario_judge_sees_at_most_thirty_tool_calls_capped() -> None:
    """n8n ``harness/agent-execution.ts`` ``buildAgentVerificationArtifact``: every tool call when
    there are at most 30, else the first 22 and the last 8; inputs and outputs capped at 2,000
    characters; at most 5 intercepted requests a call; the pre-analysis flags."""
    calls = [{"tool": f"tool{i}", "kind": "node", "input": {"i": i}, "output": "o" * 5000, "mocked": True,
              "interceptedRequests": [{"method": "GET", "url": f"https://x/{i}/{r}", "nodeType": "http",
                                       "mockResponse": {"_evalMockError": "no"} if r == 0 else {}}
                                      for r in range(7)]} for i in range(40)]
    result = {"success": True, "finalText": "done", "toolCalls": calls, "modelTurns": [{}],
              "seed": {"openingMessage": "hi", "warnings": ["hints were empty"]},
              "skippedFeatures": [{"feature": "integrations", "reason": "pruned"}]}
    scenario = CASE.execution_scenarios[0]
    prompt = agent_scenario_prompt("### Agent config", scenario, result)
    shown = [f"tool{i} " for i in range(40) if f"### tool{i} (" in prompt]
    assert shown == [f"tool{i} " for i in [*range(22), *range(32, 40)]] and "10 tool call(s) omitted" in prompt
    assert "o" * 2000 + "…[truncated]" in prompt and "o" * 2001 not in prompt
    assert "https://x/0/4" in prompt and "https://x/0/5" not in prompt
    assert "⚠ FRAMEWORK ISSUE: hints were empty" in prompt and "HARNESS LIMITATION" in prompt and "⚠ MOCK ISSUE" in prompt
