"""One routing trial on a real lane: the lane's Instance AI agent takes the case's turn while a judge
watches, and the trial stops as soon as the route is decided.

The trial is a builder (it runs in ``run``'s unit stage: a fresh member's project, the ledger, the
member's clean-up): the thread is set up as the ``instance-ai`` builder sets it up — the case's
credentials pinned, its inline seed restored (workflows, tables, Agents, folders, projects, prior
runs; a replay seed rebuilt from LangSmith first), the opening turn's attachment handed over — and
then the event stream is watched:

- every orchestrator tool call that commits to a route (:func:`.judge.committing`) is shown to the
  judge with what the Assistant did before it; the first ``stop`` with a route ends the trial
  (``/chat/:id/cancel``). n8n stops *before* the call runs, in process; on a lane the call has
  already started when its event arrives, so its effect (a workflow, say) may exist: it is in the
  ledger and goes with the member;
- a stop on a question the case accepts, in a stage-direction case with answers left (at most
  :data:`~.grade.MAX_ANSWERS`), lets the run go on so the user proxy answers the card; a question
  asked in text ends the turn, and the proxy answers it as the next chat message in the same thread;
- a turn that ends first is judged whole; the trial budget (``--timeout``) cancels a run that
  overstays it, and what was decided by then still counts.

The result is the trial's *resolution* (``BuildResult.harness``): route, steer, evidence, the
judge's reason (or error), the answered questions, the stream status and the orchestrator's calls.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, ClassVar

from orchestrator.builders import seeds
from orchestrator.builders.builder import BuilderSettings, BuildEvents, BuildRequest, BuildResult
from orchestrator.builders.instance_ai.builder import CANCEL_GRACE_S, InstanceAiBuilder, answer_confirmation, user_turns
from orchestrator.builders.instance_ai.replay_seed import ReplayUnavailable, materialize_replay
from orchestrator.builders.instance_ai.stream import RunReader, RunState
from orchestrator.builders.instance_ai.user_proxy import ProxyConfig, UserProxy, conversation_driver
from orchestrator.builders.lane import BuildLane
from orchestrator.builders.users import BuildUser
from orchestrator.domain import BuildStatus
from orchestrator.harnesses.routing.cases import RoutingCase
from orchestrator.harnesses.routing.grade import MAX_ANSWERS, can_reply
from orchestrator.harnesses.routing.judge import RouteVerdict, RoutingJudge, committing, is_orchestrator
from orchestrator.n8n.errors import N8nError, N8nTransportError
from orchestrator.n8n.instance_ai import EventStream, InstanceAiChat
from orchestrator.redact import redact
from orchestrator.transcript import Transcript, final_narration, read_transcript, transcript_path_for
from orchestrator.verify.judge import Judge, JudgeConfig

#: n8n's per-trial timeout default (``discovery/cli-args.ts``)
DEFAULT_TRIAL_TIMEOUT_MS = 60_000


class Watch:
    """What the judge sees of one trial, and what it decided."""

    def __init__(self, case: RoutingCase, judge: RoutingJudge, stop_on_route: bool) -> None:
        self.case, self.judge, self.stop_on_route = case, judge, stop_on_route
        self.steps: list[dict[str, Any]] = []
        self.text = ""
        self.tools: list[str] = []
        self.questions: list[dict[str, Any]] = []  # answered, in order
        self.waiting: dict[str, Any] | None = None  # a question card the proxy may answer
        self.stopped: dict[str, Any] | None = None
        self.judge_error: str | None = None

    def flush(self) -> None:
        """Close the Assistant text seen so far into a step."""
        if self.text.strip():
            self.steps.append({"kind": "text", "text": self.text.strip()})
        self.text = ""

    def resolution(self, verdict: RouteVerdict | None, evidence: str) -> dict[str, Any]:
        """The trial's resolution from ``verdict`` (route ``none`` without one) and its ``evidence``."""
        found: dict[str, Any] = {"route": verdict.route if verdict else "none", "steer": verdict.steer if verdict else None,
                                 "evidence": evidence}
        if verdict is not None:
            found["judgeReason"] = verdict.reason
        return found

    async def before_call(self, tool: str, args: dict[str, Any]) -> bool:
        """True: stop the trial before this call."""
        self.flush()
        self.steps.append({"kind": "call", "tool": tool, "args": args})
        self.tools.append(tool)
        if not (committing(tool, args) or self.stop_on_route):
            return False
        verdict, error = await self.judge.decide(self.steps, "stopped at its first committing call"
                                                 if self.stop_on_route else None)
        self.judge_error = self.judge_error or error
        if verdict is None or verdict.route == "none" or (verdict.decision != "stop" and not self.stop_on_route):
            return False
        found = self.resolution(verdict, f"{tool} call")
        if len(self.questions) < MAX_ANSWERS and can_reply(self.case, found):
            self.waiting = found  # the user proxy answers the card; the run goes on
            return False
        self.stopped = found
        return True

    def answered(self, answer: Any) -> None:
        """Record the user's answer to a card; the question it answered counts as asked."""
        self.steps.append({"kind": "answer", "answer": answer})
        if self.waiting is not None:
            self.questions.append(self.waiting)
            self.waiting = None

    async def end_of_turn(self, status: str) -> dict[str, Any]:
        """The turn ended with ``status`` before a route was decided: the judge decides on the whole turn."""
        self.flush()
        verdict, error = await self.judge.decide(self.steps, status)
        self.judge_error = self.judge_error or error
        return self.resolution(verdict, f"end of turn ({status})" + ("" if verdict else ", judge failed"))

    def final(self, found: dict[str, Any], status: str) -> dict[str, Any]:
        """The resolution as the build result carries it: with the questions, stream status, tool calls and
        the judge's error, if any."""
        out = {**found, "questions": list(self.questions), "streamStatus": status, "tools": list(self.tools)}
        if self.judge_error:
            out["judgeError"] = self.judge_error
        return out


class RoutingTrialBuilder(InstanceAiBuilder):
    """The ``instance-ai`` builder's thread set-up, then a watched trial instead of a build."""

    #: the cases of the run by slug (their labels), and ``--stop-on-route``: set by :func:`trial_builder`
    cases: ClassVar[dict[str, RoutingCase]] = {}
    stop_on_route: ClassVar[bool] = False
    default_build_timeout_ms = DEFAULT_TRIAL_TIMEOUT_MS

    def __init__(self, settings: BuilderSettings, events: BuildEvents | None = None) -> None:
        super().__init__(settings, events)
        self._judge: RoutingJudge | None = None

    def routing_judge(self) -> RoutingJudge:
        """The routing judge, made on first use from the environment and the settings' key and URL."""
        if self._judge is None:
            config = JudgeConfig.from_env(api_key=self.settings.api_key, base_url=self.settings.base_url)
            self._judge = RoutingJudge(Judge(config))
        return self._judge

    async def aclose(self) -> None:
        if self._judge is not None:
            await self._judge.aclose()
        await super().aclose()

    async def build(self, request: BuildRequest, lane: BuildLane, user: BuildUser) -> BuildResult:
        """Run one routing trial on the lane (see the module docstring); the resolution is the result's
        ``harness`` data."""
        started = time.monotonic()
        path = transcript_path_for(request, self.settings.run_dir)
        transcript = Transcript(path, builder=self.name, iteration=request.iteration, attempt=request.attempt,
                                model=self.settings.model, lane=lane.lane.lane_id)
        chat = InstanceAiChat(lane.owner)
        thread_id = str(uuid.uuid4())
        result = BuildResult(BuildStatus.failed, attempts=1, transcript_path=path, thread_id=thread_id)
        state = RunState()
        try:
            case = await materialize_replay(request.case)
            lane.ledger.created("thread", thread_id, lane=lane.lane.lane_id, user=user.user_id, project=user.project_id)
            await chat.create_thread(user.project_id, thread_id)
            await chat.pin_credentials(thread_id, user.credential_ids, user.credential_test_bypass)
            seed, error = (await self._restore_seed(lane, user, thread_id, case, transcript)
                           if case.inline_seed is not None else (None, None))
            if error is not None:
                raise seeds.SeedRestoreFailed(error)
            routing = self.cases[request.case_slug]
            watch = Watch(routing, self.routing_judge(), self.stop_on_route)
            found = await self._trial(chat, lane, user, thread_id, case, routing, seed, watch, state, transcript,
                                      request.timeout_ms / 1000 if request.timeout_ms > 0 else None)
            result.status, result.harness = BuildStatus.ok, found
            result.workflow_id = state.main_workflow_id
        except N8nTransportError:
            raise
        except (ReplayUnavailable, seeds.SeedRestoreFailed, N8nError) as exc:
            # the trial could not be set up: the harness's fault, nothing graded
            result.error = result.not_judged_reason = redact(f"routing trial not set up: {exc}")[:1000]
            result.framework_fault = True
            transcript.add("error", message=result.error)
        finally:
            transcript.close()
            if not self.settings.keep_workflows:
                await self._delete_threads(lane, [thread_id])
        result.turns = state.runs
        result.duration_s = time.monotonic() - started
        result.narration = final_narration(read_transcript(path))
        return result

    async def _trial(self, chat: InstanceAiChat, lane: BuildLane, user: BuildUser, thread_id: str, case: Any,
                     routing: RoutingCase, seed: Any, watch: Watch, state: RunState, transcript: Transcript,
                     budget_s: float | None) -> dict[str, Any]:
        lane_id = lane.lane.lane_id
        reader = RunReader(transcript, state,
                           on_workflow=lambda wf: lane.ledger.created("workflow", wf, lane=lane_id, user=user.user_id,
                                                                      source=self.name),
                           on_agent=lambda ag: lane.ledger.created("agent", ag, lane=lane_id, user=user.user_id,
                                                                   project=user.project_id))
        driver = conversation_driver(
            case, lambda: ProxyConfig.from_env(api_key=self.settings.api_key, base_url=self.settings.base_url,
                                               lane_env=self.settings.lane_env),
            transcript, turns=user_turns(case), approve=answer_confirmation,
            credential_ids=await self._credentials_by_type(user))
        attachments, context = seeds.opening_attachment(case, seed, user.project_id)
        deadline = time.monotonic() + budget_s if budget_s else None
        stream = chat.open_events(thread_id)
        await stream.open(timeout_s=30.0)
        try:
            text: str | None = driver.opening()
            number = 0
            while text is not None:
                transcript.user(text, number)
                await chat.send(thread_id, text, attachments=attachments if number == 0 else None,
                                context=context if number == 0 else None)
                status = await self._watch_turn(chat, stream, thread_id, reader, driver, watch, deadline)
                if watch.stopped is not None:
                    return watch.final(watch.stopped, status)
                found = await watch.end_of_turn(status)
                if (status != "completed" or not isinstance(driver, UserProxy) or len(watch.questions) >= MAX_ANSWERS
                        or not can_reply(routing, found)):
                    return watch.final(found, status)
                text, number = await driver.next_message(), number + 1
                if text is None:  # nothing to answer: graded on the question
                    return watch.final(found, status)
                watch.waiting = found
                watch.answered(text)
            return watch.final(await watch.end_of_turn("completed"), "completed")
        finally:
            await stream.aclose()
            await driver.aclose()

    async def _watch_turn(self, chat: InstanceAiChat, stream: EventStream, thread_id: str, reader: RunReader,
                          driver: Any, watch: Watch, deadline: float | None) -> str:
        """Read one turn: ``completed`` / ``error`` / ``cancelled`` (its run's end), ``stopped`` (the
        judge decided), or ``timed-out`` (the trial budget)."""
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                await self._cancel(chat, stream, thread_id, reader)
                return "timed-out"
            try:
                event = await stream.next(timeout_s=left if left is not None else CANCEL_GRACE_S * 8)
            except TimeoutError:
                continue
            reader.feed(event)
            mine = is_orchestrator(event.agent_id)
            if event.kind == "text-delta" and mine:
                watch.text += str(event.payload.get("text", ""))
            elif event.kind == "tool-call" and mine:
                args = event.payload.get("args")
                if await watch.before_call(str(event.payload.get("toolName", "")), args if isinstance(args, dict) else {}):
                    await self._cancel(chat, stream, thread_id, reader)
                    return "stopped"
            elif event.kind == "confirmation-request":
                await self._confirm(chat, event.payload, reader, driver)
                answer = reader.transcript.entries[-1].get("answer") if reader.transcript.entries else None
                if event.payload.get("inputType") == "questions" and isinstance(answer, dict) and answer.get("answers"):
                    watch.answered(answer["answers"])
            elif event.kind == "run-finish" and await self._idle(chat, thread_id):
                return str(event.payload.get("status") or "completed")


def trial_builder(cases: list[RoutingCase], *, stop_on_route: bool = False) -> type[RoutingTrialBuilder]:
    """The trial builder class for one run (the run constructs builders from a class)."""
    return type("RoutingTrials", (RoutingTrialBuilder,), {"cases": {c.id: c for c in cases},
                                                           "stop_on_route": stop_on_route})
