"""report.html: self-contained, escaped and redacted; rendered for real in headless Chromium."""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.chromium import chromium, dark_pixels, decode_png, need_chromium, open_tab
from support.eval_results_factory import results, unit
from support.polling import eventually

from orchestrator.redact import MASK, register_secret
from orchestrator.results.model import BuildStatus, EvalResults
from orchestrator.results.report_html import (
    FILENAME,
    OUTCOME_COLOURS,
    render_report,
    write_report,
)
from orchestrator.results.scoring import UnitOutcome

SECRET = "n8n-api-key-7Hq2LmZpX0"


def _run() -> EvalResults:
    register_secret(SECRET)
    units = []
    t = 1_700_000_000.0
    for i in range(3):
        units.append(unit("contact-form", i, {"happy": i != 1, "empty": True}, {"Sends a mail": True},
                          lane="lane-0", started_at=t + i * 200, duration=180, cost=0.4 + i / 10, turns=20 + i))
        units.append(unit("dedupe <trigger>", i, {"dup": (False, "mock_generation") if i else True},
                          lane="lane-1", started_at=t + 20 + i * 240, duration=220, cost=0.9, turns=35,
                          reason=f"mock said {SECRET}"))
    units.append(unit("slow-case", 0, status=BuildStatus.timeout, lane="lane-10", started_at=t + 30, duration=600,
                      cost=1.5, turns=80, failure_category="build_timeout"))
    units.append(unit("slow-case", 1, {"s": True}, lane="lane-10", started_at=t + 640, duration=90, cost=0.2, turns=9))
    units.append(unit("outage", 0, status=BuildStatus.provider_outage, lane="lane-1", started_at=t + 700,
                      duration=15, cost=0.0, turns=0))
    return results("run-2024-x", units, k=2, experiment=f"nightly {SECRET}")


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_report_is_self_contained_escaped_and_redacted() -> None:
    page = render_report(_run())
    assert SECRET not in page and MASK in page
    assert "<trigger>" not in page and "dedupe &lt;trigger&gt;" in page
    assert not re.search(r"https?://|//cdn|@import", page)
    parser = _Collector()
    parser.feed(page)
    for tag, attrs in parser.tags:
        assert not (tag in {"script", "img", "iframe"} and attrs.get("src")), (tag, attrs)
        assert not (tag == "link" and attrs.get("href")), attrs
    rows = [a for t, a in parser.tags if t == "tr" and a.get("class") == "case-row"]
    assert [r["data-case"] for r in rows] == ["contact-form", "dedupe <trigger>", "outage", "slow-case"]
    bars = [a for t, a in parser.tags if t == "rect" and a.get("class") == "unit-bar"]
    assert len(bars) == 9
    outcomes = [b["data-outcome"] for b in bars]
    assert outcomes.count("failed") == 3 and outcomes.count("build_timeout") == 1
    assert outcomes.count("provider_outage") == 1
    assert {b["fill"] for b in bars if b["data-outcome"] == "passed"} == {OUTCOME_COLOURS[UnitOutcome.passed]}
    assert len([a for t, a in parser.tags if t == "rect" and a.get("class") == "cost-bar"]) == 4
    # per-case cost: contact-form 0.4 + 0.5 + 0.6
    assert '<td class="num" data-v="1.5">1.50</td>' in page


def test_lane_rows_in_natural_order() -> None:
    page = render_report(_run())
    labels = re.findall(r'class="lane-label"[^>]*>([^<]+)<', page)
    assert labels == ["lane-0", "lane-1", "lane-10"]


def test_timeline_marks_a_lane_idle_while_units_waited() -> None:
    """Issue 25's picture: lane-a runs two units then nothing, while lane-b still starts units
    until t=1100; lane-a's idle stretch (1040 s to 1100 s) is marked, its hand-over gap of 1 s is not."""
    units = [
        unit("c1", 0, lane="lane-a", started_at=1000.0, duration=20.0),
        unit("c2", 0, lane="lane-a", started_at=1021.0, duration=19.0),
        *(unit(f"d{i}", 0, lane="lane-b", started_at=1000.0 + 25 * i, duration=25.0) for i in range(5)),
    ]
    page = render_report(results("idle-run", units))
    marks = re.findall(r'<rect class="idle-waiting"[^>]*><title>([^<]+)</title>', page)
    assert marks == ["idle 60.0 s while units waited"]
    assert "idle while units waited (60 s)" in page
    busy = render_report(results("busy-run", units[2:]))
    assert 'class="idle-waiting"' not in busy


@pytest.mark.slow
@pytest.mark.chromium
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    need_chromium()
    page = write_report(tmp_path, _run())
    assert page.name == FILENAME
    url = page.resolve().as_uri()

    dom = chromium("--dump-dom", url, user_data=tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-ready="1"' in dom.stdout  # the inline script ran to the end
    assert len(re.findall(r'<tr class="case-row"', dom.stdout)) == 4
    assert dom.stdout.count('class="unit-bar"') == 9

    shot = tmp_path / "report.png"
    proc = chromium(f"--screenshot={shot}", "--window-size=1280,1600", url, user_data=tmp_path / "profile-shot")
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    width, height, rows = decode_png(shot.read_bytes())
    assert (width, height) == (1280, 1600)
    pixels = {row[i:i + 3] for row in rows[::8] for i in range(0, len(row), 24)}
    assert len(pixels) > 20, f"screenshot looks blank ({len(pixels)} colours)"
    # the outcome colours of the timeline bars are on screen
    on_screen = {bytes.fromhex(OUTCOME_COLOURS[o][1:]) for o in (UnitOutcome.passed, UnitOutcome.failed)}
    all_pixels = {row[i:i + 3] for row in rows[::2] for i in range(0, len(row), 3)}
    assert on_screen <= all_pixels
    shutil.rmtree(tmp_path / "profile-dom", ignore_errors=True)
    shutil.rmtree(tmp_path / "profile-shot", ignore_errors=True)


@pytest.mark.slow
@pytest.mark.chromium
def test_failing_unit_reason_is_visible_after_one_click(tmp_path: Path) -> None:
    """From the top of the page (no scrolling): one real click on the failing unit's link opens it
    with the judge's reason on screen."""
    need_chromium()
    res = _run()
    failing = next(u for u in res.units if u.case == "contact-form" and u.iteration == 1)
    failing.scenarios[0].reason = "The Slack message lists no signups: the Code node drops every item."
    page = write_report(tmp_path, res)
    with open_tab(page.resolve().as_uri(), tmp_path / "profile-click") as tab:
        anchor = "unit-contact-form-1"
        reason_js = f"document.querySelector('#{anchor} .judge-reason')"
        assert tab.js(f"{reason_js}.checkVisibility()") is False  # closed until clicked
        link_js = f"document.querySelector('#failing a[href=\"#{anchor}\"]')"
        link = tab.box(link_js)
        assert tab.js("window.scrollY") == 0 and 0 <= link["top"] < 1000  # on screen at the top
        tab.click(link["x"] + 5, link["y"] + link["height"] / 2)
        eventually(lambda: tab.js(f"document.getElementById('{anchor}').open") is True, interval=0.1,
                   what="the click opened the unit")
        assert tab.js(f"{reason_js}.checkVisibility()") is True
        assert "drops every item" in str(tab.js(f"{reason_js}.innerText"))
        rect = tab.box(reason_js)
        assert 0 <= rect["top"] < 1000 and rect["height"] > 0  # on screen
        shot = tab.screenshot()
        (tmp_path / "clicked.png").write_bytes(shot)
        assert dark_pixels(shot, rect["top"], rect["height"]) > 50, "the judge's reason is not drawn where the page says"


def test_unit_sections_show_what_to_debug_from(tmp_path: Path) -> None:
    import json as _json

    from orchestrator.results.model import StructuralCheck

    res = _run()
    u = next(x for x in res.units if x.case == "contact-form" and x.iteration == 1)
    u.workflow = {"name": "Signups", "nodes": [
        {"name": "Start", "type": "n8n-nodes-base.manualTrigger", "parameters": {}},
        {"name": "Post <b>", "type": "n8n-nodes-base.slack", "parameters": {"channel": "#growth"}}],
        "connections": {"Start": {"main": [[{"node": "Post <b>", "type": "main", "index": 0}]]}}}
    u.scenarios[0].failure_category = "builder_issue"
    u.scenarios[0].execution = {"success": False, "errors": ["Slack: channel_not_found"], "mockErrors": [],
                                "nodeResults": {"Post <b>": {"executionMode": "mocked", "outputs": {"ok": False},
                                                             "interceptedRequests": [{"url": "https://slack.com/api/x",
                                                                                      "mockResponse": {"ok": False}}]}},
                                "hints": {"globalContext": "three signups"}}
    u.structural = [StructuralCheck(name="has_trigger", passed=True, dimension="structure", detail="trigger: Start"),
                    StructuralCheck(name="fulfills_user_request", passed=None, dimension="intent_match", kind="llm",
                                    detail="N/A: no judge key")]
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("\n".join(_json.dumps(e) for e in [
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "I will build it."},
                                                      {"type": "tool_use", "name": "create_workflow", "input": {}}]}},
        {"type": "result", "result": "WORKFLOW_ID=wf1"}]) + "\nnot json\n")
    u.transcript_path = str(transcript)
    html_text = render_report(res)
    section = html_text[html_text.index('id="unit-contact-form-1"'):html_text.index('id="unit-contact-form-2"')]
    assert "happy: fail [builder_issue]" in section  # the summary line names the category
    assert "Post &lt;b&gt;" in section and "Start → Post &lt;b&gt;" in section  # nodes and connections, escaped
    assert "channel_not_found" in section and "mockResponse" in section and "three signups" in section
    assert "structure" in section and "trigger: Start" in section and "N/A: no judge key" in section
    assert "I will build it." in section and "→ create_workflow" in section and "WORKFLOW_ID=wf1" in section
    assert "Transcript — 3 event(s)" in section
    assert "✓" in section  # the expectation


def test_run_level_workflow_checks_table() -> None:
    from orchestrator.results.model import StructuralCheck

    res = _run()
    for u in res.units[:2]:
        u.structural = [StructuralCheck(name="has_trigger", passed=True, dimension="structure"),
                        StructuralCheck(name="no_hardcoded_credentials", passed=False, dimension="security")]
    page = render_report(res)
    table = page[page.index('id="workflow-checks"'):page.index("<h2>Units</h2>")]
    assert "2 checks over 2 build(s)" in table
    assert table.index("has_trigger") < table.index("no_hardcoded_credentials")  # rubric order
    assert '<td class="num">0</td><td class="num">2</td>' in table  # no_hardcoded_credentials: 0 pass, 2 fail


def test_kept_workflow_links_into_its_lane() -> None:
    from orchestrator.results.model import LaneRecord

    res = _run()
    res.lanes = [LaneRecord(lane="lane-0", backend="static", base_url="http://127.0.0.1:5678", fingerprint={})]
    assert "view in n8n" not in render_report(res)
    res.config["keep_workflows"] = True
    assert 'href="http://127.0.0.1:5678/workflow/wf1"' in render_report(res)


def test_failing_units_are_listed_at_the_top_with_what_failed(tmp_path: Path) -> None:
    from orchestrator.results.model import StructuralCheck

    res = _run()
    u = next(x for x in res.units if x.case == "contact-form" and x.iteration == 1)
    u.structural = [StructuralCheck(name="has_trigger", passed=True, dimension="structure"),
                    StructuralCheck(name="no_hardcoded_credentials", passed=False, dimension="security",
                                    detail="token in HTTP Request")]
    u.transcript_path = str(tmp_path / "state" / "transcripts" / "contact-form.1.0.jsonl")
    page = render_report(res, tmp_path / "out")
    top = page[page.index('id="failing"'):page.index("<h2>Cases</h2>")]
    links = re.findall(r'class="fail-link" href="#([^"]+)"', top)
    # every unit that did not pass, in case order: 3 failed, a timeout, an outage
    assert links == ["unit-contact-form-1", "unit-dedupe-trigger-1", "unit-dedupe-trigger-2", "unit-outage-0",
                     "unit-slow-case-0"]
    line = top[top.index("unit-contact-form-1"):top.index("unit-dedupe-trigger-1")]
    assert "scenario happy" in line and "check no_hardcoded_credentials" in line
    section = page[page.index('id="unit-contact-form-1"'):page.index('id="unit-contact-form-2"')]
    assert '<details class="dim" open><summary>security' in section  # a failed check shows when the unit opens
    assert '<details class="dim"><summary>structure' in section
    assert 'class="transcript-link" href="../state/transcripts/contact-form.1.0.jsonl"' in section
    assert 'id="failing"' not in render_report(results("all-good", [unit("c", 0, {"s": True})]))


def test_our_transcript_entries_render_by_kind(tmp_path: Path) -> None:
    from orchestrator.transcript import Transcript

    path = tmp_path / "t.jsonl"
    with Transcript(path, builder="instance-ai", model="m1", lane="lane-0") as t:
        t.user("Build a greeter", 0)
        t.add("tool_call", tool="build-workflow", call_id="c1", args={"filePath": "wf.ts"}, agent="orchestrator-1")
        t.add("tool_result", tool="build-workflow", call_id="c1", result={"success": True, "workflowId": "W9"})
        t.add("assistant", text="I built it.", agent="orchestrator-1")
        t.add("run", status="completed", reason=None)
    res = _run()
    u = next(x for x in res.units if x.case == "contact-form" and x.iteration == 0)
    u.transcript_path = str(path)
    page = render_report(res)
    section = page[page.index('id="unit-contact-form-0"'):page.index('id="unit-contact-form-1"')]
    events = re.findall(r'<div class="event"><b>([^<]+)</b> <span class="reason">([^<]*)</span>', section)
    assert [k for k, _ in events] == ["meta", "user", "tool_call", "tool_result", "assistant", "run"]
    text = dict(events)
    assert text["meta"] == "builder instance-ai · model m1 · lane lane-0"
    assert text["tool_call"] == "→ build-workflow({&quot;filePath&quot;: &quot;wf.ts&quot;})"
    assert text["tool_result"].startswith("← build-workflow: {&quot;success&quot;: true")
    assert text["assistant"] == "I built it." and text["run"] == "completed"
