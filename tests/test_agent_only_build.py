"""A build whose artifact is an Agent (no workflow) on a case with execution scenarios: graded on its
expectations, its scenarios left incomplete with the reason. The judge is the real ``anthropic``
client talking to the embedded scripted model over loopback HTTP; no lane is needed (nothing is
fetched without a workflow or a project)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cases import EvalCase
from orchestrator.results.model import Verdict
from orchestrator.scripted.scripts import judge, verdict_list
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.transcript import Transcript
from orchestrator.verify.artifacts import ArtifactRef
from orchestrator.verify.judge import Judge, JudgeConfig
from orchestrator.verify.verifier import AGENT_SCENARIO_NOT_RUN, verify_workflow

CASE = EvalCase.model_validate({
    "conversation": [{"role": "user", "text": "Create an n8n agent called 'Release Crier' that announces releases."}],
    "complexity": "medium", "tags": ["agent"],
    "outcomeExpectations": ["A first-class n8n Agent artifact was created."],
    "executionScenarios": [{"name": "announces", "description": "d", "dataSetup": "s", "successCriteria": "c"}],
})


async def test_an_agent_build_is_graded_on_its_expectations_and_its_scenarios_wait(tmp_path: Path) -> None:
    """n8n: agent-artifact cases (``data/workflows/agent-*.json``, TRUST-268) build an Agent, not a
    workflow, and run their scenarios against that Agent (``harness/agent-execution.ts``); a build
    that made the Agent is not a failed build (``harness/build-workflow.ts`` ``workflowExpectedForCase``
    counts the artifact). Here the expectations are judged and the scenarios are incomplete, naming why."""
    path = tmp_path / "u.jsonl"
    with Transcript(path, builder="instance-ai") as t:
        t.user(CASE.opening_prompt(), 0)
        t.add("assistant", text="I created the agent 'Release Crier'.", agent="orchestrator")
        t.add("run", status="completed")
    with ScriptedModelServer(judge(verdict_list([True]))) as srv:
        j = Judge(JudgeConfig(api_key="sk-ant-judge-test-000000", base_url=srv.base_url, effort="low", backoff_s=0))
        v = await verify_workflow(CASE, None, None, j, timeout_ms=1000, transcript_path=path,
                                  artifact_refs=[ArtifactRef("agent", "AgEnT0000000001")])
        await j.aclose()
    assert [(s.name, s.verdict, s.reason) for s in v.scenarios] == [("announces", Verdict.incomplete, AGENT_SCENARIO_NOT_RUN)]
    assert [(e.kind, e.verdict) for e in v.expectations] == [("outcome", Verdict.passed)]
