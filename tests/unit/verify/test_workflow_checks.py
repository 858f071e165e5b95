"""The 28 workflow checks: rubric shape, deterministic outcomes on real n8n workflow JSON (saved on
a real lane, then read back), the LLM checks through the judge (N/A without a key), aggregation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.workflow_samples import SAMPLES

from orchestrator.results.contract import workflow_checks_summary
from orchestrator.results.model import DIMENSIONS, StructuralCheck, UnitResult
from orchestrator.scripted.scripts import judge as scripted_judge
from orchestrator.scripted.scripts import status_storm, verdict_list
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.verify.judge import Judge, JudgeConfig
from orchestrator.verify.workflow_checks import (
    CHECKS,
    CheckContext,
    deterministic_checks,
    feedback,
    run_workflow_checks,
)

CAPTURED = Path(__file__).resolve().parents[2] / "fixtures" / "workflows"
RUBRIC = {"structure": 4, "connection_topology": 4, "parameter_correctness": 8, "intent_match": 1,
          "communication": 1, "ai_nodes": 6, "nodes_craftsmanship": 2, "security": 2}
LLM = {"fulfills_user_request", "valid_data_flow", "correct_node_operations", "handles_multiple_items",
       "descriptive_node_names", "response_describes_changes_accurately"}


def test_rubric_has_28_checks_in_8_dimensions() -> None:
    assert len(CHECKS) == 28 and len({c.name for c in CHECKS}) == 28
    assert {d: sum(1 for c in CHECKS if c.dimension == d) for d in DIMENSIONS} == RUBRIC
    assert {c.name for c in CHECKS if c.kind == "llm"} == LLM


def _statuses(checks: list[StructuralCheck]) -> dict[str, str]:
    return {c.name: c.status for c in checks}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_deterministic_checks_on_captured_lane_json(name: str) -> None:
    """The JSON a real n8n 2.41.1 lane gave back for each sample (captured by the n8n test below)."""
    workflow = json.loads((CAPTURED / f"{name}.json").read_text())
    _, prompt, expected = SAMPLES[name]
    checks = deterministic_checks(workflow, CheckContext(prompt=prompt))
    assert len(checks) == 22
    got = _statuses(checks)
    assert {k: got[k] for k in expected} == expected
    assert all(c.detail for c in checks)  # every answer has a reason


def test_reasons_name_what_is_wrong() -> None:
    workflow = json.loads((CAPTURED / "flawed.json").read_text())
    by = {c.name: c for c in deterministic_checks(workflow, CheckContext(prompt=SAMPLES["flawed"][1]))}
    assert "Lookup contact" in by["expressions_reference_existing_nodes"].detail
    assert "$json.mail" in by["valid_field_references"].detail
    assert "Call CRM" in by["no_hardcoded_credentials"].detail and "Call CRM" in by["error_routes_consistent"].detail
    assert "Forgotten" in by["no_unreachable_nodes"].detail and "Old step" in by["no_disabled_nodes"].detail
    assert "Make payload" in by["no_unnecessary_code_nodes"].detail


def test_prompt_asking_for_auth_fails_an_open_webhook() -> None:
    workflow = json.loads((CAPTURED / "flawed.json").read_text())
    ctx = CheckContext(prompt="Receive signups on a webhook protected with header auth.")
    [check] = [c for c in deterministic_checks(workflow, ctx) if c.name == "inbound_trigger_auth_defaults"]
    assert check.status == "fail" and "asks for authentication" in check.detail


def test_code_necessary_annotation_passes_the_code_check() -> None:
    workflow = json.loads((CAPTURED / "flawed.json").read_text())
    ctx = CheckContext(annotations={"code_necessary": True})
    [check] = [c for c in deterministic_checks(workflow, ctx) if c.name == "no_unnecessary_code_nodes"]
    assert check.status == "pass"


def test_malformed_workflow_never_raises() -> None:
    checks = deterministic_checks({"nodes": [None, {"name": 3}], "connections": {"x": [1]}})
    assert len(checks) == 22


async def test_llm_checks_are_na_without_a_judge_key() -> None:
    judge = Judge(JudgeConfig(api_key=None))
    try:
        checks = await run_workflow_checks(SAMPLES["clean"][0], CheckContext(prompt="x"), judge)
    finally:
        await judge.aclose()
    assert [c.name for c in checks] == [c.name for c in CHECKS]
    llm = {c.name: c for c in checks if c.kind == "llm"}
    assert set(llm) == LLM and all(c.status == "n_a" and "no judge key" in c.detail for c in llm.values())


async def test_llm_checks_go_through_the_judge_model() -> None:
    """The embedded scripted model stands in for the judge: one call grades the five applicable
    LLM checks (no narration → response_describes_changes_accurately is N/A)."""
    with ScriptedModelServer(scripted_judge(verdict_list([True, False, True, True, False]))) as srv:
        judge = Judge(JudgeConfig(api_key="sk-ant-checks-test-000000", base_url=srv.base_url, effort="low",
                                  backoff_s=0))
        try:
            checks = await run_workflow_checks(SAMPLES["clean"][0], CheckContext(prompt="build it"), judge)
        finally:
            await judge.aclose()
        calls = [r for r in srv.requests if r.is_messages]
    assert len(calls) == 1 and "fulfills_user_request" in json.dumps(calls[0].body)
    statuses = _statuses(checks)
    assert statuses["response_describes_changes_accurately"] == "n_a"
    graded = [c.name for c in CHECKS if c.kind == "llm" and c.name != "response_describes_changes_accurately"]
    assert [statuses[n] for n in graded] == ["pass", "fail", "pass", "pass", "fail"]


async def test_judge_outage_marks_llm_checks_unmeasured_not_failed() -> None:
    with ScriptedModelServer(status_storm(529)) as srv:
        judge = Judge(JudgeConfig(api_key="sk-ant-checks-test-000000", base_url=srv.base_url, effort="low",
                                  backoff_s=0, attempts=1))
        try:
            checks = await run_workflow_checks(SAMPLES["clean"][0], CheckContext(prompt="x", narration="done"), judge)
        finally:
            await judge.aclose()
    assert {c.status for c in checks if c.kind == "llm"} == {"error"}


def test_aggregation_and_feedback_keys() -> None:
    workflow = json.loads((CAPTURED / "flawed.json").read_text())
    checks = deterministic_checks(workflow, CheckContext(prompt=SAMPLES["flawed"][1]))
    units = [UnitResult.model_validate({"case": "c", "iteration": i, "started_at": 0, "finished_at": 1,
                                        "build": {"status": "ok"}, "structural": [c.model_dump() for c in checks]})
             for i in range(2)]
    summary = workflow_checks_summary(units)
    assert summary is not None and summary["scoredBuilds"] == 2
    assert summary["perCheck"]["no_disabled_nodes"] == {"kind": "deterministic", "dimension": "structure",
                                                        "passes": 0, "fails": 2, "nA": 0, "errors": 0,
                                                        "passRate": 0.0}
    assert summary["perCheck"]["agent_has_language_model"]["passRate"] is None
    keys = feedback(checks)
    assert keys["evals.workflows.structure.no_disabled_nodes"] == 0
    assert keys["evals.workflows.structure.has_trigger"] == 1
    assert "evals.workflows.ai_nodes.agent_has_language_model" not in keys  # N/A omitted


@pytest.mark.n8n
@pytest.mark.slow
def test_samples_saved_on_a_real_lane_get_the_expected_outcomes(shared_plain_lane) -> None:
    """Save each sample through n8n's REST API, read back what n8n stored, check that JSON (and
    refresh the captured fixtures when ``CAPTURE_WORKFLOWS=1``)."""
    from support.lanes import seed

    lane = seed(shared_plain_lane)  # reset and seeded for this test
    with lane.owner_client() as http:
        for name, (body, prompt, expected) in SAMPLES.items():
            created = http.post("/rest/workflows", json=body)
            assert created.status_code == 200, created.text
            workflow_id = created.json()["data"]["id"]
            stored = http.get(f"/rest/workflows/{workflow_id}").json()["data"]
            got = _statuses(deterministic_checks(stored, CheckContext(prompt=prompt)))
            assert {k: got[k] for k in expected} == expected, name
            if os.environ.get("CAPTURE_WORKFLOWS") == "1":
                kept = {k: stored[k] for k in ("name", "nodes", "connections", "settings") if k in stored}
                (CAPTURED / f"{name}.json").write_text(json.dumps(kept, indent=2) + "\n")


def test_langsmith_feedback_rows_carry_the_check_keys() -> None:
    """n8n ``run/langsmith-driver.ts`` (04d53711): ``evals.workflows.<dimension>.<check>`` on every row
    of the build that carries workflow checks (N/A left out)."""
    from orchestrator.experiments.langsmith_rows import row_feedback, unit_rows

    workflow = json.loads((CAPTURED / "flawed.json").read_text())
    checks = deterministic_checks(workflow, CheckContext(prompt=SAMPLES["flawed"][1]))
    u = UnitResult.model_validate({"case": "c", "iteration": 0, "started_at": 0, "finished_at": 1,
                                   "build": {"status": "ok"}, "structural": [c.model_dump() for c in checks],
                                   "scenarios": [{"name": "a", "verdict": "pass"}, {"name": "b", "verdict": "fail"}]})
    per_row = [{f.key: f for f in row_feedback(row, u)} for row in unit_rows(u)]
    assert len(per_row) == 2 and per_row[0].keys() == per_row[1].keys()
    rows = per_row[1]
    assert rows["evals.workflows.security.no_hardcoded_credentials"].score == 0.0
    assert "Call CRM" in (rows["evals.workflows.security.no_hardcoded_credentials"].comment or "")
    assert rows["evals.workflows.structure.has_trigger"].score == 1.0
    assert not any(k.endswith("agent_has_language_model") for k in rows)  # N/A omitted
