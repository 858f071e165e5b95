"""``eval-results.json`` in the reference harness's contract: the fields n8n's tooling reads, the
published JSON Schema, and reading a file written by n8n's TypeScript harness."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from support.eval_results_factory import results, unit

from orchestrator.compare import compare, comparison_dict, load_results
from orchestrator.compare.tiers import Tier
from orchestrator.results.contract import from_document, to_document
from orchestrator.results.model import (
    Attribution,
    BuildStatus,
    EvalResults,
    StructuralCheck,
    UsageEntry,
)
from orchestrator.results.schema import SCHEMA_VERSION, json_schema, published_schema
from orchestrator.results.writer import ResultsWriter

REFERENCE = Path(__file__).resolve().parents[2] / "fixtures" / "reference" / "eval-results.json"


def validate(doc: dict) -> None:
    jsonschema.Draft202012Validator(published_schema()).validate(doc)


def _run() -> EvalResults:
    units = [
        unit("daily-signups-slack", i, {"happy-path": (False, "builder_issue"), "empty-day": True},
             {"Uses a Schedule trigger.": True}, cost=0.5 + i, turns=10 + i)
        for i in range(3)
    ]
    units[0].structural = [
        StructuralCheck(name="has_trigger", passed=True, dimension="structure"),
        StructuralCheck(name="agent_has_language_model", passed=None, dimension="ai_nodes", detail="no agent"),
        StructuralCheck(name="fulfills_user_request", passed=None, dimension="intent_match", kind="llm"),
    ]
    units[0].harness_usage = [UsageEntry(agent="judge", model="claude-sonnet-4-6", calls=2, input_tokens=900,
                                         uncached_input_tokens=700, output_tokens=120, reasoning_tokens=0)]
    units += [unit("contact-dedup", i, {"happy-path": i < 2}) for i in range(3)]
    units.append(unit("timeout-case", 0, {"s": False}, status=BuildStatus.timeout,
                      failure_category="build_failure", attribution=Attribution.builder_issue))
    res = results("run-1", units, k=3)
    res.config["iterations"] = 3
    return res


def test_published_schema_is_the_generated_one() -> None:
    """Regenerate with `python -m orchestrator.results.schema` after changing the models."""
    assert published_schema() == json_schema()
    assert published_schema()["properties"]["schemaVersion"]["const"] == SCHEMA_VERSION


def test_document_carries_the_reference_fields_and_validates() -> None:
    res = _run()
    doc = to_document(res)
    validate(doc)
    assert doc["totalRuns"] == 3 and doc["schemaVersion"] == SCHEMA_VERSION
    tc = {t["testCaseFile"]: t for t in doc["testCases"]}["daily-signups-slack"]
    assert tc["buildCostUsdPerRun"] == [0.5, 1.5, 2.5] and tc["buildTurnsPerRun"] == [10, 11, 12]
    assert tc["buildExpectations"] == [{"expectation": "Uses a Schedule trigger.", "passCount": 3,
                                        "evaluatedCount": 3, "passAtK": 1.0, "passHatK": 1.0,
                                        "passHatKUnbiased": 1.0}]
    assert [len(r) for r in tc["buildExpectationResultsPerRun"]] == [1, 1, 1]
    assert tc["harnessUsagePerRun"][0] == [{"agent": "judge", "model": "claude-sonnet-4-6", "calls": 2,
                                           "inputTokens": 900, "uncachedInputTokens": 700, "outputTokens": 120,
                                           "reasoningTokens": 0}]
    assert tc["harnessUsagePerRun"][1:] == [None, None]  # not measured
    assert tc["workflowChecksPerRun"][0] == {"has_trigger": "pass", "agent_has_language_model": "n_a",
                                             "fulfills_user_request": "n_a"}
    happy = {s["name"]: s for s in tc["scenarios"]}["happy-path"]
    failed = happy["runs"][0]
    assert not failed["passed"] and failed["failureCategory"] == "builder_issue"
    assert failed["attribution"] == "builder_issue" and failed["rootCause"]
    assert happy["passCount"] == 0 and happy["evaluatedCount"] == 3
    summary = doc["summary"]
    assert summary["mcpBuild"] == {"builds": 7, "totalCostUsd": round(sum(u.build.cost_usd for u in res.units), 2),
                                   "avgTurns": round(sum(u.build.turns for u in res.units) / 7, 1)}
    checks = summary["workflowChecks"]
    assert checks["scoredBuilds"] == 1
    assert checks["perCheck"]["has_trigger"] == {"kind": "deterministic", "dimension": "structure", "passes": 1,
                                                 "fails": 0, "nA": 0, "errors": 0, "passRate": 1.0}
    timeout = {t["testCaseFile"]: t for t in doc["testCases"]}["timeout-case"]
    assert timeout["buildSuccessCount"] == 0
    run = timeout["scenarios"][0]["runs"][0]  # a timed-out build is neutral, not a builder failure
    # n8n's attachExpectations (run/case-pipeline.ts): incomplete, build_timeout / timeout, buildTimeout
    assert run["incomplete"] is True and run["passed"] is False
    assert (run["failureCategory"], run["attribution"]) == ("build_timeout", "timeout") and run["buildTimeout"]
    assert timeout["scenarios"][0]["evaluatedCount"] == 0 and timeout["status"] == "notVerified"
    # ours stays under its own key, whole
    assert doc["orchestrator"]["run_id"] == "run-1" and len(doc["orchestrator"]["units"]) == 7


def test_comparison_lands_as_evaluation_units() -> None:
    pr = _run()
    base = results("base", [unit("daily-signups-slack", i, {"happy-path": True, "empty-day": True},
                                 {"Uses a Schedule trigger.": True}) for i in range(3)], k=3)
    pr.comparison = comparison_dict(compare(pr, base))
    doc = to_document(pr)
    validate(doc)
    units = {u["key"]: u for u in doc["comparison"]["result"]["evaluationUnits"]}
    assert units["daily-signups-slack/happy-path"]["kind"] == "scenario"
    assert units["daily-signups-slack/happy-path"]["verdict"] == "hard_regression"
    exp = units["daily-signups-slack#expectation:Uses a Schedule trigger."]
    assert exp["kind"] == "expectation" and exp["name"] == "Uses a Schedule trigger."
    assert {"kind": "scenario", "testCaseFile": "contact-dedup", "name": "happy-path",
            "key": "contact-dedup/happy-path"} in doc["comparison"]["result"]["prOnly"]


def test_round_trip_keeps_every_unit() -> None:
    res = _run()
    back = from_document(json.loads(json.dumps(to_document(res))))
    assert back.model_dump() == EvalResults.model_validate_json(res.model_dump_json()).model_dump()


def test_written_file_validates(tmp_path: Path) -> None:
    res = _run()
    writer = ResultsWriter(EvalResults(run_id="w", started_at=1.0, config={"iterations": 3}), tmp_path / "out",
                           tmp_path / "run")
    (tmp_path / "run").mkdir()
    for u in res.units:
        writer.add(u)
    writer.flush()
    doc = json.loads((tmp_path / "out" / "eval-results.json").read_text())
    validate(doc)
    assert load_results(tmp_path / "out" / "eval-results.json").units == writer.results.units


def test_older_snake_case_files_still_load(tmp_path: Path) -> None:
    res = _run()
    path = tmp_path / "old.json"
    path.write_text(res.model_dump_json())
    assert load_results(path).run_id == "run-1"


def test_reference_harness_file_is_read() -> None:
    ref = load_results(REFERENCE, role="BASELINE")
    assert ref.run_id == "instance-ai-baseline-2026-11-30"
    assert {(u.case, u.iteration) for u in ref.units} == {(c, i) for c in ("daily-signups-slack", "contact-dedup")
                                                          for i in range(3)}
    last = next(u for u in ref.units if u.case == "contact-dedup" and u.iteration == 2)
    assert last.scenarios[0].failure_category == "mock_issue"
    assert last.scenarios[0].attribution is Attribution.mock_issue
    assert last.build.cost_usd == 0.0 and last.scenarios[0].root_cause == "mock returned an empty list"


def test_reference_baseline_compares_with_the_expected_tiers() -> None:
    base = load_results(REFERENCE, role="BASELINE")
    comparison = compare(_run(), base)
    tiers = {u.key: u.tier for u in comparison.units}
    assert tiers == {
        "daily-signups-slack/happy-path": Tier.hard_regression,  # 0/3 vs 3/3
        "daily-signups-slack/empty-day": Tier.stable,
        "daily-signups-slack#expectation:Uses a Schedule trigger.": Tier.stable,
        "contact-dedup/happy-path": Tier.stable,  # 2/3 vs 2/3
    }
    # the timed-out build is neutral: its unit is listed (n8n's results list its incomplete row) with
    # no trial, so nothing of it is compared
    assert comparison.pr_only == ["timeout-case/s"]
    assert "timeout-case/s" not in tiers


def test_not_an_eval_results_file_is_one_line(tmp_path: Path) -> None:
    from orchestrator.errors import UserError

    path = tmp_path / "x.json"
    path.write_text('{"hello": 1}')
    with pytest.raises(UserError, match="is not an eval-results.json: neither testCases"):
        load_results(path)


def test_compare_cli_accepts_a_reference_harness_baseline(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli.main import app

    ours = tmp_path / "pr" / "eval-results.json"
    ours.parent.mkdir()
    ours.write_text(json.dumps(to_document(_run())))
    done = CliRunner().invoke(app, ["compare", str(ours), str(REFERENCE), "--output-dir", str(tmp_path / "cmp")])
    assert done.exit_code == 0, done.output
    data = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    tiers = {u["key"]: u["verdict"] for u in data["evaluationUnits"]}
    assert tiers["daily-signups-slack/happy-path"] == "hard_regression"
    assert data["baseline"]["experimentName"] == "instance-ai-baseline-2026-11-30"
    assert "regression" in (tmp_path / "cmp" / "eval-pr-comment.md").read_text().lower()


def test_mcp_build_summary_only_for_mcp_builds() -> None:
    """n8n's tooling reads ``summary.mcpBuild`` as "an MCP run" (cli/build-cost-report.ts): an
    Instance AI run carries none; a run whose units name no builder keeps the default (mcp)."""
    res = _run()
    for u in res.units:
        u.builder = "instance-ai"
    assert "mcpBuild" not in to_document(res)["summary"]
    res.units[0].builder = "mcp"
    assert to_document(res)["summary"]["mcpBuild"]["builds"] == 1
    for u in res.units:
        u.builder = None
    res.config["builder"] = "instance-ai"
    assert "mcpBuild" not in to_document(res)["summary"]
