"""``eval-pr-comment.md``: the whole PR comment as markdown — alert line, aggregate with its Wilson
band, comparison tables (raw tiers beside the Benjamini–Hochberg view), failure-category drift,
per-case results and the failures list. Without a baseline it falls back to a summary of the run.
Every line passes through :func:`orchestrator.redact.redact`."""

from __future__ import annotations

from pathlib import Path

from orchestrator.compare.comparison import Comparison, UnitComparison
from orchestrator.compare.tiers import HARD, Tier
from orchestrator.domain import Verdict
from orchestrator.redact import redact
from orchestrator.results.model import Band, CaseSummary, EvalResults, RunSummary
from orchestrator.results.scoring import NO_WORKFLOW_BUILDS, case_pass_means, summaries

FILENAME = "eval-pr-comment.md"
MAX_FAILURES = 100
MAX_REASON = 240

#: Flagged tiers in the order their tables appear, with their headings.
TIER_SECTIONS: list[tuple[Tier, str, str]] = [
    (Tier.hard_regression, "Hard regressions", "significant drop (p < 0.05, ≥ 30 pts) on a reliable baseline (≥ 70%)"),
    (Tier.soft_regression, "Soft regressions", "p < 0.20, drop ≥ 15 pts, baseline ≥ 50% — often natural variance"),
    (Tier.unreliable_baseline, "Unreliable baseline", "confident drop, but the baseline passed < 70%"),
    (Tier.watch, "Watch", "moved ≥ 35 pts without a flag"),
    (Tier.improvement, "Improvements", "significantly better (p < 0.05, ≥ 30 pts)"),
]


def cell(text: object) -> str:
    """Make ``text`` safe inside a markdown table cell (no pipes, newlines or raw HTML)."""
    s = str(text).replace("\r", " ").replace("\n", " ")
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def code(text: object) -> str:
    """An inline code span that cannot be broken out of."""
    return "`" + cell(text).replace("`", "'") + "`"


def pct(value: float | None) -> str:
    """A rate as a percentage with one decimal; ``—`` when unknown."""
    return "—" if value is None else f"{value * 100:.1f}%"


def band_text(band: Band | None, passed: int | None = None, total: int | None = None) -> str:
    """A pass rate with its counts and 95% interval, as the PR comment and console print it."""
    if band is None:
        return "— (no judged trials)"
    counts = f" ({passed}/{total})" if passed is not None and total is not None else ""
    return f"{pct(band.rate)}{counts}, 95% CI {pct(band.low)}–{pct(band.high)}"


# --------------------------------------------------------------------------- sections


#: n8n's heading (``comparison/format.ts``; its newest test drops the commit SHA from it): what readers
#: of the PR comment key on.
HEADING = "### Instance AI Workflow Eval"
#: n8n's warning when the baseline could not be read (``fetch_failed``) and its advice when no baseline
#: exists (``no_baseline``), from ``comparison/format.ts``.
FETCH_FAILED = "Regression detection did not run — baseline fetch failed"
NO_BASELINE_HINT = ("no baseline configured — comparison skipped. Run the eval with "
                    "`--experiment-name instance-ai-baseline` on master to create one")


def _status_reason(results: EvalResults) -> str | None:
    """Why there is no comparison, in n8n's words per ``comparisonStatus`` (None: the caller's reason)."""
    if results.comparison_status == "no_baseline":
        return NO_BASELINE_HINT
    if results.comparison_status == "self_baseline":
        return f"this run is the baseline ({code(results.experiment_name or results.run_id)}) — nothing to compare against"
    if results.comparison_status == "fetch_failed":
        return f"{FETCH_FAILED}: {results.comparison_error or 'unknown error'}"
    return None


def alert_line(comparison: Comparison | None, no_baseline_reason: str | None = None) -> str:
    """The PR comment's first line: the regressions (and soft ones, watches and improvements), or why
    there is no baseline comparison (a failed fetch as a warning)."""
    if comparison is None:
        if no_baseline_reason and no_baseline_reason.startswith(FETCH_FAILED):
            return f"⚠️ **{no_baseline_reason}**"
        return f"ℹ️ **No baseline comparison** — {no_baseline_reason or 'no baseline was given'}."
    tc = comparison.tier_counts
    reg, likely = tc.get(Tier.hard_regression.value, 0), tc.get(Tier.soft_regression.value, 0)
    improved, watch = tc.get(Tier.improvement.value, 0), tc.get(Tier.watch.value, 0)
    extras = []
    if likely and reg:
        extras.append(f"{likely} soft regression(s)")
    if watch:
        extras.append(f"{watch} to watch")
    if improved:
        extras.append(f"{improved} improvement(s)")
    tail = f" · {' · '.join(extras)}" if extras else ""
    if reg:
        survive = len(comparison.regressions_surviving_bh)
        return (f"🔴 **{reg} hard regression(s)** vs baseline {code(comparison.baseline_run_id)}"
                f" ({survive} survive Benjamini–Hochberg){tail}")
    if likely:
        return (f"🟠 **{likely} soft regression(s)** vs baseline {code(comparison.baseline_run_id)}"
                f" — often natural variance{tail}")
    return f"🟢 **No regressions** vs baseline {code(comparison.baseline_run_id)}{tail}"


def _aggregate(summary: RunSummary, baseline: RunSummary | None) -> list[str]:
    k = summary.k
    rows: list[tuple[str, str, str]] = [
        ("Pass rate", band_text(summary.pass_rate, summary.passed_trials, summary.trials),
         band_text(baseline.pass_rate, baseline.passed_trials, baseline.trials) if baseline else ""),
        (f"pass@{k}", pct(summary.pass_at_k), pct(baseline.pass_at_k) if baseline else ""),
        (f"pass^{k}", pct(summary.pass_hat_k), pct(baseline.pass_hat_k) if baseline else ""),
        ("Scoring units", str(summary.scoring_units), str(baseline.scoring_units) if baseline else ""),
        ("Build cost", f"${summary.build_cost_usd:.2f}", f"${baseline.build_cost_usd:.2f}" if baseline else ""),
        ("Build turns", str(summary.build_turns), str(baseline.build_turns) if baseline else ""),
        ("Units finished", f"{summary.units_finished}/{summary.units_total}",
         f"{baseline.units_finished}/{baseline.units_total}" if baseline else ""),
    ]
    out = ["#### Aggregate", ""]
    if baseline is not None:
        out += ["| | This run | Baseline |", "|---|---|---|"]
        out += [f"| {a} | {cell(b)} | {cell(c)} |" for a, b, c in rows]
    else:
        out += ["| | This run |", "|---|---|"]
        out += [f"| {a} | {cell(b)} |" for a, b, _ in rows]
    if summary.stopped_reason:
        out += ["", f"⚠️ Run stopped early: {cell(summary.stopped_reason)}"]
    attributed = {k: v for k, v in summary.attribution.items() if v}
    if attributed:
        out += ["", "Failed trials by attribution: " + ", ".join(f"{cell(k)} {v}" for k, v in attributed.items())]
    return out + [""]


def _p(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def _unit_row(u: UnitComparison) -> str:
    c = u.counts
    q = u.q_better if u.tier is Tier.improvement else u.q_worse
    p = u.p_better if u.tier is Tier.improvement else u.p_worse
    bh = u.bh_tier.value if u.bh_tier else "—"
    return (f"| {cell(u.key)} | {u.kind} | {c.pr_passes}/{c.pr_total} ({pct(float(c.pr_rate))}) "
            f"| {c.base_passes}/{c.base_total} ({pct(float(c.base_rate))}) | {float(c.delta) * 100:+.0f} pts "
            f"| {_p(p)} | {_p(q)} | {bh} |")


def _comparison(comparison: Comparison) -> list[str]:
    out = [f"#### Comparison vs baseline {code(comparison.baseline_run_id)}", "",
           f"Over the {comparison.intersection_size} unit(s) both runs measured: this run "
           f"{band_text(comparison.pr_band)}; baseline {band_text(comparison.baseline_band)}.", ""]
    tc = comparison.tier_counts
    out.append(" · ".join(f"{t.value.replace('_', ' ')}: {tc.get(t.value, 0)}" for t in Tier))
    out.append("")
    family = [u for u in comparison.units if u.q_worse is not None]
    reg = comparison.in_tier(Tier.hard_regression)
    if family:
        out.append(
            f"Benjamini–Hochberg view across {len(family)} compared unit(s): "
            f"{len(comparison.regressions_surviving_bh)} of {len(reg)} hard regression(s) survive"
            f" at q < {HARD.max_p:g}."
        )
        out.append("")
    header = ["| Unit | Kind | This run | Baseline | Δ | p | q (BH) | BH tier |", "|---|---|---|---|---|---|---|---|"]
    for tier, title, blurb in TIER_SECTIONS:
        rows = comparison.in_tier(tier)
        if not rows:
            continue
        out += [f"##### {title} ({len(rows)})", "", f"_{blurb}_", ""] + header + [_unit_row(u) for u in rows] + [""]
    bh_only = [u for u in comparison.units if u.bh_tier is Tier.hard_regression and u.tier is not Tier.hard_regression]
    if bh_only:  # cannot happen with q >= p, kept so a change of method would show
        out += ["##### Regressions only under BH", ""] + header + [_unit_row(u) for u in bh_only] + [""]
    for title, keys in (("Only in this run", comparison.pr_only), ("Only in the baseline", comparison.baseline_only)):
        if keys:
            out += [f"<details><summary>{title} ({len(keys)}) — not compared</summary>", ""]
            out += [f"- {cell(k)}" for k in keys] + ["", "</details>", ""]
    if comparison.drift is None:
        out += ["_Failure-category drift: not captured on both sides._", ""]
    elif comparison.drift:
        out += ["#### Failure-category drift", "",
                "_Notable: rate moved ≥ 5 pts and ≥ 3 trials beyond what the trial-count scaling predicts._", "",
                "| Category | This run | Baseline | Δ | Beyond scaling | Notable |", "|---|---|---|---|---|---|"]
        for d in comparison.drift:
            out.append(
                f"| {cell(d.category)} | {d.pr_count}/{d.pr_trials} ({pct(float(d.pr_rate))}) "
                f"| {d.base_count}/{d.base_trials} ({pct(float(d.base_rate))}) | {float(d.delta) * 100:+.1f} pts "
                f"| {float(d.excess):+.1f} | {'⚠️ yes' if d.notable else 'no'} |"
            )
        out.append("")
    return out


def gate_lines(results: EvalResults) -> list[str]:
    """The absolute gate of a gated tier (n8n's ``comparison/gate.ts``), or nothing."""
    from orchestrator.results.contract import to_document
    from orchestrator.results.gate import evaluate_gate, is_gated_tier

    tier = results.config.get("tier")
    if not is_gated_tier(tier if isinstance(tier, str) else None):
        return []
    doc = to_document(results)
    gate = evaluate_gate(doc["testCases"], doc["totalRuns"])
    agg = gate["aggregate"]
    head = "🟢 **Gate green**" if gate["green"] else f"🔴 **Gate red** — {len(gate['failing'])} unit(s) never passed"
    out = ["#### Gate", "", f"{head} (tier {code(tier)}, every unit must pass at least once in {gate['totalRuns']} "
           f"iteration(s); {agg['passed']}/{agg['total']} trials passed)", ""]
    for u in gate["failing"]:
        out.append(f"- {cell(u['slug'])} ({u['passCount']}/{u['total']})")
    if gate["excluded"]:
        out.append(f"- _{len(gate['excluded'])} unit(s) without a verdict, not gated_")
    return out + [""]


def _cases(cases: list[CaseSummary], k: int) -> list[str]:
    out = ["#### Per-case results", "",
           f"| Case | Iterations | pass@{k} | pass^{k} | Trials passed | Cost | Turns | Failure categories |",
           "|---|---|---|---|---|---|---|---|"]
    for case in cases:
        at_k, hat_k = case_pass_means(case)
        n = sum(u.n for u in case.units)
        c = sum(u.c for u in case.units)
        cats = ", ".join(f"{name} ×{count}" for name, count in case.failure_categories.items()) or "—"
        out.append(
            f"| {cell(case.case)} | {case.iterations} | {pct(at_k)} | {pct(hat_k)} | {c}/{n} "
            f"| ${sum(case.build_cost_usd_per_run):.2f} | {sum(case.build_turns_per_run)} | {cell(cats)} |"
        )
    return out + [""]


DIMENSION_ORDER = ("structure", "connection_topology", "parameter_correctness", "intent_match", "communication",
                   "ai_nodes", "nodes_craftsmanship", "security")


def workflow_checks_lines(results: EvalResults) -> list[str]:
    """The "Workflow checks" table: pass / fail / N/A per check and its pass rate, by dimension,
    across every build that has check outcomes (the reference's table)."""
    from orchestrator.results.contract import workflow_checks_summary

    summary = workflow_checks_summary(results.units)
    if not summary:
        return []
    per_check = summary["perCheck"]
    rank = {d: i for i, d in enumerate(DIMENSION_ORDER)}
    rows = sorted(per_check.items(), key=lambda kv: (rank.get(kv[1]["dimension"], 99), kv[0]))
    out = ["#### Workflow checks", "",
           f"<details><summary>{len(rows)} checks over {summary['scoredBuilds']} build(s)"
           " — independent of the scenario verdicts</summary>", "",
           "| Dimension | Check | Pass | Fail | N/A | Pass rate |", "|---|---|---|---|---|---|"]
    for name, c in rows:
        na = c["nA"] + c["errors"]
        kind = " (LLM)" if c["kind"] == "llm" else ""
        out.append(f"| {cell(c['dimension'])} | {code(name)}{kind} | {c['passes']} | {c['fails']} | {na} "
                   f"| {pct(c['passRate'])} |")
    return out + ["", "</details>", ""]


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def failure_lines(results: EvalResults) -> list[str]:
    """One Markdown line per failure of the run, by case and iteration: builds without a workflow,
    failed scenarios and failed expectations, each with its reason and attribution."""
    lines: list[str] = []
    for u in sorted(results.units, key=lambda u: (u.case, u.iteration)):
        where = f"**{cell(u.case)}** #{u.iteration}"
        if u.build.status in NO_WORKFLOW_BUILDS:
            why = u.build.error or u.build.root_cause or ""
            lines.append(f"- {where} — build {u.build.status.value}: {cell(_short(why))}")
        for s in u.scenarios:
            if s.verdict is Verdict.failed:
                tags = " · ".join(x for x in (s.failure_category, s.attribution.value if s.attribution else None) if x)
                tagged = f" [{cell(tags)}]" if tags else ""
                lines.append(f"- {where} — scenario {cell(s.name)}{tagged}: {cell(_short(s.reason))}")
        for e in u.expectations:
            if e.verdict is Verdict.failed:
                tag = f" [{e.attribution.value}]" if e.attribution else ""
                text = cell(_short(e.text))
                lines.append(f"- {where} — {e.kind} expectation “{text}”{tag}: {cell(_short(e.reason))}")
    return lines


def _failures(results: EvalResults) -> list[str]:
    lines = failure_lines(results)
    if not lines:
        return ["#### Failures", "", "None.", ""]
    shown = lines[:MAX_FAILURES]
    more = [f"- … and {len(lines) - MAX_FAILURES} more (see eval-results.json)"] if len(lines) > MAX_FAILURES else []
    return (["#### Failures", "", f"<details><summary>{len(lines)} failure(s)</summary>", ""]
            + shown + more + ["", "</details>", ""])


def render_pr_comment(
    results: EvalResults,
    comparison: Comparison | None = None,
    baseline: EvalResults | None = None,
    *,
    no_baseline_reason: str | None = None,
) -> str:
    """The full comment body; ``comparison=None`` gives the no-baseline variant."""
    summary, cases = summaries(results)
    base_summary = summaries(baseline)[0] if baseline is not None and comparison is not None else None
    title = results.experiment_name or results.run_id
    if comparison is None:
        no_baseline_reason = _status_reason(results) or no_baseline_reason
    out = [HEADING, "", alert_line(comparison, no_baseline_reason), "", f"<sub>{cell(title)}</sub>", ""]
    out += _aggregate(summary, base_summary)
    out += gate_lines(results)
    if comparison is not None:
        out += _comparison(comparison)
    out += _cases(cases, summary.k)
    out += workflow_checks_lines(results)
    out += _failures(results)
    out.append(f"<sub>run {code(results.run_id)}</sub>")
    return redact("\n".join(out) + "\n")


def write_pr_comment(directory: Path, text: str) -> Path:
    """Write ``text``, redacted, to ``eval-pr-comment.md`` in ``directory``; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / FILENAME
    path.write_text(redact(text), encoding="utf-8")
    return path
