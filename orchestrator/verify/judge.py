"""The LLM judge: grades outcome expectations and scenario success criteria with the ``anthropic`` SDK.

Model and effort come from ``N8N_INSTANCE_AI_EVAL_JUDGE_MODEL`` / ``N8N_INSTANCE_AI_EVAL_JUDGE_EFFORT``
(the reference harness's names). Each call is retried with a per-attempt timeout. When every attempt
fails the judge never raises:

- the provider was down or the judge timed out → every verdict is ``incomplete`` (not judged,
  excluded from scoring, attributed ``verification_gap``): an outage is not a quality signal;
- the judge answered but never in a usable shape → every verdict is ``fail`` (the reference's
  all-fail fallback), attributed ``verification_gap``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from dataclasses import dataclass
from typing import Any

import anthropic

from orchestrator.build.outage import classify_exception
from orchestrator.redact import redact, register_secret
from orchestrator.results.model import Attribution, Verdict

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
    attempt_timeout_s: float = 120.0
    backoff_s: float = 2.0

    @classmethod
    def from_env(cls, **overrides: Any) -> "JudgeConfig":
        effort = os.environ.get("N8N_INSTANCE_AI_EVAL_JUDGE_EFFORT", "high")
        if effort not in EFFORT_BUDGET:
            from orchestrator.errors import ConfigError

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
        return self.model.split("/", 1)[1] if self.model.startswith("anthropic/") else self.model


@dataclass
class Judgement:
    verdict: Verdict
    reason: str
    category: str | None = None
    attribution: Attribution | None = None


class Judge:
    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        self._client = anthropic.AsyncAnthropic(
            api_key=config.api_key or "unset", base_url=config.base_url, max_retries=0,
            timeout=config.attempt_timeout_s,
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def _ask(self, system: str, prompt: str) -> str:
        kwargs: dict[str, Any] = {}
        budget = EFFORT_BUDGET.get(self.config.effort, 0)
        if budget:
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": budget}
        msg = await asyncio.wait_for(
            self._client.messages.create(
                model=self.config.api_model,
                max_tokens=budget + 2048,
                system=system,
                messages=[{"role": "user", "content": prompt}],
                **kwargs,
            ),
            timeout=self.config.attempt_timeout_s,
        )
        return "".join(getattr(b, "text", "") for b in msg.content)

    async def judge(self, system: str, prompt: str, count: int) -> list[Judgement]:
        """``count`` verdicts for the numbered items in ``prompt``; never raises."""
        outage = False
        last_error = ""
        for attempt in range(self.config.attempts):
            try:
                text = await self._ask(system, prompt)
            except (asyncio.TimeoutError, anthropic.APIError) as exc:
                info = classify_exception(exc)
                outage = outage or info is not None or isinstance(exc, (asyncio.TimeoutError, anthropic.APITimeoutError))
                last_error = redact(f"{type(exc).__name__}: {exc}")[:300]
                log.warning("judge attempt %d failed: %s", attempt + 1, last_error)
            else:
                parsed = parse_verdicts(text, count)
                if parsed is not None:
                    return parsed
                outage = False
                last_error = "judge reply was not the JSON verdict list asked for"
                log.warning("judge attempt %d: %s", attempt + 1, last_error)
            if attempt + 1 < self.config.attempts:
                await asyncio.sleep(self.config.backoff_s * (attempt + 1))
        verdict = Verdict.incomplete if outage else Verdict.failed
        reason = f"not judged: {last_error}" if outage else f"judge failed: {last_error}"
        return [Judgement(verdict, reason, "verification_failure", Attribution.verification_gap) for _ in range(count)]


_JSON_BLOCK = re.compile(r"\{.*\}", re.S)


def parse_verdicts(text: str, count: int) -> list[Judgement] | None:
    """Parse ``{"verdicts": [{"index": i, "pass": bool, "reason": str, "category": str?}]}``."""
    match = _JSON_BLOCK.search(text or "")
    if not match:
        return None
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    items = data.get("verdicts") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    by_index: dict[int, dict[str, Any]] = {}
    for pos, item in enumerate(items):
        if isinstance(item, dict) and isinstance(item.get("pass"), bool):
            idx = item.get("index", pos)
            if isinstance(idx, int):
                by_index[idx] = item
    if set(by_index) != set(range(count)):
        return None
    out = []
    for i in range(count):
        item = by_index[i]
        passed = item["pass"]
        category = item.get("category") if item.get("category") in CATEGORIES else None
        if not passed and category is None:
            category = "builder_issue"
        out.append(
            Judgement(
                Verdict.passed if passed else Verdict.failed,
                redact(str(item.get("reason", "")))[:1000],
                None if passed else category,
                None if passed else Attribution(category),
            )
        )
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


def process_prompt(transcript_text: str, workflow: dict[str, Any] | None, expectations: list[str]) -> str:
    listing = "\n".join(f"{i}. {text}" for i, text in enumerate(expectations))
    body = json.dumps(workflow, indent=1)[:30000] if workflow else "(no workflow built)"
    return (f"## Build conversation\n{transcript_text}\n\n## Final workflow JSON\n{body}\n\n"
            f"## Expectations\n{listing}\n")


def expectation_prompt(workflow: dict[str, Any] | None, expectations: list[str]) -> str:
    listing = "\n".join(f"{i}. {text}" for i, text in enumerate(expectations))
    body = json.dumps(workflow, indent=1)[:60000] if workflow else "(no workflow built)"
    return f"## Workflow JSON\n{body}\n\n## Expectations\n{listing}\n"


def scenario_prompt(workflow: dict[str, Any], scenario: Any, execution: dict[str, Any]) -> str:
    return (
        f"## Workflow JSON\n{json.dumps(workflow, indent=1)[:40000]}\n\n"
        f"## Scenario 0: {scenario.name}\n{scenario.description or ''}\n"
        f"Data setup: {scenario.data_setup or '(none)'}\nSuccess criteria: {scenario.success_criteria}\n\n"
        f"## Execution result\n{json.dumps(execution, indent=1, default=str)[:40000]}\n"
    )
