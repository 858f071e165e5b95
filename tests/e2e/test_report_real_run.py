"""A real run's ``eval-results.json``, PR comment and ``report.html`` (opened in headless Chromium).

A real n8n process lane (used as a static lane), the real claude CLI building through the lane's
MCP server, the real verification (the lane's mock execution, the 28 workflow checks) and the real
report writer. The only stand-in is the model (the embedded scripted server), whose judge fails one
case's scenario and its LLM workflow checks with reasons we can look for on screen. From the top of
the page, one real click on that unit's link opens it with the failed scenario, its judge reason,
the failed check names and a link to the unit's transcript visible.

The same run is compared, as ``--baseline``, with a baseline in the shape n8n's TypeScript harness
writes (built from the stored reference fixture): its ``eval-results.json`` validates against the
published schema, carries the fields the reference names, and the comparison has the expected tiers.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.chromium import dark_pixels, need_chromium, open_tab
from support.model_switch import SharedModel
from support.process_lanes import leftovers
from support.static_lane import LaneTurn, StaticLane, lane_turn
from support.tools import require

from orchestrator.ledger import Ledger
from orchestrator.results.schema import published_schema
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import run
from orchestrator.scripted.scripts import demo_script, judge, last_user_text, verdict_list
from orchestrator.toolchain import Toolchain, default_cache_dir

pytestmark = [pytest.mark.n8n, pytest.mark.claude, pytest.mark.chromium, pytest.mark.slow]
CASES = Path(__file__).resolve().parents[2] / "cases"
PASSING, FAILING = "smoke-manual-code-greetings", "smoke-manual-set-static-fields"
#: Only the failing case's prompt and success criteria say this.
FAILING_MARK = "the number 3"
SCENARIO_REASON = "The Set node outputs greeting only: there is no status field and no version field."
CHECK_REASON = "The workflow greets instead of setting status and version."
FAKE_KEY = "sk-ant-report-e2e-fake-key-0123456789"
ITERATIONS = 3
REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "reference" / "eval-results.json"

_pass = verdict_list(True, reason="scripted judge: fine")
_fail_scenario = verdict_list(False, reason=SCENARIO_REASON, category="builder_issue")
_fail_checks = verdict_list(False, reason=CHECK_REASON)


def _grade(request: dict[str, Any]) -> dict[str, Any]:
    """The judge: everything passes except the failing case's scenario and its LLM workflow checks
    (its outcome expectation passes, so the unit fails on the scenario alone)."""
    text = last_user_text(request)
    if FAILING_MARK not in text:
        return _pass(request)
    if "## Checks" in text:
        return _fail_checks(request)
    if "## Scenario" in text:
        return _fail_scenario(request)
    return _pass(request)


def reference_baseline(path: Path) -> Path:
    """A baseline as n8n's harness writes it (the stored reference file's shape) in which both cases
    passed every run: the failing case then regresses (0/3 against 3/3), the other stays stable."""
    from orchestrator.cases import load_disk

    doc = json.loads(REFERENCE.read_text())
    template = doc["testCases"][0]
    loaded = {c.slug: c.case for c in load_disk([CASES])[0] if c.slug in (PASSING, FAILING)}
    cases = []
    for slug, case in loaded.items():
        tc = json.loads(json.dumps(template))
        tc["testCaseFile"] = slug
        scenario = tc["scenarios"][0]
        scenario["name"] = case.execution_scenarios[0].name
        tc["scenarios"] = [scenario]
        rows = [{"expectation": t, "pass": True, "reason": "met"} for t in case.outcome_expectations]
        tc["buildExpectationResultsPerRun"] = [rows] * 3
        tc["buildExpectations"] = [{"expectation": t, "passCount": 3, "evaluatedCount": 3, "passAtK": 1,
                                    "passHatK": 1} for t in case.outcome_expectations]
        cases.append(tc)
    doc["testCases"] = cases
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def shared_turn(shared_sandbox_lane: StaticLane, shared_model: SharedModel):
    """The session's seeded lane (``_static_lane``), used as a static lane; its model calls (and
    this module's claude and judge) answered by this module's script on the session's server."""
    with lane_turn(shared_sandbox_lane, shared_model, demo_script(judge_script=judge(_grade))) as turn:
        yield turn


@pytest.fixture(scope="module")
def model(shared_turn: LaneTurn):
    return shared_turn.model


@pytest.fixture(scope="module")
def static_lane(shared_turn: LaneTurn):
    return shared_turn.shared


async def test_a_real_runs_failing_unit_is_one_click_from_the_top(static_lane, model, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    require("claude", Toolchain(default_cache_dir()).claude_ready, "run `orchestrator lanes install`")
    need_chromium()
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model.base_url)
    owner = static_lane.owner
    cfg = RunConfig(
        cases_paths=[CASES], filter=f"{PASSING},{FAILING}", iterations=ITERATIONS, backend="static",
        base_url=static_lane.base_url, lanes=1, email=owner.email, password=owner.password, model_server="real",
        state_dir=tmp_path / "state", output_dir=tmp_path / "out", run_id="report-run",
        baseline=reference_baseline(tmp_path / "baseline-eval-results.json"),
    )
    outcome = await run(cfg)
    assert outcome.ok, outcome.errors
    assert Ledger.for_run("report-run", tmp_path / "state").open_entries() == []
    assert leftovers("report-run", tmp_path / "state") == []

    # eval-results.json: the published schema and the fields the reference names
    document = json.loads((tmp_path / "out" / "eval-results.json").read_text())
    jsonschema.Draft202012Validator(published_schema()).validate(document)
    by_case = {tc["testCaseFile"]: tc for tc in document["testCases"]}
    assert set(by_case) == {PASSING, FAILING}
    for tc in by_case.values():
        assert len(tc["buildCostUsdPerRun"]) == ITERATIONS and all(c > 0 for c in tc["buildCostUsdPerRun"])
        assert len(tc["buildTurnsPerRun"]) == ITERATIONS and all(t >= 2 for t in tc["buildTurnsPerRun"])
        assert [e["passCount"] for e in tc["buildExpectations"]] == [ITERATIONS]
        assert [len(r) for r in tc["buildExpectationResultsPerRun"]] == [1] * ITERATIONS
        for usage in tc["harnessUsagePerRun"]:  # our judge's calls, per agent per model
            assert usage and {"agent", "model", "inputTokens", "uncachedInputTokens", "outputTokens",
                              "reasoningTokens"} <= set(usage[0]) and usage[0]["agent"] == "judge"
        assert all(len(r) == 28 for r in tc["workflowChecksPerRun"])
    failed_rows = by_case[FAILING]["scenarios"][0]["runs"]
    assert all(not r["passed"] and r["failureCategory"] == "builder_issue" and r["attribution"] == "builder_issue"
               and r["rootCause"] for r in failed_rows)
    assert document["summary"]["mcpBuild"]["builds"] == 2 * ITERATIONS
    assert document["summary"]["workflowChecks"]["scoredBuilds"] == 2 * ITERATIONS
    # compared with the reference-shaped baseline: the expected tiers, as evaluation units
    units_cmp = {u["key"]: u for u in document["comparison"]["result"]["evaluationUnits"]}
    assert units_cmp[f"{FAILING}/happy-path"]["kind"] == "scenario"
    assert units_cmp[f"{FAILING}/happy-path"]["verdict"] == "hard_regression"
    assert units_cmp[f"{PASSING}/happy-path"]["verdict"] == "stable"
    expectation_keys = [k for k, u in units_cmp.items() if u["kind"] == "expectation"]
    assert len(expectation_keys) == 2 and all("#expectation:" in k for k in expectation_keys)
    assert all(units_cmp[k]["verdict"] == "stable" for k in expectation_keys)

    # our own record, under its own key: builder, model route, lanes and fingerprints, the unit timeline;
    # every failing unit failed on its scenario with the judge's reason
    ours = document["orchestrator"]
    assert ours["config"]["builder"] == "mcp" and ours["config"]["model_server"] == "real"
    assert ours["lanes"][0]["fingerprint"] and all(u["finished_at"] >= u["started_at"] > 0 for u in ours["units"])
    units = {(u["case"], u["iteration"]): u for u in ours["units"]}
    assert all(u["build"]["status"] == "ok" for u in units.values())
    assert all(s["verdict"] == "pass" for i in range(ITERATIONS) for s in units[PASSING, i]["scenarios"])
    for i in range(ITERATIONS):
        [failed] = units[FAILING, i]["scenarios"]
        assert (failed["verdict"], failed["reason"], failed["failure_category"]) == ("fail", SCENARIO_REASON,
                                                                                      "builder_issue")
    # the builder's narration (claude's final result) reached the communication check: graded, not N/A
    for case, verdict in ((PASSING, True), (FAILING, False)):
        [comm] = [c for c in units[case, 0]["structural"] if c["name"] == "response_describes_changes_accurately"]
        assert comm["passed"] is verdict, comm
    failed_checks = sorted(c["name"] for c in units[FAILING, 0]["structural"] if c["passed"] is False)
    assert "fulfills_user_request" in failed_checks and "response_describes_changes_accurately" in failed_checks
    transcript = Path(units[FAILING, 0]["transcript_path"])
    assert transcript.is_file()

    # the PR comment and the report carry the workflow-check table
    comment = (tmp_path / "out" / "eval-pr-comment.md").read_text()
    assert "### Workflow checks" in comment and f"28 checks over {2 * ITERATIONS} build(s)" in comment
    assert "fulfills_user_request" in comment and "has_trigger" in comment
    report = (tmp_path / "out" / "report.html").read_text()
    table = report[report.index('id="workflow-checks"'):report.index("<h2>Units</h2>")]
    assert f"28 checks over {2 * ITERATIONS} build(s)" in table

    # the report, in a real browser: from the top, one click on the failing unit
    page = tmp_path / "out" / "report.html"
    anchor = f"unit-{FAILING}-0"
    with open_tab(page.resolve().as_uri(), tmp_path / "profile") as tab:
        unit_js = f"document.getElementById('{anchor}')"
        assert tab.js(f"{unit_js}.open") is False
        links = tab.js("Array.from(document.querySelectorAll('#failing a.fail-link')).map(a => a.getAttribute('href'))")
        assert links == [f"#unit-{FAILING}-{i}" for i in range(ITERATIONS)]  # the passing units are not listed
        link = tab.box(f"document.querySelector('#failing a[href=\"#{anchor}\"]')")
        height = float(str(tab.js("window.innerHeight")))
        assert tab.js("window.scrollY") == 0 and 0 <= link["top"] and link["bottom"] <= height  # visible at the top
        tab.click(link["x"] + 5, link["y"] + link["height"] / 2)
        deadline = time.monotonic() + 10
        while tab.js(f"{unit_js}.open") is not True:  # the hash change opens it
            assert time.monotonic() < deadline, "one click did not open the failing unit"
            time.sleep(0.1)

        reason_js = f"document.querySelector('#{anchor} .verdict[data-verdict=fail] .judge-reason')"
        assert tab.js(f"{reason_js}.innerText") == SCENARIO_REASON
        rect = tab.box(reason_js)
        assert 0 <= rect["top"] and rect["bottom"] <= height, rect  # scrolled into view, on screen
        shot = tab.screenshot()
        (tmp_path / "clicked.png").write_bytes(shot)
        assert dark_pixels(shot, rect["top"], rect["height"]) > 50, "the judge's reason is not drawn on screen"

        # what failed is visible without another click: the scenario, the failed checks, the transcript link
        visible_text = str(tab.js(f"{unit_js}.innerText"))
        assert "happy-path" in visible_text and "builder_issue" in visible_text
        for name in failed_checks:
            check_js = (f"Array.from(document.querySelectorAll('#{anchor} details.dim td'))"
                        f".find(td => td.innerText.startsWith('{name}'))")
            assert tab.js(f"{check_js}.checkVisibility()") is True, name
        assert CHECK_REASON in visible_text
        href = tab.js(f"document.querySelector('#{anchor} a.transcript-link').href")
        assert href == transcript.resolve().as_uri()  # the link resolves to the unit's transcript file
