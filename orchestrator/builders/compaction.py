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
ship together in the reference — and on 2.41.1 such a case ends ``incomplete`` with
:data:`NOT_CHECKABLE`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from orchestrator.n8n.errors import N8nError, N8nHTTPError
from orchestrator.n8n.instance_ai import BASE, InstanceAiChat

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

    async def check(self, chat: InstanceAiChat, thread_id: str) -> tuple[str | None, str | None]:
        """After the build: ``(not_judged_reason, judge_context)``; never a pass for free."""
        if self.supported is False:
            return NOT_CHECKABLE, None
        try:
            memory = await read_memory(chat, thread_id)
        except N8nError as exc:
            return f"compaction premise could not be read: {exc.message}", None
        return premise(memory)
