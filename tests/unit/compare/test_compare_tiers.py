"""Tier boundaries, hand-computed: each threshold just inside and just outside, plus BH and drift."""

from __future__ import annotations

from fractions import Fraction

import pytest
from support.eval_results_factory import results, trials_units, unit

from orchestrator.compare.comparison import compare, comparison_dict
from orchestrator.compare.drift import CategoryDrift, category_drift
from orchestrator.compare.fdr import bh_q_values
from orchestrator.compare.tiers import Counts, Tier, classify, classify_counts, fisher_left, fisher_p_values
from orchestrator.results.scoring import ScoringUnit, Trial

T = Tier


@pytest.mark.parametrize(
    ("counts", "p_worse"),
    [
        # hypergeometric left tail, 2x2 [[PR pass, PR fail], [base pass, base fail]]
        ((1, 3, 10, 10), Fraction(11, 286)),  # C(11,1)C(2,2)/C(13,3)
        ((0, 3, 3, 3), Fraction(1, 20)),  # 1/C(6,3)
        ((0, 1, 4, 4), Fraction(1, 5)),
        ((0, 2, 4, 4), Fraction(1, 15)),  # C(2,2)/C(6,2)
        ((0, 1, 3, 3), Fraction(1, 4)),
    ],
)
def test_fisher_one_sided_hand_computed(counts: tuple[int, int, int, int], p_worse: Fraction) -> None:
    worse, better = fisher_p_values(Counts(*counts))
    assert worse == pytest.approx(float(p_worse), rel=1e-12)
    assert better == pytest.approx(1.0)


def test_fisher_mirrors_for_improvements_and_is_one_without_information() -> None:
    assert fisher_p_values(Counts(3, 3, 0, 3)) == (pytest.approx(1.0), pytest.approx(0.05))
    assert fisher_p_values(Counts(3, 3, 5, 5)) == (1.0, 1.0)  # nothing failed
    assert fisher_p_values(Counts(0, 0, 5, 10)) == (1.0, 1.0)  # no PR trials


# (PR passes, PR total, baseline passes, baseline total) -> verdict, with the boundary each pins.
# Every expected verdict was also checked against a JavaScript run of n8n's arithmetic.
BOUNDARIES = [
    # hard p: 0/3 vs 3/3 (p = 1/20, a hair under in n8n's log-factorial sum) is a hard regression,
    # as n8n's own test asserts ...
    ((0, 3, 3, 3), T.hard_regression),
    # ... the next achievable p (1/15) is not, and falls to the soft tier
    ((0, 2, 4, 4), T.soft_regression),
    # hard delta: 0.7 − 1.0 is −0.30000000000000004 in floats: in; −29 pts out
    ((70, 100, 100, 100), T.hard_regression),
    ((71, 100, 100, 100), T.soft_regression),
    # the edge: 0.4 − 0.7 is −0.29999999999999993 in floats, short of −0.30, so n8n does
    # not flag 40/100 vs 70/100 as hard (nor 39/100 vs 69/100 as unreliable_baseline)
    ((40, 100, 70, 100), T.soft_regression),
    ((39, 100, 69, 100), T.soft_regression),
    ((39, 100, 70, 100), T.hard_regression),  # −31 pts on the same 70% baseline is
    ((40, 100, 71, 100), T.hard_regression),
    ((41, 100, 70, 100), T.soft_regression),
    ((0, 10, 4, 10), T.unreliable_baseline),  # n8n's own fixture (p ≈ 0.043)
    # soft p: 0/1 vs 4/4 (p = 1/5, just under in floats) in, 1/4 out (then |Δ| = 100 pts: watch)
    ((0, 1, 4, 4), T.soft_regression),
    ((0, 1, 3, 3), T.watch),
    # soft delta: −15 pts in, −14 pts out
    ((85, 100, 100, 100), T.soft_regression),
    ((86, 100, 100, 100), T.stable),
    # soft baseline 50% with 0.35 − 0.5 = −0.15000000000000002: in; 0.34 − 0.49 = −0.14999999999999997: out
    ((35, 100, 50, 100), T.soft_regression),
    ((34, 100, 49, 100), T.stable),
    # watch: |Δ| = 35 pts in, 34 out, both directions, no significance
    ((0, 1, 35, 100), T.watch),
    ((0, 1, 34, 100), T.stable),
    ((1, 1, 65, 100), T.watch),
    ((1, 1, 66, 100), T.stable),
    # improvement p: 1/20 in, 1/15 out (then watch)
    ((3, 3, 0, 3), T.improvement),
    ((2, 2, 0, 4), T.watch),
    # improvement delta: +30 pts in, +29 out
    ((30, 100, 0, 100), T.improvement),
    ((29, 100, 0, 100), T.stable),
    # improvement has no reliability gate
    ((8, 10, 0, 10), T.improvement),
    # insufficient data: zero judged trials on a side; one trial is enough to tier
    ((0, 0, 5, 10), T.insufficient_data),
    ((5, 10, 0, 0), T.insufficient_data),
    ((0, 1, 1, 1), T.watch),
    # n8n's statistics tests: small drops stay stable, 6/10 vs 10/10 is hard, 7/10 vs 10/10 soft
    ((9, 10, 10, 10), T.stable),
    ((0, 10, 1, 10), T.stable),
    ((3, 3, 3, 3), T.stable),
    ((6, 10, 10, 10), T.hard_regression),
    ((0, 10, 10, 10), T.hard_regression),
    ((10, 10, 0, 10), T.improvement),
]


@pytest.mark.parametrize(("counts", "tier"), BOUNDARIES, ids=[f"{c}->{t.value}" for c, t in BOUNDARIES])
def test_tier_boundaries_from_counts(counts: tuple[int, int, int, int], tier: Tier) -> None:
    """n8n's ``comparison/statistics.ts`` ``classifyScenario``: the verdict order, thresholds and
    float arithmetic (rates ``passes / total``, delta their difference) give these verdicts."""
    assert classify_counts(Counts(*counts))[0] is tier


@pytest.mark.parametrize(
    ("p_worse", "tier"),
    [(0.05, T.soft_regression), (0.0499999, T.hard_regression), (0.2, T.watch), (0.1999999, T.soft_regression)],
)
def test_p_value_cutoffs_are_strict(p_worse: float, tier: Tier) -> None:
    """n8n's ``comparison/statistics.ts`` ``meetsThreshold``: ``pValue >= maxPValue`` fails, so
    significance is p < α (0/3 vs 3/3: −100 pts on a 100% baseline, only the p-value decides)."""
    assert classify(Counts(0, 3, 3, 3), p_worse=p_worse, p_better=1.0) is tier


@pytest.mark.parametrize(("p_better", "tier"), [(0.0499999, T.improvement), (0.05, T.watch)])
def test_improvement_p_cutoff(p_better: float, tier: Tier) -> None:
    """n8n's ``comparison/statistics.ts`` ``classifyScenario``: improvement needs p (right) < 0.05."""
    assert classify(Counts(3, 3, 0, 3), p_worse=1.0, p_better=p_better) is tier


def test_unreliable_baseline_p_cutoff() -> None:
    """n8n's ``comparison/statistics.ts`` ``classifyScenario``: unreliable_baseline needs
    ``pValueLeft < hard.maxPValue``; below a 50% baseline there is no soft tier, so the drop is watch."""
    counts = Counts(0, 10, 4, 10)  # −40 pts on a 40% baseline
    assert classify(counts, p_worse=0.0499999, p_better=1.0) is T.unreliable_baseline
    assert classify(counts, p_worse=0.05, p_better=1.0) is T.watch


def test_fisher_returns_one_without_information() -> None:
    """n8n's ``comparison/statistics.ts`` ``fishersExactOneSidedLeft``: 1 when a side is empty or
    the table has no passes or no failures; the textbook 1/3 vs 10/10 case is 11/286."""
    assert fisher_left(0, 0, 5, 5) == 1 and fisher_left(5, 5, 0, 0) == 1
    assert fisher_left(3, 0, 5, 0) == 1 and fisher_left(0, 3, 0, 5) == 1
    assert fisher_left(5, 0, 5, 0) == 1
    assert fisher_left(1, 2, 10, 0) == pytest.approx(11 / 286, abs=1e-12)
    assert fisher_left(5, 5, 5, 5) > 0.5


def test_bh_q_values_hand_computed() -> None:
    # ranks of 0.01, 0.03, 0.04, 0.5 → p·m/rank = 0.04, 0.06, 0.0533…, 0.5 → running min from the top
    q = bh_q_values([0.01, 0.04, 0.03, 0.5])
    assert q == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.5])
    assert bh_q_values([]) == []


def test_bh_view_shows_which_regressions_survive() -> None:
    """Ours alone, an extra beside n8n's verdicts: the BH view (q-values, bhVerdict) never changes them."""
    # four units at 0/3 vs 3/3 (p just under 1/20 each): alone, q = p·4/4 = p → all survive
    pr = [u for i in range(4) for u in trials_units(f"r{i}", "s", 0, 3)]
    base = [u for i in range(4) for u in trials_units(f"r{i}", "s", 3, 3)]
    alone = compare(results("pr", pr), results("base", base))
    assert [u.tier for u in alone.units] == [T.hard_regression] * 4
    assert [u.q_worse for u in alone.units] == pytest.approx([0.05] * 4)
    assert len(alone.regressions_surviving_bh) == 4

    # with four stable units (p = 1) beside them: q = 0.05·8/4 = 0.10 → none survive, BH tier is soft
    pr += [u for i in range(4) for u in trials_units(f"ok{i}", "s", 3, 3)]
    base += [u for i in range(4) for u in trials_units(f"ok{i}", "s", 3, 3)]
    crowded = compare(results("pr", pr), results("base", base))
    regs = crowded.in_tier(T.hard_regression)
    assert len(regs) == 4
    assert [u.q_worse for u in regs] == pytest.approx([0.1] * 4)
    assert [u.bh_tier for u in regs] == [T.soft_regression] * 4
    assert crowded.regressions_surviving_bh == []
    data = comparison_dict(crowded)
    assert data["orchestrator"]["hardRegressionsSurvivingBh"] == []
    assert data["orchestrator"]["verdictCounts"]["hard_regression"] == 4
    assert [u["verdict"] for u in data["evaluationUnits"]].count("hard_regression") == 4
    assert all(u["bhVerdict"] in ("soft_regression", "stable") for u in data["evaluationUnits"])


def test_compare_lists_one_sided_units_and_insufficient_data() -> None:
    pr = trials_units("a", "s", 3, 3) + trials_units("only-pr", "s", 1, 1) + [unit("b", 0, {"s": None})]
    base = trials_units("a", "s", 3, 3) + trials_units("only-base", "s", 1, 1) + trials_units("b", "s", 2, 2)
    comparison = compare(results("pr", pr), results("base", base))
    assert comparison.pr_only == ["only-pr/s"]
    assert comparison.baseline_only == ["only-base/s"]
    tiers = {u.key: u for u in comparison.units}
    assert tiers["a/s"].tier is T.stable
    assert tiers["b/s"].tier is T.insufficient_data
    assert tiers["b/s"].q_worse is None and tiers["b/s"].bh_tier is None  # not part of the BH family


def _side(total: int, failures: dict[str, int]) -> list[ScoringUnit]:
    trials = [Trial(iteration=i, passed=True) for i in range(total - sum(failures.values()))]
    for cat, n in failures.items():
        trials += [Trial(iteration=0, passed=False, failure_category=cat)] * n
    return [ScoringUnit(key="c/s", kind="scenario", case="c", trials=trials)]


@pytest.mark.parametrize(
    ("pr", "base", "notable"),
    [
        ((60, 3), (60, 0), True),  # Δ = 5 pts exactly, 3 trials beyond scaling exactly
        ((60, 2), (60, 0), False),  # Δ 3.3 pts, 2 trials
        ((20, 3), (20, 0), True),  # Δ 15 pts, 3 trials
        ((20, 2), (20, 0), False),  # Δ 10 pts but only 2 trials
        ((100, 8), (100, 3), True),  # Δ 5 pts, 5 trials
        ((100, 7), (100, 3), False),  # Δ 4 pts
        ((40, 4), (20, 2), False),  # same 10% rate at twice the trials: scaling predicts 4
        ((40, 10), (20, 2), True),  # 25% vs 10%: expected 4, got 10 → 6 beyond scaling
        ((20, 0), (60, 9), True),  # a category that went away: −15 pts, expected 3, got 0
    ],
)
def test_drift_notable_boundaries(pr: tuple[int, int], base: tuple[int, int], notable: bool) -> None:
    rows = category_drift(_side(pr[0], {"mock_generation": pr[1]}), _side(base[0], {"mock_generation": base[1]}))
    assert rows is not None
    row = next(r for r in rows if r.category == "mock_generation")
    assert row.notable is notable


def test_drift_excess_is_beyond_scaling() -> None:
    row = CategoryDrift("x", pr_count=10, pr_trials=40, base_count=2, base_trials=20)
    assert row.expected_pr_count == 4 and row.excess == 6 and row.delta == Fraction(15, 100)


def test_drift_needs_categories_on_both_sides() -> None:
    uncategorized = [ScoringUnit(key="c/s", kind="scenario", case="c",
                                 trials=[Trial(iteration=0, passed=False)])]
    assert category_drift(_side(10, {"x": 2}), uncategorized) is None
    assert category_drift(_side(10, {"x": 2}), []) is None
    clean = category_drift(_side(10, {"x": 2}), _side(10, {}))  # a side without failures captured nothing wrong
    assert clean is not None and [r.category for r in clean] == ["x"]


def test_comparison_dict_embeds_in_eval_results() -> None:
    """n8n's ``comparison/compare.ts`` ``EvaluationUnitComparison``: the unit row's field names."""
    pr = results("pr", trials_units("a", "s", 0, 3, category="mock_generation"))
    base = results("base", trials_units("a", "s", 3, 3))
    data = comparison_dict(compare(pr, base))
    embedded = pr.model_copy(update={"comparison": data})
    again = type(pr).model_validate_json(embedded.model_dump_json())
    assert again.comparison == data
    [row] = data["evaluationUnits"]
    assert {k: row[k] for k in ("kind", "testCaseFile", "name", "prPasses", "prTotal", "baselinePasses",
                                "baselineTotal", "verdict", "prPassRate", "baselinePassRate", "delta")} == {
        "kind": "scenario", "testCaseFile": "a", "name": "s", "prPasses": 0, "prTotal": 3, "baselinePasses": 3,
        "baselineTotal": 3, "verdict": "hard_regression", "prPassRate": 0.0, "baselinePassRate": 1.0, "delta": -1.0}
    assert row["pValueLeft"] < 0.05 and row["pValueRight"] == pytest.approx(1.0)
    assert data["orchestrator"]["thresholds"]["hard"] == {"maxPValue": 0.05, "minDelta": 0.3, "minBaselinePassRate": 0.7}
    [drift] = data["orchestrator"]["failureCategoryDrift"]
    assert drift["category"] == "mock_generation" and drift["notable"] is True
