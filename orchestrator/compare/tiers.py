"""Tiering one unit's PR-vs-baseline pass counts with n8n's rules (``comparison/statistics.ts``,
``classifyScenario``).

Verdicts, tested in this order (the first that holds wins):

``insufficient_data``
    Either side has no judged trial.
``improvement``
    One-sided Fisher p (better) < 0.05 and a rise of at least 30 points. No reliability gate:
    fixing a flaky unit is a real win.
``hard_regression``
    p (worse) < 0.05, a drop of at least 30 points, baseline pass rate ≥ 70%. Gating-grade.
``unreliable_baseline``
    The same confident drop, but the baseline passed < 70%: surfaced, not flagged.
``soft_regression``
    p (worse) < 0.20, a drop of at least 15 points, baseline ≥ 50%.
``watch``
    Moved ≥ 35 points either way without any of the above.
``stable``
    Everything else.

Everything is computed the way n8n computes it, so the same counts get the same verdict there and
here: rates and deltas are IEEE doubles (``passes / total``), significance is strict (``p < α``),
and the Fisher p-value is n8n's sum of hypergeometric terms over cumulated log factorials. The
edges follow from that: 40/100 vs 70/100 is a float delta of −0.29999999999999993, short of −0.30,
so it is not a hard regression (n8n does not flag it either); PR 0/3 vs baseline 3/3 has p just
under 0.05 in that arithmetic and is a hard regression (n8n's own test asserts it).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass


class Tier(str, enum.Enum):
    """n8n's ``ScenarioVerdict`` names."""

    hard_regression = "hard_regression"
    soft_regression = "soft_regression"
    watch = "watch"
    improvement = "improvement"
    stable = "stable"
    unreliable_baseline = "unreliable_baseline"
    insufficient_data = "insufficient_data"


#: Tiers that mean "the PR got worse" with some confidence.
REGRESSION_TIERS = frozenset({Tier.hard_regression, Tier.soft_regression})

#: n8n's ``VERDICT_ORDER`` (``comparison/compare.ts``): how units are listed.
VERDICT_ORDER = {
    Tier.hard_regression: 0, Tier.soft_regression: 1, Tier.improvement: 2, Tier.watch: 3,
    Tier.unreliable_baseline: 4, Tier.stable: 5, Tier.insufficient_data: 6,
}


@dataclass(frozen=True)
class TierThresholds:
    max_p: float
    min_delta: float
    min_baseline_rate: float


HARD = TierThresholds(max_p=0.05, min_delta=0.3, min_baseline_rate=0.7)
SOFT = TierThresholds(max_p=0.2, min_delta=0.15, min_baseline_rate=0.5)
WATCH_DELTA = 0.35


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
    def pr_rate(self) -> float:
        """This run's pass rate (0 without trials)."""
        return self.pr_passes / self.pr_total if self.pr_total > 0 else 0.0

    @property
    def base_rate(self) -> float:
        """The baseline's pass rate (0 without trials)."""
        return self.base_passes / self.base_total if self.base_total > 0 else 0.0

    @property
    def delta(self) -> float:
        """PR rate − baseline rate: negative means the PR is worse."""
        return self.pr_rate - self.base_rate


# --------------------------------------------------------------------------- Fisher, n8n's arithmetic

_LOG_FACTORIAL = [0.0, 0.0]


def _log_factorial(n: int) -> float:
    for i in range(len(_LOG_FACTORIAL), n + 1):
        _LOG_FACTORIAL.append(_LOG_FACTORIAL[i - 1] + math.log(i))
    return _LOG_FACTORIAL[n]


def _log_binomial(n: int, k: int) -> float:
    if k < 0 or k > n:
        return -math.inf
    return _log_factorial(n) - _log_factorial(k) - _log_factorial(n - k)


def _hypergeom_pmf(passes: int, fails: int, drawn: int, k: int) -> float:
    if k < max(0, drawn - fails) or k > min(drawn, passes):
        return 0.0
    return math.exp(_log_binomial(passes, k) + _log_binomial(fails, drawn - k) - _log_binomial(passes + fails, drawn))


def fisher_left(a: int, b: int, c: int, d: int) -> float:
    """One-sided (left-tail) Fisher exact p for the table PR ``a`` pass / ``b`` fail vs baseline
    ``c`` / ``d``: the chance the PR passes at most ``a`` times if both shared one rate. 1 when a
    side has no trials or the table has no passes or no failures (nothing to test)."""
    if min(a, b, c, d) < 0:
        raise ValueError("fisher_left needs non-negative counts")
    n_pr, n_base, passes, fails = a + b, c + d, a + c, b + d
    if n_pr == 0 or n_base == 0 or passes == 0 or fails == 0:
        return 1.0
    p = 0.0
    for k in range(min(a, passes) + 1):
        p += _hypergeom_pmf(passes, fails, n_pr, k)
    return min(1.0, max(0.0, p))


def fisher_p_values(counts: Counts) -> tuple[float, float]:
    """``(p_worse, p_better)``: n8n's ``pValueLeft`` and ``pValueRight``."""
    if counts.pr_total == 0 or counts.base_total == 0:
        return 1.0, 1.0
    a, b = counts.pr_passes, counts.pr_total - counts.pr_passes
    c, d = counts.base_passes, counts.base_total - counts.base_passes
    return fisher_left(a, b, c, d), fisher_left(c, d, a, b)


def _meets(p: float, delta: float, base_rate: float, tier: TierThresholds, *, worse: bool) -> bool:
    if p >= tier.max_p:
        return False
    if worse:
        return delta <= -tier.min_delta and base_rate >= tier.min_baseline_rate
    return delta >= tier.min_delta


def classify(
    counts: Counts,
    p_worse: float,
    p_better: float,
    *,
    hard: TierThresholds = HARD,
    soft: TierThresholds = SOFT,
    watch_delta: float = WATCH_DELTA,
) -> Tier:
    """The verdict for ``counts`` given its p-values (raw Fisher, or BH-adjusted q-values)."""
    if counts.pr_total == 0 or counts.base_total == 0:
        return Tier.insufficient_data
    delta, base = counts.delta, counts.base_rate
    if _meets(p_better, delta, base, hard, worse=False):
        return Tier.improvement
    if _meets(p_worse, delta, base, hard, worse=True):
        return Tier.hard_regression
    if p_worse < hard.max_p and delta <= -hard.min_delta and base < hard.min_baseline_rate:
        return Tier.unreliable_baseline
    if _meets(p_worse, delta, base, soft, worse=True):
        return Tier.soft_regression
    if abs(delta) >= watch_delta:
        return Tier.watch
    return Tier.stable


def classify_counts(counts: Counts) -> tuple[Tier, float, float]:
    """Fisher p-values and the raw verdict for ``counts``: ``(tier, p_worse, p_better)``."""
    p_worse, p_better = fisher_p_values(counts)
    return classify(counts, p_worse, p_better), p_worse, p_better
