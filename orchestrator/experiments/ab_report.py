"""``ab-report.md`` / ``ab-report.json``: the arms side by side.

Per arm: model, lane env, pass rate with its Wilson band, cost and turns. Per comparison (every
arm against the first, the control): the verdict pairs per (case, scoring unit, iteration), the
exact McNemar test per case (with Benjamini–Hochberg q-values across cases) and over all pairs,
and the trials only one arm judged (they are not part of the test).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.compare.fdr import bh_q_values
from orchestrator.compare.pr_comment import band_text, cell, code
from orchestrator.experiments.mcnemar import TEST_NAME, McNemar, Pairing, VerdictPair, mcnemar, pair_verdicts
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
    sus = scoring_units(results.units)
    n = sum(su.n for su in sus.values())
    c = sum(su.c for su in sus.values())
    return (wilson_band(c, n) if n else None), c, n


def compare_arms(control: ArmData, variant: ArmData) -> ArmComparison:
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
    return {"pairs": t.pairs, "both_pass": t.both_pass, "control_only": t.control_only,
            "variant_only": t.variant_only, "both_fail": t.both_fail, "discordant": t.discordant,
            "p_value": t.p_value}


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


def report_dict(ab_id: str, mode: str, arms: list[ArmData], comparisons: list[ArmComparison]) -> dict[str, Any]:
    return redact_obj({
        "ab_id": ab_id, "mode": mode, "test": TEST_NAME,
        "arms": [_arm_dict(a) for a in arms],
        "comparisons": [{
            "control": c.control, "variant": c.variant,
            "overall": _test_dict(c.overall),
            "cases": [{"case": ct.case, **_test_dict(ct.test), "q_value": ct.q_value} for ct in c.cases],
            "pairs": [{"case": p.case, "key": p.key, "kind": p.kind, "iteration": p.iteration,
                       "control": _verdict(p.control), "variant": _verdict(p.variant)} for p in c.pairing.pairs],
            "control_only_trials": c.pairing.control_only_trials,
            "variant_only_trials": c.pairing.variant_only_trials,
        } for c in comparisons],
    })


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
            f"→ p = {_p(t.p_value)} ({lean}).")


def render_markdown(ab_id: str, mode: str, arms: list[ArmData], comparisons: list[ArmComparison]) -> str:
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
    for c in comparisons:
        out += ["", f"## {code(c.control)} vs {code(c.variant)}", "", _mcnemar_line(c), "",
                "### Per case", "",
                f"| case | pairs | both pass | only {cell(c.control)} | only {cell(c.variant)} | both fail | p (McNemar) | q (BH) |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for ct in c.cases:
            t = ct.test
            out.append(f"| {code(ct.case)} | {t.pairs} | {t.both_pass} | {t.control_only} | {t.variant_only} "
                       f"| {t.both_fail} | {_p(t.p_value)} | {_p(ct.q_value)} |")
        if not c.cases:
            out.append("| — | 0 | 0 | 0 | 0 | 0 | — | — |")
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


def write_ab_report(output_dir: Path, ab_id: str, mode: str, arms: list[ArmData]) -> tuple[Path, Path]:
    """Compare every arm against the first; write ``ab-report.md`` and ``ab-report.json``."""
    comparisons = [compare_arms(arms[0], other) for other in arms[1:]]
    output_dir.mkdir(parents=True, exist_ok=True)
    md, js = output_dir / MD_FILENAME, output_dir / JSON_FILENAME
    md.write_text(render_markdown(ab_id, mode, arms, comparisons), encoding="utf-8")
    js.write_text(redact(json.dumps(report_dict(ab_id, mode, arms, comparisons), indent=2)) + "\n", encoding="utf-8")
    return md, js
