"""pass@k / pass^k / Wilson against hand-computed values, and the run / case summaries."""

from __future__ import annotations

import math

import pytest
from support.eval_results_factory import unit

from orchestrator.results.model import Attribution, BuildStatus
from orchestrator.results.scoring import (
    BUILD_FAILED_CATEGORY,
    pass_at_k,
    pass_hat_k,
    pass_hat_k_unbiased,
    scoring_units,
    summarize,
    terminal_rates,
    wilson_band,
)


@pytest.mark.parametrize(
    ("n", "c", "k", "at_k", "hat_k"),
    [
        # 1 − C(3,2)/C(5,2) = 1 − 3/10 ; C(2,2)/C(5,2) = 1/10 (the plug-in (2/5)^2 would be 0.16)
        (5, 2, 2, 0.7, 0.1),
        # 1 − C(5,3)/C(10,3) = 1 − 10/120 ; C(5,3)/C(10,3) = 10/120
        (10, 5, 3, 11 / 12, 1 / 12),
        (3, 3, 3, 1.0, 1.0),
        (3, 0, 3, 0.0, 0.0),
        (3, 1, 3, 1.0, 0.0),  # one pass among exactly k trials: some draw passes, not all
        (4, 3, 1, 0.75, 0.75),  # k = 1 is the plain pass rate either way
        # 1 − C(2,2)/C(4,2) = 5/6 ; C(2,2)/C(4,2) = 1/6
        (4, 2, 2, 5 / 6, 1 / 6),
    ],
)
def test_pass_at_k_and_unbiased_pass_hat_k_hand_computed(n: int, c: int, k: int, at_k: float, hat_k: float) -> None:
    """pass@k is n8n's ``passAtK`` (``run/aggregator.ts``); the unbiased pass^k is ours alone, an
    extra field beside n8n's headline figure."""
    assert pass_at_k(n, c, k) == pytest.approx(at_k, abs=1e-12)
    assert pass_hat_k_unbiased(n, c, k) == pytest.approx(hat_k, abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k", "hat_k"), [(5, 2, 2, 0.16), (10, 5, 3, 0.125), (3, 1, 3, 1 / 27),
                                                    (4, 3, 1, 0.75), (0, 0, 3, 0.0), (3, 3, 3, 1.0)])
def test_pass_hat_k_is_n8ns_plug_in(n: int, c: int, k: int, hat_k: float) -> None:
    """n8n's ``run/aggregator.ts`` ``passHatK``: (c/n)^k, 0 with no trials — the headline pass^k."""
    assert pass_hat_k(n, c, k) == pytest.approx(hat_k, abs=1e-12)


def test_terminal_rates_are_n8ns() -> None:
    """n8n's ``run/persist.ts`` ``terminalRate``: a unit's pass@k / pass^k at its last k = n."""
    assert terminal_rates(3, 2) == (pytest.approx(1.0), pytest.approx((2 / 3) ** 3))
    assert terminal_rates(3, 0) == (0.0, 0.0)
    assert terminal_rates(0, 0) == (0.0, 0.0)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 4, 1), (3, 1, 4), (3, 1, 0), (0, 0, 1), (3, -1, 1)])
def test_estimators_reject_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError):
        pass_hat_k_unbiased(n, c, k)


def _wilson_by_hand(c: int, n: int, z: float) -> tuple[float, float]:
    p = c / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def test_wilson_band_five_of_ten() -> None:
    """n8n's ``comparison/statistics.ts`` ``wilsonInterval`` (z = 1.96): 5/10 → about [0.237, 0.763]."""
    band = wilson_band(5, 10)
    # center 0.5, half-width 1.96·sqrt(0.025 + 3.8416/400)/1.38416 = 0.2634105
    assert band.rate == 0.5
    assert band.low == pytest.approx(0.2365895, abs=1e-6)
    assert band.high == pytest.approx(0.7634105, abs=1e-6)


@pytest.mark.parametrize(("c", "n", "z"), [(0, 10, 1.96), (10, 10, 1.96), (1, 3, 1.96), (7, 9, 1.0), (3, 50, 2.576)])
def test_wilson_band_matches_the_formula(c: int, n: int, z: float) -> None:
    low, high = _wilson_by_hand(c, n, z)
    band = wilson_band(c, n, z=z)
    assert band.low == pytest.approx(low, abs=1e-6)
    assert band.high == pytest.approx(high, abs=1e-6)


def test_wilson_band_zero_of_ten_upper_bound() -> None:
    # center = half-width = 0.19208 / 1.38416 = 0.1387701 → [0, 0.2775402]
    band = wilson_band(0, 10)
    assert band.low == 0.0
    assert band.high == pytest.approx(0.2775402, abs=1e-6)


def test_wilson_band_without_trials_is_the_whole_range() -> None:
    band = wilson_band(0, 0)
    assert (band.low, band.high) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_band(3, 2)


def test_scoring_units_keys_and_incomplete_excluded() -> None:
    units = [
        unit("alpha", 0, {"happy path": True, "bad input": None}, {"Sends an email": True}),
        unit("alpha", 1, {"happy path": False, "bad input": True}, {"Sends an email": None}),
        unit("alpha", 2, {"happy path": True, "bad input": None}, {"Sends an email": False}),
    ]
    sus = scoring_units(units)
    assert set(sus) == {"alpha/happy path", "alpha/bad input", "alpha#expectation:Sends an email"}
    assert (sus["alpha/happy path"].n, sus["alpha/happy path"].c) == (3, 2)
    assert (sus["alpha/bad input"].n, sus["alpha/bad input"].c) == (1, 1)
    assert (sus["alpha#expectation:Sends an email"].n, sus["alpha#expectation:Sends an email"].c) == (2, 1)
    assert sus["alpha#expectation:Sends an email"].kind == "expectation"


def test_failed_build_counts_as_failure_and_rows_decide_the_rest() -> None:
    """n8n's rule (``packages/@n8n/instance-ai/evaluations/harness/runner.ts`` ``runWorkflowTestCase``,
    ``run/aggregator.ts``): a build that saved no workflow passes none of its scenarios, each an
    evaluated failure; otherwise a unit's rows decide — only ``incomplete`` ones are dropped (a
    timed-out iteration's rows are stamped so, an infrastructure failure's are failures: both
    written by ``run/unit.py``, see ``test_fidelity_counts.py``). A record without rows of a build
    that was not the builder's failure (an older file) contributes nothing."""
    units = [
        unit("beta", 0, {"s1": True, "s2": True}),
        unit("beta", 1, status=BuildStatus.failed, failure_category=None, attribution=None),
        unit("beta", 2, status=BuildStatus.provider_outage),
        unit("beta", 3, status=BuildStatus.lane_failure),
        unit("beta", 4, status=BuildStatus.skipped),
        unit("beta", 5, {"s1": (False, "framework_issue"), "s2": (False, "framework_issue")},
             status=BuildStatus.provider_outage, attribution=Attribution.framework_issue),
        unit("gamma", 0, status=BuildStatus.failed, failure_category="build_failure"),
        unit("gamma", 1, status=BuildStatus.timeout, failure_category="build_failure"),
        unit("theta", 0, {"s": None}, status=BuildStatus.timeout, failure_category="build_timeout"),
    ]
    sus = scoring_units(units)
    assert (sus["beta/s1"].n, sus["beta/s1"].c) == (3, 1)
    failed = [t for t in sus["beta/s2"].trials if not t.passed]
    assert [(t.iteration, t.failure_category, t.attribution) for t in failed] == [
        (1, BUILD_FAILED_CATEGORY, Attribution.builder_issue), (5, "framework_issue", Attribution.framework_issue)
    ]
    # a case no iteration produced a verdict for is still scored, on its build
    assert (sus["gamma/(build)"].n, sus["gamma/(build)"].c) == (1, 0)
    assert sus["gamma/(build)"].trials[0].failure_category == "build_failure"
    assert [t.iteration for t in sus["gamma/(build)"].trials] == [0]
    # a timed-out iteration's rows are incomplete: the unit is known, with no trial
    assert sus["theta/s"].n == 0 and "theta/(build)" not in sus


def test_summarize_fills_run_and_case_summaries() -> None:
    units = [
        unit("alpha", 0, {"s": True}, {"e": True}, cost=0.5, turns=10),
        unit("alpha", 1, {"s": (False, "wrong_output")}, {"e": True}, cost=0.25, turns=7,
             attribution=Attribution.mock_issue),
        unit("alpha", 2, {"s": True}, {"e": False}, cost=0.25, turns=3),
        unit("delta", 0, {"t": True}, cost=1.0, turns=20),
        unit("delta", 1, {"t": None}, cost=1.0, turns=20),
        unit("delta", 2, status=BuildStatus.skipped, cost=0.0, turns=0),
    ]
    summary, cases = summarize(units, k=2, units_total=7)

    assert summary.k == 2
    assert summary.scoring_units == 3
    assert (summary.trials, summary.passed_trials) == (7, 5)  # alpha/s 3, alpha#e 3, delta/t 1
    assert summary.pass_rate is not None and summary.pass_rate.rate == pytest.approx(5 / 7)
    # n8n's headline (run/persist.ts computeAggregateMetrics): every judged unit at its terminal
    # k = n: alpha/s (3, 2) and alpha#e (3, 2) → pass@3 = 1, pass^3 = (2/3)^3; delta/t (1, 1) → 1, 1
    assert summary.pass_at_k == pytest.approx(1.0)
    assert summary.pass_hat_k == pytest.approx((2 * (2 / 3) ** 3 + 1) / 3)
    # ours alone: the unbiased pass^2 over units with n >= 2 = C(2,2)/C(3,2) = 1/3
    assert summary.pass_hat_k_unbiased == pytest.approx(1 / 3)
    assert summary.build_cost_usd == pytest.approx(3.0)
    assert summary.build_turns == 60
    assert summary.attribution == {"builder_issue": 1, "mock_issue": 1, "framework_issue": 0, "verification_gap": 0}
    assert summary.failure_categories == {"wrong_output": 1}
    assert (summary.units_total, summary.units_finished, summary.units_skipped) == (7, 5, 2)

    by_case = {c.case: c for c in cases}
    alpha = by_case["alpha"]
    assert alpha.iterations == 3
    assert alpha.build_cost_usd_per_run == [0.5, 0.25, 0.25]
    assert alpha.build_turns_per_run == [10, 7, 3]
    assert alpha.failure_categories == {"wrong_output": 1}
    assert {u.key: (u.n, u.c, u.pass_at_k, u.pass_hat_k, u.pass_hat_k_unbiased) for u in alpha.units} == {
        "alpha/s": (3, 2, pytest.approx(1.0), pytest.approx(8 / 27), pytest.approx(1 / 3)),
        "alpha#expectation:e": (3, 2, pytest.approx(1.0), pytest.approx(8 / 27), pytest.approx(1 / 3)),
    }
    delta = by_case["delta"]
    assert delta.iterations == 2  # the skipped unit never ran
    assert [(u.key, u.n, u.pass_at_k, u.pass_hat_k_unbiased) for u in delta.units] == [("delta/t", 1, 1.0, None)]


def test_summarize_without_trials_has_no_rates() -> None:
    summary, cases = summarize([unit("x", 0, {"s": None})], k=1, units_total=1)
    assert summary.trials == 0
    assert summary.pass_rate is None and summary.pass_at_k is None and summary.pass_hat_k is None
    assert cases[0].units[0].n == 0
