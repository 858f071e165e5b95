"""``orchestrator routing``: which route the lanes' Instance AI agent takes, case by case.

Stages on ``run``'s pool: the ``route-*.json`` loader (:mod:`.cases`), the trial builder
(:mod:`.trial`: one unit is one trial, ``--trials`` of them per case), the route verifier below, and
the routing files as the finalize step. Each trial is one verdict on the case's one expectation
(``Routes to one of: <accepts>``, n8n's ``routing/expectation.ts``): pass, fail (``builder_issue``),
or ``incomplete`` when it could not be graded (the judge failed, or the turn ended before any route
for a timeout or an error) — so ``eval-results.json`` is the LangTracer dispatcher's routing
contract (``discovery/routing-eval-results.ts``).

Files in ``--output-dir`` besides run's (``eval-results.json``…): ``routing-results.json``
(``--json-out``: every case's trials — route, steer, label, evidence, judge reason, stream status,
the orchestrator's calls, duration) and ``routing-summary.md`` (a table per case, pass rate per
bucket, the failing trials).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.cases import LoadedCase, select_cases
from orchestrator.domain import Attribution, Verdict
from orchestrator.harnesses.common import write_json, write_text
from orchestrator.harnesses.routing.cases import ROUTES, RoutingCase, expectation_text
from orchestrator.harnesses.routing.grade import case_passes, incomplete_reason, label, trial_passes
from orchestrator.harnesses.routing.trial import trial_builder
from orchestrator.results.model import EvalResults, ExpectationResult, UnitResult
from orchestrator.run.config import RunConfig
from orchestrator.run.stages import Stages, UnitCheck, UnitVerifier, Verified
from orchestrator.verify.verifier import Verification

RESULTS_FILE = "routing-results.json"
SUMMARY_FILE = "routing-summary.md"


def trial_verdict(case: RoutingCase, found: dict[str, Any]) -> ExpectationResult:
    """One trial as a verdict on the case's routing expectation (n8n's ``trialVerdict``)."""
    text = expectation_text(case.accepts)
    gap = incomplete_reason(found)
    if gap is not None:
        return ExpectationResult(kind="process", text=text, verdict=Verdict.incomplete,
                                 attribution=Attribution(gap[0]), reason=gap[1])
    judged = f"Route {label(found)} ({found.get('evidence')})." + (
        f" Judge: {found['judgeReason']}" if found.get("judgeReason") else "")
    if trial_passes(case, found):
        return ExpectationResult(kind="process", text=text, verdict=Verdict.passed, reason=f"{judged} Accepted.")
    return ExpectationResult(kind="process", text=text, verdict=Verdict.failed, attribution=Attribution.builder_issue,
                             reason=f"{judged} Not in the accepted routes: {', '.join(case.accepts)}.")


def route_verifier(cases: dict[str, RoutingCase]) -> UnitVerifier:
    """The routing harness's verification: grade each trial's resolution against its case."""
    async def verify(check: UnitCheck) -> Verified:
        found = dict(check.build.harness or {})
        row = trial_verdict(cases[check.slug], found)
        found.update(label=label(found), passed=None if row.verdict is Verdict.incomplete else row.verdict is Verdict.passed)
        return Verified(Verification(expectations=[row]), found)

    return verify


@dataclass
class CaseOutcome:
    case: RoutingCase
    trials: list[dict[str, Any]]

    @property
    def passed(self) -> int:
        """Trials that passed."""
        return sum(1 for t in self.trials if t.get("passed") is True)

    @property
    def graded(self) -> int:
        """Trials with a grade (pass or fail)."""
        return sum(1 for t in self.trials if t.get("passed") is not None)

    @property
    def verdict(self) -> str:
        """``pass`` or ``fail`` by :func:`case_passes`; ``not verified`` without graded trials."""
        if not self.graded:
            return "not verified"
        return "pass" if case_passes(self.passed, self.graded) else "fail"


def trial_record(unit: UnitResult) -> dict[str, Any]:
    """One trial as ``routing-results.json`` lists it (a trial that was not set up: not graded)."""
    found = dict(unit.harness or {"route": "none", "evidence": unit.build.error or "not run", "passed": None,
                                   "streamStatus": unit.build.status.value, "tools": [], "label": "none"})
    found.setdefault("label", label(found))
    return {"trial": unit.iteration + 1, "durationMs": int(unit.build.duration_s * 1000), "lane": unit.lane,
            "threadId": unit.build.thread_id, **found}


def outcomes(results: EvalResults, cases: list[RoutingCase]) -> list[CaseOutcome]:
    """Each case's trials (skipped builds left out), in the cases' order; cases without trials omitted."""
    by_case: dict[str, list[UnitResult]] = {}
    for unit in results.units:
        if unit.build.status.value != "skipped":
            by_case.setdefault(unit.case, []).append(unit)
    return [CaseOutcome(c, [trial_record(u) for u in sorted(by_case.get(c.id, []), key=lambda u: u.iteration)])
            for c in cases if c.id in by_case]


def results_file(found: list[CaseOutcome], results: EvalResults, *, variant: str, stop_on_route: bool,
                  model: str, trials: int) -> dict[str, Any]:
    """The routing results file: the run, its settings, and per case its grades and trials."""
    def iso(ts: float | None) -> str:
        return dt.datetime.fromtimestamp(ts or 0.0, tz=dt.UTC).isoformat().replace("+00:00", "Z")

    return {
        "runId": results.run_id, "variant": variant, "model": model, "trialsPerCase": trials,
        "stopOnRoute": stop_on_route, "startedAt": iso(results.started_at), "finishedAt": iso(results.finished_at),
        "complete": results.summary is not None and results.summary.stopped_reason is None,
        "cases": [{"id": o.case.id, "bucket": o.case.bucket, "accepts": list(o.case.accepts), "after": list(o.case.after),
                   "userMessage": o.case.user_message, "passed": o.passed, "graded": o.graded, "verdict": o.verdict,
                   "trials": o.trials} for o in found],
    }


def bucket_rates(found: list[CaseOutcome]) -> list[tuple[str, int, int]]:
    """(bucket, cases passed, cases) per route, in route order, then all."""
    rows = [(b, sum(o.verdict == "pass" for o in found if o.case.bucket == b),
             sum(1 for o in found if o.case.bucket == b)) for b in ROUTES]
    rows = [r for r in rows if r[2]]
    return [*rows, ("all", sum(o.verdict == "pass" for o in found), len(found))]


def summary_markdown(found: list[CaseOutcome], results: EvalResults, *, variant: str, trials: int) -> str:
    """The routing summary: pass counts by bucket and by case, then every failing trial with its
    evidence."""
    lines = ["# Routing eval summary", "",
             f"Run `{results.run_id}`: variant {variant}, {len(found)} case(s) × {trials} trial(s); a case passes "
             "when at least 2/3 of its graded trials pass.", "",
             "| Bucket | Cases passed |", "|---|---|"]
    lines += [f"| {b} | {p}/{n} |" for b, p, n in bucket_rates(found)]
    lines += ["", "| Case | Bucket | Accepts | Routes | Passed |", "|---|---|---|---|---|"]
    for o in found:
        routes = ", ".join(str(t.get("label")) for t in o.trials)
        ungraded = len(o.trials) - o.graded
        lines.append(f"| {o.case.id} | {o.case.bucket} | {', '.join(o.case.accepts)} | {routes} | "
                     f"{o.passed}/{o.graded} {o.verdict}{f' ({ungraded} not graded)' if ungraded else ''} |")
    failing = [(o, t) for o in found for t in o.trials if t.get("passed") is False]
    if failing:
        lines += ["", "## Failing trials", ""]
        lines += [f"- {o.case.id} #{t['trial']}: {t.get('label')} from {t.get('evidence')}"
                  + (f" — {t['judgeReason']}" if t.get("judgeReason") else "") for o, t in failing]
    return "\n".join(lines).replace("\\|", "|") + "\n"


@dataclass(frozen=True)
class RoutingSettings:
    cases: list[RoutingCase]
    output_dir: Path
    json_out: Path | None = None
    variant: str = "baseline"
    stop_on_route: bool = False
    model: str = ""
    trials: int = 3


def routing_stages(settings: RoutingSettings) -> Stages:
    """The routing harness's stages: its cases, :func:`route_verifier`, and the results and summary
    files written at the end (a write failure is returned, never raised)."""
    by_id = {c.id: c for c in settings.cases}

    async def load(cfg: RunConfig) -> list[LoadedCase]:
        loaded = [LoadedCase(slug=c.id, source=f"routing:{c.id}", case=c.case) for c in settings.cases]
        return select_cases(loaded, filter=cfg.filter, exclude=cfg.exclude, tier=cfg.tier)

    async def finalize(results: EvalResults) -> list[str]:
        found = outcomes(results, settings.cases)
        try:
            write_json(settings.json_out or settings.output_dir / RESULTS_FILE,
                       results_file(found, results, variant=settings.variant, stop_on_route=settings.stop_on_route,
                                    model=settings.model, trials=settings.trials))
            write_text(settings.output_dir / SUMMARY_FILE,
                       summary_markdown(found, results, variant=settings.variant, trials=settings.trials))
        except OSError as exc:
            return [f"cannot write the routing files to {settings.output_dir}: {exc}"]
        return []

    return Stages(load_cases=load, builder=trial_builder(settings.cases, stop_on_route=settings.stop_on_route),
                  verify=route_verifier(by_id), finalize=finalize)
