"""``requiresMemoryCompaction``: grade a case only once observational memory compacted its thread.

The reference does two things per such thread: it sends a low ``observerThresholdTokens`` override
with every chat turn ("compact as soon as there is anything to compact"), and after the build it
reads ``GET /rest/instance-ai/eval/threads/:threadId/memory`` → ``{observations: [{marker, text, …}],
cursor: {lastObservedMessageId, …} | null}``. A cursor and at least one observation row: the premise
held, and the rows go to the judges as a ground-truth block. Anything else: every expectation of
the case is ``incomplete`` (not judged, out of scoring) — uncompacted, the early turns are still in
the agent's window and every expectation would pass for free.

n8n 2.41.1 (what the lanes run) has neither: its ``InstanceAiSendMessageRequest`` has no observer
override (and, being a non-strict zod object, silently drops unknown keys, so acceptance of the key
proves nothing), and its controller has no ``/eval/threads/:threadId/memory`` route (404). The
override is therefore sent only once the memory route answered for the build's thread — the two
ship together in the reference.

What 2.41.1 does show is the Observer's work in the build's run debug: the memory is rendered into
the agent's prompt as ``<observations>…</observations>``, one ``* MARKER (HH:MM) text`` line per
row (``@n8n/agents`` ``observation-log-renderer``). Without the memory route the premise is read
there (:func:`premise_from_run_debug`): a step that carried a non-empty block means the Observer
compacted the thread (there is no cursor to read: "compacted" is "the prompt held observations"),
its rows are the ground truth. No run debug either: :data:`NOT_CHECKABLE`. On a lane with the
default Observer threshold (30,000 tokens) a short thread never compacts; n8n's context evals lower
it lane-wide (``N8N_INSTANCE_AI_OBSERVER_MESSAGE_TOKENS``; the ``context`` lane profile here).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.n8n.errors import N8nError, N8nHTTPError
from orchestrator.n8n.instance_ai import BASE, InstanceAiChat
from orchestrator.n8n.run_debug import step_instructions

log = logging.getLogger(__name__)

#: The reference's ``COMPACTION_OBSERVER_THRESHOLD_TOKENS`` (``harness/build-workflow.ts``): the
#: request field's floor, 1,000 tokens of visible message content — "compact as soon as there is
#: anything to compact".
OBSERVER_THRESHOLD_OVERRIDE = 1_000
OVERRIDE_FIELD = "observerThresholdTokens"
NOT_CHECKABLE = "compaction premise not checkable on this n8n"
NO_CURSOR = "compaction premise did not hold: observational memory never compacted the thread (no cursor)"
NO_ROWS = "compaction premise did not hold: the thread was compacted but no observation rows were kept"
MAX_CONTEXT_CHARS = 20_000


def memory_path(thread_id: str) -> str:
    """The Instance AI eval endpoint of a thread's working memory."""
    return f"{BASE}/eval/threads/{thread_id}/memory"


async def read_memory(chat: InstanceAiChat, thread_id: str) -> dict[str, Any] | None:
    """The thread's observational memory, or None when this n8n has no such route (404/405)."""
    try:
        data = await chat.session.get(memory_path(thread_id))
    except N8nHTTPError as exc:
        if exc.status in (404, 405):
            return None
        raise
    return data if isinstance(data, dict) else {}


def premise(memory: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """``(not_judged_reason, judge_context)`` from what the memory route answered."""
    if memory is None:
        return NOT_CHECKABLE, None
    if not memory.get("cursor"):
        return NO_CURSOR, None
    rows = [r for r in memory.get("observations") or [] if isinstance(r, dict)]
    if not rows:
        return NO_ROWS, None
    return None, observation_block(rows)


def observation_block(rows: list[dict[str, Any]]) -> str:
    """The observation rows as the judge sees them: ``- [MARKER] text`` per row."""
    lines = [f"- [{str(r.get('marker') or 'note').upper()}] {r.get('text') or ''}".rstrip() for r in rows]
    text = "Observational memory after compaction (what replaced the masked early turns):\n" + "\n".join(lines)
    return text[:MAX_CONTEXT_CHARS]


_OBSERVATIONS = re.compile(r"<observations>(?P<body>[\s\S]*?)</observations>", re.I)
_ROW = re.compile(r"^\s*[*-]\s*(?P<marker>CRITICAL|IMPORTANT|INFO|COMPLETION)\b(?:\s*\([^)]*\))?\s*(?P<text>.+)$", re.M)


def premise_from_run_debug(run_debug: list[dict[str, Any]] | None) -> tuple[str | None, str | None]:
    """The premise as n8n 2.41.1's run debug shows it (module doc): the newest step's observation
    rows as ground truth, or why the case is not judged."""
    if not run_debug:
        return NOT_CHECKABLE, None
    blocks = [found.group("body") for run in run_debug for step in run.get("steps") or []
              if (found := _OBSERVATIONS.search(step_instructions(step.get("input") or {})))]
    if not blocks:
        return NO_CURSOR, None
    rows = [{"marker": m.group("marker"), "text": m.group("text").strip()} for m in _ROW.finditer(blocks[-1])]
    if not rows:
        return NO_ROWS, None
    return None, observation_block(rows)


@dataclass
class CompactionCheck:
    """One build's premise check (across its attempts: each attempt is a fresh thread)."""

    supported: bool | None = None

    async def prepare(self, chat: InstanceAiChat, thread_id: str) -> None:
        """Before the first turn: detect the memory route on the new thread; only a server that
        has it gets the override on every turn of this thread (``chat.request_options``)."""
        try:
            self.supported = await read_memory(chat, thread_id) is not None
        except N8nError as exc:
            log.warning("memory route probe on thread %s failed: %s", thread_id[:8], exc)
            self.supported = False
        if self.supported:
            chat.request_options[OVERRIDE_FIELD] = OBSERVER_THRESHOLD_OVERRIDE

    async def check(self, chat: InstanceAiChat, thread_id: str,
                    run_debug: list[dict[str, Any]] | None = None) -> tuple[str | None, str | None]:
        """After the build: ``(not_judged_reason, judge_context)``; never a pass for free."""
        if self.supported is False:
            return premise_from_run_debug(run_debug)
        try:
            memory = await read_memory(chat, thread_id)
        except N8nError as exc:
            return f"compaction premise could not be read: {exc.message}", None
        return premise(memory)
