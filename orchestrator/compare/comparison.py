"""PR-vs-baseline comparison of two runs: per-unit tiers (raw and BH-adjusted), aggregates and
failure-category drift. :func:`comparison_dict` is what the run embeds as ``comparison`` in
``eval-results.json`` and what ``orchestrator compare`` writes to ``comparison.json``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from orchestrator.compare.drift import CategoryDrift, category_drift
from orchestrator.compare.fdr import bh_q_values
from orchestrator.compare.tiers import (
    HARD,
    SOFT,
    WATCH_DELTA,
    Counts,
    Tier,
    TierThresholds,
    classify,
    classify_counts,
)
from orchestrator.compare.trials import unit_trials
from orchestrator.redact import redact_obj
from orchestrator.results.model import Band, EvalResults
from orchestrator.results.scoring import ScoringUnit, UnitKind, wilson_band


@dataclass(frozen=True)
class UnitComparison:
    key: str
    kind: UnitKind
    case: str
    counts: Counts
    p_worse: float
    p_better: float
    tier: Tier
    q_worse: float | None = None  # None: not part of the BH family (insufficient data)
    q_better: float | None = None
    bh_tier: Tier | None = None

    @property
    def survives_bh(self) -> bool:
        """A raw regression still a regression after BH adjustment."""
        return self.tier is Tier.regression and self.bh_tier is Tier.regression


@dataclass(frozen=True)
class Comparison:
    run_id: str
    baseline_run_id: str
    units: list[UnitComparison]
    pr_only: list[str]
    baseline_only: list[str]
    pr_band: Band | None
    baseline_band: Band | None
    drift: list[CategoryDrift] | None
    tier_counts: dict[str, int] = field(default_factory=dict)

    def in_tier(self, tier: Tier) -> list[UnitComparison]:
        return [u for u in self.units if u.tier is tier]

    @property
    def regressions_surviving_bh(self) -> list[UnitComparison]:
        return [u for u in self.units if u.survives_bh]


def _band(units: dict[str, ScoringUnit]) -> Band | None:
    n = sum(su.n for su in units.values())
    return wilson_band(sum(su.c for su in units.values()), n) if n else None


def compare(results: EvalResults, baseline: EvalResults) -> Comparison:
    """Compare every scoring unit the two runs share; list the ones only one side has."""
    pr_units, base_units = unit_trials(results), unit_trials(baseline)
    shared = [key for key in pr_units if key in base_units]
    raw: list[UnitComparison] = []
    for key in shared:
        pr, base = pr_units[key], base_units[key]
        counts = Counts(pr_passes=pr.c, pr_total=pr.n, base_passes=base.c, base_total=base.n)
        tier, p_worse, p_better = classify_counts(counts)
        raw.append(UnitComparison(key=key, kind=pr.kind, case=pr.case, counts=counts,
                                  p_worse=p_worse, p_better=p_better, tier=tier))

    family = [i for i, u in enumerate(raw) if u.tier is not Tier.insufficient_data]
    q_worse = bh_q_values([raw[i].p_worse for i in family])
    q_better = bh_q_values([raw[i].p_better for i in family])
    units = list(raw)
    for j, i in enumerate(family):
        u = raw[i]
        units[i] = UnitComparison(
            key=u.key, kind=u.kind, case=u.case, counts=u.counts, p_worse=u.p_worse,
            p_better=u.p_better, tier=u.tier, q_worse=q_worse[j], q_better=q_better[j],
            bh_tier=classify(u.counts, q_worse[j], q_better[j]),
        )

    counts_by_tier = Counter(u.tier.value for u in units)
    return Comparison(
        run_id=results.run_id,
        baseline_run_id=baseline.run_id,
        units=units,
        pr_only=sorted(k for k in pr_units if k not in base_units),
        baseline_only=sorted(k for k in base_units if k not in pr_units),
        pr_band=_band(pr_units),
        baseline_band=_band(base_units),
        drift=category_drift(pr_units.values(), base_units.values()),
        tier_counts={t.value: counts_by_tier.get(t.value, 0) for t in Tier},
    )


def _unit_dict(u: UnitComparison) -> dict[str, Any]:
    c = u.counts
    return {
        "key": u.key,
        "kind": u.kind,
        "case": u.case,
        "pr": {"passes": c.pr_passes, "total": c.pr_total, "rate": float(c.pr_rate)},
        "baseline": {"passes": c.base_passes, "total": c.base_total, "rate": float(c.base_rate)},
        "delta": float(c.delta),
        "p_worse": u.p_worse,
        "p_better": u.p_better,
        "tier": u.tier.value,
        "q_worse": u.q_worse,
        "q_better": u.q_better,
        "bh_tier": u.bh_tier.value if u.bh_tier else None,
        "survives_bh": u.survives_bh,
    }


def _drift_dict(d: CategoryDrift) -> dict[str, Any]:
    return {
        "category": d.category,
        "pr_count": d.pr_count,
        "pr_trials": d.pr_trials,
        "pr_rate": float(d.pr_rate),
        "baseline_count": d.base_count,
        "baseline_trials": d.base_trials,
        "baseline_rate": float(d.base_rate),
        "delta": float(d.delta),
        "expected_pr_count": float(d.expected_pr_count),
        "excess": float(d.excess),
        "notable": d.notable,
    }


def _thresholds() -> dict[str, Any]:
    def tier(t: TierThresholds) -> dict[str, float]:
        return {"max_p": float(t.max_p), "min_delta": float(t.min_delta),
                "min_baseline_rate": float(t.min_baseline_rate)}

    return {"hard": tier(HARD), "soft": tier(SOFT), "watch_delta": float(WATCH_DELTA),
            "p_cutoff": "inclusive (p <= max_p)"}


def comparison_dict(comparison: Comparison) -> dict[str, Any]:
    """JSON-ready, redacted form of ``comparison``."""
    return redact_obj({
        "run_id": comparison.run_id,
        "baseline_run_id": comparison.baseline_run_id,
        "thresholds": _thresholds(),
        "tier_counts": comparison.tier_counts,
        "regressions_surviving_bh": [u.key for u in comparison.regressions_surviving_bh],
        "pr_pass_rate": comparison.pr_band.model_dump() if comparison.pr_band else None,
        "baseline_pass_rate": comparison.baseline_band.model_dump() if comparison.baseline_band else None,
        "units": [_unit_dict(u) for u in comparison.units],
        "pr_only": comparison.pr_only,
        "baseline_only": comparison.baseline_only,
        "failure_category_drift": [_drift_dict(d) for d in comparison.drift] if comparison.drift is not None else None,
    })
