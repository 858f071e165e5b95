"""The ``instance-ai`` builder: n8n's own Instance AI agent builds the workflow, driven through chat.

Per unit (as n8n's reference harness does it):

1. the build user's personal project holds the build; the lane **owner** drives the chat (a thread
   needs ``project:read`` on its project, which the owner has on every project);
2. a thread is created in that project (``source: evals``) and pinned to exactly the case's
   declared credentials, which the user pool already created there;
3. the event stream is opened **before** the first chat request and read until ``run-finish``
   (reconnecting with ``Last-Event-ID`` when it drops); a single-prompt case sends its one turn, a
   multi-turn case is driven by the user proxy (:mod:`orchestrator.builders.instance_ai.user_proxy`), which sends
   each next message once the previous run finished, within the case's ``messageBudget``;
4. every confirmation is answered: single-prompt cases by :func:`answer_confirmation` (the
   reference's auto-approval: confirmations only, never a user's decision), multi-turn cases by
   the user proxy;
5. the built workflow is the last ``build-workflow`` tool result with ``success: true``; an Agent
   comes from ``agent-spawned`` (``targetResource.type == "agent"``);
6. the reference's three clocks bound the conversation (:mod:`orchestrator.builders.budgets`:
   ``request.timeout_ms`` per user turn, twice that for the conversation, 240 s of silence); a
   budget that fires in a run cancels it (``/chat/:id/cancel``), one that runs out between turns
   sends no further message. What the agent saved by then is graded; nothing saved →
   :attr:`BuildStatus.timeout` (no scored result);
7. provider outages in the run's error events (:func:`classify_run_error`) are retried after
   ``settings.outage_waits_s`` on a fresh thread; the last one is reported as
   :attr:`BuildStatus.provider_outage` with the ``PROVIDER_OUTAGE_ROOT_CAUSE`` marker;
8. threads (and with them their sandboxes) are deleted when the build ends unless
   ``keep_workflows``; built workflows and agents live in the member's project, which verification
   still needs: the user pool deletes them with the member after verification.

Everything the build creates is recorded in the ledger before it is used (threads before the
create request; built workflows and agents as soon as their tool result arrives).

The stream's events become transcript entries and build facts in
:mod:`orchestrator.builders.instance_ai.stream`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.builders import seeds
from orchestrator.builders.budgets import DEFAULT_TURN_BUDGET_MS, BudgetBreach, Budgets
from orchestrator.builders.builder import (
    Builder,
    BuilderOptions,
    BuildRequest,
    BuildResult,
    register_builder,
)
from orchestrator.builders.credentials import TEMPLATES, credential_body
from orchestrator.builders.instance_ai import scenario_tables
from orchestrator.builders.instance_ai.compaction import CompactionCheck
from orchestrator.builders.instance_ai.credential_setup import CredentialSetup
from orchestrator.builders.instance_ai.external_edits import external_edits, rename_behind_the_agents_back
from orchestrator.builders.instance_ai.replay_seed import ReplayUnavailable, materialize_replay
from orchestrator.builders.instance_ai.stream import RunReader, RunState
from orchestrator.builders.instance_ai.user_proxy import (
    ConversationDriver,
    ProxyConfig,
    conversation_driver,
    fallback_answer,
)
from orchestrator.builders.instance_ai.user_run import UserRunRefused, run_as_user
from orchestrator.builders.lane import BuildLane
from orchestrator.builders.leaks import foreign_workflow_reads
from orchestrator.builders.users import BuildUser
from orchestrator.cases import EvalCase, strip_director_notes
from orchestrator.domain import PROVIDER_OUTAGE_ROOT_CAUSE, BuildStatus
from orchestrator.errors import BuildError
from orchestrator.handoff import ScenarioSeedFailed, ScenarioTables, seed_scenario_rows
from orchestrator.n8n.errors import N8nError, N8nHTTPError, N8nTransportError
from orchestrator.n8n.instance_ai import EventStream, InstanceAiChat, StreamEvent
from orchestrator.n8n.rest import N8nSession
from orchestrator.n8n.run_debug import RunDebugCapture
from orchestrator.outage import (
    OutageInfo,
    retry_provider_outage,
)
from orchestrator.redact import redact
from orchestrator.transcript import Transcript, final_narration, read_transcript, transcript_path_for, write_run_debug

log = logging.getLogger(__name__)

#: After a cancel, how long to wait for the run's ``run-finish`` before giving up on it.
CANCEL_GRACE_S = 15.0


#: ``instanceGatewayResourceDecisionSchema`` (``@n8n/api-types``): the values a resource decision may take.
RESOURCE_DECISIONS = frozenset({"denyOnce", "allowOnce", "allowForSession"})


def answer_confirmation(payload: dict[str, Any]) -> dict[str, Any]:
    """What a single-prompt case answers to a ``confirmation-request``: the reference's
    ``buildAutoApprovePayload`` (``harness/chat-loop.ts``), its infrastructure cases from
    ``tryInfrastructureResponse`` (``utils/confirmation-payload.ts``). Only confirmations are
    approved; nothing here ever takes a decision the user would have to make:

    - network access (``domainAccess`` / ``webSearch``): allow all;
    - a gateway resource decision: the first option that allows (else the first), when the schema
      knows it (``denyOnce``, ``allowOnce``, ``allowForSession``), else ``allowOnce``;
    - a credential destination review: approved;
    - a standalone credential card (``credentialRequests`` without ``setupRequests``): deferred
      with an empty selection — no credential is picked, the card is answered before any model call;
    - a setup card (``setupRequests``): applied as it stands (``setupWorkflowApply``, no values);
    - ``ask-user`` questions: answered with no answers (a clarifying question gets no reply);
    - anything else (``approval``, ``plan-review``, ``text``, …): approved.
    """
    if isinstance(payload.get("domainAccess"), dict) or isinstance(payload.get("webSearch"), dict):
        return {"kind": "domainAccessApprove", "domainAccessAction": "allow_all"}
    decision = payload.get("resourceDecision")
    if isinstance(decision, dict):
        options = [o for o in decision.get("options") or [] if isinstance(o, str)]
        allow = next((o for o in options if "allow" in o.lower()), options[0] if options else None)
        # a value outside the schema n8n answers with falls back to allowOnce (tryInfrastructureResponse)
        return {"kind": "resourceDecision", "resourceDecision": allow if allow in RESOURCE_DECISIONS else "allowOnce"}
    destination = payload.get("credentialDestination")
    if isinstance(destination, dict) and isinstance(destination.get("origin"), str):
        return {"kind": "credentialDestination", "origin": destination["origin"], "approved": True}
    if isinstance(payload.get("credentialRequests"), list) and not isinstance(payload.get("setupRequests"), list):
        return {"kind": "credentialSelection", "credentials": {}}
    if isinstance(payload.get("setupRequests"), list):
        return {"kind": "setupWorkflowApply"}
    if payload.get("inputType") == "questions":
        return {"kind": "questions", "answers": []}
    return {"kind": "approval", "approved": True}


# ------------------------------------------------------------------------------------------------
# the builder


@dataclass
class AttemptOutcome:
    state: RunState
    #: the budget that ended the conversation (:mod:`orchestrator.builders.budgets`), if one did
    timeout: BudgetBreach | None = None
    #: a rule of the conversation broke (a user run the reference refuses): the build failed
    refused: str | None = None
    error: str | None = None
    thread_id: str | None = None
    #: What this attempt restored from the case's inline seed (``seed.workflow_ids``: the lane ids of
    #: the seeded workflows — the build's own, not a leak).
    seed: seeds.SeedRestore | None = None
    #: the case's execution-scenario tables this attempt created empty (``seedDataTables``)
    tables: ScenarioTables | None = None

    @property
    def outage(self) -> OutageInfo | None:
        """The provider outage to retry on: none once a budget ended the attempt or a workflow was built."""
        return None if self.timed_out or self.state.main_workflow_id else self.state.outage

    @property
    def timed_out(self) -> bool:
        return self.timeout is not None


def user_turns(case: EvalCase) -> list[str]:
    """The user turns to send, in order: the opening prompt verbatim, later ones without their
    ``[director notes]`` (stage directions for a simulated user, never words the user says)."""
    if not case.conversation:
        return []
    turns = [case.opening_prompt()]
    for turn in case.conversation[1:]:
        if turn.role == "user":
            text = strip_director_notes(turn.text).strip()
            if text:
                turns.append(text)
    return turns


def unsupported_reason(case: EvalCase) -> str | None:
    """Why this builder cannot drive the case yet (a harness limit, not the agent's), or None.

    Inline seeds are restored (:mod:`orchestrator.builders.seeds`) and an opening turn that is only an
    attachment is sent as the editor's hand-off; a case the builder cannot drive is a framework
    fault, never a builder failure."""
    if not case.conversation:
        return "the case has no user turn to send"
    if not case.opening_prompt().strip() and case.opening_attachment is None:
        return "the opening turn has neither text nor an attachment"
    return None


def workflow_expected(case: EvalCase) -> bool:
    """A case needs a workflow iff something judges one: execution scenarios or outcome
    expectations (the reference's ``workflowExpectedForCase``, ``harness/build-workflow.ts``)."""
    return bool(case.execution_scenarios or case.outcome_expectations)


class BuildTimedOut(BuildError):
    def __init__(self, breach: BudgetBreach) -> None:
        super().__init__(breach.describe())
        self.breach = breach


@register_builder
class InstanceAiBuilder(Builder):
    """``settings.model`` is recorded as the build model: for this builder it must be the lanes'
    ``N8N_INSTANCE_AI_MODEL`` (n8n's settings API exposes only whether a model is set, not which)."""

    name = "instance-ai"
    needs_mcp_key = False
    needs_sandbox = True
    model_env = "N8N_INSTANCE_AI_MODEL"
    #: the fake browser of ``credentialFixture`` builds redacts secrets (False: a leaking browser, for tests)
    credential_setup_redacts = True
    #: per user turn: the reference's ``DEFAULT_TIMEOUT_MS`` (``harness/build-workflow.ts``), which its
    #: ``--timeout-ms`` sets there; here ``--build-timeout-ms`` does (``--timeout-ms`` is verification's)
    default_build_timeout_ms = DEFAULT_TURN_BUDGET_MS

    @classmethod
    def check_config(cls, options: BuilderOptions | None) -> None:
        """The user proxy's settings from the environment are valid (``ConfigError`` otherwise)."""
        ProxyConfig.from_env(api_key=None, base_url=None)  # N8N_INSTANCE_AI_EVAL_EFFORT (the user proxy)

    async def prepare_lane(self, lane: BuildLane) -> None:
        """Warn when the lane's Instance AI has no sandbox (``build-workflow`` would refuse every build)."""
        try:
            settings = await lane.owner.get("/rest/instance-ai/settings")
        except N8nError as exc:
            log.warning("%s: cannot read Instance AI settings: %s", lane.lane.lane_id, exc)
            return
        if isinstance(settings, dict) and not settings.get("sandboxEnabled"):
            log.warning("%s: Instance AI has no sandbox (sandboxEnabled false): build-workflow will refuse "
                        "to build; start lanes with the sandbox env", lane.lane.lane_id)

    async def build(self, request: BuildRequest, lane: BuildLane, user: BuildUser) -> BuildResult:
        """Build the case through Instance AI chat, as the module docstring says. A replay seed that cannot
        be rebuilt, an unsupported case or a failed credential setup is a framework fault;
        ``N8nTransportError`` (the lane) propagates."""
        started = time.monotonic()
        case = request.case
        transcript_path = transcript_path_for(request, self.settings.run_dir)
        transcript = Transcript(transcript_path, builder=self.name, iteration=request.iteration, attempt=request.attempt,
                                model=self.settings.model, lane=lane.lane.lane_id)
        try:  # a replay seed is rebuilt from LangSmith into an inline seed + the trace's live turn
            case = await materialize_replay(case)
        except ReplayUnavailable as exc:
            transcript.add("error", message=str(exc))
            transcript.close()
            return BuildResult(BuildStatus.failed, error=str(exc), framework_fault=True, transcript_path=transcript_path)
        total = BuildResult(BuildStatus.failed, transcript_path=transcript_path)
        threads: list[str] = []
        seeded_ids: set[str] = set()  # workflow ids the seed restore created (every attempt's)
        # the counting attempt's thread outlives the build when scenario tables need their rows
        # seeded through it; the user's release deletes it after verification
        kept_threads: set[str] = set()
        compaction = CompactionCheck() if case.requires_memory_compaction else None
        debug: RunDebugCapture | None = None
        turns = user_turns(case)
        unsupported = unsupported_reason(case)
        if unsupported is not None:
            transcript.add("error", message=unsupported)
            transcript.close()
            return BuildResult(BuildStatus.failed, error=unsupported, framework_fault=True, transcript_path=transcript_path)
        turn_s = request.timeout_ms / 1000 if request.timeout_ms > 0 else None
        # -- credentialFixture cases: the provider fixture and the browser gateway around the conversation
        cred = await CredentialSetup.start(case, lane, redact_secrets=self.credential_setup_redacts)
        if cred is not None and cred.boot_error is not None:  # n8n's laneBootFailed: the harness's fault
            transcript.add("error", message=cred.boot_error)
            transcript.close()
            return BuildResult(BuildStatus.failed, error=cred.boot_error, framework_fault=True,
                               transcript_path=transcript_path, credential_setup=await cred.finish())

        async def one_attempt() -> AttemptOutcome:
            if total.attempts:
                self.events.outage_retry()
                transcript.add("attempt", number=total.attempts + 1)
            total.attempts += 1
            nonlocal debug
            debug = RunDebugCapture()  # each attempt is a fresh thread: the one that counts is captured
            attempt = await self._attempt(lane, user, turns, transcript, Budgets(turn_s), threads, case=case,
                                          compaction=compaction, debug=debug,
                                          on_event=cred.observe if cred else None)
            if attempt.seed is not None:
                seeded_ids.update(attempt.seed.workflow_ids)
            kept_threads.clear()
            if attempt.tables is not None:
                kept_threads.add(attempt.tables.thread_id)
            return attempt

        try:
            outcome: AttemptOutcome = await retry_provider_outage(one_attempt, self.settings.outage_waits_s)
            if compaction is not None and outcome.thread_id and not outcome.timed_out:
                total.not_judged_reason, total.judge_context = await compaction.check(
                    InstanceAiChat(lane.owner), outcome.thread_id, debug.ordered() if debug is not None else None)
        finally:
            transcript.close()
            if cred is not None:  # facts (the value probe while the fixture listens), then close and clean up
                total.credential_setup = await cred.finish(keep=self.settings.keep_workflows)
            if not self.settings.keep_workflows:
                await self._delete_threads(lane, [t for t in threads if t not in kept_threads])
        total.scenario_tables = outcome.tables
        total.run_debug = debug.ordered() if debug is not None else None
        if total.run_debug is not None:
            write_run_debug(transcript_path, total.run_debug)
        total.turns = outcome.state.runs
        total.artifact_refs = list(outcome.state.artifact_refs)
        total.thread_id = outcome.thread_id
        total.narration = final_narration(read_transcript(transcript_path))
        total.external_edits = external_edits(transcript.entries)
        total.plan_rejections = sum(1 for e in transcript.entries if e.get("kind") == "proxy"
                                    and e.get("situation") == "plan-review" and e.get("action") == "deny")
        total.duration_s = time.monotonic() - started
        state = outcome.state
        if outcome.timeout is not None:  # the conversation ended; what was saved by then is graded
            total.budget_timeout = outcome.timeout.describe()
            total.budget_breach = outcome.timeout.build_timeout()
        if outcome.timeout is not None and state.main_workflow_id is None and not (
                state.agent_ids or not workflow_expected(case)):
            total.status = BuildStatus.timeout  # nothing to grade: no scored result
            total.error = outcome.timeout.describe()
        elif outcome.refused is not None:
            total.error = redact(outcome.refused)
        elif outcome.outage is not None:
            total.status = BuildStatus.provider_outage
            total.error = total.root_cause = redact(f"{PROVIDER_OUTAGE_ROOT_CAUSE}: {outcome.outage.describe()}")
        elif state.main_workflow_id is not None:
            total.status = BuildStatus.ok
            total.workflow_id = state.main_workflow_id
        elif outcome.error is not None:
            total.error = redact(outcome.error)
            total.framework_fault = True
        elif state.sandbox_fault is not None:  # the harness's sandbox failed the build, not the agent
            total.error = redact(f"no workflow built: {state.sandbox_fault}")
            total.framework_fault = True
        elif state.agent_ids or case.is_build_only:
            total.status = BuildStatus.ok  # graded on its expectations (and the transcript)
        else:
            total.error = redact(self._failure_text(state))
        total.leaked_workflows = foreign_workflow_reads(transcript.entries, state.workflow_ids, seeded_ids)
        return total

    @staticmethod
    def _failure_text(state: RunState) -> str:
        if state.errors:
            return f"no workflow built: {state.errors[-1].get('content') or 'run error'}"
        if state.last_status and state.last_status != "completed":
            return f"no workflow built: run {state.last_status}" + (f" ({state.last_reason})" if state.last_reason else "")
        return "the agent finished without a successful build-workflow result"

    async def _attempt(self, lane: BuildLane, user: BuildUser, turns: list[str], transcript: Transcript,
                       budgets: Budgets, threads: list[str], *, case: EvalCase,
                       compaction: CompactionCheck | None = None,
                       debug: RunDebugCapture | None = None,
                       on_event: Callable[[StreamEvent], None] | None = None) -> AttemptOutcome:
        lane_id = lane.lane.lane_id
        chat = InstanceAiChat(lane.owner)
        state = RunState()
        credential_ids = await self._credentials_by_type(user)
        reader = RunReader(
            transcript, state,
            on_workflow=lambda wf: lane.ledger.created("workflow", wf, lane=lane_id, user=user.user_id, source=self.name),
            on_agent=lambda ag: lane.ledger.created("agent", ag, lane=lane_id, user=user.user_id, project=user.project_id),
        )
        thread_id = str(uuid.uuid4())
        lane.ledger.created("thread", thread_id, lane=lane_id, user=user.user_id, project=user.project_id)
        threads.append(thread_id)
        outcome = AttemptOutcome(state, thread_id=thread_id)
        try:
            await chat.create_thread(user.project_id, thread_id)
            await chat.pin_credentials(thread_id, user.credential_ids, user.credential_test_bypass)
            if compaction is not None:  # detects the memory route; sends the observer override if present
                await compaction.prepare(chat, thread_id)
        except N8nTransportError:
            raise
        except N8nError as exc:
            outcome.error = f"could not open the build thread: {exc}"
            return outcome
        if case.inline_seed is not None:  # seeds: restore right after the pin
            seed_thread = thread_id
            if case.inline_seed.session_boundary:
                # an earlier session: the history goes into a thread of its own, the live turn opens
                # this one (the seeded artifacts are on the instance either way)
                seed_thread = str(uuid.uuid4())
                lane.ledger.created("thread", seed_thread, lane=lane_id, user=user.user_id, project=user.project_id)
                threads.append(seed_thread)
                try:
                    await chat.create_thread(user.project_id, seed_thread)
                    await chat.pin_credentials(seed_thread, user.credential_ids, user.credential_test_bypass)
                except N8nTransportError:
                    raise
                except N8nError as exc:
                    outcome.error = f"could not open the earlier session's thread: {exc}"
                    return outcome
            outcome.seed, outcome.error = await self._restore_seed(lane, user, seed_thread, case, transcript)
            if outcome.error is not None:
                return outcome
        try:  # after the seed (whose restore clears this user's open tables), before the first turn
            outcome.tables = await scenario_tables.create_scenario_tables(
                lane.owner, case, thread_id, lane.ledger, lane=lane_id, user=user.user_id, project_id=user.project_id)
        except N8nTransportError:
            raise
        except (N8nError, scenario_tables.ScenarioTablesRefused) as exc:
            outcome.error = redact(f"scenario data tables could not be created: {exc}")[:1000]
            transcript.add("error", message=outcome.error)
            return outcome
        note = outcome.tables.note if outcome.tables is not None else ""
        attachments, context = seeds.opening_attachment(case, outcome.seed, user.project_id)
        driver = conversation_driver(
            case, lambda: ProxyConfig.from_env(api_key=self.settings.api_key, base_url=self.settings.base_url,
                                               lane_env=self.settings.lane_env),
            transcript, turns=turns, approve=answer_confirmation,
            credential_ids=credential_ids,
            create_credential=lambda ctype: self._create_credential(lane, user, chat, thread_id, ctype))
        stream = chat.open_events(thread_id, on_event=on_event)
        await stream.open(timeout_s=30.0)
        try:
            text: str | None = driver.opening()
            number = 0
            while text is not None:
                budgets.start_turn()
                transcript.user(text, number)
                if number == 0 and (attachments or context):
                    transcript.add("attach", attachments=attachments, context=context)
                try:
                    # the agent's opening message names the scenario tables; the recorded turn does not
                    sent = text + note if number == 0 else text
                    run_id = await chat.send(thread_id, sent, attachments=attachments if number == 0 else None,
                                             context=context if number == 0 else None)
                except N8nTransportError:
                    raise
                except N8nHTTPError as exc:
                    if exc.status is not None and exc.status >= 500:
                        raise N8nTransportError("POST", exc.path, exc.message) from None  # the lane failed
                    outcome.error = f"the lane refused the chat message: {exc}"
                    transcript.add("error", message=outcome.error)
                    break
                await self._read_turn(chat, stream, thread_id, run_id, reader, driver, budgets)
                if debug is not None:  # after every turn: the lane's run-debug buffer is small and shared
                    await debug.after_turn(lane.owner, thread_id)
                if state.last_status != "completed" or state.outage is not None:
                    break
                text, number = await driver.next_message(), number + 1
                refused = budgets.next_turn_refused() if text is not None else None
                if refused is not None:  # a turn that cannot finish is not started: grade what is saved
                    outcome.timeout = refused
                    transcript.add("timeout", **refused.as_dict(), message=refused.describe())
                    break
                rename = driver.take_external_edit() if text is not None else None
                if rename is not None:  # behind the agent's back, before the follow-up goes out
                    await rename_behind_the_agents_back(lane.owner, transcript, rename, number - 1)
                run_wf = driver.take_user_run() if text is not None else None
                if run_wf is not None:  # the user runs it before saying so (orchestrator.builders.instance_ai.user_run)
                    if outcome.tables is not None and case.execution_scenarios:
                        try:  # the user runs it on the first scenario's rows (a failure is the harness's),
                            # within what is left of the conversation (n8n bounds it by the case deadline)
                            left = budgets.conversation_left()
                            async with asyncio.timeout(None if left == math.inf else left):
                                await seed_scenario_rows(lane.owner, outcome.tables, case.execution_scenarios[0])
                        except TimeoutError:
                            outcome.timeout = BudgetBreach("conversation", budgets.turn + 1, budgets.elapsed())
                            transcript.add("timeout", **outcome.timeout.as_dict(), message=outcome.timeout.describe())
                            break
                        except (N8nHTTPError, ScenarioSeedFailed) as exc:
                            outcome.error = redact(f"scenario rows for the user's run: {exc}")[:1000]
                            transcript.add("error", message=outcome.error)
                            break
                    try:
                        run = await run_as_user(lane.owner, run_wf, state.workflow_ids, budgets.conversation_left())
                    except (UserRunRefused, N8nHTTPError) as exc:
                        outcome.refused = f"user execution: {exc}"
                        transcript.add("error", message=outcome.refused)
                        break
                    transcript.add("user_run", workflow_id=run.workflow_id, execution_id=run.execution_id,
                                   status=run.status)
                    refused = budgets.next_turn_refused()
                    if refused is not None:
                        outcome.timeout = refused
                        transcript.add("timeout", **refused.as_dict(), message=refused.describe())
                        break
        except BuildTimedOut as exc:
            outcome.timeout = exc.breach
            transcript.add("timeout", **exc.breach.as_dict(), message=exc.breach.describe())
            await self._cancel(chat, stream, thread_id, reader)
            if debug is not None:
                await debug.after_turn(lane.owner, thread_id)
        finally:
            await stream.aclose()
            await driver.aclose()
        return outcome

    async def _restore_seed(self, lane: BuildLane, user: BuildUser, thread_id: str, case: EvalCase,
                            transcript: Transcript) -> tuple[seeds.SeedRestore | None, str | None]:
        """Restore the case's inline seed into the thread (orchestrator.builders.seeds); a failure is the
        harness's (the unit is a framework fault: a seeded case cannot run unseeded)."""
        assert case.inline_seed is not None
        try:
            plan = seeds.plan_restore(case.inline_seed)
            restored = await seeds.restore(lane.owner, user.project_id, thread_id, plan, lane.ledger,
                                           lane=lane.lane.lane_id, user=user.user_id)
        except N8nTransportError:
            raise
        except (N8nError, seeds.SeedUnsupported, seeds.SeedRestoreFailed) as exc:
            error = seeds.restore_error(exc)
            transcript.add("error", message=error)
            return None, error
        seeds.seeded_transcript(transcript, plan)
        return restored, None

    async def _create_credential(self, lane: BuildLane, user: BuildUser, chat: InstanceAiChat, thread_id: str,
                                 ctype: str) -> str | None:
        """A credential the simulated user creates on an engaged card that offered none (the
        reference's ``UserProxyLlm.createCredential``): the type's template in the member's project,
        ledgered before use, deleted with the member's declared ones; the thread's pinned set (which
        the allowlist call replaces whole) grows by it, its connection test resolved as passing."""
        if ctype not in TEMPLATES:
            return None
        planned = credential_body(ctype)
        try:
            taken = {str(row.get("name")) for row in await user.session.list_credentials()}
            name, n = planned.name, 1
            while name in taken:  # a second "[eval] GitHub" gets " #2", as declared duplicates do
                n += 1
                name = f"{planned.name} #{n}"
            cid = await user.session.create_credential(name, ctype, planned.data, project_id=user.project_id)
        except N8nError as exc:
            log.warning("%s: creating a %s credential for an engaged card failed: %s", lane.lane.lane_id, ctype, exc)
            return None
        lane.ledger.created("credential", cid, lane=lane.lane.lane_id, type=ctype, user=user.user_id)
        user.credential_ids.append(cid)
        user.credential_test_bypass.append(cid)
        await chat.pin_credentials(thread_id, user.credential_ids, user.credential_test_bypass)
        return cid

    async def _credentials_by_type(self, user: BuildUser) -> dict[str, list[str]]:
        if not user.credential_ids:
            return {}
        try:
            rows = await user.session.list_credentials()
        except N8nError:
            return {}
        by_type: dict[str, list[str]] = {}
        mine = set(user.credential_ids)
        for row in rows:
            if str(row.get("id")) in mine:
                by_type.setdefault(str(row.get("type")), []).append(str(row["id"]))
        return by_type

    async def _read_turn(self, chat: InstanceAiChat, stream: EventStream, thread_id: str, run_id: str, reader: RunReader,
                         driver: ConversationDriver, budgets: Budgets) -> None:
        """Read events until the turn's run finished and the thread is idle; answer confirmations.
        A budget that fires (:class:`~orchestrator.builders.budgets.Budgets`) raises
        :class:`BuildTimedOut`."""
        reconnects = stream.stats.reconnects
        while True:
            breach = budgets.breach()
            if breach is not None:
                raise BuildTimedOut(breach)
            left = budgets.left()
            try:
                event = await stream.next(timeout_s=None if left == math.inf else max(0.05, left))
            except TimeoutError:
                continue  # the loop names the budget that fired
            budgets.saw_event()
            if stream.stats.reconnects != reconnects:
                reconnects = stream.stats.reconnects
                reader.forget_open_segments()
            reader.feed(event)
            if event.kind == "confirmation-request":
                await self._confirm(chat, event.payload, reader, driver)
            elif event.kind == "run-finish":
                if await self._idle(chat, thread_id):
                    return

    async def _idle(self, chat: InstanceAiChat, thread_id: str) -> bool:
        try:
            status = await chat.thread_status(thread_id)
        except N8nError:
            return True
        busy = status.get("hasActiveRun") or status.get("isSuspended") or any(
            isinstance(t, dict) and t.get("status") == "running" for t in status.get("backgroundTasks") or [])
        return not busy

    async def _confirm(self, chat: InstanceAiChat, payload: dict[str, Any], reader: RunReader,
                       driver: ConversationDriver) -> None:
        request_id = str(payload.get("requestId") or "")
        if not request_id:
            return
        answer = await driver.answer(payload)
        try:
            await chat.confirm(request_id, answer)
        except N8nHTTPError as exc:
            if exc.status == 400 and answer.get("kind") != "approval":
                answer = fallback_answer(answer)
                try:
                    await chat.confirm(request_id, answer)
                except N8nHTTPError as exc2:
                    reader.transcript.add("error", message=f"confirmation {request_id} refused: {exc2.message}")
                    return
            else:
                reader.transcript.add("error", message=f"confirmation {request_id} refused: {exc.message}")
                return
        reader.transcript.add("answer", request_id=request_id, answer=answer)

    async def _cancel(self, chat: InstanceAiChat, stream: EventStream, thread_id: str, reader: RunReader) -> None:
        try:
            await chat.cancel(thread_id)
        except N8nError as exc:
            log.warning("cancel of thread %s failed: %s", thread_id[:8], exc)
            return
        end = time.monotonic() + CANCEL_GRACE_S
        while time.monotonic() < end:
            try:
                event = await stream.next(timeout_s=max(0.1, end - time.monotonic()))
            except (TimeoutError, N8nError):
                return
            reader.feed(event)
            if event.kind == "run-finish":
                return

    async def _delete_threads(self, lane: BuildLane, threads: list[str]) -> None:
        chat = InstanceAiChat(lane.owner)
        lane_id = lane.lane.lane_id
        for thread_id in threads:
            try:
                await chat.delete_thread(thread_id)
            except N8nError as exc:
                msg = redact(f"{lane_id}: delete thread {thread_id}: {exc}")
                lane.ledger.delete_failed("thread", thread_id, msg, lane=lane_id)
                log.warning("%s", msg)
                continue
            lane.ledger.deleted("thread", thread_id, lane=lane_id)


async def delete_thread_entry(owner_session: N8nSession, thread_id: str) -> bool:
    """For ``orchestrator cleanup``: delete a ledgered ``thread`` (and its sandbox) as the owner."""
    return await InstanceAiChat(owner_session).delete_thread(thread_id)
