"""Differential table: which rows of a unit count, decided where the unit's record is written
(``run/unit.py``) and counted by ``orchestrator.results.scoring`` — each against the number n8n's
own code gives for the same hand-built iterations.

Every example is worked by hand from n8n's source (``packages/@n8n/instance-ai/evaluations/`` in
n8n-io/n8n; the commit each rule follows is in ``docs/fidelity.md``):

- ``run/aggregator.ts`` (``aggregateResults``, test ``__tests__/aggregator.test.ts``): a unit's n is
  its runs that are not ``incomplete``; only ``incomplete`` rows are dropped. pass^k is the plug-in
  (c/n)^k at k = n; the headline is the mean over units with n > 0 (``run/persist.ts``).
- ``run/case-pipeline.ts`` ``attachExpectations`` (commit a92ceee3, test ``__tests__/case-pipeline.test.ts``
  at 03f3eed1 "grades the saved workflow of a timed-out conversation but keeps the row out of the
  pass rate"): a budget that ended the conversation stamps every row of that iteration
  ``incomplete``, attribution ``timeout``, category ``build_timeout`` — the saved workflow is still
  graded, and the graded ``passed`` kept for the record.
- ``run/case-pipeline.ts`` build-failure row (test "stamps the pinned root cause on a
  provider-outage build", "classifies transport-failed builds as framework_issue", "converts a
  build-phase throw into a framework_issue row"): a build the infrastructure failed is a
  ``passed: false`` row attributed ``framework_issue``, and it counts.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from orchestrator.allocator import WorkUnit
from orchestrator.allocator.model import ResultStatus, WorkResult
from orchestrator.builders.builder import Builder, BuildRequest, BuildResult
from orchestrator.cases import EvalCase, LoadedCase
from orchestrator.domain import PROVIDER_OUTAGE_ROOT_CAUSE, Attribution, BuildStatus, Verdict
from orchestrator.results.model import ExpectationResult, ScenarioResult, UnitResult
from orchestrator.results.scoring import scoring_units, summarize
from orchestrator.run import unit as unit_module
from orchestrator.run.execute import record_for
from orchestrator.run.unit import Attempts, UnitRunner, UnitSettings
from orchestrator.verify.verifier import Verification

#: the issue's example: one execution scenario, nothing else
CASE = EvalCase.model_validate({
    "conversation": [{"role": "user", "text": "Build the order-total workflow"}],
    "complexity": "simple", "tags": ["t"],
    "executionScenarios": [{"name": "s", "description": "d", "dataSetup": "x", "successCriteria": "y"}],
})
#: the same with one outcome expectation (the rows n8n's attachExpectations stamps too)
CASE_E = CASE.model_copy(update={"outcome_expectations": ["It totals the order"]})

BREACH = {"kind": "turn", "turn": 1, "elapsedMs": 900_100}


@dataclass
class _Lane:
    lane_id: str = "lane-0"
    base_url: str = "http://127.0.0.1:1"
    state: Any = None


@dataclass
class _Ledger:
    created_ids: list[tuple[str, str]] = field(default_factory=list)

    def created(self, kind: str, rid: str, **_: Any) -> None:
        self.created_ids.append((kind, rid))


@dataclass
class _BuildLane:
    lane: _Lane = field(default_factory=_Lane)
    ledger: _Ledger = field(default_factory=_Ledger)
    owner: Any = None


@dataclass
class _User:
    user_id: str = "u1"
    project_id: str = "p1"


class _ScriptedBuilder(Builder):
    """Returns the given BuildResult for each iteration."""

    name = "scripted-for-tests"

    def __init__(self, by_iteration: dict[int, BuildResult]) -> None:
        self.by_iteration = by_iteration

    async def build(self, request: BuildRequest, lane: Any, user: Any) -> BuildResult:
        return self.by_iteration[request.iteration]


def _verification(case: EvalCase, verdict: Verdict) -> Verification:
    failed = verdict is Verdict.failed
    return Verification(scenarios=[ScenarioResult(name="s", verdict=verdict,
                                                  failure_category="builder_issue" if failed else None,
                                                  attribution=Attribution.builder_issue if failed else None)],
                        expectations=[ExpectationResult(kind="outcome", text=t, verdict=verdict)
                                      for t in case.outcome_expectations])


def _records(monkeypatch: pytest.MonkeyPatch, builds: dict[int, BuildResult],
             graded: dict[int, Verdict], case: EvalCase = CASE) -> list[UnitResult]:
    """One record per iteration, written by the real unit runner from each build's result (the
    workflow verified as ``graded`` says; a failed build's expectations judged by nobody: no
    transcript, so n8n's select.ts leaves them incomplete)."""
    async def verify(case: EvalCase, workflow_id: str | None, *args: Any, **kwargs: Any) -> Verification:
        return _verification(case, graded[int(str(workflow_id).rsplit("-", 1)[1])])

    async def judge_failed(case: EvalCase, *args: Any, **kwargs: Any) -> list[ExpectationResult]:
        return [ExpectationResult(kind="outcome", text=t, verdict=Verdict.incomplete, reason="no agent output")
                for t in case.outcome_expectations]

    monkeypatch.setattr(unit_module, "verify_workflow", verify)
    monkeypatch.setattr(unit_module, "judge_failed_build", judge_failed)
    runner = _runner(_ScriptedBuilder(builds), case)

    async def one(iteration: int) -> UnitResult:
        unit = WorkUnit(case="c", iteration=iteration)
        outcome, record = await runner._build_and_verify(_BuildLane(), unit, case, _User(), Attempts(), 0)
        assert isinstance(record, UnitResult), record
        return record

    return [asyncio.run(one(i)) for i in sorted(builds)]


def _runner(builder: Builder, case: EvalCase = CASE) -> UnitRunner:
    return UnitRunner({"c": LoadedCase(slug="c", source="c.json", case=case)}, {}, builder,
                      judge=None,
                      settings=UnitSettings(max_attempts=1, timeout_ms=1000, build_timeout_ms=1000,
                                            keep_workflows=False))


def _ok(i: int, **extra: Any) -> BuildResult:
    return BuildResult(BuildStatus.ok, workflow_id=f"wf-{i}", attempts=1, **extra)


def test_a_budget_timeout_after_saving_is_neutral_pass_hat_3_is_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 1 (n8n ``run/case-pipeline.ts`` ``attachExpectations``, a92ceee3): one scenario, three
    iterations; the third timed out after saving a workflow that then failed its scenario. n8n:
    that row is incomplete, so n = 2, c = 2, pass^3 = (2/2)^3 = 1.0 (counted as a failure it would be
    (2/3)^3 = 0.296)."""
    records = _records(monkeypatch, {0: _ok(0), 1: _ok(1), 2: _ok(2, budget_breach=dict(BREACH))},
                       graded={0: Verdict.passed, 1: Verdict.passed, 2: Verdict.failed}, case=CASE_E)
    timed_out = records[2]
    [row] = timed_out.scenarios
    assert (row.verdict, row.judged, row.attribution, row.failure_category) == (
        Verdict.incomplete, Verdict.failed, Attribution.timeout, "build_timeout")
    assert all(e.verdict is Verdict.incomplete and e.attribution is Attribution.timeout for e in timed_out.expectations)
    assert timed_out.build.timeout == BREACH and timed_out.build.workflow_id == "wf-2"
    su = scoring_units(records)["c/s"]
    assert (su.n, su.c) == (2, 2)
    summary, _ = summarize(records, k=3, units_total=3)
    assert summary.pass_hat_k == pytest.approx(1.0)  # both units (scenario, expectation) at 2/2
    only_scenario = _records(monkeypatch, {0: _ok(0), 1: _ok(1), 2: _ok(2, budget_breach=dict(BREACH))},
                             graded={0: Verdict.passed, 1: Verdict.passed, 2: Verdict.failed})
    assert summarize(only_scenario, k=3, units_total=3)[0].pass_hat_k == pytest.approx(1.0)


def test_an_infrastructure_failure_counts_pass_hat_3_is_0_296(monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 2 (n8n ``run/case-pipeline.ts`` build-failure row; ``run/aggregator.ts`` drops only
    incomplete rows): the same three iterations, the third a provider outage. n8n: a ``passed:
    false`` row attributed ``framework_issue`` that counts, so n = 3, c = 2, pass^3 = (2/3)^3 =
    8/27 = 0.2963."""
    outage = BuildResult(BuildStatus.provider_outage, error="provider HTTP 529: Overloaded", attempts=3,
                         root_cause=f"{PROVIDER_OUTAGE_ROOT_CAUSE}: provider HTTP 529: Overloaded")
    records = _records(monkeypatch, {0: _ok(0), 1: _ok(1), 2: outage}, graded={0: Verdict.passed, 1: Verdict.passed},
                       case=CASE_E)
    lost = records[2]
    [row] = lost.scenarios
    assert (row.verdict, row.attribution, row.failure_category) == (
        Verdict.failed, Attribution.framework_issue, "framework_issue")
    assert lost.build.root_cause is not None and lost.build.root_cause.startswith(PROVIDER_OUTAGE_ROOT_CAUSE)
    # no agent output: the expectations are not judged, and charged to the framework
    assert [(e.verdict, e.attribution) for e in lost.expectations] == [(Verdict.incomplete, Attribution.framework_issue)]
    summary, _ = summarize(records, k=3, units_total=3)
    assert summary.attribution["framework_issue"] == 1
    # the issue's example: one scenario only, so the headline is that unit's (2/3)^3
    only_scenario = _records(monkeypatch, {0: _ok(0), 1: _ok(1), 2: outage}, graded={0: Verdict.passed, 1: Verdict.passed})
    assert summarize(only_scenario, k=3, units_total=3)[0].pass_hat_k == pytest.approx(8 / 27)


@pytest.mark.parametrize("failure", ["seed", "lane", "crash"])
def test_every_infrastructure_failure_is_a_counted_framework_row(monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    """n8n ``run/case-pipeline.ts``: seeding (``seedingFailed``), a dead lane after its retries
    (``transportFailure``) and a runner crash are each a counted ``framework_issue`` row; one
    scenario passed twice and lost once → n = 3, c = 2."""
    records = _records(monkeypatch, {0: _ok(0), 1: _ok(1)}, graded={0: Verdict.passed, 1: Verdict.passed})
    runner = _runner(_ScriptedBuilder({}))
    unit = WorkUnit(case="c", iteration=2)
    if failure == "seed":
        seed = BuildResult(BuildStatus.failed, error="seed restore failed: HTTP 404", framework_fault=True, attempts=1)
        records += _records(monkeypatch, {2: seed}, graded={})
    elif failure == "lane":
        records.append(runner.lane_failure_record(unit, "lane-0", "lane faults beyond retries"))
    else:
        records.append(runner.error_record(unit, "lane-0", "RuntimeError: boom"))
    lost = records[2]
    assert lost.attribution is Attribution.framework_issue
    assert [(s.verdict, s.attribution) for s in lost.scenarios] == [(Verdict.failed, Attribution.framework_issue)]
    su = scoring_units(records)["c/s"]
    assert (su.n, su.c) == (3, 2)


def test_a_timeout_with_nothing_saved_and_a_unit_never_run_count_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """n8n ``attachExpectations`` (test "stamps a timed-out conversation that saved nothing as
    build_timeout, not build_failure"): every row incomplete, attribution ``timeout``; a unit never
    run (the spend cap) writes no row n8n would count. One pass → n = 1, c = 1."""
    timeout = BuildResult(BuildStatus.timeout, error="Run timed out after 240100ms (inactivity budget, user turn 1)",
                          attempts=1, budget_breach={"kind": "inactivity", "turn": 1, "elapsedMs": 240_100})
    records = _records(monkeypatch, {0: _ok(0), 1: timeout}, graded={0: Verdict.passed})
    runner = _runner(_ScriptedBuilder({}))
    records.append(runner.skipped_record(WorkUnit(case="c", iteration=2), "spend cap reached"))
    [row] = records[1].scenarios
    assert (row.verdict, row.attribution, row.failure_category) == (Verdict.incomplete, Attribution.timeout,
                                                                    "build_timeout")
    assert records[1].failure_category == "build_timeout" and records[1].attribution is Attribution.timeout
    su = scoring_units(records)["c/s"]
    assert (su.n, su.c) == (1, 1)


def test_a_leak_counts_as_the_framework_s_unless_a_timeout_also_ended_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """n8n ``harnessFault`` (``run/case-pipeline.ts`` a92ceee3; README: "its rows and expectations
    fail with framework_issue … A timeout still wins"): a foreign workflow read fails every row as
    ``framework_issue`` (counted); with a budget timeout too, every row is stamped ``timeout``."""
    leak = _ok(0, leaked_workflows=["wf-other"])
    both = _ok(1, leaked_workflows=["wf-other"], budget_breach=dict(BREACH))
    records = _records(monkeypatch, {0: leak, 1: both}, graded={})
    assert [(s.verdict, s.attribution) for s in records[0].scenarios] == [(Verdict.failed, Attribution.framework_issue)]
    assert [(s.verdict, s.attribution) for s in records[1].scenarios] == [(Verdict.incomplete, Attribution.timeout)]
    su = scoring_units(records)["c/s"]
    assert (su.n, su.c) == (1, 0)


@pytest.mark.parametrize(("status", "counted"), [(ResultStatus.aborted, True), (ResultStatus.lane_failure, True),
                                                 (ResultStatus.skipped, False), (ResultStatus.cancelled, False)])
def test_the_allocator_s_last_word_on_a_unit_that_never_finished(status: ResultStatus, counted: bool) -> None:
    """n8n aborts the waiters once every lane was quarantined for 5 minutes
    (``cli/lane-allocator.ts``); the build then throws and its row is a counted ``framework_issue``
    (``run/case-pipeline.ts`` runRow catch). A unit stopped before it started (the spend cap, an
    interrupt) leaves no row n8n would count (its crash path keeps complete iterations only)."""
    runner = _runner(_ScriptedBuilder({}))
    record = record_for(WorkResult(WorkUnit(case="c", iteration=0), None, status, reason="why"), runner)
    [row] = record.scenarios
    if counted:
        assert (row.verdict, row.attribution) == (Verdict.failed, Attribution.framework_issue)
        assert scoring_units([record])["c/s"].n == 1
    else:
        assert row.verdict is Verdict.incomplete and record.build.status is BuildStatus.skipped
        assert scoring_units([record]) == {}
