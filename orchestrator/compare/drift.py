"""Failure-category drift: run-level rates of each failure category, PR vs baseline.

Counted over scenario trials (expectations carry no category). A category's rate is its failed
trials over all judged scenario trials of that side. It is *notable* when

* its rate moved by at least 5 points, and
* the PR count differs from what the baseline predicts at the PR's trial count
  (``base_count × pr_trials / base_trials``) by at least 3 trials,

which catches cross-scenario shifts per-unit flags miss. Both checks use exact fractions.
The table is only drawn when both sides captured categories: each side has scenario trials and,
if it has failed ones, at least one of them names a category. Failed trials without one are
counted as ``uncategorized``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from orchestrator.results.scoring import ScoringUnit, Trial

MIN_RATE_DELTA = Fraction(5, 100)
MIN_EXCESS_TRIALS = Fraction(3)
UNCATEGORIZED = "uncategorized"


@dataclass(frozen=True)
class CategoryDrift:
    category: str
    pr_count: int
    pr_trials: int
    base_count: int
    base_trials: int

    @property
    def pr_rate(self) -> Fraction:
        """This run's rate of the category: its failed trials in it over all judged scenario trials."""
        return Fraction(self.pr_count, self.pr_trials)

    @property
    def base_rate(self) -> Fraction:
        return Fraction(self.base_count, self.base_trials)

    @property
    def delta(self) -> Fraction:
        return self.pr_rate - self.base_rate

    @property
    def expected_pr_count(self) -> Fraction:
        """What the baseline's rate predicts at the PR's trial count."""
        return Fraction(self.base_count * self.pr_trials, self.base_trials)

    @property
    def excess(self) -> Fraction:
        """Trials in the category beyond what the baseline's rate predicts for this run."""
        return self.pr_count - self.expected_pr_count

    @property
    def notable(self) -> bool:
        """Whether the drift is worth reporting: a rate change of at least 5 points and at least 3 trials
        in excess either way."""
        return abs(self.delta) >= MIN_RATE_DELTA and abs(self.excess) >= MIN_EXCESS_TRIALS


def _scenario_trials(units: Iterable[ScoringUnit]) -> list[Trial]:
    return [t for su in units if su.kind == "scenario" for t in su.trials]


def _captured(trials: list[Trial]) -> bool:
    failed = [t for t in trials if not t.passed]
    return bool(trials) and (not failed or any(t.failure_category for t in failed))


def _counts(trials: list[Trial]) -> Counter[str]:
    return Counter(t.failure_category or UNCATEGORIZED for t in trials if not t.passed)


def category_drift(pr: Iterable[ScoringUnit], baseline: Iterable[ScoringUnit]) -> list[CategoryDrift] | None:
    """One row per category seen on either side (largest movement first); None if not captured."""
    pr_trials, base_trials = _scenario_trials(pr), _scenario_trials(baseline)
    if not (_captured(pr_trials) and _captured(base_trials)):
        return None
    pr_counts, base_counts = _counts(pr_trials), _counts(base_trials)
    rows = [
        CategoryDrift(
            category=cat,
            pr_count=pr_counts.get(cat, 0),
            pr_trials=len(pr_trials),
            base_count=base_counts.get(cat, 0),
            base_trials=len(base_trials),
        )
        for cat in set(pr_counts) | set(base_counts)
    ]
    return sorted(rows, key=lambda r: (not r.notable, -abs(r.delta), r.category))
