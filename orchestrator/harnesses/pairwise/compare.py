"""``orchestrator pairwise-compare``: two pairwise folders side by side, prompt by prompt, as one
self-contained HTML page (no external URL: the workflow previews are drawn by the page itself).

A side is a folder this harness wrote (``summary.json`` + ``results.jsonl``) or one of
``ai-workflow-builder.ee``'s (``example-*/`` with ``prompt.txt``, ``workflow.json``,
``feedback.json``, ``error.txt``), as n8n's ``compare-pairwise.ts`` reads both. Rows are joined on
the prompt text with whitespace collapsed (n8n's ``promptJoinKey``).

Per prompt, each side's *pass share* is the share of its runs (every iteration) that built a
workflow whose panel passed (``pairwise_primary`` 1; a failed build is a fail). The verdict:
``both-pass`` (both always pass), ``both-fail`` (neither ever passes), ``a-only`` / ``b-only`` (that
side passes more often — with one iteration, n8n's "EE only" / "IA only"), ``tie`` (both pass
sometimes, equally often: only with ``--iterations`` ≥ 2). A prompt one side lacks counts as a fail
there. Rows are ordered a-only, b-only, tie, both-fail, both-pass, then by prompt.

The page: headline metrics per side (primary pass rate over all runs, average diagnostic, average
build time, builds ok, tool-call error rate, build failures by class, interactivity counters), the
verdict totals, a filter bar (text and verdicts), and one collapsed row per prompt; a row's heavy
part (per-run status, judge notes, the workflow preview) sits in a ``<template>`` and is rendered
when the row is first opened.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import UserError
from orchestrator.harnesses.common import errored_call, write_text
from orchestrator.harnesses.pairwise.panel import score
from orchestrator.redact import redact, redact_obj

VERDICTS = ("a-only", "b-only", "tie", "both-fail", "both-pass")


@dataclass
class Run:
    prompt: str
    example_id: str
    iteration: int
    success: bool
    workflow: dict[str, Any] | None
    feedback: list[dict[str, Any]]
    duration_ms: float = 0.0
    error_class: str | None = None
    error_message: str | None = None
    dos: str | None = None
    donts: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether the run built a workflow and the panel's primary metric passed it."""
        return self.success and score(self.feedback, "pairwise_primary") == 1


@dataclass
class Side:
    label: str
    runs: list[Run]
    summary: dict[str, Any] = field(default_factory=dict)

    def headline(self) -> dict[str, Any]:
        """One side's figures for its card: pass rate, mean diagnostic score, duration, builds, failures
        by class, tool calls and errors, interactivity."""
        runs = self.runs
        diag = [d for r in runs if (d := score(r.feedback, "pairwise_diagnostic")) is not None]
        calls = [c for r in runs for c in r.tool_calls]
        failures: dict[str, int] = {}
        for r in runs:
            if not r.success:
                failures[r.error_class or "error"] = failures.get(r.error_class or "error", 0) + 1
        return {
            "runs": len(runs), "passRate": sum(r.passed for r in runs) / len(runs) if runs else 0.0,
            "avgDiagnostic": sum(diag) / len(diag) if diag else 0.0,
            "avgDurationMs": sum(r.duration_ms for r in runs) / len(runs) if runs else 0.0,
            "built": sum(r.success for r in runs), "failures": failures,
            "toolCalls": len(calls), "toolErrors": sum(1 for c in calls if errored_call(c)),
            "interactivity": self.summary.get("interactivity") or {},
        }


def join_key(prompt: str) -> str:
    """The key that pairs the two sides' runs: the prompt with whitespace collapsed."""
    return " ".join(prompt.split())


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _ee_runs(folder: Path) -> list[Run]:
    runs: list[Run] = []
    for example in sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith("example-")):
        try:
            prompt = (example / "prompt.txt").read_text(encoding="utf-8")
        except OSError:
            continue
        fb = _read_json(example / "feedback.json") or {}
        rows = fb.get("allFeedback") or [f for ev in fb.get("evaluators") or [] for f in ev.get("feedback") or []]
        workflow = _read_json(example / "workflow.json")
        error = (example / "error.txt").read_text(encoding="utf-8") if (example / "error.txt").is_file() else None
        status = fb.get("status", "unknown")
        success = status != "error" and workflow is not None
        runs.append(Run(prompt, example.name, 1, success, workflow if isinstance(workflow, dict) else None,
                        [r for r in rows if isinstance(r, dict)], float(fb.get("durationMs") or 0.0),
                        None if success else ("error" if status == "error" else str(status)), error))
    return runs


def load_side(folder: Path, label: str | None = None) -> Side:
    """One side: this harness's folder or ``ai-workflow-builder.ee``'s; a folder that is neither is
    the user's error, one line naming it."""
    if not folder.is_dir():
        raise UserError(f"pairwise folder not found: {folder}")
    summary = _read_json(folder / "summary.json")
    results = folder / "results.jsonl"
    if results.is_file():
        runs = []
        for number, line in enumerate(results.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise UserError(f"{results}: line {number} is not JSON") from None
            build = row.get("build") or {}
            runs.append(Run(str(row.get("prompt") or ""), str(row.get("exampleId") or ""), int(row.get("iteration") or 1),
                            bool(build.get("success")), row.get("workflow"), list(row.get("feedback") or []),
                            float(build.get("durationMs") or 0.0), build.get("errorClass"), build.get("errorMessage"),
                            row.get("dos"), row.get("donts"), list(row.get("toolCalls") or [])))
    else:
        runs = _ee_runs(folder)
        if not runs:
            raise UserError(f"{folder} is not a pairwise folder: no results.jsonl and no example-*/ folders")
    name = label or folder.name
    return Side(str(name), runs, summary if isinstance(summary, dict) else {})


@dataclass
class Row:
    prompt: str
    a: list[Run]
    b: list[Run]
    verdict: str = "both-fail"

    @property
    def example_ids(self) -> str:
        """The row's example ids from both sides, each once."""
        return " / ".join(dict.fromkeys(r.example_id for r in [*self.a, *self.b] if r.example_id))


def share(runs: list[Run]) -> float:
    """The share of ``runs`` that passed (0 without runs)."""
    return sum(r.passed for r in runs) / len(runs) if runs else 0.0


def verdict(a: list[Run], b: list[Run]) -> str:
    """A row's verdict by the two sides' pass shares: ``both-pass``, ``both-fail``, ``tie``, ``a-only`` or
    ``b-only`` (the side with the higher share)."""
    pa, pb = share(a), share(b)
    if pa == pb:
        return "both-pass" if pa == 1 else "both-fail" if pa == 0 else "tie"
    return "a-only" if pa > pb else "b-only"


def pair(a: Side, b: Side) -> list[Row]:
    """The two sides' runs paired by prompt into rows, each with its verdict, sorted by verdict then
    prompt."""
    rows: dict[str, Row] = {}
    for side, runs in (("a", a.runs), ("b", b.runs)):
        for run in runs:
            row = rows.setdefault(join_key(run.prompt), Row(run.prompt, [], []))
            (row.a if side == "a" else row.b).append(run)
    for row in rows.values():
        row.a.sort(key=lambda r: r.iteration)
        row.b.sort(key=lambda r: r.iteration)
        row.verdict = verdict(row.a, row.b)
    return sorted(rows.values(), key=lambda r: (VERDICTS.index(r.verdict), r.prompt))


# --------------------------------------------------------------------------------------------- page

def _e(value: Any) -> str:
    return html.escape(redact(str(value)), quote=True)


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def _secs(ms: float) -> str:
    return f"{ms / 1000:.1f}s" if ms < 60_000 else f"{int(ms // 60_000)}m{int(ms % 60_000 // 1000):02d}s"


def _card(side: Side) -> str:
    h = side.headline()
    inter = h["interactivity"]
    failures = ", ".join(f"{k}: {v}" for k, v in sorted(h["failures"].items())) or "none"
    rate = _pct(h["toolErrors"] / h["toolCalls"]) if h["toolCalls"] else "n/a"
    counters = " · ".join(f"{k} {v if not isinstance(v, list) else len(v)}" for k, v in inter.items()) or "n/a"
    meta = side.summary
    return (f'<div class="card"><h2>{_e(side.label)}</h2>'
            + (f'<div class="meta">judge {_e(meta.get("judgeModel"))} × {_e(meta.get("numJudges"))}, '
               f'dataset {_e(meta.get("dataset"))}</div>' if meta else "")
            + f'<div class="metric"><b>{_pct(h["passRate"])}</b><span>primary pass ({h["runs"]} runs)</span></div>'
            f'<div class="metric"><b>{h["avgDiagnostic"]:.2f}</b><span>avg diagnostic</span></div>'
            f'<div class="metric"><b>{_secs(h["avgDurationMs"])}</b><span>avg build time</span></div>'
            f'<div class="metric"><b>{h["built"]}/{h["runs"]}</b><span>built ok</span></div>'
            f'<div class="metric"><b>{rate}</b><span>tool error rate ({h["toolErrors"]}/{h["toolCalls"]})</span></div>'
            f'<div class="meta failures">build failures: {_e(failures)}</div>'
            f'<div class="meta">interactivity: {_e(counters)}</div></div>')


def _chip(label: str, runs: list[Run]) -> str:
    if not runs:
        return f'<span class="chip missing">{_e(label)} <span class="st">N/A</span></span>'
    passed = sum(r.passed for r in runs)
    failed_builds = [r for r in runs if not r.success]
    status = ("PASS" if passed == len(runs) else "FAIL" if passed == 0 else f"PASS {passed}/{len(runs)}")
    if failed_builds and passed == 0:
        status = f"BUILD {(failed_builds[0].error_class or 'error').upper()}"
    kind = "pass" if passed == len(runs) else "fail" if passed == 0 else "partial"
    diag = [d for r in runs if (d := score(r.feedback, "pairwise_diagnostic")) is not None]
    meta = f"diag {sum(diag) / len(diag):.2f}" if diag else "no diag"
    return f'<span class="chip {kind}">{_e(label)} <span class="st">{_e(status)}</span> <em>{meta}</em></span>'


def _criteria(text: str | None, kind: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    items = "".join(f"<li>{_e(line)}</li>" for line in lines)
    return f'<div class="criteria {kind}"><h4>{"Do" if kind == "do" else "Don&#x27;t"}</h4><ul>{items}</ul></div>'


def _judges(run: Run) -> str:
    rows = [f for f in run.feedback if re.fullmatch(r"judge\d+", str(f.get("metric")))]
    if not rows:
        return ""
    body = "".join(f'<tr><td class="{"ok" if f.get("score") == 1 else "bad"}">{_e(f["metric"])}</td>'
                   f'<td>{_e(f.get("comment") or "no violations")}</td></tr>' for f in rows)
    return f'<table class="judges"><tr><th>judge</th><th>notes</th></tr>{body}</table>'


def _run_block(run: Run) -> str:
    status = ("PASS" if run.passed else "FAIL") if run.success else f"BUILD {(run.error_class or 'error').upper()}"
    preview = ('<div class="no-wf">No workflow built.</div>' if run.workflow is None else
               f'<div class="wf" data-workflow="{_e(json.dumps(redact_obj(run.workflow), default=str))}"></div>')
    error = f'<div class="err">{_e(run.error_message)}</div>' if run.error_message and not run.success else ""
    diag = score(run.feedback, "pairwise_diagnostic")
    return (f'<div class="run"><div class="run-head">#{run.iteration} <span class="st {"ok" if run.passed else "bad"}">'
            f'{_e(status)}</span> {_secs(run.duration_ms)}{f" · diag {diag:.2f}" if diag is not None else ""}</div>'
            f'{error}{preview}{_judges(run)}</div>')


def _column(label: str, runs: list[Run]) -> str:
    inner = "".join(_run_block(r) for r in runs) or '<div class="no-wf">No record for this prompt.</div>'
    return f'<div class="col"><div class="col-label">{_e(label)}</div>{inner}</div>'


def _row(row: Row, index: int, a: Side, b: Side) -> str:
    label = {"a-only": f"{a.label} only", "b-only": f"{b.label} only", "tie": "tie",
             "both-fail": "both fail", "both-pass": "both pass"}[row.verdict]
    dos = next((r.dos for r in [*row.b, *row.a] if r.dos), None)
    donts = next((r.donts for r in [*row.b, *row.a] if r.donts), None)
    preview = row.prompt if len(row.prompt) <= 110 else row.prompt[:110] + "…"
    return (f'<details class="row v-{row.verdict}" id="row-{index}" data-verdict="{row.verdict}" '
            f'data-text="{_e((row.prompt + " " + row.example_ids).lower())}">'
            f'<summary><span class="verdict">{_e(label.upper())}</span><span class="ids">{_e(row.example_ids)}</span>'
            f'<span class="prompt">{_e(preview)}</span><span class="chips">{_chip(a.label, row.a)}{_chip(b.label, row.b)}'
            f'</span></summary><div class="body"><pre>{_e(row.prompt)}</pre><div class="crit">'
            f'{_criteria(dos, "do")}{_criteria(donts, "dont")}</div><div class="lazy"><template><div class="grid">'
            f'{_column(a.label, row.a)}{_column(b.label, row.b)}</div></template>'
            f'<div class="placeholder">Open the row to draw the runs and workflow previews…</div></div></div></details>')


STYLE = """
body{margin:0;font-family:system-ui,sans-serif;background:#f6f7f9;color:#1d2330}
header{padding:14px 20px;background:#fff;border-bottom:1px solid #d0d5dd}header h1{margin:0;font-size:18px}
main{padding:16px 20px;display:flex;flex-direction:column;gap:16px;max-width:1500px}
.cards{display:grid;grid-template-columns:1fr 1fr;gap:14px}.card{background:#fff;border:1px solid #d0d5dd;border-radius:8px;padding:12px 16px}
.card h2{margin:0 0 6px;font-size:15px}.metric{display:flex;justify-content:space-between;font-size:13px;margin-top:4px}
.metric b{font-size:18px;color:#3949ab}.meta{font-size:12px;color:#5f6b7a;margin-top:4px}.failures{color:#c62828}
.totals{display:grid;grid-template-columns:repeat(5,1fr);gap:10px}.total{background:#fff;border:1px solid #d0d5dd;border-radius:8px;padding:10px 14px}
.total b{font-size:24px;display:block}.total span{font-size:12px;color:#5f6b7a}
.v-both-pass .verdict,.total.v-both-pass b{color:#2e7d32}.v-both-fail .verdict,.total.v-both-fail b{color:#c62828}
.v-a-only .verdict,.total.v-a-only b{color:#5e35b1}.v-b-only .verdict,.total.v-b-only b{color:#00897b}.v-tie .verdict,.total.v-tie b{color:#ef6c00}
.filters{display:flex;gap:10px;align-items:center;flex-wrap:wrap;background:#fff;border:1px solid #d0d5dd;border-radius:8px;padding:8px 12px}
.filters input[type=search]{flex:1 1 260px;padding:5px 8px}
.rows{background:#fff;border:1px solid #d0d5dd;border-radius:8px}details.row{border-bottom:1px solid #e4e7ec}
details.row>summary{cursor:pointer;list-style:none;display:grid;grid-template-columns:120px 200px 1fr auto;gap:12px;padding:9px 14px;font-size:13px;align-items:center}
details.row>summary::-webkit-details-marker{display:none}.verdict{font-weight:700;font-size:11px}
.ids{font-family:monospace;font-size:11px;color:#5f6b7a;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.prompt{overflow:hidden;text-overflow:ellipsis;white-space:nowrap}.chips{display:flex;gap:6px;white-space:nowrap}
.chip{font-size:11px;border:1px solid #d0d5dd;border-radius:4px;padding:2px 6px}.chip.pass{background:#e8f5e9}.chip.fail{background:#ffebee}.chip.partial{background:#fff3e0}
.chip .st{font-weight:700}.body{padding:12px 16px;background:#fafbfc}pre{white-space:pre-wrap;background:#fff;border:1px solid #e4e7ec;padding:8px}
.crit{display:grid;grid-template-columns:1fr 1fr;gap:10px}.criteria h4{margin:4px 0;font-size:11px;text-transform:uppercase}
.criteria.do h4{color:#2e7d32}.criteria.dont h4{color:#c62828}.grid{display:grid;grid-template-columns:1fr 1fr;gap:12px;margin-top:10px}
.col{background:#fff;border:1px solid #d0d5dd;border-radius:6px;padding:8px}.col-label{font-weight:600;margin-bottom:6px}
.run{border-top:1px solid #eef0f3;padding:6px 0}.run-head{font-size:12px}.st.ok{color:#2e7d32;font-weight:700}.st.bad{color:#c62828;font-weight:700}
.err{color:#c62828;font-size:11px;white-space:pre-wrap}.no-wf{color:#5f6b7a;font-style:italic;font-size:12px;padding:10px}
.wf svg{width:100%;height:150px;background:#fff;border:1px solid #e4e7ec;border-radius:4px}
table.judges{font-size:11px;border-collapse:collapse;width:100%;margin-top:4px}table.judges td,table.judges th{border-bottom:1px solid #eef0f3;padding:3px 6px;text-align:left}
td.ok{color:#2e7d32;font-weight:600}td.bad{color:#c62828;font-weight:600}.placeholder{color:#5f6b7a;font-size:12px;padding:8px;border:1px dashed #d0d5dd}
"""

SCRIPT = """
(function(){
  function draw(el){
    var wf; try { wf = JSON.parse(el.getAttribute('data-workflow')); } catch (e) { return; }
    var nodes = (wf.nodes || []).filter(function(n){ return n && n.type !== 'n8n-nodes-base.stickyNote'; });
    var pos = {}, xs = [], ys = [];
    nodes.forEach(function(n, i){ var p = n.position || [i * 220, 0]; pos[n.name] = p; xs.push(p[0]); ys.push(p[1]); });
    var minX = Math.min.apply(null, xs.concat([0])), maxX = Math.max.apply(null, xs.concat([1]));
    var minY = Math.min.apply(null, ys.concat([0])), maxY = Math.max.apply(null, ys.concat([1]));
    var W = 600, H = 150, sx = (W - 160) / Math.max(1, maxX - minX), sy = (H - 50) / Math.max(1, maxY - minY);
    function at(name){ var p = pos[name]; return [20 + (p[0] - minX) * sx, 20 + (p[1] - minY) * Math.min(sx, sy)]; }
    var svg = '<svg viewBox="0 0 ' + W + ' ' + H + '" xmlns="http://www.w3.org/2000/svg">';
    Object.keys(wf.connections || {}).forEach(function(src){
      var outs = (wf.connections[src] || {}).main || [];
      outs.forEach(function(list){ (list || []).forEach(function(c){
        if (!pos[src] || !pos[c.node]) return; var a = at(src), b = at(c.node);
        svg += '<line x1="' + (a[0] + 120) + '" y1="' + (a[1] + 14) + '" x2="' + b[0] + '" y2="' + (b[1] + 14) + '" stroke="#607d8b" stroke-width="2"/>';
      }); });
    });
    nodes.forEach(function(n){ var a = at(n.name); var t = String(n.name).replace(/[&<>"]/g, function(ch){ return {'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[ch]; });
      svg += '<rect class="node" x="' + a[0] + '" y="' + a[1] + '" width="120" height="28" rx="5" fill="#e8eaf6" stroke="#3949ab"/>'
          + '<text x="' + (a[0] + 6) + '" y="' + (a[1] + 18) + '" font-size="11" fill="#1d2330">' + t.slice(0, 18) + '</text>'; });
    el.innerHTML = svg + '</svg>';
  }
  document.querySelectorAll('details.row').forEach(function(row){
    row.addEventListener('toggle', function(){
      var slot = row.querySelector('.lazy'); if (!row.open || !slot || slot.getAttribute('data-loaded')) return;
      var tpl = slot.querySelector('template'); slot.appendChild(tpl.content.cloneNode(true));
      var ph = slot.querySelector('.placeholder'); if (ph) ph.remove();
      slot.querySelectorAll('.wf').forEach(draw); slot.setAttribute('data-loaded', '1');
    });
  });
  var q = document.getElementById('q'), boxes = Array.prototype.slice.call(document.querySelectorAll('.filters input[type=checkbox]'));
  var rows = Array.prototype.slice.call(document.querySelectorAll('details.row')), count = document.getElementById('count');
  function apply(){ var text = (q.value || '').toLowerCase(), on = {}, shown = 0;
    boxes.forEach(function(b){ on[b.getAttribute('data-verdict')] = b.checked; });
    rows.forEach(function(r){ var ok = on[r.getAttribute('data-verdict')] && (!text || r.getAttribute('data-text').indexOf(text) >= 0);
      r.style.display = ok ? '' : 'none'; if (ok) shown++; });
    count.textContent = shown + ' / ' + rows.length; }
  q.addEventListener('input', apply); boxes.forEach(function(b){ b.addEventListener('change', apply); }); apply();
  document.body.setAttribute('data-ready', '1');
})();
"""


def render_page(a: Side, b: Side, rows: list[Row]) -> str:
    """The comparison page as one self-contained HTML document (cards, totals, filterable rows)."""
    counts = {v: sum(1 for r in rows if r.verdict == v) for v in VERDICTS}
    names = {"both-pass": "Both pass", "a-only": f"{a.label} only", "b-only": f"{b.label} only", "tie": "Tie",
             "both-fail": "Both fail"}
    totals = "".join(f'<div class="total v-{v}"><b>{counts[v]}</b><span>{_e(names[v])} · '
                     f'{_pct(counts[v] / len(rows)) if rows else "0%"}</span></div>' for v in VERDICTS)
    boxes = "".join(f'<label><input type="checkbox" data-verdict="{v}" checked> {_e(names[v])}</label>' for v in VERDICTS)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Pairwise comparison — '
            f'{_e(a.label)} vs {_e(b.label)}</title><style>{STYLE}</style></head><body>'
            f'<header><h1>Pairwise comparison — {_e(a.label)} vs {_e(b.label)}</h1><div class="meta">{len(rows)} '
            f'prompt(s). A verdict compares each side\'s share of passing runs (a failed build is a fail).</div></header>'
            f'<main><section class="cards">{_card(a)}{_card(b)}</section><section class="totals">{totals}</section>'
            f'<section class="filters"><input type="search" id="q" placeholder="Filter by prompt or example id">{boxes}'
            f'<span id="count"></span></section><section class="rows">'
            + "".join(_row(r, i, a, b) for i, r in enumerate(rows))
            + f"</section></main><script>{SCRIPT}</script></body></html>")


def write_page(a: Side, b: Side, out: Path) -> tuple[Path, list[Row]]:
    """Pair the sides and write the page to ``out``; returns the path and the rows."""
    rows = pair(a, b)
    write_text(out, render_page(a, b, rows))
    return out, rows
