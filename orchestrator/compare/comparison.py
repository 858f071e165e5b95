"""PR-vs-baseline comparison of two runs with n8n's rules (``comparison/compare.ts``,
``compareBuckets``): per-unit verdicts, the aggregate over the units both sides share, and the
failure-category table; plus, as extras of ours, the Benjamini–Hochberg view and our drift view.

:func:`comparison_dict` is n8n's ``ComparisonResult`` (the ``comparison.result`` of
``eval-results.json``, field for field) with our extras under ``orchestrator``; ``orchestrator
compare`` writes it to ``comparison.json``.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.compare.drift import CategoryDrift, category_drift
from orchestrator.compare.fdr import bh_q_values
from orchestrator.compare.tiers import (
    HARD,
    SOFT,
    VERDICT_ORDER,
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

#: n8n's ``KNOWN_FAILURE_CATEGORIES`` (``comparison/compare.ts``), in its order: the rows of
#: ``failureCategories``; any other category is left out of that table, as there.
KNOWN_FAILURE_CATEGORIES = (
    "builder_issue", "mock_issue", "framework_issue", "verification_gap", "verification_failure",
    "build_failure", "build_timeout", "timeout", "expectations_failed",
)
CATEGORY_NOTABLE_RATE_DELTA = 0.05
CATEGORY_NOTABLE_COUNT_DELTA = 3


@dataclass(frozen=True)
class UnitComparison:
    key: str
    kind: UnitKind
    case: str
    name: str
    counts: Counts
    p_worse: float
    p_better: float
    tier: Tier
    q_worse: float | None = None  # None: not part of the BH family (insufficient data)
    q_better: float | None = None
    bh_tier: Tier | None = None

    @property
    def survives_bh(self) -> bool:
        """A raw hard regression still one after BH adjustment."""
        return self.tier is Tier.hard_regression and self.bh_tier is Tier.hard_regression


@dataclass(frozen=True)
class CategoryRow:
    """One row of n8n's ``failureCategories`` table."""

    category: str
    pr_count: int
    pr_rate: float
    baseline_count: int
    baseline_rate: float
    delta: float
    notable: bool


@dataclass(frozen=True)
class Comparison:
    run_id: str
    baseline_run_id: str
    units: list[UnitComparison]
    pr_only: list[str]
    baseline_only: list[str]
    #: n8n's aggregate: pass rate and Wilson band over the units both sides share
    pr_band: Band | None
    baseline_band: Band | None
    drift: list[CategoryDrift] | None
    tier_counts: dict[str, int] = field(default_factory=dict)
    pr_name: str = ""
    baseline_name: str = ""
    #: ours alone: the pass rate over every unit of each side, shared or not
    pr_band_all: Band | None = None
    baseline_band_all: Band | None = None
    categories: list[CategoryRow] = field(default_factory=list)
    unit_refs: dict[str, tuple[UnitKind, str, str]] = field(default_factory=dict)

    def in_tier(self, tier: Tier) -> list[UnitComparison]:
        """The compared units placed in ``tier``, in comparison order."""
        return [u for u in self.units if u.tier is tier]

    @property
    def regressions_surviving_bh(self) -> list[UnitComparison]:
        """Hard regressions still hard after the Benjamini–Hochberg adjustment."""
        return [u for u in self.units if u.survives_bh]

    @property
    def intersection_size(self) -> int:
        """Units measured in both runs (only those are compared)."""
        return len(self.units)


def _band(units: Iterable[ScoringUnit]) -> Band | None:
    units = list(units)
    n = sum(su.n for su in units)
    return wilson_band(sum(su.c for su in units), n) if n else None


def unit_name(su: ScoringUnit) -> str:
    """The scenario name or expectation text of a unit (its key without the case)."""
    sep = "#expectation:" if su.kind == "expectation" else "/"
    return su.key[len(su.case) + len(sep):] if su.key.startswith(su.case + sep) else su.key


def _category_totals(units: Iterable[ScoringUnit]) -> tuple[Counter[str], int]:
    """Failed scenario trials per category and all judged scenario trials (n8n's
    ``failureCategoryTotals`` / ``trialTotal``: scenario-only, incomplete runs left out)."""
    totals: Counter[str] = Counter()
    trials = 0
    for su in units:
        if su.kind != "scenario":
            continue
        for t in su.trials:
            trials += 1
            if not t.passed and t.failure_category:
                totals[t.failure_category] += 1
    return totals, trials


def failure_category_rows(pr: Iterable[ScoringUnit], baseline: Iterable[ScoringUnit]) -> list[CategoryRow]:
    """n8n's ``compareFailureCategories``: one row per known category (even 0/0), notable first,
    then by |delta|; nothing when either side has no scenario trial."""
    pr_totals, pr_trials = _category_totals(pr)
    base_totals, base_trials = _category_totals(baseline)
    if pr_trials == 0 or base_trials == 0:
        return []
    rows = []
    for cat in KNOWN_FAILURE_CATEGORIES:
        pc, bc = pr_totals.get(cat, 0), base_totals.get(cat, 0)
        pr_rate, base_rate = pc / pr_trials, bc / base_trials
        gap = abs(pr_rate - base_rate)
        notable = gap >= CATEGORY_NOTABLE_RATE_DELTA and abs(pc - bc * (pr_trials / base_trials)) >= CATEGORY_NOTABLE_COUNT_DELTA
        rows.append(CategoryRow(cat, pc, pr_rate, bc, base_rate, pr_rate - base_rate, notable))
    return sorted(rows, key=lambda r: (not r.notable, -abs(r.delta)))


#: The root collation order of printable ASCII, as ``String.prototype.localeCompare`` sorts it in
#: Node (ICU, ``en-US``): punctuation and symbols, digits, then letters, case ignored at first.
_COLLATION = " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789abcdefghijklmnopqrstuvwxyz"
_PRIMARY = {ch: i for i, ch in enumerate(_COLLATION)}

LocaleKey = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def locale_key(text: str) -> LocaleKey:
    """A sort key that orders strings as JavaScript's ``a.localeCompare(b)`` does (ICU root
    collation, checked against Node 24): first by each character's primary weight (letters
    case-insensitively and without accents, after digits, after punctuation; a prefix first), then
    accents, then lowercase before uppercase, each at the first difference. Characters outside
    Latin letters and printable ASCII sort after them by code point."""
    primary: list[int] = []
    secondary: list[int] = []
    tertiary: list[int] = []
    for ch in text:
        decomposed = unicodedata.normalize("NFD", ch)
        base, marks = decomposed[0], decomposed[1:]
        primary.append(_PRIMARY.get(base.lower(), len(_COLLATION) + ord(base)))
        secondary.append(sum(ord(m) for m in marks))
        tertiary.append(1 if base.isupper() else 0)
    return tuple(primary), tuple(secondary), tuple(tertiary)


def _order(u: UnitComparison) -> tuple[int, LocaleKey, int, LocaleKey]:
    """n8n's ``unitComparator`` (``comparison/compare.ts``): verdict, then ``testCaseFile.localeCompare``,
    scenarios before expectations, then ``name.localeCompare``."""
    return VERDICT_ORDER[u.tier], locale_key(u.case), 0 if u.kind == "scenario" else 1, locale_key(u.name)


def compare(results: EvalResults, baseline: EvalResults) -> Comparison:
    """Compare every scoring unit the two runs share; list the ones only one side has."""
    pr_units, base_units = unit_trials(results), unit_trials(baseline)
    shared = [key for key in pr_units if key in base_units]
    raw: list[UnitComparison] = []
    for key in shared:
        pr, base = pr_units[key], base_units[key]
        counts = Counts(pr_passes=pr.c, pr_total=pr.n, base_passes=base.c, base_total=base.n)
        tier, p_worse, p_better = classify_counts(counts)
        raw.append(UnitComparison(key=key, kind=pr.kind, case=pr.case, name=unit_name(pr), counts=counts,
                                  p_worse=p_worse, p_better=p_better, tier=tier))

    family = [i for i, u in enumerate(raw) if u.tier is not Tier.insufficient_data]
    q_worse = bh_q_values([raw[i].p_worse for i in family])
    q_better = bh_q_values([raw[i].p_better for i in family])
    units = list(raw)
    for j, i in enumerate(family):
        u = raw[i]
        units[i] = UnitComparison(
            key=u.key, kind=u.kind, case=u.case, name=u.name, counts=u.counts, p_worse=u.p_worse,
            p_better=u.p_better, tier=u.tier, q_worse=q_worse[j], q_better=q_better[j],
            bh_tier=classify(u.counts, q_worse[j], q_better[j]),
        )
    units.sort(key=_order)

    counts_by_tier = Counter(u.tier.value for u in units)
    refs = {k: (su.kind, su.case, unit_name(su)) for side in (pr_units, base_units) for k, su in side.items()}
    return Comparison(
        run_id=results.run_id,
        baseline_run_id=baseline.run_id,
        units=units,
        pr_only=sorted(k for k in pr_units if k not in base_units),
        baseline_only=sorted(k for k in base_units if k not in pr_units),
        pr_band=_band(pr_units[k] for k in shared),
        baseline_band=_band(base_units[k] for k in shared),
        drift=category_drift(pr_units.values(), base_units.values()),
        tier_counts={t.value: counts_by_tier.get(t.value, 0) for t in Tier},
        pr_name=results.experiment_name or results.run_id,
        baseline_name=baseline.experiment_name or baseline.run_id,
        pr_band_all=_band(pr_units.values()),
        baseline_band_all=_band(base_units.values()),
        categories=failure_category_rows(pr_units.values(), base_units.values()),
        unit_refs=refs,
    )


def _unit_dict(u: UnitComparison) -> dict[str, Any]:
    c = u.counts
    return {
        # n8n's EvaluationUnitComparison, field for field
        "kind": u.kind, "testCaseFile": u.case, "name": u.name,
        "prPasses": c.pr_passes, "prTotal": c.pr_total,
        "baselinePasses": c.base_passes, "baselineTotal": c.base_total,
        "verdict": u.tier.value,
        "prPassRate": c.pr_rate, "baselinePassRate": c.base_rate, "delta": c.delta,
        "pValueLeft": u.p_worse, "pValueRight": u.p_better,
        # ours alone: the unit key and the Benjamini–Hochberg view
        "key": u.key, "qValueLeft": u.q_worse, "qValueRight": u.q_better,
        "bhVerdict": u.bh_tier.value if u.bh_tier else None, "survivesBh": u.survives_bh,
    }


def _ref(comparison: Comparison, key: str) -> dict[str, Any]:
    kind, case, name = comparison.unit_refs.get(key, ("scenario", key, key))
    return {"kind": kind, "testCaseFile": case, "name": name, "key": key}


def _ci(band: Band | None) -> dict[str, float]:
    return {"lower": band.low, "upper": band.high} if band else {"lower": 0.0, "upper": 1.0}


def _drift_dict(d: CategoryDrift) -> dict[str, Any]:
    return {
        "category": d.category, "prCount": d.pr_count, "prTrials": d.pr_trials, "prRate": float(d.pr_rate),
        "baselineCount": d.base_count, "baselineTrials": d.base_trials, "baselineRate": float(d.base_rate),
        "delta": float(d.delta), "expectedPrCount": float(d.expected_pr_count), "excess": float(d.excess),
        "notable": d.notable,
    }


def _thresholds() -> dict[str, Any]:
    def tier(t: TierThresholds) -> dict[str, float]:
        return {"maxPValue": t.max_p, "minDelta": t.min_delta, "minBaselinePassRate": t.min_baseline_rate}

    return {"hard": tier(HARD), "soft": tier(SOFT), "watchDelta": WATCH_DELTA, "pCutoff": "strict (p < maxPValue)"}


def comparison_dict(comparison: Comparison) -> dict[str, Any]:
    """JSON-ready, redacted n8n ``ComparisonResult`` of ``comparison`` (ours under ``orchestrator``)."""
    pr_rate = comparison.pr_band.rate if comparison.pr_band else 0.0
    base_rate = comparison.baseline_band.rate if comparison.baseline_band else 0.0
    redacted: dict[str, Any] = redact_obj({
        "pr": {"experimentName": comparison.pr_name or comparison.run_id},
        "baseline": {"experimentName": comparison.baseline_name or comparison.baseline_run_id},
        "aggregate": {
            "intersectionSize": comparison.intersection_size,
            "prAggregatePassRate": pr_rate,
            "baselineAggregatePassRate": base_rate,
            "prAggregateCI": _ci(comparison.pr_band),
            "baselineAggregateCI": _ci(comparison.baseline_band),
            "delta": pr_rate - base_rate,
        },
        "evaluationUnits": [_unit_dict(u) for u in comparison.units],
        "prOnly": [_ref(comparison, k) for k in comparison.pr_only],
        "baselineOnly": [_ref(comparison, k) for k in comparison.baseline_only],
        "failureCategories": [
            {"category": r.category, "prCount": r.pr_count, "prRate": r.pr_rate, "baselineCount": r.baseline_count,
             "baselineRate": r.baseline_rate, "delta": r.delta, "notable": r.notable}
            for r in comparison.categories
        ],
        "orchestrator": {
            "runId": comparison.run_id,
            "baselineRunId": comparison.baseline_run_id,
            "thresholds": _thresholds(),
            "verdictCounts": comparison.tier_counts,
            "hardRegressionsSurvivingBh": [u.key for u in comparison.regressions_surviving_bh],
            "prPassRateAllUnits": comparison.pr_band_all.model_dump() if comparison.pr_band_all else None,
            "baselinePassRateAllUnits": comparison.baseline_band_all.model_dump() if comparison.baseline_band_all else None,
            "failureCategoryDrift": [_drift_dict(d) for d in comparison.drift] if comparison.drift is not None else None,
        },
    })
    return redacted
