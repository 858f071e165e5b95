"""report.html: self-contained, escaped and redacted; rendered for real in headless Chromium."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import time
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from _tools import require
from eval_results_factory import results, unit

from orchestrator.redact import MASK, register_secret
from orchestrator.results.model import BuildStatus, EvalResults
from orchestrator.results.report_html import (
    FILENAME,
    OUTCOME_COLOURS,
    render_report,
    write_report,
)
from orchestrator.results.scoring import UnitOutcome

CHROMIUM = Path("/usr/bin/chromium")
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


def _decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and unfiltered RGB(A) rows of an 8-bit non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind!r}"
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    assert header is not None
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line) if bpp == 3 else bytes(v for j, v in enumerate(line) if j % 4 != 3))
        prev = line
    return width, height, rows


def _chromium(*args: str, user_data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={user_data}", *args],
        capture_output=True, text=True, timeout=180,
    )


@pytest.mark.slow
@pytest.mark.chromium
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    deadline = time.monotonic() + 300
    while not CHROMIUM.exists() and time.monotonic() < deadline:  # it may still be being installed
        time.sleep(5)
    require("chromium", CHROMIUM.exists, "apt-get install -y chromium")
    page = write_report(tmp_path, _run())
    assert page.name == FILENAME
    url = page.resolve().as_uri()

    dom = _chromium("--dump-dom", url, user_data=tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-ready="1"' in dom.stdout  # the inline script ran to the end
    assert len(re.findall(r'<tr class="case-row"', dom.stdout)) == 4
    assert dom.stdout.count('class="unit-bar"') == 9

    shot = tmp_path / "report.png"
    proc = _chromium(f"--screenshot={shot}", "--window-size=1280,1600", url, user_data=tmp_path / "profile-shot")
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    width, height, rows = _decode_png(shot.read_bytes())
    assert (width, height) == (1280, 1600)
    pixels = {row[i:i + 3] for row in rows[::8] for i in range(0, len(row), 24)}
    assert len(pixels) > 20, f"screenshot looks blank ({len(pixels)} colours)"
    # the outcome colours of the timeline bars are on screen
    on_screen = {bytes.fromhex(OUTCOME_COLOURS[o][1:]) for o in (UnitOutcome.passed, UnitOutcome.failed)}
    all_pixels = {row[i:i + 3] for row in rows[::2] for i in range(0, len(row), 3)}
    assert on_screen <= all_pixels
    shutil.rmtree(tmp_path / "profile-dom", ignore_errors=True)
    shutil.rmtree(tmp_path / "profile-shot", ignore_errors=True)


class _Page:
    """One Chromium tab over the DevTools protocol (loopback websocket), for a real click."""

    def __init__(self, ws_url: str) -> None:
        import websocket  # websocket-client (installed with the kubernetes client)

        self.ws = websocket.create_connection(ws_url, timeout=30)
        self._id = 0

    def call(self, method: str, **params: object) -> dict:
        import json as _json

        self._id += 1
        self.ws.send(_json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = _json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                assert "error" not in msg, msg
                return msg.get("result", {})

    def js(self, expression: str) -> object:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def close(self) -> None:
        self.ws.close()


@pytest.mark.slow
def test_failing_unit_reason_is_visible_after_one_click(tmp_path: Path) -> None:
    import base64
    import json as _json

    import httpx

    if not CHROMIUM.exists():
        pytest.skip("chromium is not installed")
    res = _run()
    failing = next(u for u in res.units if u.case == "contact-form" and u.iteration == 1)
    failing.scenarios[0].reason = "The Slack message lists no signups: the Code node drops every item."
    page = write_report(tmp_path, res)
    profile = tmp_path / "profile-click"
    proc = subprocess.Popen(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
         "--disable-background-networking", "--disable-component-update", "--remote-debugging-address=127.0.0.1",
         "--remote-debugging-port=0", "--window-size=1280,1000", f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        tab = _Page(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
        try:
            tab.call("Page.navigate", url=page.resolve().as_uri())
            deadline = time.monotonic() + 30
            while tab.js("document.body && document.body.getAttribute('data-ready')") != "1":
                assert time.monotonic() < deadline, "report did not finish loading"
                time.sleep(0.2)
            anchor = "unit-contact-form-1"
            reason_js = f"document.querySelector('#{anchor} .judge-reason')"
            assert tab.js(f"{reason_js}.checkVisibility()") is False  # closed until clicked
            box = _json.loads(str(tab.js(
                f"(function(){{var s=document.querySelector('#{anchor} > summary');s.scrollIntoView({{block:'center'}});"
                "var r=s.getBoundingClientRect();return JSON.stringify([r.x+20,r.y+r.height/2]);})()")))
            for kind in ("mousePressed", "mouseReleased"):  # one real click on the unit's summary
                tab.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)
            assert tab.js(f"document.getElementById('{anchor}').open") is True
            assert tab.js(f"{reason_js}.checkVisibility()") is True
            assert "drops every item" in str(tab.js(f"{reason_js}.innerText"))
            rect = _json.loads(str(tab.js(f"JSON.stringify({reason_js}.getBoundingClientRect())")))
            assert 0 <= rect["top"] < 1000 and rect["height"] > 0  # on screen
            shot = base64.b64decode(tab.call("Page.captureScreenshot", format="png")["data"])
            (tmp_path / "clicked.png").write_bytes(shot)
            width, height, rows = _decode_png(shot)
            band = rows[int(rect["top"]):int(rect["top"] + rect["height"])]
            dark = sum(1 for row in band for i in range(0, len(row), 3) if sum(row[i:i + 3]) < 200)
            assert dark > 50, "the judge's reason is not drawn where the page says it is"
        finally:
            tab.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


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
