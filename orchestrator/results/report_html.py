"""``report.html``: one self-contained page (inline CSS, JS and SVG; no external URL) with the run
summary, the per-case table, a per-lane timeline of units and a cost chart per case.

Every string from the run is redacted, then escaped with :func:`html.escape`.
"""

from __future__ import annotations

import html
import math
import re
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.redact import redact
from orchestrator.results.model import CaseSummary, EvalResults, RunSummary, UnitResult
from orchestrator.results.scoring import UnitOutcome, case_pass_means, summaries, unit_outcome

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
  document.body.setAttribute('data-ready','1');
})();
"""


def esc(text: object) -> str:
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
            f'<td data-v="{esc(case.case)}">{esc(case.case)}</td>'
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
    parts.append("</svg>")
    seen = {unit_outcome(u) for u in timed}
    legend = "".join(f'<span><i style="background:{OUTCOME_COLOURS[o]}"></i>{esc(o.value)}</span>'
                     for o in UnitOutcome if o in seen)
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


def render_report(results: EvalResults) -> str:
    """The whole page as one string."""
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
        f"{_stats(summary, results)}{stopped}"
        f"<h2>Cases</h2>{_case_table(cases, summary.k)}"
        f"<h2>Lane timeline</h2>{_timeline(results.units)}"
        f"<h2>Build cost per case</h2>{_cost_chart(cases)}"
        f"<script>{_JS}</script></body></html>\n"
    )


def write_report(directory: Path, results: EvalResults) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / FILENAME
    path.write_text(render_report(results), encoding="utf-8")
    return path
