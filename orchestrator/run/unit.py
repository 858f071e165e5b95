"""One unit of work — a (case, iteration) on one lane: a build user, the build, verify, clean up.

The allocator calls :meth:`UnitRunner.__call__` with the lane it picked. The answer tells it what
to do next: ``done`` (a final result, whatever the agent built), ``retry_elsewhere`` (the builder
built nothing and asks for another lane), ``lane_fault`` (the lane itself failed: counts towards
quarantine). Cost and turns of every attempt are summed into the final record. Which builder runs
is the :class:`~orchestrator.builders.builder.Builder` this runner was given; nothing here depends on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from orchestrator.allocator import Outcome, WorkUnit
from orchestrator.builders.builder import Builder, BuildRequest, BuildResult
from orchestrator.builders.lane import BuildLane
from orchestrator.builders.leaks import leak_reason
from orchestrator.builders.users import BuildUser
from orchestrator.cases import EvalCase, LoadedCase
from orchestrator.domain import BUILD_TIMEOUT_CATEGORY, Attribution, BuildStatus, CleanupFailure
from orchestrator.gateway import attribution as model_calls
from orchestrator.lanes.model import LaneState
from orchestrator.n8n.errors import N8nError, N8nTransportError
from orchestrator.redact import redact
from orchestrator.results.enrich import unit_extras
from orchestrator.results.model import BuildRecord, ExpectationResult, UnitResult
from orchestrator.run.stages import UnitCheck, UnitVerifier
from orchestrator.verify.credential_setup import credential_setup_rows
from orchestrator.verify.expectations import JudgeScope
from orchestrator.verify.external_edits import external_edit_rows
from orchestrator.verify.judge import Judge
from orchestrator.verify.verifier import (
    Verification,
    charged_to_framework,
    expectations_not_judged,
    harness_fault,
    judge_failed_build,
    not_built,
    not_run,
    stamp_timeout,
    timed_out,
    verify_workflow,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


async def run_to_end(aw: Awaitable[T]) -> T:
    """Await ``aw`` to its end even when the calling task is cancelled meanwhile: the cancellation
    is absorbed (the caller goes on and returns normally), and only a cancellation of ``aw``
    itself is raised."""
    inner = asyncio.ensure_future(aw)
    absorbed = 0
    while True:
        try:
            result = await asyncio.shield(inner)
            break
        except asyncio.CancelledError:
            if inner.done():
                if inner.cancelled():
                    raise
                result = inner.result()
                break
            absorbed += 1
    me = asyncio.current_task()
    if me is not None:
        for _ in range(absorbed):
            me.uncancel()
    return result


COMPLEX_TIMEOUT_FACTOR = 1.5


def effective_timeout_ms(base_ms: int, case: EvalCase) -> int:
    """A budget as ``case`` gets it (the reference's ``effectiveTimeoutMs``): ``complex`` cases
    × :data:`COMPLEX_TIMEOUT_FACTOR`, others the base; 0 (no budget) stays 0. The only place the
    factor is applied, to the verification budget and the build budget alike."""
    factor = COMPLEX_TIMEOUT_FACTOR if case.complexity == "complex" else 1.0
    return int(base_ms * factor)


@dataclass
class Attempts:
    """What earlier attempts of one unit cost, carried across lanes."""

    attempts: int = 0
    cost_usd: float = 0.0
    turns: int = 0
    duration_s: float = 0.0
    started_at: float = field(default_factory=time.time)
    thread_id: str | None = None
    plan_rejections: int = 0

    def add(self, result: BuildResult) -> None:
        """Count one build attempt's attempts, cost, turns and time into the unit's totals."""
        self.thread_id = result.thread_id or self.thread_id
        self.plan_rejections = result.plan_rejections
        self.attempts += result.attempts
        self.cost_usd += result.cost_usd
        self.turns += result.turns
        self.duration_s += result.duration_s


@dataclass
class UnitSettings:
    max_attempts: int
    #: the verification budget (``--timeout-ms``); complex cases × 1.5
    timeout_ms: int
    #: the build budget (``--build-timeout-ms``, resolved for the builder by ``run/``); complex
    #: cases × 1.5, handed to the builder in each ``BuildRequest``
    build_timeout_ms: int
    keep_workflows: bool
    transcripts_dir: Path | None = None
    #: judge the process expectations of MCP builds too (an extra, never scored: n8n skips them)
    judge_mcp_process: bool = False


class UnitRunner:
    def __init__(
        self,
        cases: dict[str, LoadedCase],
        lanes: dict[str, BuildLane],
        builder: Builder,
        judge: Judge,
        settings: UnitSettings,
        *,
        on_cleanup_failure: Callable[[CleanupFailure], None] | None = None,
        verifier: UnitVerifier | None = None,
    ) -> None:
        self.cases = cases
        #: a harness's verification of a successful build (None: ``verify_workflow``, run's own)
        self.verifier = verifier
        self.lanes = lanes
        self.builder = builder
        self.judge = judge
        self.settings = settings
        self.on_cleanup_failure = on_cleanup_failure
        self._attempts: dict[str, Attempts] = {}
        #: the checks the harness adds to a unit's last build — n8n's credential-setup checks
        #: (``credentialFixture`` cases) and external-edit checks — appended on every path
        self._measured: dict[str, list[ExpectationResult]] = {}
        self.cleanup_failures: list[CleanupFailure] = []
        #: writes a finished unit's record (off the event loop) before the allocator hears of it
        self.persist: Callable[[UnitResult], Awaitable[None]] | None = None
        #: finished units' clean-ups (and their lanes), running after the lane's slot was given back
        self._cleanups: dict[asyncio.Task[None], BuildLane] = {}

    def _scope(self) -> JudgeScope:
        return JudgeScope(process_gradable=self.builder.process_gradable,
                          judge_process_anyway=self.settings.judge_mcp_process)

    def _timeout_ms(self, case: EvalCase) -> int:
        """The case's verification budget (the reference's ``effectiveTimeoutMs``: complex × 1.5)."""
        return effective_timeout_ms(self.settings.timeout_ms, case)

    def _build_timeout_ms(self, case: EvalCase) -> int:
        """The case's build budget (complex × 1.5, as the reference scales a build turn; 0 stays 0):
        the one every builder reads, from its ``BuildRequest``."""
        return effective_timeout_ms(self.settings.build_timeout_ms, case)

    def _record(self, unit: WorkUnit, lane_id: str, status: BuildStatus, verification: Verification, *,
                workflow_id: str | None = None, error: str | None = None, root_cause: str | None = None,
                verify_s: float = 0.0, transcript_path: Path | None = None,
                timeout: dict[str, object] | None = None) -> UnitResult:
        acc = self._attempts.pop(unit.key, Attempts())
        verification.expectations.extend(self._measured.pop(unit.key, []))  # measurements, as they are
        failure_category, attribution = None, None
        if timeout is not None or status == BuildStatus.timeout:
            # n8n's attachExpectations: the whole iteration is neutral, whatever was graded
            failure_category, attribution = BUILD_TIMEOUT_CATEGORY, Attribution.timeout
        elif status in (BuildStatus.provider_outage, BuildStatus.lane_failure):
            failure_category, attribution = "framework_issue", Attribution.framework_issue
        elif status == BuildStatus.failed:
            failure_category, attribution = "build_failure", Attribution.builder_issue
        else:
            failed = [s for s in verification.scenarios if s.verdict.value == "fail"]
            if failed:
                failure_category, attribution = failed[0].failure_category, failed[0].attribution
            elif any(e.verdict.value == "fail" for e in verification.expectations):
                failure_category, attribution = "expectations_failed", Attribution.builder_issue
        return UnitResult(
            case=unit.case, iteration=unit.iteration, lane=lane_id, started_at=acc.started_at, finished_at=time.time(),
            build=BuildRecord(status=status, workflow_id=workflow_id, attempts=acc.attempts, cost_usd=round(acc.cost_usd, 6),
                              turns=acc.turns, duration_s=round(acc.duration_s, 3), error=error, root_cause=root_cause,
                              thread_id=acc.thread_id, timeout=dict(timeout) if timeout is not None else None,
                              plan_rejections=acc.plan_rejections),
            scenarios=verification.scenarios, expectations=verification.expectations, structural=verification.structural,
            failure_category=failure_category, attribution=attribution, verify_duration_s=round(verify_s, 3),
            **unit_extras(verification, builder=self.builder.name, base_url=self.lanes[lane_id].lane.base_url
                          if lane_id in self.lanes else None, transcript_path=transcript_path),
        )

    def _leak_record(self, unit: WorkUnit, lane_id: str, case: EvalCase, result: BuildResult) -> UnitResult:
        """The agent read a workflow its build neither created nor seeded: every row fails as the
        harness's fault (counted: n8n's ``harnessFault`` with ``counted``), and the log names the
        workflow(s). A budget that also ended the conversation still wins: the rows are stamped
        ``timeout``, as every timed-out run."""
        reason = leak_reason(result.leaked_workflows)
        log.warning("%s: %s#%s: %s", lane_id, unit.case, unit.iteration, reason)
        v = harness_fault(case, reason=reason)
        if result.budget_breach is not None:
            stamp_timeout(v)
        record = self._record(unit, lane_id, result.status, v, workflow_id=result.workflow_id, error=reason,
                              transcript_path=result.transcript_path, timeout=result.budget_breach)
        if result.budget_breach is None:
            record.failure_category, record.attribution = "framework_issue", Attribution.framework_issue
        return record

    def lane_failure_record(self, unit: WorkUnit, lane_id: str | None, reason: str) -> UnitResult:
        """The unit's lanes kept failing under it (or every lane was lost): its scenarios fail as the
        framework's, and count (n8n: a transport failure after its lane retries is a
        ``framework_issue`` row)."""
        case = self.cases[unit.case].case
        v = not_built(case, reason=reason, attribution=Attribution.framework_issue, category="framework_issue")
        return self._record(unit, lane_id or "", BuildStatus.lane_failure, v, error=reason)

    def error_record(self, unit: WorkUnit, lane_id: str | None, reason: str) -> UnitResult:
        """The orchestrator itself failed on this unit: a framework problem, never the builder's
        (n8n's runner-crash row: ``framework_issue``, counted)."""
        case = self.cases[unit.case].case
        v = not_built(case, reason=reason, attribution=Attribution.framework_issue, category="framework_issue")
        record = self._record(unit, lane_id or "", BuildStatus.failed, v, error=reason)
        record.failure_category, record.attribution = "framework_issue", Attribution.framework_issue
        return record

    def skipped_record(self, unit: WorkUnit, reason: str) -> UnitResult:
        """A unit that never started (the spend cap, an interrupt): nothing of it is scored."""
        case = self.cases[unit.case].case
        return self._record(unit, "", BuildStatus.skipped, not_run(case, reason=reason), error=reason)

    async def __call__(self, lane_id: str, unit: WorkUnit, attempt: int) -> tuple[Outcome, UnitResult | str]:
        ctx = self.lanes[lane_id]
        loaded = self.cases[unit.case]
        case = loaded.case
        acc = self._attempts.setdefault(unit.key, Attempts())
        try:
            user = await ctx.users.acquire(case.credentials, mcp_key=self.builder.needs_mcp_key)
        except N8nTransportError as exc:
            return Outcome.lane_fault, redact(f"{lane_id}: {exc}")
        except N8nError as exc:
            if exc.status is not None and exc.status >= 500:
                return Outcome.lane_fault, redact(f"{lane_id}: {exc}")
            raise
        model_calls.member(user.email)  # issue 37: n8n names the user's project in every agent turn
        answer: tuple[Outcome, UnitResult | str] | None = None
        try:
            answer = await self._build_and_verify(ctx, unit, case, user, acc, attempt)
        except N8nTransportError as exc:
            answer = Outcome.lane_fault, redact(f"{lane_id}: {exc}")
        finally:
            if answer is None:  # cancelled (a drain, the run's end) or a bug: the user goes as always
                await self._release(ctx, user)
        outcome, value = answer
        if outcome is Outcome.done and isinstance(value, UnitResult):
            await self._finish(ctx, user, value)
        else:
            await self._release(ctx, user)
        return answer

    async def _finish(self, ctx: BuildLane, user: BuildUser, record: UnitResult) -> None:
        """A finished unit stays finished when a drain (its lane died) cancels this task now:
        cancelled, it would run again elsewhere while its record was already written, and be in
        the results twice. So the record is written to the end, durable before the lane's slot is
        given to the next unit.

        The build user's clean-up (its workflows, threads, seeds, credentials, the user) then runs
        on its own, after the slot is given back: the lane's next build starts while n8n deletes
        what the last one left, instead of the lane running nothing for those requests (issue 25:
        on a loaded lane they took about a second, counted as idle while work waited).
        :meth:`settle` waits for every clean-up before the run ends."""
        if self.persist is not None:
            await run_to_end(self.persist(record))
        task = asyncio.get_running_loop().create_task(self._cleanup(ctx, user), name=f"cleanup {record.case}")
        self._cleanups[task] = ctx
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._cleanups.pop(task, None)

    async def _cleanup(self, ctx: BuildLane, user: BuildUser) -> None:
        try:
            await self._release(ctx, user)
        except asyncio.CancelledError:  # the run is ending: the user goes with the lane, as for a drained one
            await user.session.aclose()
            raise
        except Exception as exc:  # a bug here must not end the run: the ledger keeps what is still open
            log.warning("%s: clean-up of %s failed: %s", ctx.lane.lane_id, user.email, redact(str(exc)))

    def abandon_cleanups(self) -> None:
        """Cancel the clean-ups still running (the run was interrupted)."""
        for task in self._cleanups:
            task.cancel()

    async def settle(self) -> None:
        """Wait for the clean-ups still running (the run's end, before results and teardown); one
        on a lane that died meanwhile is cancelled, as a drain cancelled it before: its user goes
        with the lane instead of waiting out the requests' timeouts."""
        while self._cleanups:
            for task, ctx in list(self._cleanups.items()):
                if ctx.lane.state == LaneState.dead and not task.cancelling():  # once: its session still closes
                    task.cancel()
            await asyncio.wait(list(self._cleanups), timeout=1.0)

    async def _release(self, ctx: BuildLane, user: BuildUser) -> None:
        if ctx.lane.state == LaneState.dead:
            # drained: a dead or hung lane would only time out; its user stays in the ledger and
            # goes with the lane (owned lanes) or is reported at teardown (static lanes)
            await user.session.aclose()
            failures: list[CleanupFailure] = []
        else:
            failures = await ctx.users.release(user, keep=self.settings.keep_workflows)
        for f in failures:
            self.cleanup_failures.append(f)
            if self.on_cleanup_failure:
                self.on_cleanup_failure(f)

    async def _build_and_verify(self, ctx: BuildLane, unit: WorkUnit, case: EvalCase, user: BuildUser,
                                acc: Attempts, attempt: int) -> tuple[Outcome, UnitResult | str]:
        lane_id = ctx.lane.lane_id
        transcripts = self.settings.transcripts_dir
        request = BuildRequest(case=case, iteration=unit.iteration, attempt=attempt,
                               timeout_ms=self._build_timeout_ms(case),
                               transcript_path=transcripts / f"{unit.case}.{unit.iteration}.{attempt}.jsonl"
                               if transcripts else None, case_slug=unit.case)
        result = await self.builder.build(request, ctx, user)
        model_calls.phase("verify")  # issue 37: the lane's calls from here on are this unit's verification
        acc.add(result)
        # measured now, before anything else touches what the build left (n8n: eagerly, before clean-up)
        self._measured[unit.key] = (credential_setup_rows(result.credential_setup)
                                    + await external_edit_rows(ctx.owner, result.external_edits))
        if result.leaked_workflows and result.status != BuildStatus.timeout:
            return Outcome.done, self._leak_record(unit, lane_id, case, result)
        # ok without a workflow: a build-only case, or a build whose artifact is an Agent, graded on
        # its expectations (instance-ai builder)
        built_agent = any(getattr(ref, "type", None) == "agent" for ref in result.artifact_refs)
        if result.status == BuildStatus.ok and (result.workflow_id is not None or case.is_build_only or built_agent):
            if result.workflow_id is not None:
                ctx.ledger.created("workflow", result.workflow_id, lane=lane_id, user=user.user_id)
            t0 = time.monotonic()
            harness_record: dict[str, object] | None = None
            if self.verifier is not None:  # a harness's own verification (run/stages.py)
                verified = await self.verifier(UnitCheck(case, unit.case, unit.iteration, result, ctx, user, self.judge,
                                                         self._timeout_ms(case)))
                verification, harness_record = verified.verification, verified.record
            else:
                verification = await verify_workflow(case, result.workflow_id, ctx.owner, self.judge,
                                                     timeout_ms=self._timeout_ms(case), transcript_path=result.transcript_path,
                                                     narration=result.narration,
                                                     not_judged_reason=result.not_judged_reason,
                                                     ground_truth=result.judge_context, scope=self._scope(),
                                                     artifact_refs=result.artifact_refs, project_id=user.project_id,
                                                     scenario_tables=result.scenario_tables, run_debug=result.run_debug)
            if result.budget_breach is not None:  # graded, recorded, and neutral (n8n's attachExpectations)
                stamp_timeout(verification)
            record = self._record(unit, lane_id, BuildStatus.ok, verification, workflow_id=result.workflow_id,
                                  verify_s=time.monotonic() - t0, transcript_path=result.transcript_path,
                                  timeout=result.budget_breach)
            record.harness = harness_record
            return Outcome.done, record
        reason = result.error or "no workflow built"
        kept = result.transcript_path
        if result.status == BuildStatus.timeout:  # nothing saved: neutral, nothing graded
            return Outcome.done, self._record(unit, lane_id, BuildStatus.timeout, timed_out(case, reason=reason),
                                              error=reason, transcript_path=kept, timeout=result.budget_breach)
        if result.framework_fault or result.status == BuildStatus.provider_outage:
            # the infrastructure failed the build (a seed, the sandbox, the provider): its scenarios
            # fail as the framework's and count; its expectations are judged when the agent said
            # anything, a failing one charged to the framework too (n8n's attributionForExpectation)
            status = BuildStatus.provider_outage if result.status == BuildStatus.provider_outage else BuildStatus.failed
            v = not_built(case, reason=reason, attribution=Attribution.framework_issue, category="framework_issue")
            v.expectations = charged_to_framework(await self._judge_failed(ctx, case, user, result))
            record = self._record(unit, lane_id, status, v, error=reason, transcript_path=kept,
                                  root_cause=result.root_cause or (reason if status == BuildStatus.provider_outage else None))
            record.failure_category, record.attribution = "framework_issue", Attribution.framework_issue
            return Outcome.done, record
        if result.retry_elsewhere and acc.attempts < self.settings.max_attempts:
            return Outcome.retry_elsewhere, reason
        v = not_built(case, reason=f"no workflow built: {reason}", attribution=Attribution.builder_issue, category="build_failure")
        v.expectations = await self._judge_failed(ctx, case, user, result)
        return Outcome.done, self._record(unit, lane_id, BuildStatus.failed, v, error=reason, transcript_path=kept)

    async def _judge_failed(self, ctx: BuildLane, case: EvalCase, user: BuildUser,
                            result: BuildResult) -> list[ExpectationResult]:
        """The expectations of a build that saved no workflow: not judged when the case's premise did
        not hold, else judged as n8n does (:func:`judge_failed_build`)."""
        if result.not_judged_reason is not None:
            return expectations_not_judged(case, result.not_judged_reason)
        return await judge_failed_build(case, ctx.owner, self.judge, transcript_path=result.transcript_path,
                                        scope=self._scope(), artifact_refs=result.artifact_refs,
                                        project_id=user.project_id, ground_truth=result.judge_context,
                                        run_debug=result.run_debug)
