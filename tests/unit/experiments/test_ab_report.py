"""Matched pairs, exact McNemar (hand-computed fixtures) and the side-by-side A/B report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from support.eval_results_factory import results, unit

from orchestrator.experiments.ab_report import ArmData, compare_arms, write_ab_report
from orchestrator.experiments.mcnemar import (
    VerdictPair,
    mcnemar,
    mcnemar_exact,
    pair_verdicts,
    paired_difference,
    tango_score,
)
from orchestrator.results.model import BuildStatus


def _pairs(both_pass: int, control_only: int, variant_only: int, both_fail: int) -> list[VerdictPair]:
    spec = [(True, True)] * both_pass + [(True, False)] * control_only + [(False, True)] * variant_only \
        + [(False, False)] * both_fail
    return [VerdictPair("c", "c/s", "scenario", i, a, b) for i, (a, b) in enumerate(spec)]


# --------------------------------------------------------------------------- McNemar by hand


def test_eight_discordant_pairs_all_one_way() -> None:
    # two-sided exact: 2 · P(X = 0 | n=8, ½) = 2 · 0.5^8
    assert mcnemar_exact(8, 0) == pytest.approx(2 * 0.5 ** 8, rel=1e-12)
    assert mcnemar_exact(0, 8) == pytest.approx(0.0078125, rel=1e-12)
    t = mcnemar(_pairs(both_pass=5, control_only=0, variant_only=8, both_fail=3))
    assert (t.pairs, t.discordant, t.control_only, t.variant_only) == (16, 8, 0, 8)
    assert t.p_value == pytest.approx(0.0078125)


def test_ties_give_p_one_and_concordant_pairs_do_not_matter() -> None:
    assert mcnemar_exact(4, 4) == pytest.approx(1.0)
    assert mcnemar(_pairs(100, 3, 3, 0)).p_value == pytest.approx(1.0)
    assert mcnemar(_pairs(0, 3, 3, 100)).p_value == pytest.approx(1.0)


def test_no_discordant_pairs_p_is_one() -> None:
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar(_pairs(7, 0, 0, 2)).p_value == 1.0
    assert mcnemar([]).p_value == 1.0 and mcnemar([]).pairs == 0


def test_small_asymmetric_counts() -> None:
    # b=1, c=5: 2 · (C(6,0) + C(6,1)) / 2^6 = 2 · 7/64
    assert mcnemar_exact(1, 5) == pytest.approx(14 / 64)
    # b=2, c=10: 2 · (1 + 12 + 66) / 4096
    assert mcnemar_exact(2, 10) == pytest.approx(2 * 79 / 4096)
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


# --------------------------------------------------------------------------- effect interval (Tango)


def test_tango_interval_without_discordant_pairs_is_closed_form() -> None:
    """b = c = 0: the constrained MLE of the control-only share is 0 (Δ > 0), so
    Z(Δ) = −nΔ / √(nΔ(1−Δ)) and |Z| = z at Δ = z² / (n + z²)."""
    z2 = 1.959963984540054 ** 2
    for n in (1, 4, 30):
        d = paired_difference(n // 2, 0, 0, n - n // 2)
        assert d.estimate == 0.0
        assert d.high == pytest.approx(z2 / (n + z2), abs=1e-9) and d.low == pytest.approx(-z2 / (n + z2), abs=1e-9)


def test_tango_bounds_are_where_the_score_statistic_is_plus_minus_z() -> None:
    """At each bound the score statistic, recomputed here from Tango (1998, eq. 2–4), is ∓1.96."""
    b, c, n = 12, 2, 50  # control-only 12, variant-only 2: variant − control = −0.2
    d = paired_difference(36, b, c, 0)
    assert d.estimate == pytest.approx(-0.2) and d.low < -0.2 < d.high < 0

    def z(delta: float) -> float:
        # Tango's b (first only) = variant-only = c here; his c = control-only = b
        bb = -c - b + (2 * n - c + b) * delta
        cc = -b * delta * (1 - delta)
        q = (-bb + math.sqrt(bb * bb - 4 * (2 * n) * cc)) / (2 * (2 * n))
        return (c - b - n * delta) / math.sqrt(n * (2 * q + delta * (1 - delta)))

    assert z(d.low) == pytest.approx(1.959964, abs=1e-5) and z(d.high) == pytest.approx(-1.959964, abs=1e-5)
    assert tango_score(b, c, n, d.low) == pytest.approx(z(d.low))


def test_tango_interval_limits() -> None:
    none = paired_difference(0, 0, 0, 0)
    assert (none.estimate, none.low, none.high) == (0.0, -1.0, 1.0)
    all_variant = paired_difference(0, 0, 8, 0)
    # every pair variant-only: q̂ = (1−Δ)/2, Z = √n · √((1−Δ)/(1+Δ)) = z at Δ = (1 − r)/(1 + r), r = z²/n
    r = 1.959963984540054 ** 2 / 8
    assert all_variant.estimate == 1.0 and all_variant.high == 1.0
    assert all_variant.low == pytest.approx((1 - r) / (1 + r), abs=1e-9)
    mirrored = paired_difference(0, 8, 0, 0)
    assert (mirrored.low, mirrored.high) == pytest.approx((-all_variant.high, -all_variant.low))
    with pytest.raises(ValueError):
        paired_difference(-1, 0, 0, 0)


# --------------------------------------------------------------------------- pairing


def test_pairs_match_on_scoring_unit_and_iteration() -> None:
    control = [unit("a", 0, {"s": True}, {"e": True}), unit("a", 1, {"s": True}, {"e": False}),
               unit("a", 2, {"s": True})]
    variant = [unit("a", 0, {"s": False}, {"e": True}), unit("a", 1, {"s": None}, {"e": True})]
    pairing = pair_verdicts(control, variant)
    got = {(p.key, p.iteration): (p.control, p.variant) for p in pairing.pairs}
    assert got == {("a/s", 0): (True, False), ("a#expectation:e", 0): (True, True),
                   ("a#expectation:e", 1): (False, True)}
    # variant's incomplete verdict at iteration 1 and its missing iteration 2: control-only trials
    assert pairing.control_only_trials == ["a/s@1", "a/s@2"] and pairing.variant_only_trials == []


def test_failed_build_pairs_as_failures_and_infrastructure_loss_is_unpaired() -> None:
    control = [unit("a", 0, {"s": True}), unit("a", 1, {"s": True})]
    variant = [unit("a", 0, {"s": True}), unit("a", 1, status=BuildStatus.failed),
               unit("a", 2, status=BuildStatus.lane_failure)]
    pairing = pair_verdicts(control, variant)
    assert [(p.iteration, p.control, p.variant) for p in pairing.pairs] == [(0, True, True), (1, True, False)]
    assert pairing.variant_only_trials == []


# --------------------------------------------------------------------------- report


def _arm(name: str, model: str, units, env: list[str] | None = None) -> ArmData:
    return ArmData(name, model, env or [], f"exp-{name}", results(f"ab-1-{name}", units))


def test_report_tables_mcnemar_and_costs(tmp_path: Path) -> None:
    # case "greet": 8 iterations, control passes all, variant fails all → 8 discordant pairs one way
    control = [unit("greet", i, {"happy": True}, cost=0.10, turns=4) for i in range(8)]
    variant = [unit("greet", i, {"happy": False}, cost=0.30, turns=6) for i in range(8)]
    # case "sum": identical outcomes → p = 1
    control += [unit("sum", i, {"ok": i % 2 == 0}, cost=0.10, turns=4) for i in range(4)]
    variant += [unit("sum", i, {"ok": i % 2 == 0}, cost=0.30, turns=6) for i in range(4)]
    flags = 'N8N_FEATURE_FLAG_OVERRIDES={"118_instance_ai_setup_overhaul":"variant"}'
    arms = [_arm("control", "anthropic/claude-sonnet-4-6", control), _arm("variant", "openai/gpt-5.5", variant, [flags])]

    comparison = compare_arms(arms[0], arms[1])
    assert comparison.overall.p_value == pytest.approx(2 * 0.5 ** 8)
    by_case = {ct.case: ct for ct in comparison.cases}
    assert by_case["greet"].test.p_value == pytest.approx(0.0078125) and by_case["sum"].test.p_value == 1.0
    assert by_case["greet"].q_value == pytest.approx(2 * 0.0078125)  # BH over 2 cases, rank 1

    md_path, json_path = write_ab_report(tmp_path, "ab-1", "separate", arms)
    md = md_path.read_text()
    assert "McNemar exact" in md and "p = 0.007812" in md
    assert "| `greet` | 8 | 0 | 8 | 0 | 0 | -100.0 pts [-100.0, -35.1] | 0.007812 | 0.01562 |" in md
    # no discordant pair in 4: Tango's interval is ±z²/(n + z²) = ±3.8415/7.8415 = ±49.0 points (not a point)
    assert "| `sum` | 4 | 2 | 0 | 0 | 2 | +0.0 pts [-49.0, +49.0] | 1 | 1 |" in md
    assert "**Difference in pass rate** (`variant` − `control`): -66.7 pts [" in md and "Tango score interval" in md
    assert "### What this comparison could detect" in md and "| difference | power | build pairs |" in md
    assert "| `greet` | `happy` | 0 | pass | fail ◀ |" in md
    control_row = next(line for line in md.splitlines() if line.startswith("| `control` | `anthropic/"))
    assert control_row.endswith("| $1.2000 | 48 | $0.1000 |")  # 12 units × $0.10, 12 × 4 turns
    assert "N8N_FEATURE_FLAG_OVERRIDES" in md

    data = json.loads(json_path.read_text())
    control_arm, variant_arm = data["arms"]
    assert control_arm["build_cost_usd"] == pytest.approx(1.2) and variant_arm["build_cost_usd"] == pytest.approx(3.6)
    assert control_arm["cost_per_unit_usd"] == pytest.approx(0.1) and variant_arm["build_turns"] == 72
    assert control_arm["passed_trials"] == 10 and control_arm["trials"] == 12
    assert 0 < control_arm["pass_rate"]["low"] < 10 / 12 < control_arm["pass_rate"]["high"] <= 1
    (cmp_,) = data["comparisons"]
    overall = dict(cmp_["overall"])
    difference = overall.pop("difference")
    assert overall == {"pairs": 12, "both_pass": 2, "control_only": 8, "variant_only": 0, "both_fail": 2,
                       "discordant": 8, "p_value": pytest.approx(0.0078125)}
    assert difference["estimate"] == pytest.approx(-8 / 12) and difference["low"] < -8 / 12 < difference["high"] < 0
    power = cmp_["power"]
    assert power["build_pairs"] == 12 and power["plan"]["plan"]["effect"] == 0.1
    assert len(cmp_["pairs"]) == 12 and {"case", "key", "kind", "iteration", "control", "variant"} <= set(cmp_["pairs"][0])


def test_three_arms_compare_each_against_the_first(tmp_path: Path) -> None:
    units = [unit("a", 0, {"s": True})]
    arms = [_arm("control", "m1", units), _arm("v1", "m2", units), _arm("v2", "m3", [unit("a", 0, {"s": False})])]
    _, json_path = write_ab_report(tmp_path, "ab-3", "separate", arms)
    data = json.loads(json_path.read_text())
    assert [(c["control"], c["variant"]) for c in data["comparisons"]] == [("control", "v1"), ("control", "v2")]
    assert data["comparisons"][1]["overall"]["control_only"] == 1


def test_report_without_pairs_says_so(tmp_path: Path) -> None:
    arms = [_arm("control", "m1", [unit("a", 0, status=BuildStatus.skipped)]), _arm("variant", "m2", [])]
    md_path, _ = write_ab_report(tmp_path, "ab-0", "separate", arms)
    assert "no matched pairs" in md_path.read_text()


def test_sequential_section_shows_the_decision_and_the_saving(tmp_path: Path) -> None:
    from orchestrator.experiments.ab import SequentialOutcome
    from orchestrator.experiments.sequential import SequentialDesign, SequentialState

    state = SequentialState(SequentialDesign(effect=0.45, discordance=0.5))
    for _ in range(6):
        state.observe(-1)
    seq = SequentialOutcome(state, fixed_builds=40, builds_run=14, cost_usd=1.4, wall_s=125.0,
                            stop_reason="sequential A/B: control better after 6 build pairs")
    assert (seq.builds_saved, seq.saved_share, seq.cost_saved_usd) == (26, 0.65, pytest.approx(2.6))
    units = [unit("a", i, {"s": True}) for i in range(6)]
    arms = [_arm("control", "m1", units), _arm("variant", "m2", [unit("a", i, {"s": False}) for i in range(6)])]
    md_path, json_path = write_ab_report(tmp_path, "ab-s", "sequential", arms, seq.to_dict())
    md = md_path.read_text()
    assert "## Sequential decision" in md and "**control better** after 6 build pair(s)" in md
    assert "Builds run: 14 of the fixed design's 40 → **26 builds saved (65%)**, about $2.6000" in md
    assert "wall time 2 min" in md
    assert "Test: mixture SPRT on discordant build pairs: planned effect +45% (ψ = 0.5), reject at Λ ≥ 1/α = 20, " \
           "futile at Λ ≤ β = 0.2." in md  # no cap in the design: the runs' units are the cap
    data = json.loads(json_path.read_text())["sequential"]
    assert data["decision"] == "control better" and data["max_pairs"] == 20 and data["likelihood_ratio"] >= 20
