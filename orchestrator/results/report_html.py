"""``report.html``: one self-contained page (inline CSS, JS and SVG; no external URL) with the run
summary, the per-case table, a per-lane timeline of units and a cost chart per case, then the
debugging view: per case → per unit (a ``<details>`` that opens with one click) the scenarios'
verdicts with the judge's reasoning and failure category, the mock execution (node traces,
intercepted requests, mock responses, hints), the build expectations ✓/✗, the workflow checks by
dimension, the built workflow (nodes and connections) and the build transcript.

Every string from the run is redacted, then escaped with :func:`html.escape`.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.domain import Verdict
from orchestrator.redact import redact
from orchestrator.results.idle import idle_while_waiting, total_seconds
from orchestrator.results.model import (
    DIMENSIONS,
    CaseSummary,
    EvalResults,
    ExpectationResult,
    RunSummary,
    ScenarioResult,
    StructuralCheck,
    UnitResult,
    by_dimension,
)
from orchestrator.results.report_cost import model_cost_section, unit_cost
from orchestrator.results.scoring import (
    UnitOutcome,
    case_pass_means,
    summaries,
    unit_outcome,
)

FILENAME = "report.html"

OUTCOME_COLOURS: dict[UnitOutcome, str] = {
    UnitOutcome.passed: "#2e7d32",
    UnitOutcome.failed: "#c62828",
    UnitOutcome.incomplete: "#9e9e9e",
    UnitOutcome.build_failed: "#ef6c00",
    UnitOutcome.build_timeout: "#f9a825",
    UnitOutcome.provider_outage: "#6a1b9a",
    UnitOutcome.lane_failure: "#5d4037",
    UnitOutcome.skipped: "#cfd8dc",
}

TIMELINE_WIDTH = 1180
LABEL_WIDTH = 150
ROW_HEIGHT = 28
BAR_HEIGHT = 18
#: Idle-while-units-waited stretches on the lane timeline (issue 25): shorter ones are the
#: scheduler's ordinary hand-over between units, not worth a mark.
IDLE_MIN_S = 2.0
IDLE_COLOUR = "#c62828"
AXIS_HEIGHT = 30
TICK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400)
COST_LABEL_WIDTH = 300
COST_ROW_HEIGHT = 24
MAX_LABEL_CHARS = 44

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1c1c1c;background:#fafafa}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px}
.meta{color:#555;margin-bottom:16px}
.stats{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.stat{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:120px}
.stat b{display:block;font-size:18px}
table{border-collapse:collapse;background:#fff;width:100%}
th,td{border:1px solid #ddd;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4;cursor:pointer;user-select:none} td.num{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even) td{background:#f7f8fa}
.legend span{display:inline-block;margin-right:14px} .legend i{display:inline-block;width:12px;height:12px;
margin-right:4px;vertical-align:-1px;border-radius:2px}
svg{background:#fff;border:1px solid #ddd;border-radius:6px} svg text{font:12px system-ui,sans-serif;fill:#333}
.empty{color:#777;font-style:italic}
.case-block{margin:10px 0 18px} .case-block h3{font-size:15px;margin:14px 0 6px}
details.unit{background:#fff;border:1px solid #ddd;border-left:5px solid #9e9e9e;border-radius:4px;margin:6px 0}
details.unit[data-outcome=passed]{border-left-color:#2e7d32} details.unit[data-outcome=failed]{border-left-color:#c62828}
details.unit[data-outcome=build_failed],details.unit[data-outcome=build_timeout]{border-left-color:#ef6c00}
details.unit>summary{cursor:pointer;padding:6px 10px;font-weight:600}
.unit-body{padding:4px 14px 12px} .unit-body h4{margin:12px 0 4px;font-size:13px;text-transform:uppercase;color:#555}
.chip{display:inline-block;border-radius:3px;padding:0 6px;margin:0 4px 0 0;font-weight:normal;font-size:12px}
.chip.pass{background:#e8f5e9;color:#1b5e20} .chip.fail{background:#ffebee;color:#b71c1c}
.chip.n_a,.chip.incomplete,.chip.error{background:#eceff1;color:#455a64}
.verdict{border:1px solid #eee;border-radius:4px;padding:6px 8px;margin:6px 0}
.reason{margin:4px 0;white-space:pre-wrap} pre{background:#f4f6f8;padding:6px;overflow:auto;max-height:320px;
font-size:12px;margin:4px 0} .muted{color:#777} ul.exp{list-style:none;padding-left:4px} ul.exp li{margin:3px 0}
.ok{color:#2e7d32;font-weight:bold} .ko{color:#c62828;font-weight:bold}
.event{border-bottom:1px dashed #e5e5e5;padding:3px 0} .event b{color:#37474f}
#failing{background:#fff;border:1px solid #ddd;border-left:5px solid #c62828;border-radius:4px;padding:6px 12px;margin:10px 0}
#failing li{margin:3px 0} #failing a{font-weight:600} .what{color:#b71c1c}
"""

_JS = """
(function(){
  var table=document.getElementById('cases');
  if(table){
    var heads=table.tHead.rows[0].cells;
    for(var i=0;i<heads.length;i++){(function(col){
      heads[col].addEventListener('click',function(){
        var body=table.tBodies[0],rows=Array.prototype.slice.call(body.rows);
        var asc=heads[col].getAttribute('data-dir')!=='asc';
        rows.sort(function(a,b){
          var x=a.cells[col].getAttribute('data-v'),y=b.cells[col].getAttribute('data-v');
          var nx=parseFloat(x),ny=parseFloat(y);
          var r=(!isNaN(nx)&&!isNaN(ny))?nx-ny:String(x).localeCompare(String(y));
          return asc?r:-r;});
        rows.forEach(function(r){body.appendChild(r);});
        heads[col].setAttribute('data-dir',asc?'asc':'desc');
      });})(i);}
  }
  function openHash(){var id=decodeURIComponent(location.hash.slice(1));var el=id&&document.getElementById(id);
    if(el&&el.tagName==='DETAILS'){el.open=true;el.scrollIntoView();}}
  window.addEventListener('hashchange',openHash);openHash();
  document.body.setAttribute('data-ready','1');
})();
"""


def esc(text: object) -> str:
    """``text`` made safe for HTML: redacted of secrets, then escaped (quotes included)."""
    return html.escape(redact(str(text)), quote=True)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _short(text: str, limit: int = MAX_LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _when(ts: float | None) -> str:
    return "—" if ts is None else datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def _natural(name: str) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


# --------------------------------------------------------------------------- sections


def _stats(summary: RunSummary, results: EvalResults) -> str:
    band = summary.pass_rate
    rate = "—" if band is None else f"{_pct(band.rate)}"
    ci = "" if band is None else f"95% CI {_pct(band.low)}–{_pct(band.high)}"
    items = [
        ("Pass rate", rate, f"{summary.passed_trials}/{summary.trials} trials · {ci}"),
        (f"pass@{summary.k}", _pct(summary.pass_at_k), f"{summary.scoring_units} scoring units"),
        (f"pass^{summary.k}", _pct(summary.pass_hat_k), "all k trials pass"),
        ("Build cost", f"${summary.build_cost_usd:.2f}", f"{summary.build_turns} turns"),
        ("Units", f"{summary.units_finished}/{summary.units_total}", f"{summary.units_skipped} skipped"),
        ("Lanes", str(len({u.lane for u in results.units if u.lane}) or len(results.lanes)), ""),
    ]
    cells = "".join(f'<div class="stat">{esc(a)}<b>{esc(b)}</b><small>{esc(c)}</small></div>' for a, b, c in items)
    return f'<div class="stats">{cells}</div>'


def _case_table(cases: list[CaseSummary], k: int) -> str:
    head = ["Case", "Iterations", f"pass@{k}", f"pass^{k}", "Cost (USD)", "Turns", "Failure categories"]
    rows = []
    for case in cases:
        at_k, hat_k = case_pass_means(case)
        cost = sum(case.build_cost_usd_per_run)
        turns = sum(case.build_turns_per_run)
        cats = ", ".join(f"{name} ×{n}" for name, n in case.failure_categories.items())
        rows.append(
            f'<tr class="case-row" data-case="{esc(case.case)}">'
            f'<td data-v="{esc(case.case)}"><a href="#case-{esc(_anchor(case.case))}">{esc(case.case)}</a></td>'
            f'<td class="num" data-v="{case.iterations}">{case.iterations}</td>'
            f'<td class="num" data-v="{-1 if at_k is None else at_k}">{_pct(at_k)}</td>'
            f'<td class="num" data-v="{-1 if hat_k is None else hat_k}">{_pct(hat_k)}</td>'
            f'<td class="num" data-v="{cost}">{cost:.2f}</td>'
            f'<td class="num" data-v="{turns}">{turns}</td>'
            f'<td data-v="{esc(cats)}">{esc(cats) or "—"}</td></tr>'
        )
    if not rows:
        return '<p class="empty">No cases.</p>'
    header = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f'<table id="cases"><thead><tr>{header}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _tick_step(span: float) -> int:
    return next((s for s in TICK_STEPS if span / s <= 10), TICK_STEPS[-1])


def _idle_stretches(lanes: dict[str, list[UnitResult]]) -> dict[str, list[tuple[float, float]]]:
    """Per lane, where it ran nothing while units still waited (:mod:`orchestrator.results.idle`):
    from its first unit to the run's end (to its last unit when the lane failed then), stretches
    of at least ``IDLE_MIN_S``."""
    ran = {lane: us for lane, us in lanes.items() if lane != "(no lane)"}
    if not ran:
        return {}
    last_start = max(u.started_at for us in ran.values() for u in us)
    end = max(u.finished_at for us in ran.values() for u in us)
    windows: dict[str, tuple[float, float]] = {}
    for lane, us in ran.items():
        last = max(us, key=lambda u: u.finished_at)
        closed = last.finished_at if unit_outcome(last) is UnitOutcome.lane_failure else end
        windows[lane] = (min(u.started_at for u in us), closed)
    busy = {lane: [(u.started_at, u.finished_at) for u in us] for lane, us in ran.items()}
    return idle_while_waiting(busy, last_start=last_start, windows=windows, min_s=IDLE_MIN_S)


def _timeline(units: list[UnitResult]) -> str:
    timed = [u for u in units if u.finished_at >= u.started_at]
    if not timed:
        return '<p class="empty">No units ran.</p>'
    lanes: dict[str, list[UnitResult]] = defaultdict(list)
    for u in timed:
        lanes[u.lane or "(no lane)"].append(u)
    order = sorted(lanes, key=_natural)
    t0 = min(u.started_at for u in timed)
    span = max(max(u.finished_at for u in timed) - t0, 1.0)
    plot = TIMELINE_WIDTH - LABEL_WIDTH - 20
    height = AXIS_HEIGHT + ROW_HEIGHT * len(order) + 10

    def x(t: float) -> float:
        return LABEL_WIDTH + (t - t0) / span * plot

    idle = _idle_stretches(lanes)

    parts = [f'<svg id="timeline" width="{TIMELINE_WIDTH}" height="{height}" '
             f'viewBox="0 0 {TIMELINE_WIDTH} {height}" role="img" aria-label="Units per lane over time">']
    step = _tick_step(span)
    for i in range(int(math.floor(span / step)) + 1):
        tx = x(t0 + i * step)
        parts.append(f'<line x1="{tx:.1f}" y1="{AXIS_HEIGHT - 6}" x2="{tx:.1f}" y2="{height - 6}" stroke="#e3e3e3"/>')
        parts.append(f'<text x="{tx:.1f}" y="{AXIS_HEIGHT - 12}" text-anchor="middle">{_clock(i * step)}</text>')
    for row, lane in enumerate(order):
        y = AXIS_HEIGHT + row * ROW_HEIGHT
        parts.append(f'<text class="lane-label" x="8" y="{y + ROW_HEIGHT / 2 + 4:.1f}">{esc(_short(lane, 20))}'
                     f'<title>{esc(lane)}</title></text>')
        for u in sorted(lanes[lane], key=lambda u: u.started_at):
            outcome = unit_outcome(u)
            bx, bw = x(u.started_at), max(2.0, (u.finished_at - u.started_at) / span * plot)
            tip = (f"{u.case} #{u.iteration} — {outcome.value} — {_clock(u.finished_at - u.started_at)} "
                   f"(build {u.build.duration_s:.0f}s, verify {u.verify_duration_s:.0f}s, ${u.build.cost_usd:.2f})")
            parts.append(
                f'<rect class="unit-bar" data-outcome="{outcome.value}" x="{bx:.1f}" '
                f'y="{y + (ROW_HEIGHT - BAR_HEIGHT) / 2:.1f}" '
                f'width="{bw:.1f}" height="{BAR_HEIGHT}" rx="3" fill="{OUTCOME_COLOURS[outcome]}" stroke="#fff">'
                f"<title>{esc(tip)}</title></rect>"
            )
        for a, b in idle.get(lane, []):
            parts.append(
                f'<rect class="idle-waiting" x="{x(a):.1f}" y="{y + 2:.1f}" width="{max(1.0, (b - a) / span * plot):.1f}" '
                f'height="{ROW_HEIGHT - 4}" fill="{IDLE_COLOUR}" fill-opacity="0.25" stroke="{IDLE_COLOUR}" '
                f'stroke-dasharray="3 2"><title>idle {b - a:.1f} s while units waited</title></rect>'
            )
    parts.append("</svg>")
    seen = {unit_outcome(u) for u in timed}
    legend = "".join(f'<span><i style="background:{OUTCOME_COLOURS[o]}"></i>{esc(o.value)}</span>'
                     for o in UnitOutcome if o in seen)
    if any(idle.values()):
        total = total_seconds(idle)
        legend += f'<span><i style="background:{IDLE_COLOUR};opacity:0.4"></i>idle while units waited ({total:.0f} s)</span>'
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def _cost_chart(cases: list[CaseSummary]) -> str:
    if not cases:
        return '<p class="empty">No cases.</p>'
    costs = [(c.case, sum(c.build_cost_usd_per_run), len(c.build_cost_usd_per_run)) for c in cases]
    top = max((cost for _, cost, _ in costs), default=0.0) or 1.0
    plot = TIMELINE_WIDTH - COST_LABEL_WIDTH - 90
    height = COST_ROW_HEIGHT * len(costs) + 12
    parts = [f'<svg id="cost-chart" width="{TIMELINE_WIDTH}" height="{height}" '
             f'viewBox="0 0 {TIMELINE_WIDTH} {height}" role="img" aria-label="Build cost per case">']
    for row, (case, cost, runs) in enumerate(costs):
        y = 6 + row * COST_ROW_HEIGHT
        w = max(1.0, cost / top * plot) if cost > 0 else 0.0
        tip = f"{case}: ${cost:.4f} over {runs} run(s)"
        parts.append(f'<text x="8" y="{y + 16}">{esc(_short(case))}<title>{esc(case)}</title></text>')
        parts.append(f'<rect class="cost-bar" x="{COST_LABEL_WIDTH}" y="{y + 3}" width="{w:.1f}" '
                     f'height="{COST_ROW_HEIGHT - 8}" '
                     f'rx="2" fill="#1565c0"><title>{esc(tip)}</title></rect>')
        parts.append(f'<text x="{COST_LABEL_WIDTH + w + 6:.1f}" y="{y + 16}">${cost:.2f}</text>')
    parts.append("</svg>")
    return "".join(parts)


# --------------------------------------------------------------------------- units (debugging view)

MAX_TRANSCRIPT_EVENTS = 400
MAX_EVENT_CHARS = 2000
MAX_JSON_CHARS = 6000


def _anchor(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


def unit_anchor(unit: UnitResult) -> str:
    """The HTML id of ``unit``'s section in the report, for links from the summary tables."""
    return f"unit-{_anchor(unit.case)}-{unit.iteration}"


def _json(value: Any, limit: int = MAX_JSON_CHARS) -> str:
    text = json.dumps(value, indent=1, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "\n…(cut)"


def _chip(status: str, label: str | None = None) -> str:
    return f'<span class="chip {esc(status)}">{esc(label or status)}</span>'


def _verdict_status(v: Verdict) -> str:
    return {Verdict.passed: "pass", Verdict.failed: "fail"}.get(v, "incomplete")


def _summary_line(u: UnitResult) -> str:
    outcome = unit_outcome(u)
    chips = []
    for s in u.scenarios:
        tag = f" [{s.failure_category}]" if s.verdict is Verdict.failed and s.failure_category else ""
        chips.append(_chip(_verdict_status(s.verdict), f"{s.name}: {s.verdict.value}{tag}"))
    failed_exp = sum(1 for e in u.expectations if e.verdict is Verdict.failed)
    if u.expectations:
        judged = sum(1 for e in u.expectations if e.verdict is not Verdict.incomplete)
        chips.append(_chip("fail" if failed_exp else "pass", f"expectations {judged - failed_exp}/{judged}"))
    return (f"#{u.iteration} · {esc(u.lane or '—')} · {esc(outcome.value)} · ${u.build.cost_usd:.2f} · "
            f"{_clock(u.finished_at - u.started_at)} {''.join(chips)}")


def _execution(execution: dict[str, Any] | None) -> str:
    if not execution:
        return ""
    parts = [f'<details class="exec"><summary>Mock execution — {"success" if execution.get("success") else "errors"}'
             f"</summary>"]
    for label in ("errors", "mockErrors"):
        if execution.get(label):
            parts.append(f"<p><b>{esc(label)}:</b></p><pre>{esc(_json(execution[label]))}</pre>")
    for name, node in (execution.get("nodeResults") or {}).items():
        node = node if isinstance(node, dict) else {"value": node}
        mode = node.get("executionMode") or ""
        parts.append(f"<p><b>{esc(name)}</b> <span class=\"muted\">{esc(mode)}</span></p>")
        if node.get("interceptedRequests"):
            parts.append(f"<p class=\"muted\">intercepted requests and mock responses</p>"
                         f"<pre>{esc(_json(node['interceptedRequests']))}</pre>")
        if node.get("outputs"):
            parts.append(f"<pre>{esc(_json(node['outputs']))}</pre>")
    if execution.get("hints"):
        parts.append(f"<p><b>Hints (phase 1)</b></p><pre>{esc(_json(execution['hints']))}</pre>")
    return "".join(parts) + "</details>"


def _scenarios(scenarios: list[ScenarioResult]) -> str:
    if not scenarios:
        return ""
    out = ["<h4>Scenarios</h4>"]
    for s in scenarios:
        status = _verdict_status(s.verdict)
        tags = " · ".join(dict.fromkeys(x for x in (s.failure_category, s.attribution.value if s.attribution else None) if x))
        out.append(
            f'<div class="verdict" data-verdict="{status}"><b>{esc(s.name)}</b> {_chip(status, s.verdict.value)}'
            + (f' <span class="muted">[{esc(tags)}]</span>' if tags and s.verdict is not Verdict.passed else "")
            + (f' <span class="muted">execution {esc(s.execution_id)}</span>' if s.execution_id else "")
            + f'<p class="reason judge-reason">{esc(s.reason) or "<span class=muted>(no reasoning)</span>"}</p>'
            + (f'<p class="muted">root cause: {esc(s.root_cause)}</p>' if s.root_cause else "")
            + _execution(s.execution) + "</div>"
        )
    return "".join(out)


def _expectations(expectations: list[ExpectationResult]) -> str:
    if not expectations:
        return ""
    items = []
    for e in expectations:
        mark = {Verdict.passed: '<span class="ok">✓</span>', Verdict.failed: '<span class="ko">✗</span>'}.get(
            e.verdict, '<span class="muted">–</span>')
        items.append(f"<li>{mark} <i>{esc(e.kind)}</i> {esc(e.text)}"
                     f'<div class="reason muted">{esc(e.reason)}</div></li>')
    return f'<h4>Build expectations</h4><ul class="exp">{"".join(items)}</ul>'


def _checks(checks: list[StructuralCheck]) -> str:
    if not checks:
        return ""
    out = ["<h4>Workflow checks</h4>"]
    for dimension, group in by_dimension(checks).items():
        counts = {st: sum(1 for c in group if c.status == st) for st in ("pass", "fail", "n_a", "error")}
        head = " ".join(_chip(st, f"{st} {n}") for st, n in counts.items() if n)
        rows = "".join(f"<tr><td>{esc(c.name)}{' (LLM)' if c.kind == 'llm' else ''}</td>"
                       f"<td>{_chip(c.status)}</td><td>{esc(c.detail)}</td></tr>" for c in group)
        opened = " open" if counts["fail"] else ""  # a failed check is visible as soon as the unit opens
        out.append(f'<details class="dim"{opened}><summary>{esc(dimension)} {head}</summary>'
                   f"<table><tbody>{rows}</tbody></table></details>")
    return "".join(out)


def _workflow(u: UnitResult, keep_link: bool, lane_urls: dict[str, str] | None = None) -> str:
    wf = u.workflow
    link = ""
    base_url = u.base_url or (lane_urls or {}).get(u.lane or "")
    if keep_link and base_url and u.build.workflow_id:
        url = f"{base_url.rstrip('/')}/workflow/{u.build.workflow_id}"
        link = f' <a href="{esc(url)}">view in n8n</a>'
    if not wf:
        ident = f" {esc(u.build.workflow_id)}" if u.build.workflow_id else ""
        return f"<h4>Built workflow</h4><p class=\"muted\">workflow{ident}: JSON not kept{link}</p>" if ident else ""
    nodes = [n for n in wf.get("nodes") or [] if isinstance(n, dict)]
    rows = "".join(f"<tr><td>{esc(n.get('name'))}</td><td>{esc(n.get('type'))}</td>"
                   f"<td><pre>{esc(_json(n.get('parameters') or {}, 1500))}</pre></td></tr>" for n in nodes)
    links = []
    for source, outputs in (wf.get("connections") or {}).items():
        for kind, branches in (outputs or {}).items() if isinstance(outputs, dict) else []:
            for index, branch in enumerate(branches or []):
                for link_ in branch or []:
                    if isinstance(link_, dict):
                        out_tag = f"[{index}]" if index else ""
                        links.append(f"<li>{esc(source)}{out_tag} → {esc(link_.get('node'))} "
                                     f'<span class="muted">{esc(kind)}</span></li>')
    return (f"<h4>Built workflow</h4><p>{esc(wf.get('name') or u.build.workflow_id or '')}"
            f" — {len(nodes)} node(s){link}</p>"
            f"<table><thead><tr><th>Node</th><th>Type</th><th>Parameters</th></tr></thead><tbody>{rows}</tbody></table>"
            f"<p><b>Connections</b></p><ul>{''.join(links) or '<li class=muted>none</li>'}</ul>")


def _event_text(event: dict[str, Any]) -> tuple[str, str]:
    """(who/what, text) for one transcript event: our transcript entries (:mod:`orchestrator.transcript`),
    claude stream-json or chat events."""
    if isinstance(event.get("kind"), str) and "seq" in event:  # our own transcript file
        entry = str(event["kind"])
        tool = event.get("tool") or ""
        if entry == "tool_call":
            return entry, f"→ {tool}({json.dumps(event.get('args'), default=str)[:600]})"
        if entry in ("tool_result", "tool_error"):
            value = event.get("result" if entry == "tool_result" else "error")
            return entry, f"← {tool}: " + (value if isinstance(value, str) else json.dumps(value, default=str))[:600]
        if entry == "run":
            return entry, " ".join(str(event.get(k)) for k in ("status", "reason") if event.get(k))
        if entry == "meta":
            return entry, " · ".join(f"{k} {event[k]}" for k in ("builder", "model", "lane") if event.get(k))
    kind = str(event.get("type") or event.get("role") or event.get("kind") or event.get("event") or "event")
    message = event.get("message") if isinstance(event.get("message"), dict) else None
    blocks = (message or {}).get("content") if message else event.get("content")
    if isinstance(blocks, list):
        texts = []
        for b in blocks:
            if not isinstance(b, dict):
                texts.append(str(b))
            elif b.get("type") == "text":
                texts.append(str(b.get("text", "")))
            elif b.get("type") == "tool_use":
                texts.append(f"→ {b.get('name')}({json.dumps(b.get('input'), default=str)[:600]})")
            elif b.get("type") == "tool_result":
                content = b.get("content")
                texts.append("← " + (content if isinstance(content, str) else json.dumps(content, default=str))[:600])
            elif b.get("type") == "thinking":
                texts.append("(thinking) " + str(b.get("thinking", ""))[:400])
        return kind, "\n".join(texts)
    for key in ("text", "result", "content", "message", "subtype"):
        if isinstance(event.get(key), str):
            return kind, str(event[key])
    return kind, json.dumps(event, default=str)[:MAX_EVENT_CHARS]


def _transcript(u: UnitResult) -> str:
    if not u.transcript_path:
        return ""
    path = Path(u.transcript_path)
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        return f'<h4>Transcript</h4><p class="muted">{esc(path)}: {esc(exc.strerror or exc)}</p>'
    events = []
    for line in lines[:MAX_TRANSCRIPT_EVENTS]:
        try:
            event = json.loads(line)
        except ValueError:
            event = {"type": "text", "text": line}
        kind, text = _event_text(event if isinstance(event, dict) else {"text": str(event)})
        text = text if len(text) <= MAX_EVENT_CHARS else text[:MAX_EVENT_CHARS] + "…"
        events.append(f'<div class="event"><b>{esc(kind)}</b> <span class="reason">{esc(text)}</span></div>')
    more = f'<p class="muted">… {len(lines) - MAX_TRANSCRIPT_EVENTS} more event(s) in {esc(path)}</p>' \
        if len(lines) > MAX_TRANSCRIPT_EVENTS else ""
    return (f'<details class="transcript"><summary>Transcript — {len(lines)} event(s)</summary>'
            f'{"".join(events)}{more}</details>')


def _what_failed(u: UnitResult) -> tuple[list[str], str]:
    """(what failed — scenario, expectation and check names —, the first reason) of one unit."""
    what: list[str] = []
    reason = ""
    for s in u.scenarios:
        if s.verdict is Verdict.failed:
            what.append(f"scenario {s.name}" + (f" [{s.failure_category}]" if s.failure_category else ""))
            reason = reason or s.reason
    for e in u.expectations:
        if e.verdict is Verdict.failed:
            what.append(f"{e.kind} expectation “{_short(e.text, 60)}”")
            reason = reason or e.reason
    if u.build.status.value != "ok":
        what.insert(0, f"build {u.build.status.value}")
        reason = u.build.error or reason
    what += [f"check {c.name}" for c in u.structural if c.status == "fail"]
    reason = reason or next((c.detail for c in u.structural if c.status == "fail"), "")
    return what, reason


def _failing(results: EvalResults) -> str:
    """Every unit that did not pass, one link each (it opens the unit): the way in from the top."""
    bad = [u for u in results.units if unit_outcome(u) not in (UnitOutcome.passed, UnitOutcome.skipped)]
    if not bad:
        return ""
    items = []
    for u in sorted(bad, key=lambda u: (_natural(u.case), u.iteration)):
        what, reason = _what_failed(u)
        items.append(f'<li><a class="fail-link" href="#{esc(unit_anchor(u))}">{esc(u.case)} #{u.iteration}</a> '
                     f'<span class="muted">{esc(unit_outcome(u).value)}</span>'
                     + (f' — <span class="what">{esc(", ".join(what))}</span>' if what else "")
                     + (f'<div class="reason muted">{esc(_short(reason, 240))}</div>' if reason else "") + "</li>")
    return (f'<div id="failing"><b>{len(bad)} unit(s) did not pass</b> — click one to open it'
            f'<ul>{"".join(items)}</ul></div>')


def _transcript_link(u: UnitResult, base_dir: Path | None) -> str:
    if not u.transcript_path:
        return ""
    path = Path(u.transcript_path)
    if base_dir is not None:
        try:
            href = Path(os.path.relpath(path.resolve(), base_dir.resolve())).as_posix()
        except ValueError:  # another drive
            href = path.resolve().as_uri()
    else:
        href = path.resolve().as_uri()
    return f'<p><a class="transcript-link" href="{esc(href)}">build transcript ({esc(path.name)})</a></p>'


def _build(u: UnitResult) -> str:
    b = u.build
    bits = [f"status {esc(b.status.value)}", f"{b.attempts} attempt(s)", f"{b.turns} turns",
            f"${b.cost_usd:.4f}", f"build {b.duration_s:.0f}s", f"verify {u.verify_duration_s:.0f}s"]
    if u.builder:
        bits.append(f"builder {esc(u.builder)}")
    extra = "".join(f"<p class=\"reason\"><b>{label}:</b> {esc(value)}</p>"
                    for label, value in (("error", b.error), ("root cause", b.root_cause)) if value)
    cat = (f'<p><b>failure:</b> {esc(u.failure_category)}'
           f'{" · " + esc(u.attribution.value) if u.attribution else ""}</p>') if u.failure_category else ""
    return f"<h4>Build</h4><p>{' · '.join(bits)}</p>{extra}{cat}"


def _units(results: EvalResults, base_dir: Path | None = None) -> str:
    keep_link = bool(results.config.get("keep_workflows"))
    lane_urls = {lane.lane: lane.base_url for lane in results.lanes}
    by_case: dict[str, list[UnitResult]] = defaultdict(list)
    for u in results.units:
        by_case[u.case].append(u)
    if not by_case:
        return '<p class="empty">No units.</p>'
    out = []
    for case in sorted(by_case, key=_natural):
        blocks = []
        for u in sorted(by_case[case], key=lambda u: u.iteration):
            body = (_transcript_link(u, base_dir) + _scenarios(u.scenarios) + _expectations(u.expectations)
                    + _checks(u.structural) + _workflow(u, keep_link, lane_urls) + _transcript(u) + _build(u)
                    + unit_cost(u))
            blocks.append(f'<details class="unit" id="{esc(unit_anchor(u))}" data-outcome="{unit_outcome(u).value}">'
                          f"<summary>{_summary_line(u)}</summary><div class=\"unit-body\">{body}</div></details>")
        out.append(f'<section class="case-block" id="case-{esc(_anchor(case))}"><h3>{esc(case)}</h3>'
                   f'{"".join(blocks)}</section>')
    return "".join(out)


def _checks_table(results: EvalResults) -> str:
    """Per check across every build: pass / fail / N/A and pass rate, in rubric order."""
    from orchestrator.results.contract import workflow_checks_summary

    summary = workflow_checks_summary(results.units)
    if not summary:
        return '<p class="empty">No workflow was checked.</p>'
    rank = {d: i for i, d in enumerate(DIMENSIONS)}
    rows = []
    for name, c in sorted(summary["perCheck"].items(), key=lambda kv: (rank.get(kv[1]["dimension"], 99), kv[0])):
        rows.append(f"<tr><td>{esc(c['dimension'])}</td><td>{esc(name)}{' (LLM)' if c['kind'] == 'llm' else ''}</td>"
                    f'<td class="num">{c["passes"]}</td><td class="num">{c["fails"]}</td>'
                    f'<td class="num">{c["nA"] + c["errors"]}</td><td class="num">{_pct(c["passRate"])}</td></tr>')
    return (f'<details id="workflow-checks"><summary>{len(rows)} checks over {summary["scoredBuilds"]} build(s) — '
            "independent of the scenario verdicts</summary><table><thead><tr><th>Dimension</th><th>Check</th>"
            "<th>Pass</th><th>Fail</th><th>N/A</th><th>Pass rate</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></details>")


def render_report(results: EvalResults, base_dir: Path | None = None) -> str:
    """The whole page as one string (``base_dir``: where it is written, for relative transcript links)."""
    summary, cases = summaries(results)
    title = results.experiment_name or results.run_id
    stopped = f'<p><b>Stopped early:</b> {esc(summary.stopped_reason)}</p>' if summary.stopped_reason else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Eval report — {esc(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>Instance AI eval — {esc(title)}</h1>"
        f'<div class="meta">run {esc(results.run_id)} · started {esc(_when(results.started_at))} · '
        f"finished {esc(_when(results.finished_at))}</div>"
        f"{_stats(summary, results)}{stopped}{_failing(results)}"
        f"<h2>Cases</h2>{_case_table(cases, summary.k)}"
        f"<h2>Lane timeline</h2>{_timeline(results.units)}"
        f"<h2>Build cost per case</h2>{_cost_chart(cases)}"
        f"<h2>Model cost by stage</h2>{model_cost_section(results)}"  # the model gateway's count (issue 37)
        f"<h2>Workflow checks</h2>{_checks_table(results)}"
        f"<h2>Units</h2>{_units(results, base_dir)}"
        f"<script>{_JS}</script></body></html>\n"
    )


def write_report(directory: Path, results: EvalResults) -> Path:
    """Render ``results`` into ``report.html`` in ``directory`` (created if need be); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / FILENAME
    path.write_text(render_report(results, directory), encoding="utf-8")
    return path
