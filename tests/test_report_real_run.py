"""``report.html`` of a real run, opened in headless Chromium: the failing unit is one click away.

A real n8n process lane (used as a static lane), the real claude CLI building through the lane's
MCP server, the real verification (the lane's mock execution, the 28 workflow checks) and the real
report writer. The only stand-in is the model (the embedded scripted server), whose judge fails one
case's scenario and its LLM workflow checks with reasons we can look for on screen. From the top of
the page, one real click on that unit's link opens it with the failed scenario, its judge reason,
the failed check names and a link to the unit's transcript visible.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from _chromium import dark_pixels, need_chromium, open_tab
from _process_lanes import leftovers
from _static_lane import started_static_lane
from _tools import require

from orchestrator.lanes.install import Toolchain, default_cache_dir
from orchestrator.ledger import Ledger
from orchestrator.results.contract import published_schema
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import run
from orchestrator.scripted.scripts import demo_script, judge, last_user_text, verdict_list
from orchestrator.scripted.server import ScriptedModelServer

pytestmark = [pytest.mark.n8n, pytest.mark.claude, pytest.mark.chromium, pytest.mark.slow]
CASES = Path(__file__).resolve().parents[1] / "cases"
PASSING, FAILING = "smoke-manual-code-greetings", "smoke-manual-set-static-fields"
#: Only the failing case's prompt and success criteria say this.
FAILING_MARK = "the number 3"
SCENARIO_REASON = "The Set node outputs greeting only: there is no status field and no version field."
CHECK_REASON = "The workflow greets instead of setting status and version."
FAKE_KEY = "sk-ant-report-e2e-fake-key-0123456789"

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


@pytest.fixture(scope="module")
def model() -> ScriptedModelServer:
    server = ScriptedModelServer(demo_script(judge_script=judge(_grade))).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def static_lane(model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory):
    with started_static_lane("report-lane", tmp_path_factory.mktemp("lane-state"), model.base_url) as lane:
        yield lane


async def test_a_real_runs_failing_unit_is_one_click_from_the_top(static_lane, model, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    require("claude", Toolchain(default_cache_dir()).claude_ready, "run `orchestrator lanes install`")
    need_chromium()
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model.base_url)
    owner = static_lane.owner
    cfg = RunConfig(
        cases_paths=[CASES], filter=f"{PASSING},{FAILING}", iterations=1, backend="static",
        base_url=static_lane.base_url, lanes=1, email=owner.email, password=owner.password, model_server="real",
        state_dir=tmp_path / "state", output_dir=tmp_path / "out", run_id="report-run",
    )
    outcome = await run(cfg)
    assert outcome.ok, outcome.errors
    assert Ledger.for_run("report-run", tmp_path / "state").open_entries() == []
    assert leftovers("report-run", tmp_path / "state") == []

    # the run itself: one unit passed, one failed on its scenario with the judge's reason
    document = json.loads((tmp_path / "out" / "eval-results.json").read_text())
    jsonschema.Draft202012Validator(published_schema()).validate(document)
    units = {u["case"]: u for u in document["orchestrator"]["units"]}
    assert {c: u["build"]["status"] for c, u in units.items()} == {PASSING: "ok", FAILING: "ok"}
    assert [s["verdict"] for s in units[PASSING]["scenarios"]] == ["pass"]
    [failed] = units[FAILING]["scenarios"]
    assert (failed["verdict"], failed["reason"], failed["failure_category"]) == ("fail", SCENARIO_REASON, "builder_issue")
    # the builder's narration (claude's final result) reached the communication check: graded, not N/A
    for case, verdict in ((PASSING, True), (FAILING, False)):
        [comm] = [c for c in units[case]["structural"] if c["name"] == "response_describes_changes_accurately"]
        assert comm["passed"] is verdict, comm
    failed_checks = sorted(c["name"] for c in units[FAILING]["structural"] if c["passed"] is False)
    assert "fulfills_user_request" in failed_checks and "response_describes_changes_accurately" in failed_checks
    transcript = Path(units[FAILING]["transcript_path"])
    assert transcript.is_file()

    # the report, in a real browser: from the top, one click on the failing unit
    page = tmp_path / "out" / "report.html"
    anchor = f"unit-{FAILING}-0"
    with open_tab(page.resolve().as_uri(), tmp_path / "profile") as tab:
        unit_js = f"document.getElementById('{anchor}')"
        assert tab.js(f"{unit_js}.open") is False
        links = tab.js("Array.from(document.querySelectorAll('#failing a.fail-link')).map(a => a.getAttribute('href'))")
        assert links == [f"#{anchor}"]  # the passing unit is not listed
        link = tab.box("document.querySelector('#failing a.fail-link')")
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
