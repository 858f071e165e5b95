"""Tiering one unit's PR-vs-baseline pass counts, as the reference harness does.

Verdicts, tested in this order (the first that holds wins):

``insufficient_data``
    Fewer than :data:`MIN_TRIALS_PER_SIDE` judged trials on either side (the reference: zero).
``improvement``
    PR significantly better: one-sided Fisher p (better) ≤ 0.05 and a rise ≥ 30 points. No
    reliability gate: fixing a flaky unit is a real win.
``regression``
    p (worse) ≤ 0.05, drop ≥ 30 points, baseline pass rate ≥ 70%. Gating-grade.
``unreliable_baseline``
    The same confident drop, but the baseline passed < 70%: surfaced, not flagged.
``likely_regression``
    p (worse) ≤ 0.20, drop ≥ 15 points, baseline ≥ 50%.
``worth_watching``
    Moved ≥ 35 points either way without any of the above.
``stable``
    Everything else.

Significance is ``p ≤ α``. The reference README words it "< 5%" and its code writes ``p < α``,
but its own tests assert that PR 0/3 vs baseline 3/3 — p = 1/20 exactly, the strongest evidence
three iterations can give — is a hard regression, which holds there only through floating-point
rounding (scipy computes 0.05000000000000001). We make that intended behaviour explicit: p ≤ α,
with a relative tolerance of 1e-9 to absorb rounding (achievable Fisher p-values at eval sizes
are orders of magnitude further apart than that). Rates, deltas and thresholds are compared as
exact fractions, so 40/100 vs 70/100 is a drop of exactly 30 points on a baseline of exactly 70%.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from fractions import Fraction

from scipy.stats import fisher_exact

#: A side with fewer judged trials than this cannot be tiered (the reference: any trial at all).
MIN_TRIALS_PER_SIDE = 1
#: Relative slack when comparing a p-value to its cutoff.
P_TOLERANCE = 1e-9


class Tier(str, enum.Enum):
    regression = "regression"
    likely_regression = "likely_regression"
    worth_watching = "worth_watching"
    improvement = "improvement"
    unreliable_baseline = "unreliable_baseline"
    stable = "stable"
    insufficient_data = "insufficient_data"


#: Tiers that mean "the PR got worse" with some confidence.
REGRESSION_TIERS = frozenset({Tier.regression, Tier.likely_regression})


@dataclass(frozen=True)
class TierThresholds:
    max_p: Fraction
    min_delta: Fraction
    min_baseline_rate: Fraction


HARD = TierThresholds(max_p=Fraction("0.05"), min_delta=Fraction("0.30"), min_baseline_rate=Fraction("0.70"))
SOFT = TierThresholds(max_p=Fraction("0.20"), min_delta=Fraction("0.15"), min_baseline_rate=Fraction("0.50"))
WATCH_DELTA = Fraction("0.35")


@dataclass(frozen=True)
class Counts:
    """Judged trials of one unit on both sides."""

    pr_passes: int
    pr_total: int
    base_passes: int
    base_total: int

    def __post_init__(self) -> None:
        for passes, total in ((self.pr_passes, self.pr_total), (self.base_passes, self.base_total)):
            if total < 0 or passes < 0 or passes > total:
                raise ValueError(f"need 0 <= passes <= total, got {passes}/{total}")

    @property
    def pr_rate(self) -> Fraction:
        return Fraction(self.pr_passes, self.pr_total) if self.pr_total else Fraction(0)

    @property
    def base_rate(self) -> Fraction:
        return Fraction(self.base_passes, self.base_total) if self.base_total else Fraction(0)

    @property
    def delta(self) -> Fraction:
        """PR rate − baseline rate: negative means the PR is worse."""
        return self.pr_rate - self.base_rate


def fisher_p_values(counts: Counts) -> tuple[float, float]:
    """One-sided Fisher exact p-values ``(p_worse, p_better)`` for the PR against the baseline."""
    if counts.pr_total == 0 or counts.base_total == 0:
        return 1.0, 1.0
    table = [
        [counts.pr_passes, counts.pr_total - counts.pr_passes],
        [counts.base_passes, counts.base_total - counts.base_passes],
    ]
    worse = float(fisher_exact(table, alternative="less").pvalue)
    better = float(fisher_exact(table, alternative="greater").pvalue)
    return min(1.0, worse), min(1.0, better)


def significant(p: float, max_p: Fraction) -> bool:
    return p <= float(max_p) * (1.0 + P_TOLERANCE)


def classify(
    counts: Counts,
    p_worse: float,
    p_better: float,
    *,
    hard: TierThresholds = HARD,
    soft: TierThresholds = SOFT,
    watch_delta: Fraction = WATCH_DELTA,
    min_trials: int = MIN_TRIALS_PER_SIDE,
) -> Tier:
    """The tier for ``counts`` given its p-values (raw Fisher, or BH-adjusted q-values)."""
    if counts.pr_total < min_trials or counts.base_total < min_trials:
        return Tier.insufficient_data
    delta, base = counts.delta, counts.base_rate
    if significant(p_better, hard.max_p) and delta >= hard.min_delta:
        return Tier.improvement
    if significant(p_worse, hard.max_p) and delta <= -hard.min_delta:
        return Tier.regression if base >= hard.min_baseline_rate else Tier.unreliable_baseline
    if significant(p_worse, soft.max_p) and delta <= -soft.min_delta and base >= soft.min_baseline_rate:
        return Tier.likely_regression
    if abs(delta) >= watch_delta:
        return Tier.worth_watching
    return Tier.stable


def classify_counts(counts: Counts) -> tuple[Tier, float, float]:
    """Fisher p-values and the raw tier for ``counts``: ``(tier, p_worse, p_better)``."""
    p_worse, p_better = fisher_p_values(counts)
    return classify(counts, p_worse, p_better), p_worse, p_better
