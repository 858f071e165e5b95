"""Builders for eval-results fixtures used by the scoring / compare / report tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from orchestrator.results.model import (
    Attribution,
    BuildRecord,
    BuildStatus,
    EvalResults,
    ExpectationResult,
    ScenarioResult,
    UnitResult,
    Verdict,
)
from orchestrator.results.scoring import summarize
from orchestrator.verify.verifier import Verification, stamp_timeout

#: A scenario outcome: True pass, False fail, None incomplete, or (passed, failure category).
Outcome = bool | None | tuple[bool, str]


def _verdict(outcome: Outcome) -> tuple[Verdict, str | None]:
    if isinstance(outcome, tuple):
        passed, category = outcome
        return (Verdict.passed if passed else Verdict.failed), (None if passed else category)
    if outcome is None:
        return Verdict.incomplete, None
    return (Verdict.passed if outcome else Verdict.failed), None


def unit(
    case: str,
    iteration: int,
    scenarios: Mapping[str, Outcome] | None = None,
    expectations: Mapping[str, Outcome] | None = None,
    *,
    status: BuildStatus = BuildStatus.ok,
    cost: float = 0.1,
    turns: int = 5,
    lane: str | None = "lane-0",
    started_at: float = 1000.0,
    duration: float = 60.0,
    attribution: Attribution | None = Attribution.builder_issue,
    failure_category: str | None = None,
    reason: str = "did not do the thing",
    timeout: dict[str, object] | None = None,
) -> UnitResult:
    """One record as ``run/unit.py`` writes it. A timed-out iteration (``status`` timeout, or a
    ``timeout`` breach on a saved build) has its rows stamped as the runner stamps them
    (``incomplete``, attribution ``timeout``), the graded verdicts kept in ``judged``."""
    scenario_results = []
    for name, outcome in (scenarios or {}).items():
        verdict, category = _verdict(outcome)
        scenario_results.append(ScenarioResult(
            name=name, verdict=verdict, failure_category=category,
            attribution=attribution if verdict is Verdict.failed else None,
            reason=reason if verdict is Verdict.failed else "",
        ))
    expectation_results = []
    for text, outcome in (expectations or {}).items():
        verdict, _ = _verdict(outcome)
        expectation_results.append(ExpectationResult(
            kind="outcome", text=text, verdict=verdict,
            attribution=attribution if verdict is Verdict.failed else None,
            reason=reason if verdict is Verdict.failed else "",
        ))
    if status is BuildStatus.timeout and timeout is None:
        timeout = {"kind": "turn", "turn": 1, "elapsedMs": 900_000}
    if timeout is not None:
        stamped = Verification(scenarios=scenario_results, expectations=expectation_results)
        stamp_timeout(stamped)
        failure_category = "build_timeout"
    return UnitResult(
        case=case,
        iteration=iteration,
        lane=lane,
        started_at=started_at,
        finished_at=started_at + duration,
        build=BuildRecord(status=status, workflow_id="wf1" if status is BuildStatus.ok else None,
                          attempts=1, cost_usd=cost, turns=turns, duration_s=duration / 2, timeout=timeout),
        scenarios=scenario_results,
        expectations=expectation_results,
        failure_category=failure_category,
        verify_duration_s=duration / 2,
    )


def trials_units(case: str, scenario: str, passes: int, total: int, *, category: str = "wrong_output",
                 start_iteration: int = 0) -> list[UnitResult]:
    """``total`` iterations of ``case`` whose single scenario passes in the first ``passes``."""
    return [
        unit(case, start_iteration + i, {scenario: True if i < passes else (False, category)})
        for i in range(total)
    ]


def results(run_id: str, units: Iterable[UnitResult], *, k: int = 1, experiment: str | None = None) -> EvalResults:
    units = list(units)
    summary, cases = summarize(units, k=k, units_total=len(units))
    return EvalResults(run_id=run_id, experiment_name=experiment, started_at=1000.0, finished_at=2000.0,
                       config={"k": k}, units=units, summary=summary, cases=cases)
