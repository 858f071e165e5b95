"""Verification of one built workflow, on the lane that built it.

Three independent signals: the 28 workflow checks of the workflow JSON (``workflow_checks``); each execution
scenario run with mocks and judged against its success criteria (the judge sees every node's
outputs and the requests the mock layer intercepted); the case's process and outcome expectations,
judged together in one call as n8n does (:mod:`orchestrator.verify.expectations`: transcript,
workflow, Agent / Config-eval sections, conversation metrics; process expectations are not judged
for MCP builds unless opted in, and then never scored).

A build-only case (no execution scenarios) whose build saved no workflow is still graded: its
expectations are judged with "(no workflow built)" in place of the workflow.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.cases import EvalCase
from orchestrator.domain import BUILD_TIMEOUT_CATEGORY, Attribution, Verdict
from orchestrator.handoff import ArtifactRef, ScenarioSeedFailed, ScenarioTables, seed_scenario_rows
from orchestrator.n8n.errors import N8nError
from orchestrator.n8n.rest import N8nSession
from orchestrator.redact import redact
from orchestrator.results.model import (
    DETERMINISTIC_KINDS,
    ExpectationResult,
    ScenarioResult,
    StructuralCheck,
    UsageEntry,
)
from orchestrator.results.usage import usage_meter
from orchestrator.transcript import gradable, read_transcript, render_for_judge
from orchestrator.verify.agent_scenarios import agent_scenario
from orchestrator.verify.artifacts import artifact_context, fetch_agent, render_agent
from orchestrator.verify.context import NO_THREAD, check_context_assertions
from orchestrator.verify.context import not_graded as context_not_graded
from orchestrator.verify.expectations import JudgeScope, judge_build_expectations
from orchestrator.verify.intent import intent_not_graded
from orchestrator.verify.judge import (
    PROCESS_SYSTEM,
    SCENARIO_SYSTEM,
    Judge,
    process_prompt,
    scenario_prompt,
)
from orchestrator.verify.memory import not_graded as memory_not_graded
from orchestrator.verify.scenarios import execute_scenario
from orchestrator.verify.workflow_checks import (
    check_context,
    execution_record,
    run_workflow_checks,
)

AGENT_SCENARIO_NOT_RUN = ("not run: the build's artifact is an Agent but the build has no agent transcript (n8n's "
                          "agentRunnable needs one: run/case-pipeline.ts), so the Agent's scenarios cannot run")
PROCESS_NOT_JUDGED = "not judged: process expectations need a build transcript, and this unit has none"
PROCESS_NO_OUTPUT = "not judged: the build transcript holds no agent output to grade"


@dataclass
class Verification:
    scenarios: list[ScenarioResult] = field(default_factory=list)
    expectations: list[ExpectationResult] = field(default_factory=list)
    structural: list[StructuralCheck] = field(default_factory=list)
    workflow: dict[str, Any] | None = None
    #: our own model calls while verifying (judge), per agent and model: ``harnessUsagePerRun``
    usage: list[UsageEntry] | None = None


def _process_incomplete(case: EvalCase, reason: str = PROCESS_NOT_JUDGED) -> list[ExpectationResult]:
    return [ExpectationResult(kind="process", text=t, verdict=Verdict.incomplete, reason=reason)
            for t in case.process_expectations]


async def judge_process_expectations(case: EvalCase, transcript_path: Path | None, judge: Judge,
                                     workflow: dict[str, Any] | None = None,
                                     ground_truth: str | None = None) -> list[ExpectationResult]:
    """The case's process expectations judged against the unit's transcript (any builder).

    No transcript, or one with no agent output: ``incomplete`` (nothing to grade). Usable for a
    failed build too (the reference judges them "even when the build fails").
    """
    if not case.process_expectations:
        return []
    if transcript_path is None or not transcript_path.is_file():
        return _process_incomplete(case)
    entries = read_transcript(transcript_path)
    if not gradable(entries):
        return _process_incomplete(case, PROCESS_NO_OUTPUT)
    expectations = list(case.process_expectations)
    verdicts = await judge.judge(PROCESS_SYSTEM, process_prompt(render_for_judge(entries), workflow, expectations,
                                                                ground_truth), len(expectations))
    return [ExpectationResult(kind="process", text=t, verdict=j.verdict, attribution=j.attribution, reason=j.reason)
            for t, j in zip(expectations, verdicts)]


def not_built(case: EvalCase, *, reason: str, attribution: Attribution, category: str) -> Verification:
    """Every row of a unit whose build saved no workflow, as n8n's build-failure row has it
    (``run/case-pipeline.ts``): each execution scenario *fails* and counts (n8n's aggregator drops
    only ``incomplete`` rows) — charged to the builder (``build_failure``), or to the framework
    (``framework_issue``) when the build died on the infrastructure: a provider outage, a dead
    lane or transport, a seed that would not restore, a crash of the runner ("the pass rate shows
    the leak, builder analyses can filter it out by attribution").

    The expectations are left ``incomplete`` here — not judged — with ``framework_issue`` for an
    infrastructure failure and ``verification_gap`` otherwise (``attributionForExpectation``); a
    caller that has the build's transcript judges them instead (:func:`judge_failed_build`).
    """
    v = Verification()
    v.scenarios = [ScenarioResult(name=s.name, verdict=Verdict.failed, failure_category=category,
                                  attribution=attribution, reason=reason)
                   for s in case.execution_scenarios]
    unjudged = Attribution.framework_issue if attribution is Attribution.framework_issue else Attribution.verification_gap
    v.expectations = _unjudged_rows(case, reason, unjudged)
    return v


def _unjudged_rows(case: EvalCase, reason: str, attribution: Attribution | None = None) -> list[ExpectationResult]:
    rows = [ExpectationResult(kind="process", text=t, verdict=Verdict.incomplete, reason=reason)
            for t in case.process_expectations]
    rows += [ExpectationResult(kind="outcome", text=t, verdict=Verdict.incomplete, reason=reason)
             for t in case.outcome_expectations]
    rows += intent_not_graded(case.intent_expectation, Verdict.incomplete, reason)
    rows += memory_not_graded(case.memory_expectations, reason)
    for row in rows:
        row.attribution = attribution
    return rows + context_not_graded(case.context_assertions, reason)


def charged_to_framework(rows: list[ExpectationResult]) -> list[ExpectationResult]:
    """The expectations of a build the infrastructure failed: a failing verdict is charged to the
    framework, and so is a row left unjudged (n8n's ``attributionForExpectation`` when
    ``buildFailedOnInfra``)."""
    for row in rows:
        if row.verdict is not Verdict.passed and row.kind not in DETERMINISTIC_KINDS:
            row.attribution = Attribution.framework_issue
    return rows


def not_run(case: EvalCase, *, reason: str) -> Verification:
    """Every row of a unit that never ran (the spend cap, an interrupt): all ``incomplete``. n8n
    writes no row for an iteration it did not run (its crash path drops partial iterations)."""
    v = Verification()
    v.scenarios = [ScenarioResult(name=s.name, verdict=Verdict.incomplete, reason=reason)
                   for s in case.execution_scenarios]
    v.expectations = _unjudged_rows(case, reason)
    return v


def timed_out(case: EvalCase, *, reason: str) -> Verification:
    """Every row of an iteration whose conversation a budget ended before anything was saved:
    ``incomplete``, attribution ``timeout``, category ``build_timeout`` (n8n's ``attachExpectations``
    stamps the build-failure row so: "a timed-out run stays neutral")."""
    v = not_run(case, reason=reason)
    stamp_timeout(v)
    return v


def stamp_timeout(v: Verification) -> None:
    """A budget ended the conversation: every row of the iteration becomes ``incomplete`` with
    attribution ``timeout`` (scenarios: category ``build_timeout``) — what was saved is still graded
    and the verdict kept in ``judged`` for the record, but the iteration counts neither as a pass nor
    as a failure (``run/case-pipeline.ts`` ``attachExpectations``, ``run/build-orchestrator.ts``
    ``attribute``). Deterministic checks the harness adds (context assertions, credential-setup and
    external-edit checks) are measurements and keep their verdicts, as n8n leaves them."""
    for s in v.scenarios:
        if s.verdict is not Verdict.incomplete:
            s.judged = s.verdict
        s.verdict, s.attribution, s.failure_category = Verdict.incomplete, Attribution.timeout, BUILD_TIMEOUT_CATEGORY
    for e in v.expectations:
        if e.kind in DETERMINISTIC_KINDS:
            continue
        if e.verdict is not Verdict.incomplete:
            e.judged = e.verdict
        e.verdict, e.attribution = Verdict.incomplete, Attribution.timeout


def harness_fault(case: EvalCase, *, reason: str) -> Verification:
    """Every row of a unit the harness spoiled (a build-isolation leak): failed, charged to the
    harness (``framework_issue``). Nothing is judged: the build saw what it must not see."""
    v = Verification()
    attribution = Attribution.framework_issue
    v.scenarios = [ScenarioResult(name=s.name, verdict=Verdict.failed, failure_category="framework_issue",
                                  attribution=attribution, reason=reason) for s in case.execution_scenarios]
    v.expectations = [ExpectationResult(kind="outcome", text=t, verdict=Verdict.failed, attribution=attribution,
                                        reason=reason) for t in case.outcome_expectations]
    v.expectations += [ExpectationResult(kind="process", text=t, verdict=Verdict.failed, attribution=attribution,
                                         reason=reason) for t in case.process_expectations]
    v.expectations += intent_not_graded(case.intent_expectation, Verdict.failed, reason)
    v.expectations += [ExpectationResult(kind="memory", text=e.text, verdict=Verdict.failed, reason=reason)
                       for e in case.memory_expectations]
    for row in v.expectations:
        row.attribution = attribution
    v.expectations += context_not_graded(case.context_assertions, reason)
    return v


def expectations_not_judged(case: EvalCase, reason: str) -> list[ExpectationResult]:
    """Every expectation of the case ``incomplete`` (not judged, out of scoring) with ``reason``."""
    return _unjudged_rows(case, reason)


def scenario_evidence(result: Any) -> dict[str, Any]:
    """What the scenario judge sees of a mock execution: success, errors, mock errors, and per node
    its outputs, execution mode and the requests the mock layer intercepted (n8n's scenario
    verifier grades the requests a node sent, not only what came back)."""
    return {
        "success": result.success,
        "errors": result.errors,
        "mockErrors": result.mock_errors,
        "nodeResults": {name: node.model_dump(by_alias=True, include={"outputs", "execution_mode", "intercepted_requests"})
                        for name, node in result.node_results.items()},
    }


async def _scenario(owner: N8nSession, judge: Judge, workflow: dict[str, Any], workflow_id: str, scenario: Any, timeout_ms: int,
                    tables: ScenarioTables | None = None) -> ScenarioResult:
    if tables is not None and scenario.seed_data_tables:
        try:  # this scenario's rows, and only they, are in its tables when it runs
            await seed_scenario_rows(owner, tables, scenario)
        except (N8nError, ScenarioSeedFailed) as exc:
            return ScenarioResult(name=scenario.name, verdict=Verdict.failed, failure_category="framework_issue",
                                  attribution=Attribution.framework_issue,
                                  reason=redact(f"could not seed the scenario's data tables: {exc}")[:500])
    run = await execute_scenario(owner, workflow_id, scenario.data_setup, timeout_ms)
    if run.gap:
        return ScenarioResult(name=scenario.name, verdict=Verdict.incomplete, failure_category="verification_gap",
                              attribution=Attribution.verification_gap, reason=run.gap)
    if run.framework_error or run.result is None:
        return ScenarioResult(name=scenario.name, verdict=Verdict.failed, failure_category="framework_issue",
                              attribution=Attribution.framework_issue, reason=run.framework_error or "no result")
    result = run.result
    framework = [e for e in result.errors if e.startswith("FRAMEWORK ISSUE:")]
    if framework:
        return ScenarioResult(name=scenario.name, verdict=Verdict.failed, failure_category="framework_issue",
                              attribution=Attribution.framework_issue, reason=redact(framework[0])[:500],
                              execution_id=result.execution_id)
    execution = scenario_evidence(result)
    prompt = scenario_prompt(workflow, scenario, execution)
    [judgement] = await judge.judge(SCENARIO_SYSTEM, prompt, 1)
    category = judgement.category
    if judgement.verdict == Verdict.failed and result.mock_errors and category == "builder_issue":
        category = "mock_issue"  # the mock failed to answer: not the builder's fault
    return ScenarioResult(
        name=scenario.name, verdict=judgement.verdict, failure_category=category,
        attribution=Attribution(category) if category in Attribution.__members__ else judgement.attribution,
        reason=judgement.reason, execution_id=result.execution_id, execution=execution_record(result),
        judge_input={"system": SCENARIO_SYSTEM, "prompt": prompt, "count": 1,
                     "mock_errors": bool(result.mock_errors)},
    )


async def verify_workflow(case: EvalCase, workflow_id: str | None, owner: N8nSession, judge: Judge, *, timeout_ms: int,
                          transcript_path: Path | None = None, narration: str | None = None,
                          not_judged_reason: str | None = None, ground_truth: str | None = None,
                          scope: JudgeScope = JudgeScope(), artifact_refs: list[ArtifactRef] | None = None,
                          project_id: str | None = None, scenario_tables: ScenarioTables | None = None,
                          run_debug: list[dict[str, Any]] | None = None) -> Verification:
    """Verify what a build left. ``workflow_id`` None: a build-only case built no workflow (or only
    an Agent): its expectations are judged without one; scenarios (if any) cannot run. ``narration``
    (the builder's account of what it did, :attr:`BuildResult.narration`) feeds the communication check.

    ``not_judged_reason``: the case's premise did not hold (or could not be checked), so every
    expectation is ``incomplete`` with that reason and none is judged. ``ground_truth``: facts read
    from the lane that the expectation judges see as their own block (observational-memory rows).
    ``artifact_refs`` (the build's Agents and config-evals, fetched from ``project_id``) become the
    Agent / Config-eval sections of the expectation judge's context; ``scope`` says whether the
    transcript's process is graded (:mod:`orchestrator.verify.expectations`). ``scenario_tables``: the
    case's scenario data tables the build created (``seedDataTables``): each scenario's rows are put
    in them just before it runs, and the scenarios then run one at a time (they share the tables).
    ``run_debug``: the build's captured run debug, which the memory expectations and context
    assertions grade and which gives the expectation judge its token figures."""
    with usage_meter() as meter:
        v = await _verify_workflow(case, workflow_id, owner, judge, timeout_ms=timeout_ms,
                                   transcript_path=transcript_path, narration=narration,
                                   not_judged_reason=not_judged_reason, ground_truth=ground_truth,
                                   scope=scope, artifact_refs=artifact_refs, project_id=project_id,
                                   scenario_tables=scenario_tables, run_debug=run_debug)
    v.usage = meter.rows()
    return v


async def _verify_workflow(case: EvalCase, workflow_id: str | None, owner: N8nSession, judge: Judge, *,
                           timeout_ms: int, transcript_path: Path | None, narration: str | None = None,
                           not_judged_reason: str | None = None, ground_truth: str | None = None,
                           scope: JudgeScope = JudgeScope(), artifact_refs: list[ArtifactRef] | None = None,
                           project_id: str | None = None, scenario_tables: ScenarioTables | None = None,
                           run_debug: list[dict[str, Any]] | None = None) -> Verification:
    v = Verification()
    workflow: dict[str, Any] | None = None
    if workflow_id is not None:
        try:
            workflow = await owner.get_workflow(workflow_id)
        except N8nError as exc:
            reason = redact(f"could not fetch workflow {workflow_id}: {exc}")
            return not_built(case, reason=reason, attribution=Attribution.framework_issue, category="framework_issue")
        v.workflow = workflow

    agent = next((ref for ref in artifact_refs or [] if ref.type == "agent"), None)
    # n8n's agentRunnable (run/case-pipeline.ts): an Agent, and a build driven through the chat (its
    # transcript): every scenario runs against the Agent, whatever workflow was saved too
    agent_runnable = agent is not None and scope.process_gradable and transcript_path is not None
    agent_context = await _agent_context(owner, agent, project_id) if agent_runnable else ""

    async def one_scenario(scenario: Any) -> ScenarioResult:
        started = time.monotonic()
        result = await _one_scenario(scenario)
        result.duration_s = round(time.monotonic() - started, 3)
        return result

    async def _one_scenario(scenario: Any) -> ScenarioResult:
        if agent_runnable and agent is not None:
            return await agent_scenario(owner, judge, case, agent, project_id or "", scenario, timeout_ms, agent_context)
        if workflow is None or workflow_id is None:
            reason = AGENT_SCENARIO_NOT_RUN if agent is not None else "no workflow was built to execute"
            return ScenarioResult(name=scenario.name, verdict=Verdict.incomplete, failure_category="verification_gap",
                                  attribution=Attribution.verification_gap, reason=reason)
        return await _scenario(owner, judge, workflow, workflow_id, scenario, timeout_ms, scenario_tables)

    # Expectations and the workflow checks run concurrently with the scenario batch, as in the reference harness.
    async def expectations() -> list[ExpectationResult]:
        if not_judged_reason is not None:  # the premise failed the judged units; measurements still stand
            judged = [e for e in expectations_not_judged(case, not_judged_reason) if e.kind != "context"]
            measured = check_context_assertions(case.context_assertions, run_debug) if scope.process_gradable \
                else context_not_graded(case.context_assertions, NO_THREAD)
            return judged + measured
        context = await artifact_context(artifact_refs or [], owner, project_id) if project_id else None
        return await judge_build_expectations(case, judge, transcript_path=transcript_path, workflow=workflow,
                                              build_succeeded=True, scope=scope, artifact_context=context,
                                              ground_truth=ground_truth, run_debug=run_debug)

    expectation_task = asyncio.ensure_future(expectations())
    checks = asyncio.ensure_future(run_workflow_checks(workflow, check_context(case, narration=narration), judge)) if workflow else None
    if any(s.seed_data_tables for s in case.execution_scenarios):
        # the scenarios share one table per name, each seeding its own rows: one at a time
        v.scenarios = [await one_scenario(s) for s in case.execution_scenarios]
    else:
        v.scenarios = list(await asyncio.gather(*(one_scenario(s) for s in case.execution_scenarios)))
    v.expectations = await expectation_task
    v.structural = await checks if checks is not None else []
    return v


async def _agent_context(owner: N8nSession, ref: ArtifactRef | None, project_id: str | None) -> str:
    """The Agent under test as the scenario judge sees it: its config and skills (n8n's
    ``fetchAgentScenarioContext``, once per build), or n8n's fallback when it cannot be read."""
    if ref is None or not (ref.project_id or project_id):
        return "(agent configuration could not be fetched)"
    try:
        return render_agent(await fetch_agent(owner, ref, project_id or ""))
    except N8nError:
        return "(agent configuration could not be fetched)"


async def judge_failed_build(case: EvalCase, owner: N8nSession, judge: Judge, *, transcript_path: Path | None,
                             scope: JudgeScope = JudgeScope(), artifact_refs: list[ArtifactRef] | None = None,
                             project_id: str | None = None, ground_truth: str | None = None,
                             run_debug: list[dict[str, Any]] | None = None) -> list[ExpectationResult]:
    """The expectations of a build that saved no workflow, judged as n8n does: against "(no workflow
    built)" and the transcript when the agent produced output, all ``incomplete`` when it did not."""
    with usage_meter():
        context = await artifact_context(artifact_refs or [], owner, project_id) if project_id else None
        return await judge_build_expectations(case, judge, transcript_path=transcript_path, workflow=None,
                                              build_succeeded=False, scope=scope, artifact_context=context,
                                              ground_truth=ground_truth, run_debug=run_debug)
