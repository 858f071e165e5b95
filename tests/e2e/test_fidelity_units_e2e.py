"""Issue 34's units on a real n8n 2.41.1 lane, offline, through ``orchestrator run`` (the scripted
model is the only stand-in): every unit n8n's harness produces, counted as it counts it.

- ``seeded-prose-prelude-agreed-digest`` (``contextAssertions`` and ``memoryExpectations``) and
  ``memory-session-boundary-report-recipient``: the lane's run debug is captured after each turn
  (``N8N_INSTANCE_AI_RUN_DEBUG_ENABLED``), the context assertions are checked on it and the memory
  expectations judged on it — scored, with the captured context in ``judge-inputs.jsonl``;
- ``agent-standalone-order-status-helper``: the built Agent's execution scenarios run through
  ``POST /eval/execute-agent-with-llm-mock/:agentId`` (its model reached through the declared
  Anthropic credential) and are judged;
- ``credential-notion-mcp-registry``: the lane's MCP registry is seeded, the case's
  ``notionMcpOAuth2Api`` credential is created and the build succeeds;
- ``behaviour-keeps-an-external-rename``: the harness renames the saved workflow behind the
  agent's back before the follow-up, and the rename survived;
- a case whose seed this n8n cannot restore: a counted ``framework_issue`` failure, never the
  builder's.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.model_switch import SharedModel, Switch
from support.static_lane import StaticLane, lane_turn

from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import run
from orchestrator.scripted.scripts import demo_script

pytestmark = [pytest.mark.n8n]
CASES = Path(__file__).resolve().parents[2] / "cases"
SLUGS = ["seeded-prose-prelude-agreed-digest", "memory-session-boundary-report-recipient",
         "agent-standalone-order-status-helper", "credential-notion-mcp-registry", "behaviour-keeps-an-external-rename"]
SEED_FAILS = "seed-this-n8n-cannot-restore"


def _corpus(tmp: Path) -> Path:
    """The bundled cases under test, and one whose seed 2.41.1 cannot restore (seeded projects)."""
    folder = tmp / "cases"
    folder.mkdir()
    for slug in SLUGS:
        shutil.copy(CASES / f"{slug}.json", folder)
    (folder / f"{SEED_FAILS}.json").write_text(json.dumps({
        "conversation": [{"role": "user", "text": "List my Ops project's workflows."}], "complexity": "simple",
        "tags": ["seeded"], "outcomeExpectations": ["It lists the Ops project's workflows."],
        "executionScenarios": [{"name": "lists", "description": "d", "dataSetup": "x", "successCriteria": "y"}],
        "seed": {"mode": "inline", "projects": [{"id": "projOpsSeed01", "name": "Ops"}]}}))
    return folder


@pytest.fixture(scope="module")
def outcome(shared_sandbox_lane: StaticLane, shared_model: SharedModel,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("fidelity-units")
    lane = shared_sandbox_lane
    with lane_turn(lane, shared_model, Switch(demo_script())) as turn, pytest.MonkeyPatch.context() as patch:
        patch.setenv("ANTHROPIC_API_KEY", "scripted-fidelity-units-key")  # the judge's, on the scripted model
        patch.setenv("ANTHROPIC_BASE_URL", turn.model.base_url)
        cfg = RunConfig(cases_paths=[_corpus(tmp)], iterations=1, backend="static", base_url=lane.base_url, lanes=1,
                        email=lane.owner.email, password=lane.owner.password, model_server="real",
                        builder="instance-ai", state_dir=tmp / "state", output_dir=tmp / "out", run_id="fidelity-units",
                        env=[f"N8N_INSTANCE_AI_MODEL_URL={lane.lane_env['N8N_INSTANCE_AI_MODEL_URL']}"])
        result = asyncio.run(run(cfg))
    doc = json.loads((tmp / "out" / "eval-results.json").read_text())
    inputs = [json.loads(line) for line in (tmp / "out" / "judge-inputs.jsonl").read_text().splitlines()]
    return {"outcome": result, "units": {u["case"]: u for u in doc["orchestrator"]["units"]}, "doc": doc,
            "inputs": inputs}


def test_every_case_ran_and_nothing_is_left(outcome: dict[str, Any]) -> None:
    assert outcome["outcome"].cleanup_failures == []
    assert set(outcome["units"]) == {*SLUGS, SEED_FAILS}


def test_context_and_memory_units_are_scored_on_the_captured_context(outcome: dict[str, Any]) -> None:
    """n8n ``harness/capture-run-debug.ts`` (88e78c20), ``context-assertions.ts`` (135abd20),
    ``memory-verifier.ts`` (449ea184): each unit judged (not incomplete), and the memory judge's input
    — the captured context — is kept for ``orchestrator rejudge``."""
    for slug in ("seeded-prose-prelude-agreed-digest", "memory-session-boundary-report-recipient"):
        rows = [e for e in outcome["units"][slug]["expectations"] if e["kind"] in ("memory", "context")]
        assert {e["kind"] for e in rows} == {"memory", "context"}
        assert all(e["verdict"] in ("pass", "fail") for e in rows), rows
    digest = {e["text"]: e for e in outcome["units"]["seeded-prose-prelude-agreed-digest"]["expectations"]}
    assert digest['context contains "17:00"']["reason"].startswith("retained — present at the probe in: message window")
    memory_inputs = [i for i in outcome["inputs"] if "memory" in (i.get("kinds") or [])]
    assert len(memory_inputs) == 2
    assert all("## Raw message window" in i["prompt"] and "## Capture summary" in i["prompt"] for i in memory_inputs)
    assert any("#ops-digest" in i["prompt"] for i in memory_inputs)
    assert outcome["doc"]["testCases"]  # and n8n's shape carries their kind
    per_run = next(t for t in outcome["doc"]["testCases"] if t["testCaseFile"] == "seeded-prose-prelude-agreed-digest")
    assert {r.get("kind") for r in per_run["buildExpectationResultsPerRun"][0]} >= {"memory", "context"}


def test_the_agents_scenarios_are_executed_and_scored(outcome: dict[str, Any]) -> None:
    """n8n ``run/case-pipeline.ts`` ``agentRunnable`` and ``harness/agent-execution.ts``."""
    unit = outcome["units"]["agent-standalone-order-status-helper"]
    assert unit["build"]["status"] == "ok" and unit["build"]["workflow_id"] is None
    assert len(unit["scenarios"]) == 2
    for s in unit["scenarios"]:
        assert s["verdict"] in ("pass", "fail"), s
        run_record = s["execution"]["agentRun"]
        assert run_record["success"] is True and run_record["finalText"]


def test_an_mcp_registry_case_builds(outcome: dict[str, Any]) -> None:
    """n8n's harness seeds each lane's MCP registry (``mcp-registry/seeder.ts``)."""
    unit = outcome["units"]["credential-notion-mcp-registry"]
    assert unit["build"]["status"] == "ok" and unit["build"]["workflow_id"], unit["build"]


def test_an_external_rename_is_checked(outcome: dict[str, Any]) -> None:
    """n8n ``harness/chat-loop.ts`` rename, ``harness/external-edit-checks.ts`` check."""
    unit = outcome["units"]["behaviour-keeps-an-external-rename"]
    [edit] = [e for e in unit["expectations"] if e["kind"] == "external_edit"]
    assert edit["verdict"] == "pass" and 'still named "Ops Status Check"' in edit["reason"]


def test_a_seed_that_fails_is_the_frameworks_counted_failure(outcome: dict[str, Any]) -> None:
    """n8n ``run/case-pipeline.ts``: a build that died on seeding is a ``framework_issue`` row that
    counts (``run/aggregator.ts`` drops only incomplete rows)."""
    unit = outcome["units"][SEED_FAILS]
    assert unit["attribution"] == "framework_issue" and unit["failure_category"] == "framework_issue"
    assert [(s["verdict"], s["attribution"]) for s in unit["scenarios"]] == [("fail", "framework_issue")]
    assert "seed restore failed" in (unit["build"]["error"] or "")
    summary = outcome["doc"]["orchestrator"]["summary"]
    assert summary["attribution"]["framework_issue"] >= 1
