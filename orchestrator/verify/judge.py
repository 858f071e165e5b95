"""The LLM judge: grades outcome expectations and scenario success criteria with the ``anthropic`` SDK.

Model and effort come from ``N8N_INSTANCE_AI_EVAL_JUDGE_MODEL`` / ``N8N_INSTANCE_AI_EVAL_JUDGE_EFFORT``
(the reference harness's names). Each call is retried with a per-attempt timeout. When every attempt
fails the judge never raises:

- whether the provider was down, the judge timed out, or it answered but never in a usable shape,
  every verdict is ``incomplete`` (not judged, excluded from scoring, attributed
  ``verification_gap``), as n8n leaves a unit whose verifier was exhausted without a verdict.

Scenario calls escalate their per-attempt cap (60 s, 120 s, 240 s, as n8n's checklist verifier);
expectation calls follow n8n's assertion judge (:meth:`Judge.judge_expectations`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, StrictBool, StrictInt, ValidationError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt, wait_incrementing

from orchestrator.domain import Attribution, Verdict
from orchestrator.errors import ConfigError, ModelCallError
from orchestrator.gateway.attribution import attribution_hook
from orchestrator.outage import classify_exception
from orchestrator.redact import redact, register_secret
from orchestrator.results.usage import record_model_call

if TYPE_CHECKING:
    import anthropic

log = logging.getLogger(__name__)

DEFAULT_JUDGE_MODEL = "anthropic/claude-sonnet-5-5"
#: Effort → extended-thinking budget (tokens). Effort applies to Anthropic models only.
EFFORT_BUDGET = {"low": 0, "medium": 2048, "high": 4096, "xhigh": 8192, "max": 16000}
CATEGORIES = ("builder_issue", "mock_issue", "framework_issue", "verification_gap")


@dataclass(frozen=True)
class JudgeConfig:
    model: str = DEFAULT_JUDGE_MODEL
    effort: str = "high"
    api_key: str | None = None
    base_url: str | None = None
    attempts: int = 3
    #: cap of any one attempt (a run's ``judge_attempt_timeout_s`` lowers it)
    attempt_timeout_s: float = 240.0
    #: per-attempt caps of the scenario judge, escalating (n8n ``checklist/verifier.ts``
    #: ``VERIFY_ATTEMPT_TIMEOUTS_MS``: 60 s, 120 s, 240 s), each at most ``attempt_timeout_s``
    timeout_ladder_s: tuple[float, ...] = (60.0, 120.0, 240.0)
    #: per-attempt cap of the expectation judge (n8n ``assertion-judge.ts``: 120 s)
    expectation_timeout_s: float = 120.0
    backoff_s: float = 2.0

    @classmethod
    def from_env(cls, **overrides: Any) -> JudgeConfig:
        """The judge's settings from the environment (the reference's ``N8N_INSTANCE_AI_EVAL_JUDGE_*``
        variables and ``ANTHROPIC_*``), then ``overrides``. Registers the API key as a secret for
        redaction; raises ``ConfigError`` for an unknown effort."""
        effort = os.environ.get("N8N_INSTANCE_AI_EVAL_JUDGE_EFFORT", "high")
        if effort not in EFFORT_BUDGET:
            raise ConfigError(
                f"N8N_INSTANCE_AI_EVAL_JUDGE_EFFORT: {effort!r} is not one of {', '.join(EFFORT_BUDGET)}"
            )
        cfg = cls(
            model=os.environ.get("N8N_INSTANCE_AI_EVAL_JUDGE_MODEL", DEFAULT_JUDGE_MODEL),
            effort=effort,
            api_key=os.environ.get("ANTHROPIC_API_KEY"),
            base_url=os.environ.get("ANTHROPIC_BASE_URL"),
        )
        register_secret(cfg.api_key)
        return cls(**{**cfg.__dict__, **overrides})

    @property
    def api_model(self) -> str:
        """The model id the API takes (without an ``anthropic/`` prefix)."""
        return self.model.split("/", 1)[1] if self.model.startswith("anthropic/") else self.model


@dataclass
class Judgement:
    verdict: Verdict
    reason: str
    category: str | None = None
    attribution: Attribution | None = None


class Judge:
    def __init__(self, config: JudgeConfig) -> None:
        import anthropic  # seconds to import: loaded by the first judge, not by every CLI start (JudgeConfig)

        self.config = config
        self._client: anthropic.AsyncAnthropic = anthropic.AsyncAnthropic(
            api_key=config.api_key or "unset", base_url=config.base_url, max_retries=0,
            timeout=config.attempt_timeout_s,
            # the model gateway counts each call to the unit whose task sends it (issue 37)
            http_client=anthropic.DefaultAsyncHttpxClient(event_hooks={"request": [attribution_hook("judge")]}),
        )

    async def aclose(self) -> None:
        await self._client.close()

    def ladder_timeout(self, attempt: int) -> float:
        """Seconds allowed for try ``attempt`` (1-based): its step of the timeout ladder (the last step for
        later tries), never more than ``attempt_timeout_s``."""
        ladder = self.config.timeout_ladder_s or (self.config.attempt_timeout_s,)
        return min(ladder[min(attempt - 1, len(ladder) - 1)], self.config.attempt_timeout_s)

    async def _ask(self, system: str, prompt: str, timeout_s: float | None = None) -> str:
        kwargs: dict[str, Any] = {}
        budget = EFFORT_BUDGET.get(self.config.effort, 0)
        if budget:
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": budget}
        started = time.monotonic()
        msg = await asyncio.wait_for(
            self._client.messages.create(
                model=self.config.api_model,
                max_tokens=budget + 2048,
                system=system,
                messages=[{"role": "user", "content": prompt}],
                **kwargs,
            ),
            timeout=timeout_s or self.config.attempt_timeout_s,
        )
        record_model_call("judge", self.config.model, getattr(msg, "usage", None), effort=self.config.effort,
                          duration_s=time.monotonic() - started, stop_reason=getattr(msg, "stop_reason", None))
        return "".join(getattr(b, "text", "") for b in msg.content)

    async def ask(self, system: str, prompt: str, timeout_s: float | None = None) -> str:
        """One call on the judge model, its reply text (a harness's own panel parses it)."""
        return await self._ask(system, prompt, timeout_s)

    async def judge(self, system: str, prompt: str, count: int) -> list[Judgement]:
        """``count`` verdicts for the numbered items in ``prompt``; never raises.

        Retried (tenacity, ``attempts`` in all, waiting ``backoff_s``, then twice that, …) on a
        provider error, a timeout, or a reply that is not the verdict list asked for. After the
        last try: an outage or timeout leaves the items ``incomplete`` (not judged); an unusable
        reply fails them as a ``verification_gap``."""
        import anthropic  # loaded by __init__

        outage = False
        last_error = ""

        tries = 0

        async def once() -> list[Judgement]:
            nonlocal outage, last_error, tries
            tries += 1
            try:
                text = await self._ask(system, prompt, self.ladder_timeout(tries))
            except (TimeoutError, anthropic.APIError) as exc:
                outage = outage or classify_exception(exc) is not None or isinstance(
                    exc, (asyncio.TimeoutError, anthropic.APITimeoutError))
                last_error = redact(f"{type(exc).__name__}: {exc}")[:300]
                raise
            parsed = parse_verdicts(text, count)
            if parsed is None:
                outage = False
                last_error = "judge reply was not the JSON verdict list asked for"
                raise _UnusableReply(last_error)
            return parsed

        def log_retry(state: RetryCallState) -> None:
            log.warning("judge attempt %d failed: %s", state.attempt_number, last_error)

        retrying = AsyncRetrying(
            stop=stop_after_attempt(max(1, self.config.attempts)),
            wait=wait_incrementing(start=self.config.backoff_s, increment=self.config.backoff_s),
            retry=retry_if_exception_type((asyncio.TimeoutError, anthropic.APIError, _UnusableReply)),
            before_sleep=log_retry,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await once()
        except (TimeoutError, anthropic.APIError, _UnusableReply):
            log.warning("judge gave up after %d attempt(s): %s", self.config.attempts, last_error)
        # n8n: a verifier that never produced a verdict leaves the unit without one (``gate.ts``:
        # "verifier exhausted" units are excluded), whether it was down or answered unusably
        reason = f"not judged: {last_error}" if outage else f"not judged: judge failed: {last_error}"
        return [Judgement(Verdict.incomplete, reason, "verification_failure", Attribution.verification_gap)
                for _ in range(count)]


    async def judge_expectations(self, system: str, prompt: str, count: int) -> list[Judgement]:
        """Verdicts for ``count`` numbered expectations, with the rules of n8n's assertion judge
        (``build-expectations/assertion-judge.ts`` ``judgeExpectations``): ``EXPECTATION_ATTEMPTS``
        tries; a reply is usable when it gives a verdict for at least one index in range (others out
        of range are ignored); an expectation the usable reply leaves out is ``incomplete`` ("no
        verdict returned"), not a fail; when no attempt gives a usable reply every expectation is
        ``incomplete`` ("judge produced no result"): a dead judge is no verdict. Never raises."""
        import anthropic  # loaded by __init__

        last_error = ""
        for attempt in range(1, EXPECTATION_ATTEMPTS + 1):
            try:
                text = await self._ask(system, prompt, min(self.config.expectation_timeout_s, self.config.attempt_timeout_s))
            except (TimeoutError, anthropic.APIError) as exc:
                last_error = redact(f"{type(exc).__name__}: {exc}")[:300]
                log.warning("expectation judge attempt %d/%d failed: %s", attempt, EXPECTATION_ATTEMPTS, last_error)
                continue
            found = parse_partial_verdicts(text, count)
            if found:
                return [found.get(i) or Judgement(Verdict.incomplete, NO_VERDICT_RETURNED) for i in range(count)]
            last_error = "judge reply held no verdict for any expectation"
            log.warning("expectation judge attempt %d/%d: %s", attempt, EXPECTATION_ATTEMPTS, last_error)
        reason = f"not judged: {JUDGE_PRODUCED_NOTHING} ({last_error})" if last_error else f"not judged: {JUDGE_PRODUCED_NOTHING}"
        return [Judgement(Verdict.incomplete, reason, "verification_failure", Attribution.verification_gap)
                for _ in range(count)]


#: n8n's expectation judge tries twice (``assertion-judge.ts`` ``MAX_VERIFY_ATTEMPTS``)
EXPECTATION_ATTEMPTS = 2
NO_VERDICT_RETURNED = "no verdict returned"
JUDGE_PRODUCED_NOTHING = "judge produced no result"


class _UnusableReply(ModelCallError):
    """The judge answered, but not with the verdict list asked for (worth another try)."""


class JudgeItem(BaseModel):
    """One verdict of the judge's reply: ``{"index": i, "pass": bool, "reason": str, "category": str?}``."""

    index: StrictInt | None = None
    passed: StrictBool = Field(alias="pass")
    reason: Any = ""
    category: Any = None


class JudgeReply(BaseModel):
    #: items that are not verdicts are kept as they are and skipped, as long as every index is covered
    verdicts: list[JudgeItem | Any]


def parse_verdicts(text: str, count: int) -> list[Judgement] | None:
    """The verdicts of the first ``{`` … last ``}`` of ``text``, validated; ``None`` when unusable."""
    text = text or ""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        reply = JudgeReply.model_validate_json(text[start : end + 1])
    except ValidationError:
        return None
    by_index: dict[int, JudgeItem] = {}
    for pos, item in enumerate(reply.verdicts):
        if isinstance(item, JudgeItem):
            by_index[pos if item.index is None else item.index] = item
    if set(by_index) != set(range(count)):
        return None
    out = []
    for i in range(count):
        item = by_index[i]
        category = item.category if item.category in CATEGORIES else None
        if not item.passed and category is None:
            category = "builder_issue"
        out.append(
            Judgement(
                Verdict.passed if item.passed else Verdict.failed,
                redact(str(item.reason))[:1000],
                None if item.passed else category,
                None if item.passed else Attribution(category),
            )
        )
    return out


def parse_partial_verdicts(text: str, count: int) -> dict[int, Judgement]:
    """The verdicts of the reply whose index is in ``[0, count)`` (others ignored); {} when none."""
    text = text or ""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return {}
    try:
        reply = JudgeReply.model_validate_json(text[start : end + 1])
    except ValidationError:
        return {}
    out: dict[int, Judgement] = {}
    for pos, item in enumerate(reply.verdicts):
        if not isinstance(item, JudgeItem):
            continue
        index = pos if item.index is None else item.index
        if 0 <= index < count:
            reason = redact(str(item.reason))[:1000]
            out[index] = (Judgement(Verdict.passed, reason) if item.passed else
                          Judgement(Verdict.failed, reason, "builder_issue", Attribution.builder_issue))
    return out


EXPECTATION_SYSTEM = (
    "You grade workflows built by an AI builder for n8n. You get the workflow JSON and numbered "
    "expectations about it. For each expectation decide whether the workflow meets it. Answer ONLY "
    'with JSON: {"verdicts": [{"index": 0, "pass": true, "reason": "one line"}, ...]} covering every index.'
)

SCENARIO_SYSTEM = (
    "You verify an n8n workflow execution against a scenario's success criteria. You get the "
    "workflow, the scenario, and the execution result (node outputs and errors; external calls were "
    "answered by an LLM mock). Decide pass/fail; on fail give the root cause category: builder_issue "
    "(the workflow is built wrong), mock_issue (the mock returned data the scenario did not describe), "
    "framework_issue (the eval framework failed), verification_gap (not enough information). Answer "
    'ONLY with JSON: {"verdicts": [{"index": 0, "pass": false, "reason": "one line", "category": "builder_issue"}]}.'
)


PROCESS_SYSTEM = (
    "You grade how an AI builder for n8n worked with its user. You get the build conversation "
    "(user turns, the assistant's replies, its tool calls and results, the questions it asked and the "
    "answers it got), the workflow it ended with, and numbered expectations about the process. For each "
    "expectation decide from the conversation whether it holds. Answer ONLY with JSON: "
    '{"verdicts": [{"index": 0, "pass": true, "reason": "one line"}, ...]} covering every index.'
)


BUILD_JUDGE_SYSTEM = (
    "You are grading one run of an AI assistant that builds things in n8n (workflows, agents, "
    "evaluation configs) while chatting with a user. You are given what the run left behind — the "
    "saved workflow (or a note that none was saved), any other artifacts it produced, the chat "
    "transcript with the assistant's tool calls, and counts measured by the harness — followed by a "
    "numbered list of expectations written by the case author. Some expectations are about how the "
    "assistant behaved in the chat, others about what it produced. Decide each one from the evidence "
    "given; an expectation about something that is absent fails. Treat the measured counts as exact "
    "and do not recount them from the transcript. Reply with JSON only: "
    '{"verdicts": [{"index": 0, "pass": true, "reason": "one short sentence"}, ...]} '
    "with one entry per numbered expectation, using its number as the index."
)


def build_context_block(workflow: dict[str, Any] | None, artifact_context: str | None) -> str:
    """What the build left: the workflow (or "(no workflow built)") and the agent / config-eval
    sections (n8n: ``build-expectations/verifier.ts`` joins the two into one block)."""
    body = json.dumps(workflow, indent=1)[:60000] if workflow else "(no workflow built)"
    block = f"## Workflow JSON\n{body}"
    return f"{block}\n\n{artifact_context}" if artifact_context else block


def build_expectations_prompt(expectations: list[str], *, workflow: dict[str, Any] | None, transcript_text: str,
                              metrics: dict[str, Any] | None, tool_calls_per_turn: str,
                              artifact_context: str | None = None, ground_truth: str | None = None,
                              token_totals: str | None = None) -> str:
    """One prompt for the process and outcome expectations of a build (n8n judges both in one call);
    ``token_totals``: the build's token figures from its run debug (n8n's totals block), for a chat
    build."""
    listing = "\n".join(f"{i}. {text}" for i, text in enumerate(expectations))
    measured = f"```json\n{json.dumps(metrics, indent=1)}\n```" if metrics else "(none captured)"
    tokens = (f"## Token usage totals (ground truth — do not recount)\n{token_totals}\n\n"
              if token_totals is not None else "")
    return (f"{build_context_block(workflow, artifact_context)}\n\n"
            f"## Conversation transcript\n{transcript_text or '(empty)'}\n\n"
            f"## Conversation metrics (ground truth, measured by the harness: do not recount)\n{measured}\n\n"
            f"## Tool calls per turn (ground truth, measured by the harness: do not recount)\n{tool_calls_per_turn}\n\n"
            f"{tokens}{_ground_truth(ground_truth)}## Expectations\n{listing}\n\n"
            "Give a verdict for every numbered expectation, by its number.\n")


def _ground_truth(ground_truth: str | None) -> str:
    """A block of facts the harness read from the lane (e.g. observational-memory rows)."""
    return f"## Ground truth (read from the n8n instance, not said by the agent)\n{ground_truth}\n\n" if ground_truth else ""


def process_prompt(transcript_text: str, workflow: dict[str, Any] | None, expectations: list[str],
                   ground_truth: str | None = None) -> str:
    """The process judge's user prompt: the build conversation, the final workflow (first 30,000
    characters), the ground truth if any and the numbered expectations (0-based)."""
    listing = "\n".join(f"{i}. {text}" for i, text in enumerate(expectations))
    body = json.dumps(workflow, indent=1)[:30000] if workflow else "(no workflow built)"
    return (f"## Build conversation\n{transcript_text}\n\n## Final workflow JSON\n{body}\n\n"
            f"{_ground_truth(ground_truth)}## Expectations\n{listing}\n")


def expectation_prompt(workflow: dict[str, Any] | None, expectations: list[str], ground_truth: str | None = None) -> str:
    """The expectations judge's user prompt: the workflow (first 60,000 characters), the ground truth if
    any and the numbered expectations (0-based)."""
    listing = "\n".join(f"{i}. {text}" for i, text in enumerate(expectations))
    body = json.dumps(workflow, indent=1)[:60000] if workflow else "(no workflow built)"
    return f"## Workflow JSON\n{body}\n\n{_ground_truth(ground_truth)}## Expectations\n{listing}\n"


def scenario_prompt(workflow: dict[str, Any], scenario: Any, execution: dict[str, Any]) -> str:
    """The scenario judge's user prompt: the workflow, the scenario with its data setup and success
    criteria, and the mocked execution's result (each cut to 40,000 characters)."""
    return (
        f"## Workflow JSON\n{json.dumps(workflow, indent=1)[:40000]}\n\n"
        f"## Scenario 0: {scenario.name}\n{scenario.description or ''}\n"
        f"Data setup: {scenario.data_setup or '(none)'}\nSuccess criteria: {scenario.success_criteria}\n\n"
        f"## Execution result\n{json.dumps(execution, indent=1, default=str)[:40000]}\n"
    )
