"""An Instance AI thread's run debug: what each agent step was given and what it cost.

n8n 2.41.1 keeps it in memory when the lane runs with ``N8N_INSTANCE_AI_RUN_DEBUG_ENABLED=true``
(``@n8n/instance-ai`` ``debug/run-debug-buffer``: at most 50 runs across the whole instance, 200
steps a run, lost on restart) and serves it to the thread's owner:
``GET /rest/instance-ai/debug/threads/:threadId/runs`` → ``{threadId, runs: [{runId, startedAt,
stepCount, label?}]}`` and ``GET /rest/instance-ai/debug/runs/:runId`` → ``{runId, threadId,
startedAt, label?, steps: [{stepNumber, input, output}], workflowCode}`` (404 "Run debug is not
enabled" without the flag). A step's ``input`` holds the prompt — ``instructions`` in 2.41.1 (AI SDK
7), ``system`` in earlier builds — and ``messages``; its ``output`` the reply and ``usage``.

Capture follows n8n's ``harness/capture-run-debug.ts``: list the thread's runs, fetch each (four at a
time, 20 s a request, 60 s in all), sorted by ``startedAt``; best effort — anything that fails leaves
nothing rather than an error. The buffer is instance-wide and small, so a build captures after every
turn and merges (:class:`RunDebugCapture`). What is kept of a step (:func:`compact_run`) is what the
graders read: the prompt, the messages, the reply and the usage; the tool schemas and provider
request/response bodies are dropped.

Usage figures follow ``harness/usage-summary.ts`` (:func:`summarize_usage`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from orchestrator.n8n.errors import N8nError
from orchestrator.n8n.rest import N8nSession
from orchestrator.redact import redact_obj

log = logging.getLogger(__name__)

RUNS_PATH = "/rest/instance-ai/debug/threads/{thread_id}/runs"
RUN_PATH = "/rest/instance-ai/debug/runs/{run_id}"
CAPTURE_DEADLINE_S = 60.0
REQUEST_TIMEOUT_S = 20.0
RUN_FETCH_CONCURRENCY = 4
#: the step input fields a grader reads (the prompt and the window); the rest is dropped
INPUT_KEEP = ("instructions", "system", "messages", "modelId", "provider")
OUTPUT_KEEP = ("content", "text", "finishReason", "usage")


def step_instructions(step_input: dict[str, Any]) -> str:
    """The step's system prompt as text: ``instructions`` (a string, a ``{role, content}`` message or
    a list of them: 2.41.1) or, before it, ``system``."""
    value = step_input.get("instructions")
    if value is None:
        value = step_input.get("system")
    return _text(value)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return _text(value.get("content") if "content" in value else value.get("text"))
    if isinstance(value, list):
        return "\n".join(t for t in (_text(v) for v in value) if t)
    return ""


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def compact_run(run: dict[str, Any]) -> dict[str, Any]:
    """What is kept of one debug run: its ids, label and, per step, the prompt, messages, reply and usage."""
    steps = []
    for step in run.get("steps") or []:
        if not isinstance(step, dict):
            continue
        given = _mapping(step.get("input"))
        out = _mapping(step.get("output"))
        steps.append({"stepNumber": step.get("stepNumber"),
                      "input": {k: given[k] for k in INPUT_KEEP if k in given},
                      "output": {k: out[k] for k in OUTPUT_KEEP if k in out}})
    return {"runId": run.get("runId"), "threadId": run.get("threadId"), "startedAt": run.get("startedAt"),
            "label": run.get("label"), "steps": steps}


async def capture_thread(session: N8nSession, thread_id: str, *, deadline_s: float = CAPTURE_DEADLINE_S) -> list[dict[str, Any]]:
    """The thread's debug runs (compacted, redacted), oldest first; ``[]`` when none could be read."""
    try:
        async with asyncio.timeout(deadline_s):
            return await _capture(session, thread_id)
    except (TimeoutError, N8nError) as exc:
        log.debug("run debug of thread %s not captured: %s", thread_id[:8], exc)
        return []


async def _capture(session: N8nSession, thread_id: str) -> list[dict[str, Any]]:
    listing = await session.get(RUNS_PATH.format(thread_id=thread_id))
    summaries = [r for r in (listing.get("runs") if isinstance(listing, dict) else None) or [] if isinstance(r, dict)]
    gate = asyncio.Semaphore(RUN_FETCH_CONCURRENCY)

    async def one(summary: dict[str, Any]) -> dict[str, Any] | None:
        async with gate:
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    run = await session.get(RUN_PATH.format(run_id=summary.get("runId")))
            except (TimeoutError, N8nError) as exc:
                log.debug("run debug %s dropped: %s", summary.get("runId"), exc)
                return None
        if not isinstance(run, dict):
            return None
        if summary.get("label") and not run.get("label"):
            run["label"] = summary["label"]
        return compact_run(run)

    runs = [r for r in await asyncio.gather(*(one(s) for s in summaries)) if r is not None]
    return sorted((redact_obj(r) for r in runs), key=lambda r: r.get("startedAt") or 0)


@dataclass
class RunDebugCapture:
    """One build's run debug across its turns (and its threads): each capture merges into the last,
    a run seen again replacing its earlier copy (it may have grown). ``enabled`` turns False once the
    lane said run debug is off, so no later turn asks again."""

    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    enabled: bool = True

    async def after_turn(self, session: N8nSession, thread_id: str) -> None:
        """Capture the thread's run debug after a turn (at most 60 s), merging it into :attr:`runs`. An
        n8n error or the deadline skips this turn; a lane that says run debug is off turns capture off."""
        if not self.enabled:
            return
        try:
            async with asyncio.timeout(CAPTURE_DEADLINE_S):
                runs = await _capture(session, thread_id)
        except N8nError as exc:
            if exc.status == 404 and "not enabled" in exc.message.lower():
                self.enabled = False
            return
        except TimeoutError:
            return
        for run in runs:
            self.runs[str(run.get("runId"))] = run

    def ordered(self) -> list[dict[str, Any]] | None:
        """The runs oldest first; None when run debug was off or nothing was captured."""
        if not self.runs:
            return None
        return sorted(self.runs.values(), key=lambda r: r.get("startedAt") or 0)


# ------------------------------------------------------------------------------------------------
# usage (n8n's harness/usage-summary.ts)


@dataclass(frozen=True)
class Usage:
    """Token figures summed over steps: input split into uncached, cache read and cache write."""

    uncached_input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    total_tokens: int = 0
    steps: int = 0

    @property
    def input(self) -> int:
        """All input tokens: uncached plus cache reads and writes."""
        return self.uncached_input + self.cache_read + self.cache_write

    def as_dict(self) -> dict[str, int]:
        """n8n's ``buildTokensPerRun`` entry."""
        return {"uncachedInput": self.uncached_input, "cacheRead": self.cache_read, "cacheWrite": self.cache_write,
                "output": self.output, "totalTokens": self.total_tokens, "steps": self.steps}


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def step_usage(usage: Any) -> Usage | None:
    """One step's usage (AI SDK ``LanguageModelUsage``), or None when it has none."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("inputTokenDetails") if isinstance(usage.get("inputTokenDetails"), dict) else None
    inputs = _int(usage.get("inputTokens"))
    if inputs is None:
        inputs = _int(usage.get("promptTokens"))
    output = _int(usage.get("outputTokens"))
    if output is None:
        output = _int(usage.get("completionTokens"))
    if inputs is None and output is None:
        return None
    read = write = 0
    uncached = inputs or 0
    if details is not None:
        read = _int(details.get("cacheReadTokens")) or _int(details.get("cacheRead")) or 0
        write = (_int(details.get("cacheWriteTokens")) or _int(details.get("cacheWrite"))
                 or _int(details.get("cacheCreationTokens")) or 0)
        explicit = _int(details.get("noCacheTokens"))
        if explicit is None:
            explicit = _int(details.get("noCache"))
        uncached = explicit if explicit is not None else max(0, (inputs or 0) - read - write)
    return Usage(uncached, read, write, output or 0, _int(usage.get("totalTokens")) or 0, 1)


def add(a: Usage, b: Usage) -> Usage:
    """The sum of two usages, field by field."""
    return Usage(a.uncached_input + b.uncached_input, a.cache_read + b.cache_read, a.cache_write + b.cache_write,
                 a.output + b.output, a.total_tokens + b.total_tokens, a.steps + b.steps)


def summarize_usage(runs: list[dict[str, Any]] | None) -> Usage | None:
    """Every step of every run summed; a step without usage is skipped; None when no step had any."""
    total: Usage | None = None
    for run in runs or []:
        for step in run.get("steps") or []:
            used = step_usage((step.get("output") or {}).get("usage"))
            if used is not None:
                total = used if total is None else add(total, used)
    return total


def usage_by_run(runs: list[dict[str, Any]] | None) -> dict[str, Usage]:
    """Each run's summed usage, by run id (runs without usage left out)."""
    out: dict[str, Usage] = {}
    for run in runs or []:
        total = summarize_usage([run])
        if total is not None:
            out[str(run.get("runId"))] = total
    return out


def opening_input_tokens(runs: list[dict[str, Any]] | None) -> int | None:
    """The first step's input tokens (instructions, tool schemas and the first message; a seeded case
    carries its restored history here too)."""
    for run in runs or []:
        for step in run.get("steps") or []:
            used = step_usage((step.get("output") or {}).get("usage"))
            if used is not None:
                return used.input
    return None
