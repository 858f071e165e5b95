"""``ab-report.md`` / ``ab-report.json``: the arms side by side.

Per arm: model, lane env, pass rate with its Wilson band, cost and turns. Per comparison (every
arm against the first, the control): the verdict pairs per (case, scoring unit, iteration), the
exact McNemar test per case (with Benjamini–Hochberg q-values across cases) and over all pairs,
each beside the paired difference in pass rate with its 95% interval (Tango's score
interval, :func:`orchestrator.experiments.mcnemar.paired_difference`), and the trials only one arm
judged (they are not part of the test). Then what the experiment could detect: the smallest
difference its build pairs detect with 80% power, and the trade-off table of
:mod:`orchestrator.experiments.plan` with the control arm as baseline. A sequential run adds its
decision, the test's state and the builds and cost it saved against the fixed design.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.compare.fdr import bh_q_values
from orchestrator.compare.pr_comment import band_text, cell, code
from orchestrator.errors import UserError
from orchestrator.experiments.mcnemar import TEST_NAME, McNemar, Pairing, VerdictPair, mcnemar, pair_verdicts
from orchestrator.experiments.plan import (
    Plan,
    build_scores,
    detectable_difference,
    duration_text,
    make_plan,
    read_baseline,
    render_table,
)
from orchestrator.redact import redact, redact_obj
from orchestrator.results.model import Band, EvalResults
from orchestrator.results.scoring import scoring_units, wilson_band

MD_FILENAME = "ab-report.md"
JSON_FILENAME = "ab-report.json"
MAX_PAIR_ROWS = 400


@dataclass(frozen=True)
class ArmData:
    name: str
    model: str
    env: list[str]
    experiment_name: str | None
    results: EvalResults
    results_path: Path | None = None

    @property
    def builder(self) -> str:
        """The builder the arm's run used, as its eval-results.json records it."""
        return str(self.results.config.get("builder") or "—")

    @property
    def build_model(self) -> str:
        """The model the arm's builds actually used (the lanes' model for instance-ai, claude's for mcp)."""
        return str(self.results.config.get("build_model") or "—")


@dataclass(frozen=True)
class CaseTest:
    case: str
    test: McNemar
    q_value: float


@dataclass(frozen=True)
class ArmComparison:
    control: str
    variant: str
    pairing: Pairing
    overall: McNemar
    cases: list[CaseTest]


def arm_band(results: EvalResults) -> tuple[Band | None, int, int]:
    """An arm's pass rate over every scored trial: its 95% Wilson band (None without trials), passes
    and trials."""
    sus = scoring_units(results.units)
    n = sum(su.n for su in sus.values())
    c = sum(su.c for su in sus.values())
    return (wilson_band(c, n) if n else None), c, n


def compare_arms(control: ArmData, variant: ArmData) -> ArmComparison:
    """Pair the arms' verdicts and test them: McNemar's exact test overall and per case, the per-case
    p-values corrected to Benjamini–Hochberg q-values."""
    pairing = pair_verdicts(control.results.units, variant.results.units)
    by_case: dict[str, list[VerdictPair]] = {}
    for p in pairing.pairs:
        by_case.setdefault(p.case, []).append(p)
    tests = [(case, mcnemar(pairs)) for case, pairs in sorted(by_case.items())]
    q = bh_q_values([t.p_value for _, t in tests])
    return ArmComparison(control.name, variant.name, pairing, mcnemar(pairing.pairs),
                         [CaseTest(case, t, qv) for (case, t), qv in zip(tests, q)])


def _verdict(passed: bool) -> str:
    return "pass" if passed else "fail"


def _test_dict(t: McNemar) -> dict[str, Any]:
    d = t.difference
    return {"pairs": t.pairs, "both_pass": t.both_pass, "control_only": t.control_only,
            "variant_only": t.variant_only, "both_fail": t.both_fail, "discordant": t.discordant,
            "p_value": t.p_value, "difference": {"estimate": d.estimate, "low": d.low, "high": d.high,
                                                  "method": EFFECT_METHOD}}


EFFECT_METHOD = "Tango score interval (paired, 95%)"


def _diff(t: McNemar) -> str:
    d = t.difference
    return f"{d.estimate * 100:+.1f} pts [{d.low * 100:+.1f}, {d.high * 100:+.1f}]"


def build_pairs(control: ArmData, variant: ArmData) -> int:
    """Build pairs both arms scored: what the power of the comparison rests on."""
    a, b = build_scores(control.results.units), build_scores(variant.results.units)
    return len(set(a) & set(b))


def power_section(control: ArmData, variant: ArmData, *, alpha: float = 0.05, power: float = 0.80) -> dict[str, Any] | None:
    """What the comparison could detect, with the control arm as the baseline of a plan."""
    try:
        base = read_baseline(control.results)
    except UserError:
        return None
    lanes = max(1, len(control.results.lanes))
    plan: Plan = make_plan(control.results, effect=0.10, power=power, alpha=alpha, lanes=lanes)
    pairs = build_pairs(control, variant)
    return {"build_pairs": pairs, "discordance": base.discordance, "alpha": alpha, "power": power,
            "detectable_difference": detectable_difference(pairs, base.discordance, alpha=alpha, power=power),
            "plan": plan}


def _arm_dict(arm: ArmData) -> dict[str, Any]:
    band, passed, trials = arm_band(arm.results)
    s = arm.results.summary
    cost = sum(u.build.cost_usd for u in arm.results.units)
    finished = s.units_finished if s else len(arm.results.units)
    return {
        "name": arm.name, "model": arm.model, "builder": arm.builder, "build_model": arm.build_model,
        "env": arm.env, "experiment_name": arm.experiment_name,
        "run_id": arm.results.run_id, "results": str(arm.results_path) if arm.results_path else None,
        "pass_rate": band.model_dump() if band else None, "passed_trials": passed, "trials": trials,
        "build_cost_usd": cost, "build_turns": sum(u.build.turns for u in arm.results.units),
        "units_finished": finished, "cost_per_unit_usd": cost / finished if finished else None,
        "stopped_reason": s.stopped_reason if s else None,
    }


def _power_dict(power: dict[str, Any] | None) -> dict[str, Any] | None:
    if power is None:
        return None
    return {**{k: v for k, v in power.items() if k != "plan"}, "plan": power["plan"].to_dict()}


def report_dict(ab_id: str, mode: str, arms: list[ArmData], comparisons: list[ArmComparison],
                sequential: dict[str, Any] | None = None) -> dict[str, Any]:
    """The A/B report as JSON (``ab-report.json``): arms, the sequential test if any, and each
    comparison's tests, power and pairs; redacted."""
    by_name = {a.name: a for a in arms}
    redacted: dict[str, Any] = redact_obj({
        "ab_id": ab_id, "mode": mode, "test": TEST_NAME, "effect_interval": EFFECT_METHOD,
        "arms": [_arm_dict(a) for a in arms],
        "sequential": sequential,
        "comparisons": [{
            "control": c.control, "variant": c.variant,
            "overall": _test_dict(c.overall),
            "power": _power_dict(power_section(by_name[c.control], by_name[c.variant])),
            "cases": [{"case": ct.case, **_test_dict(ct.test), "q_value": ct.q_value} for ct in c.cases],
            "pairs": [{"case": p.case, "key": p.key, "kind": p.kind, "iteration": p.iteration,
                       "control": _verdict(p.control), "variant": _verdict(p.variant)} for p in c.pairing.pairs],
            "control_only_trials": c.pairing.control_only_trials,
            "variant_only_trials": c.pairing.variant_only_trials,
        } for c in comparisons],
    })
    return redacted


def _p(p: float) -> str:
    return f"{p:.4g}"


def _mcnemar_line(c: ArmComparison) -> str:
    t = c.overall
    if t.pairs == 0:
        return f"**McNemar** ({code(c.control)} vs {code(c.variant)}): no matched pairs — nothing to test."
    lean = ("no difference in the discordant pairs" if t.control_only == t.variant_only
            else f"{code(c.control if t.control_only > t.variant_only else c.variant)} wins more discordant pairs")
    return (f"**McNemar exact** ({code(c.control)} vs {code(c.variant)}): {t.pairs} matched pairs, "
            f"{t.control_only} pass only in {code(c.control)}, {t.variant_only} pass only in {code(c.variant)} "
            f"→ p = {_p(t.p_value)} ({lean}).\n\n"
            f"**Difference in pass rate** ({code(c.variant)} − {code(c.control)}): {_diff(t)} "
            f"(95% interval, {EFFECT_METHOD}).")


def _power_lines(c: ArmComparison, section: dict[str, Any] | None) -> list[str]:
    if section is None:
        return []
    mdd = section["detectable_difference"]
    can = (f"the smallest difference they detect with {section['power']:.0%} power is {mdd:.0%}" if mdd is not None
           else "too few to detect even a 100-point difference")
    plan: Plan = section["plan"]
    return ["", "### What this comparison could detect", "",
            f"{section['build_pairs']} build pair(s) scored in both arms, discordance ψ = {section['discordance']:.3f} "
            f"(from {code(c.control)}): {can} (α = {section['alpha']}).", "",
            f"To plan a bigger one (with {code(c.control)} as the baseline, {plan.lanes} lane(s), "
            f"${plan.baseline.cost_per_build_usd:.4f} per build):", "", *render_table(plan)]


def _sequential_lines(seq: dict[str, Any]) -> list[str]:
    decided = seq.get("decided_at_pair")
    return ["", "## Sequential decision", "",
            f"**{seq['decision']}** after {decided} build pair(s) ({seq['variant_wins']} won by the variant, "
            f"{seq['control_wins']} by the control; likelihood ratio Λ = {seq['likelihood_ratio']:.3g}, "
            f"reject at ≥ {seq['reject_at']:.3g}, futile at ≤ {seq['futile_at']:.3g}).", "",
            f"Test: {seq['test']}.", "",
            f"Builds run: {seq['builds_run']} of the fixed design's {seq['fixed_builds']} → "
            f"**{seq['builds_saved']} builds saved ({seq['saved_share']:.0%})**, about ${seq['cost_saved_usd']:.4f} "
            f"(spent ${seq['cost_usd']:.4f}); wall time {duration_text(seq['wall_s'])}."]


def render_markdown(ab_id: str, mode: str, arms: list[ArmData], comparisons: list[ArmComparison],
                    sequential: dict[str, Any] | None = None) -> str:
    """The A/B report as Markdown: one row per arm, then each comparison's overall and per-case tests."""
    by_name = {a.name: a for a in arms}
    out = [f"# A/B report {code(ab_id)}", "",
           f"Mode `{mode}` · {len(arms)} arms · test: {TEST_NAME}.", "",
           "| arm | model | builder (build model) | arm env | run | pass rate (95% Wilson) | cost | turns | cost / unit |",
           "|---|---|---|---|---|---|---:|---:|---:|"]
    for arm in arms:
        d = _arm_dict(arm)
        band, passed, trials = arm_band(arm.results)
        per_unit = f"${d['cost_per_unit_usd']:.4f}" if d["cost_per_unit_usd"] is not None else "—"
        out.append(f"| {code(arm.name)} | {code(arm.model)} | {code(arm.builder)} ({code(arm.build_model)}) "
                   f"| {cell(', '.join(arm.env) or '—')} | {code(arm.results.run_id)} "
                   f"| {band_text(band, passed, trials)} | ${d['build_cost_usd']:.4f} | {d['build_turns']} | {per_unit} |")
    for arm in arms:
        if arm.results.summary and arm.results.summary.stopped_reason:
            out += ["", f"⚠️ arm {code(arm.name)} stopped early: {cell(arm.results.summary.stopped_reason)}"]
    if sequential is not None:
        out += _sequential_lines(sequential)
    for c in comparisons:
        out += ["", f"## {code(c.control)} vs {code(c.variant)}", "", _mcnemar_line(c),
                *_power_lines(c, power_section(by_name[c.control], by_name[c.variant])), "",
                "### Per case", "",
                f"| case | pairs | both pass | only {cell(c.control)} | only {cell(c.variant)} | both fail "
                "| difference (95% CI) | p (McNemar) | q (BH) |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for ct in c.cases:
            t = ct.test
            out.append(f"| {code(ct.case)} | {t.pairs} | {t.both_pass} | {t.control_only} | {t.variant_only} "
                       f"| {t.both_fail} | {_diff(t)} | {_p(t.p_value)} | {_p(ct.q_value)} |")
        if not c.cases:
            out.append("| — | 0 | 0 | 0 | 0 | 0 | — | — | — |")
        out += ["", "### Verdict pairs", "", f"◀ passed only in {code(c.control)} · ▶ passed only in {code(c.variant)}", "",
                f"| case | scoring unit | iteration | {cell(c.control)} | {cell(c.variant)} |",
                "|---|---|---:|---|---|"]
        for p in c.pairing.pairs[:MAX_PAIR_ROWS]:
            mark = "" if p.control == p.variant else " ◀" if p.control else " ▶"
            unit = p.key[len(p.case):].lstrip("/#") or p.key
            out.append(f"| {code(p.case)} | {code(unit)} | {p.iteration} | {_verdict(p.control)} "
                       f"| {_verdict(p.variant)}{mark} |")
        if len(c.pairing.pairs) > MAX_PAIR_ROWS:
            out.append(f"| … | {len(c.pairing.pairs) - MAX_PAIR_ROWS} more in {JSON_FILENAME} | | | |")
        unpaired = len(c.pairing.control_only_trials) + len(c.pairing.variant_only_trials)
        if unpaired:
            out += ["", f"{unpaired} trial(s) were judged in one arm only and are not part of the test "
                        f"({len(c.pairing.control_only_trials)} only in {code(c.control)}, "
                        f"{len(c.pairing.variant_only_trials)} only in {code(c.variant)})."]
    return redact("\n".join(out) + "\n")


def write_ab_report(output_dir: Path, ab_id: str, mode: str, arms: list[ArmData],
                    sequential: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """Compare every arm against the first; write ``ab-report.md`` and ``ab-report.json``
    (``sequential``: :meth:`orchestrator.experiments.ab.SequentialOutcome.to_dict` of a sequential run)."""
    comparisons = [compare_arms(arms[0], other) for other in arms[1:]]
    output_dir.mkdir(parents=True, exist_ok=True)
    md, js = output_dir / MD_FILENAME, output_dir / JSON_FILENAME
    md.write_text(render_markdown(ab_id, mode, arms, comparisons, sequential), encoding="utf-8")
    js.write_text(redact(json.dumps(report_dict(ab_id, mode, arms, comparisons, sequential), indent=2)) + "\n",
                  encoding="utf-8")
    return md, js
