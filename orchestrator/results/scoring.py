"""Scoring: pass@k, pass^k, the Wilson band, and the run / per-case summaries of ``eval-results.json``.

A *scoring unit* is one execution scenario or one evaluated expectation of a case, measured once
per iteration (a *trial*). Keys follow the reference harness: ``<case>/<scenario name>`` and
``<case>#expectation:<text>``.

Which trials count — n8n's rule (``run/aggregator.ts`` ``aggregateResults``): every row that is not
``incomplete``. The rows carry the decision, made once where the unit's record is written
(``run/unit.py``):

* a build the infrastructure failed (provider outage, a lost lane, a seed that would not restore, a
  crash of the runner) fails its scenarios as ``framework_issue``: they count ("the pass rate shows
  the leak, builder analyses can filter it out by attribution");
* a budget that ended the conversation makes every row of the iteration ``incomplete`` (attribution
  ``timeout``), whatever was graded: a timed-out run stays neutral;
* a unit that never ran (``skipped``: the spend cap, an interrupt) contributes nothing.

A unit whose build produced no workflow (``failed``) and carries no rows at all (an older record)
counts as one *failed* trial for every scoring unit its case shows in other iterations, so a failed
build cannot drop out of the denominator. When no iteration of the case produced a verdict at all,
the case is scored on one synthetic scenario unit ``<case>/(build)``.
"""

from __future__ import annotations

import enum
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from orchestrator.domain import FAILURE_BUCKETS, Attribution, BuildStatus, Verdict
from orchestrator.results.model import (
    Band,
    CaseSummary,
    EvalResults,
    ExpectationResult,
    RunSummary,
    ScenarioResult,
    ScoringUnitSummary,
    UnitResult,
)

UnitKind = Literal["scenario", "expectation"]

#: Build outcomes charged to the builder: the unit's scoring units fail.
BUILDER_FAILURES = frozenset({BuildStatus.failed})
#: Build outcomes of units that never ran: not scored (every other unit is scored by its rows).
UNSCORED_BUILDS = frozenset({BuildStatus.skipped})
#: Builds that produced no workflow, listed as failures in the PR comment (scored or not).
NO_WORKFLOW_BUILDS = frozenset({BuildStatus.failed, BuildStatus.timeout})
#: Category given to the trials of a failed build whose unit names none.
BUILD_FAILED_CATEGORY = "build_failure"  # n8n's category name (KNOWN_FAILURE_CATEGORIES, comparison/compare.ts)
#: Scenario name of the stand-in unit for a case no iteration produced a verdict for.
BUILD_ONLY_SCENARIO = "(build)"
UNATTRIBUTED = "unattributed"


def scenario_key(case: str, scenario: str) -> str:
    """The scoring key of a scenario unit: ``"<case>/<scenario>"``."""
    return f"{case}/{scenario}"


def expectation_key(case: str, text: str) -> str:
    """The scoring key of a build-expectation unit: ``"<case>#expectation:<text>"``."""
    return f"{case}#expectation:{text}"


# --------------------------------------------------------------------------- estimators


def _check_counts(n: int, c: int, k: int) -> None:
    if n < 0 or c < 0 or c > n:
        raise ValueError(f"need 0 <= c <= n, got n={n} c={c}")
    if k < 1 or k > n:
        raise ValueError(f"need 1 <= k <= n, got n={n} k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that at least one of k trials drawn from n passes: 1 − C(n−c,k)/C(n,k) (n8n's
    ``passAtK``, ``run/aggregator.ts``)."""
    _check_counts(n, c, k)
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """n8n's pass^k (``passHatK``, ``run/aggregator.ts``): the plug-in (c/n)^k; 0 with no trials.
    This is the headline figure, so it lines up with n8n's history."""
    if n < 0 or c < 0 or c > n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n} c={c} k={k}")
    return (c / n) ** k if n else 0.0


def pass_hat_k_unbiased(n: int, c: int, k: int) -> float:
    """Unbiased chance that all k trials drawn from n pass: C(c,k)/C(n,k). Ours alone, kept as an
    extra field (``passHatKUnbiased``) beside n8n's plug-in figure."""
    _check_counts(n, c, k)
    return float(Fraction(math.comb(c, k), math.comb(n, k)))


def terminal_rates(n: int, c: int) -> tuple[float, float]:
    """A unit's pass@k and pass^k at its terminal k = n (its judged trials), as n8n's summary and
    per-unit fields take them (``terminalRate`` in ``run/persist.ts``); ``(0, 0)`` with no trials."""
    if n == 0:
        return 0.0, 0.0
    return pass_at_k(n, c, n), pass_hat_k(n, c, n)


#: n8n's z for its 95% band (``Z_95`` in ``comparison/statistics.ts``).
WILSON_Z = 1.96


def wilson_band(c: int, n: int, z: float = WILSON_Z) -> Band:
    """Wilson score interval for c passes out of n, in n8n's arithmetic (``wilsonInterval``,
    ``comparison/statistics.ts``); ``[0, 1]`` when there are no trials."""
    if n < 0 or c < 0 or c > n:
        raise ValueError(f"need 0 <= c <= n, got c={c} n={n}")
    if n == 0:
        return Band(rate=0.0, low=0.0, high=1.0)
    p = c / n
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = (z * math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n))) / denom
    return Band(rate=p, low=max(0.0, center - half), high=min(1.0, center + half))


# --------------------------------------------------------------------------- scoring units


@dataclass(frozen=True)
class Trial:
    """One judged measurement of a scoring unit."""

    iteration: int
    passed: bool
    failure_category: str | None = None
    attribution: Attribution | None = None


@dataclass
class ScoringUnit:
    key: str
    kind: UnitKind
    case: str
    trials: list[Trial] = field(default_factory=list)

    @property
    def n(self) -> int:
        """Trials (pass@k's n)."""
        return len(self.trials)

    @property
    def c(self) -> int:
        """Trials that passed (pass@k's c)."""
        return sum(1 for t in self.trials if t.passed)


def _verdict_trials(unit: UnitResult) -> list[tuple[str, UnitKind, Trial]]:
    out: list[tuple[str, UnitKind, Trial]] = []
    for s in unit.scenarios:
        if s.verdict is Verdict.incomplete:
            continue
        failed = s.verdict is Verdict.failed
        out.append((
            scenario_key(unit.case, s.name),
            "scenario",
            Trial(
                iteration=unit.iteration,
                passed=not failed,
                failure_category=(s.failure_category or unit.failure_category) if failed else None,
                attribution=(s.attribution or unit.attribution) if failed else None,
            ),
        ))
    for e in unit.expectations:
        if e.verdict is Verdict.incomplete:
            continue
        failed = e.verdict is Verdict.failed
        out.append((
            expectation_key(unit.case, e.text),
            "expectation",
            Trial(
                iteration=unit.iteration,
                passed=not failed,
                attribution=(e.attribution or unit.attribution) if failed else None,
            ),
        ))
    return out


def _has_verdicts(unit: UnitResult) -> bool:
    return bool(unit.scenarios or unit.expectations)


def scoring_units(units: list[UnitResult]) -> dict[str, ScoringUnit]:
    """Group every judged trial by scoring-unit key (cases in name order, keys in first-seen order)."""
    by_case: dict[str, list[UnitResult]] = defaultdict(list)
    for u in units:
        by_case[u.case].append(u)
    result: dict[str, ScoringUnit] = {}
    for case in sorted(by_case):
        case_units = sorted(by_case[case], key=lambda u: u.iteration)
        known: dict[str, UnitKind] = {}
        for u in case_units:
            if u.build.status in UNSCORED_BUILDS:
                continue
            for s in u.scenarios:  # incomplete verdicts still name their scoring unit
                known.setdefault(scenario_key(case, s.name), "scenario")
            for e in u.expectations:
                known.setdefault(expectation_key(case, e.text), "expectation")
        for u in case_units:
            if u.build.status in UNSCORED_BUILDS:
                continue
            if u.build.status in BUILDER_FAILURES and not _has_verdicts(u):
                targets = known or {scenario_key(case, BUILD_ONLY_SCENARIO): "scenario"}
                trial = Trial(
                    iteration=u.iteration,
                    passed=False,
                    failure_category=u.failure_category or BUILD_FAILED_CATEGORY,
                    attribution=u.attribution or Attribution.builder_issue,
                )
                entries = [(key, kind, trial) for key, kind in targets.items()]
            else:
                entries = _verdict_trials(u)
            for key, kind, trial in entries:
                su = result.setdefault(key, ScoringUnit(key=key, kind=kind, case=case))
                su.trials.append(trial)
        for key, kind in known.items():  # units whose every trial was incomplete: n = 0
            result.setdefault(key, ScoringUnit(key=key, kind=kind, case=case))
    return result


# --------------------------------------------------------------------------- summaries


def _unit_summary(su: ScoringUnit, k: int) -> ScoringUnitSummary:
    at, hat = terminal_rates(su.n, su.c)
    return ScoringUnitSummary(
        key=su.key,
        kind=su.kind,
        n=su.n,
        c=su.c,
        pass_at_k=at if su.n else None,
        pass_hat_k=hat if su.n else None,
        pass_hat_k_unbiased=pass_hat_k_unbiased(su.n, su.c, k) if su.n >= k else None,
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _failure_categories(sus: list[ScoringUnit]) -> dict[str, int]:
    counts = Counter(t.failure_category for su in sus for t in su.trials if not t.passed and t.failure_category)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def summarize(units: list[UnitResult], k: int, units_total: int) -> tuple[RunSummary, list[CaseSummary]]:
    """The run summary and the per-case summaries for ``eval-results.json``."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    sus = scoring_units(units)
    per_case_units: dict[str, list[ScoringUnit]] = defaultdict(list)
    for su in sus.values():
        per_case_units[su.case].append(su)

    ran = sorted((u for u in units if u.build.status is not BuildStatus.skipped), key=lambda u: (u.case, u.iteration))
    per_case_runs: dict[str, list[UnitResult]] = defaultdict(list)
    for u in ran:
        per_case_runs[u.case].append(u)

    cases: list[CaseSummary] = []
    for case in sorted(set(per_case_units) | set(per_case_runs)):
        runs = per_case_runs.get(case, [])
        case_sus = per_case_units.get(case, [])
        cases.append(CaseSummary(
            case=case,
            iterations=len(runs),
            units=[_unit_summary(su, k) for su in case_sus],
            build_cost_usd_per_run=[u.build.cost_usd for u in runs],
            build_turns_per_run=[u.build.turns for u in runs],
            failure_categories=_failure_categories(case_sus),
        ))

    all_sus = list(sus.values())
    trials = sum(su.n for su in all_sus)
    passed = sum(su.c for su in all_sus)
    judged = [su for su in all_sus if su.n > 0]
    eligible = [su for su in all_sus if su.n >= k]
    attribution: dict[str, int] = {a.value: 0 for a in FAILURE_BUCKETS}
    for su in all_sus:
        for t in su.trials:
            if not t.passed:
                bucket = t.attribution.value if t.attribution else UNATTRIBUTED
                attribution[bucket] = attribution.get(bucket, 0) + 1

    summary = RunSummary(
        k=k,
        scoring_units=sum(1 for su in all_sus if su.n > 0),
        trials=trials,
        passed_trials=passed,
        pass_rate=wilson_band(passed, trials) if trials else None,
        # n8n's headline (``computeAggregateMetrics``, ``run/persist.ts``): the mean over judged
        # units of each unit's terminal pass@k / pass^k; the unbiased pass^k is an extra field.
        pass_at_k=_mean([terminal_rates(su.n, su.c)[0] for su in judged]),
        pass_hat_k=_mean([terminal_rates(su.n, su.c)[1] for su in judged]),
        pass_hat_k_unbiased=_mean([pass_hat_k_unbiased(su.n, su.c, k) for su in eligible]),
        build_cost_usd=sum(u.build.cost_usd for u in units),
        build_turns=sum(u.build.turns for u in units),
        attribution=attribution,
        failure_categories=_failure_categories(all_sus),
        units_total=units_total,
        units_finished=len(ran),
        units_skipped=max(0, units_total - len(ran)),
    )
    return summary, cases


def summaries(results: EvalResults) -> tuple[RunSummary, list[CaseSummary]]:
    """A run's stored summaries, or ones computed from its units when it has none."""
    if results.summary is not None and results.cases:
        return results.summary, results.cases
    configured = results.config.get("k")
    k = results.summary.k if results.summary else (configured if isinstance(configured, int) and configured >= 1 else 1)
    computed, cases = summarize(results.units, k=k, units_total=len(results.units))
    return results.summary or computed, results.cases or cases


def case_pass_means(case: CaseSummary) -> tuple[float | None, float | None]:
    """A case's pass@k and pass^k: means over its judged scoring units (terminal k, as n8n)."""
    return (_mean([u.pass_at_k for u in case.units if u.pass_at_k is not None]),
            _mean([u.pass_hat_k for u in case.units if u.pass_hat_k is not None]))


# --------------------------------------------------------------------------- unit outcome


class UnitOutcome(str, enum.Enum):
    """One word for how a (case, iteration) ended: metric label, timeline colour."""

    passed = "passed"  # every judged verdict passed
    failed = "failed"  # at least one judged verdict failed
    incomplete = "incomplete"  # built, but nothing was judged
    build_failed = "build_failed"
    build_timeout = "build_timeout"
    provider_outage = "provider_outage"
    lane_failure = "lane_failure"
    skipped = "skipped"


_BUILD_OUTCOMES = {
    BuildStatus.failed: UnitOutcome.build_failed,
    BuildStatus.timeout: UnitOutcome.build_timeout,
    BuildStatus.provider_outage: UnitOutcome.provider_outage,
    BuildStatus.lane_failure: UnitOutcome.lane_failure,
    BuildStatus.skipped: UnitOutcome.skipped,
}


def unit_outcome(unit: UnitResult) -> UnitOutcome:
    """One unit's outcome: a build that timed out, failed or never ran decides it; else ``failed`` when
    any scenario or expectation failed, ``passed`` when some passed, ``incomplete`` when none judged."""
    if unit.build.timeout is not None:  # a budget ended it: neutral, whatever was saved and graded
        return UnitOutcome.build_timeout
    if unit.build.status in _BUILD_OUTCOMES:
        return _BUILD_OUTCOMES[unit.build.status]
    rows: list[ScenarioResult | ExpectationResult] = [*unit.scenarios, *unit.expectations]
    verdicts = [r.verdict for r in rows if r.verdict is not Verdict.incomplete]
    if not verdicts:
        return UnitOutcome.incomplete
    return UnitOutcome.failed if Verdict.failed in verdicts else UnitOutcome.passed
