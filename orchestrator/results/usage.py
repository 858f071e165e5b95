"""Tokens of our own model calls (the judge today; a user proxy later): the usage log and the
per-unit totals behind ``harnessUsagePerRun``.

``N8N_INSTANCE_AI_EVAL_USAGE_LOG=<file>`` (the reference's variable) appends one JSON line per
call: ``{"ts", "agent", "model", "effort", "inputTokens", "cacheReadInputTokens",
"cacheCreationInputTokens", "uncachedInputTokens", "outputTokens", "reasoningTokens", "durationMs",
"stopReason"}``. Anthropic counts thinking inside ``output_tokens`` and reports no separate
reasoning figure, so ``reasoningTokens`` is 0 for Anthropic models.

:func:`usage_meter` opens a scope (one unit's verification): every call recorded inside it —
including from tasks it spawns, which inherit the context — is summed per (agent, model) into
:class:`~orchestrator.results.model.UsageEntry` rows.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from orchestrator.redact import redact
from orchestrator.results.model import UsageEntry

log = logging.getLogger(__name__)

USAGE_LOG_ENV = "N8N_INSTANCE_AI_EVAL_USAGE_LOG"

_lock = threading.Lock()


@dataclass
class UsageMeter:
    entries: dict[tuple[str, str], UsageEntry] = field(default_factory=dict)

    def add(self, agent: str, model: str, *, input_tokens: int, uncached: int, output: int, reasoning: int) -> None:
        """Count one model call's tokens under (``agent``, ``model``); thread-safe."""
        with _lock:
            e = self.entries.setdefault((agent, model), UsageEntry(agent=agent, model=model))
            e.calls += 1
            e.input_tokens += input_tokens
            e.uncached_input_tokens += uncached
            e.output_tokens += output
            e.reasoning_tokens += reasoning

    def rows(self) -> list[UsageEntry]:
        """A copy of the totals so far, one row per (agent, model)."""
        return [e.model_copy() for e in self.entries.values()]


_current: contextvars.ContextVar[UsageMeter | None] = contextvars.ContextVar("orchestrator_usage_meter", default=None)


@contextmanager
def usage_meter() -> Iterator[UsageMeter]:
    """Open a metering scope (see the module docstring): calls recorded inside it, in this task and the
    tasks it spawns, add to the meter it yields."""
    meter = UsageMeter()
    token = _current.set(meter)
    try:
        yield meter
    finally:
        _current.reset(token)


def _field(usage: Any, name: str) -> int:
    value = usage.get(name) if isinstance(usage, dict) else getattr(usage, name, None)
    return int(value) if isinstance(value, (int, float)) else 0


def record_model_call(agent: str, model: str, usage: Any, *, effort: str | None = None, duration_s: float = 0.0,
                      stop_reason: str | None = None) -> None:
    """Count one call (an Anthropic ``usage`` object or dict) in the open meter and the usage log.
    Never raises: usage accounting must not break a judgement (a failure is a warning in the log)."""
    try:
        uncached = _field(usage, "input_tokens")
        cache_read = _field(usage, "cache_read_input_tokens")
        cache_write = _field(usage, "cache_creation_input_tokens")
        output = _field(usage, "output_tokens")
        reasoning = _field(usage, "reasoning_tokens")
        total_in = uncached + cache_read + cache_write
        meter = _current.get()
        if meter is not None:
            meter.add(agent, model, input_tokens=total_in, uncached=uncached, output=output, reasoning=reasoning)
        path = os.environ.get(USAGE_LOG_ENV)
        if not path:
            return
        line = json.dumps({
            "ts": round(time.time(), 3), "agent": agent, "model": model, "effort": effort,
            "inputTokens": total_in, "cacheReadInputTokens": cache_read, "cacheCreationInputTokens": cache_write,
            "uncachedInputTokens": uncached, "outputTokens": output, "reasoningTokens": reasoning,
            "durationMs": int(duration_s * 1000), "stopReason": stop_reason,
        })
        with _lock, open(path, "a", encoding="utf-8") as fh:
            fh.write(redact(line) + "\n")
    except Exception as exc:  # accounting never breaks a judgement, but says it missed one
        log.warning("usage of one %s call on %s not recorded: %s", agent, model, redact(f"{type(exc).__name__}: {exc}"))
