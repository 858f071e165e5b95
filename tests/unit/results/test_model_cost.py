"""A unit's model cost in results (issue 37): the rows a provider failure took charged to the framework
with n8n's marker (``harness/transient-error.ts``: provider outages are never a builder verdict; the
mock generator's failures too, n8n's "still uncovered" case), the per-iteration columns of
``eval-results.json`` (n8n's ``buildTokensPerRun`` shape), and ``orchestrator cost-report`` (n8n's
``evaluations/cli/build-cost-report.ts``: cost per green iteration, green = every evaluated unit of
the iteration passed)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from support.eval_results_factory import results, unit
from typer.testing import CliRunner

from orchestrator.cli.main import app, main
from orchestrator.domain import PROVIDER_OUTAGE_ROOT_CAUSE, Attribution, BuildStatus, Verdict
from orchestrator.results.contract import from_document, to_document
from orchestrator.results.cost_report import cohort_of, green_stats, render_markdown
from orchestrator.results.model import ModelCost, StageCost, UnitResult
from orchestrator.results.model_cost import charge_provider_outage, per_run_columns
from orchestrator.results.report_html import render_report
from orchestrator.results.schema import published_schema


def costed(u: UnitResult, **failed: int) -> UnitResult:
    stages = [StageCost(stage="build", calls=5, failed_calls=failed.get("build", 0), models=["claude-sonnet-4-6"],
                        input_tokens=1000, cache_write_tokens=200, cache_read_tokens=3000, output_tokens=100,
                        cost_usd=0.01),
              StageCost(stage="mock", calls=2, failed_calls=failed.get("mock", 0), input_tokens=50, output_tokens=5,
                        cost_usd=0.001),
              StageCost(stage="judge", calls=1, failed_calls=failed.get("judge", 0), input_tokens=40, output_tokens=4,
                        cost_usd=0.0005)]
    u.model_cost = ModelCost(stages=stages)
    return u


def test_a_failed_build_whose_build_calls_met_a_provider_failure_is_the_frameworks_with_the_marker() -> None:
    u = costed(unit("c", 0, {"s1": False, "s2": False}, {"e1": False}, status=BuildStatus.failed,
                    failure_category="build_failure"), build=3)
    assert charge_provider_outage(u, "the gateway saw 3 build calls fail")
    assert u.build.status is BuildStatus.provider_outage
    assert u.build.root_cause == f"{PROVIDER_OUTAGE_ROOT_CAUSE}: the gateway saw 3 build calls fail"
    assert (u.failure_category, u.attribution) == ("framework_issue", Attribution.framework_issue)
    assert all(s.attribution is Attribution.framework_issue and s.root_cause == u.build.root_cause for s in u.scenarios)
    assert all(e.attribution is Attribution.framework_issue for e in u.expectations)


def test_a_verified_unit_whose_mock_calls_met_a_provider_failure_has_its_failing_scenarios_charged_to_the_framework() -> None:
    u = costed(unit("c", 0, {"s1": (False, "mock_issue"), "s2": True}, attribution=Attribution.mock_issue,
                    failure_category="mock_issue"), mock=1)
    assert charge_provider_outage(u, "mock calls failed")
    assert u.build.status is BuildStatus.ok
    failing = [s for s in u.scenarios if s.verdict is Verdict.failed]
    assert [s.attribution for s in failing] == [Attribution.framework_issue]
    assert failing[0].root_cause is not None and failing[0].root_cause.startswith(PROVIDER_OUTAGE_ROOT_CAUSE)
    assert next(s for s in u.scenarios if s.verdict is Verdict.passed).attribution is None
    assert u.attribution is Attribution.framework_issue


def test_rows_the_judge_could_not_grade_for_a_provider_failure_stay_incomplete_and_are_the_frameworks() -> None:
    u = costed(unit("c", 0, {"s1": None, "s2": True}, {"e1": None}, attribution=Attribution.verification_gap), judge=3)
    u.scenarios[0].attribution = u.expectations[0].attribution = Attribution.verification_gap
    assert charge_provider_outage(u, "judge calls failed")
    assert u.scenarios[0].verdict is Verdict.incomplete and u.scenarios[0].attribution is Attribution.framework_issue
    assert u.scenarios[0].root_cause is not None and u.scenarios[0].root_cause.startswith(PROVIDER_OUTAGE_ROOT_CAUSE)
    assert u.expectations[0].attribution is Attribution.framework_issue and u.scenarios[1].attribution is None
    assert u.attribution is None  # nothing failed: the unit is no one's failure


@pytest.mark.parametrize("make", [
    lambda: costed(unit("c", 0, {"s": False}, status=BuildStatus.failed)),  # no failed call
    lambda: costed(unit("c", 0, {"s": False}, status=BuildStatus.timeout), build=2),  # neutral stays neutral
    lambda: costed(unit("c", 0, {"s": True}), build=2),  # built despite it: nothing failed
    lambda: costed(unit("c", 0, {"s": False}), judge=1),  # a judged failure is the judge's verdict
])
def test_nothing_else_is_re_attributed(make) -> None:
    u = make()
    before = u.model_dump()
    assert not charge_provider_outage(u, "x")
    assert u.model_dump() == before


def test_the_per_iteration_columns_and_the_document_validate() -> None:
    units = [costed(unit("c", 0, {"s": True})), unit("c", 1, {"s": False}), costed(unit("d", 0, {"s": True}))]
    cols = per_run_columns([units[0], units[1]])
    assert cols["modelCostUsdPerRun"] == [pytest.approx(0.0115), None]
    assert cols["modelCostByStagePerRun"][0] == {"build": 0.01, "mock": 0.001, "judge": 0.0005}
    assert cols["buildTokensPerRun"] == [{"uncachedInput": 1000, "cacheRead": 3000, "cacheWrite": 200, "output": 100,
                                          "totalTokens": 4300, "steps": 5}, None]
    assert per_run_columns([unit("e", 0, {"s": True})]) == {}  # no gateway: no columns
    doc = to_document(results("r1", units))
    jsonschema.Draft202012Validator(published_schema()).validate(doc)
    back = from_document(json.loads(json.dumps(doc)))
    assert back.units[0].model_cost == units[0].model_cost


def test_green_iterations_are_those_whose_every_evaluated_unit_passed() -> None:
    tc = {"totalRuns": 3,
          "scenarios": [{"runs": [{"passed": True}, {"passed": False}, {"passed": True, "incomplete": True}]}],
          "buildExpectationResultsPerRun": [[{"pass": True}], [{"pass": True}], None]}
    assert green_stats(tc) == (1, 2)  # the third iteration evaluated nothing


def test_cost_per_green_iteration_by_cohort_and_by_stage(tmp_path: Path) -> None:
    gateway = results("with-gateway", [costed(unit("a", 0, {"s": True})), costed(unit("a", 1, {"s": False})),
                                       costed(unit("b", 0, {"s": True}))])
    claude = results("claude-only", [unit("a", 0, {"s": True}, cost=0.5), unit("a", 1, {"s": True}, cost=0.7)])
    paths = []
    for name, res in (("g", gateway), ("c", claude)):
        path = tmp_path / name / "eval-results.json"
        path.parent.mkdir()
        path.write_text(json.dumps(to_document(res)))
        paths.append(path)
    one = cohort_of(json.loads(paths[0].read_text()), "gw")
    assert one.source.startswith("model gateway") and one.total == pytest.approx(3 * 0.0115)
    assert (one.green, one.evaluated) == (2, 3) and one.per_green == pytest.approx(3 * 0.0115 / 2)
    assert one.by_stage == {"build": pytest.approx(0.03), "mock": pytest.approx(0.003),
                            "judge": pytest.approx(0.0015)}
    out = tmp_path / "report.md"
    answer = CliRunner().invoke(app, ["cost-report", str(paths[0]), str(paths[1]), "--label", "gw", "--out", str(out)])
    assert answer.exit_code == 0, answer.output
    assert "**gw** (model gateway: every stage, cache-aware)" in answer.output
    assert f"cost per green iteration ${3 * 0.0115 / 2:.4f}" in answer.output
    assert "**claude-only** (persisted claude spend)" in answer.output and "cost per green iteration $0.6000" in answer.output
    assert "| gw | $0.0300 | $0.0015 | $0.0030 |" in answer.output  # build, judge, mock
    assert out.read_text() == answer.output == render_markdown([one, cohort_of(json.loads(paths[1].read_text()),
                                                                                 "claude-only")])


def test_a_file_that_is_not_eval_results_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    for path, said in ((bad, "not an eval-results.json"), (tmp_path / "missing.json", "cannot read it")):
        with pytest.raises(SystemExit) as exit_:
            main(["cost-report", str(path)])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith("error: ") and said in err and err.count("\n") == 1


def test_the_report_shows_the_cost_by_stage_the_gateway_and_each_units_calls() -> None:
    res = results("r", [costed(unit("a", 0, {"s": True})), costed(unit("a", 1, {"s": False}))])
    res.config["model_gateway_status"] = {"calls": 16, "unattributed_usd": 0.0, "outages": 1, "refused_while_down": 2,
                                   "adaptive": True, "concurrency": 6, "concurrency_changes": [{}, {}],
                                   "failed_to_caller": {"outage": 2}}
    page = render_report(res)
    section = page.split("<h2>Model cost by stage</h2>", 1)[1].split("<h2>", 1)[0]
    assert "green 1/2 iterations" in section and f"cost per green iteration ${2 * 0.0115:.4f}" in section
    assert '<td>build</td><td class="num">10</td><td class="num">2,000</td>' in section
    assert "provider outages 1" in section and "failed to their caller: outage 2" in section
    assert page.count("<h4>Model calls by stage ($0.0115)</h4>") == 2
    assert "No model gateway in this run" in render_report(results("r", [unit("a", 0, {"s": True})]))
