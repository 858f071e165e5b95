"""The case's ``memoryExpectations``: claims about the agent's captured context, judged on it alone.

As n8n's ``build-expectations/memory-verifier.ts`` (449ea184) with ``harness/memory-context.ts``
(aafa6938), on n8n's ``context-hack-eval-prep`` branch: the judge sees only the context state the
build's run debug captured (:mod:`orchestrator.verify.context`) — never the transcript or the
workflow — and grades each claim ("a fact counts as retained if any tier holds it"). Claims are
grouped by ``anchor`` (``probe`` unless given) and judged one call per group, then listed in the
author's order; each is one unit, kind ``memory``. The judge's partial-verdict rules are those of
every expectation judge (a claim it leaves out is ``incomplete``; an exhausted judge leaves all
``incomplete``). No run debug: every claim ``incomplete`` and no judge call.

The context block for the judge caps what n8n caps: each message part at 4,000 characters, the
window at 80,000 (head and tail, the middle replaced by a note to read absence there as unknown),
the system prompt at 40,000; the capture's counts come last as ground truth.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.cases.model import MemoryExpectation
from orchestrator.domain import Verdict
from orchestrator.results.model import ExpectationResult
from orchestrator.verify.context import Anchor, CapturedContext, Snapshot, captured_context, render_window
from orchestrator.verify.judge import Judge

MAX_SEGMENT_PAYLOAD_CHARS = 4_000
MAX_MESSAGE_WINDOW_CHARS = 80_000
MAX_SYSTEM_PROMPT_CHARS = 40_000
NO_RUN_DEBUG = "not judged — no run debug was captured for this thread, so there was no context state to grade"

MEMORY_SYSTEM = (
    "You grade the context state of an AI assistant that builds in n8n: what it had in front of it at "
    "one moment of a conversation — its compressed observational memory (if any), the raw message window "
    "and its system prompt — not what it answered. You get that state and numbered claims about it. A "
    "fact counts as retained when ANY of the three tiers holds it; an empty observation block is not by "
    "itself a failure. A tool result the assistant fetched counts like a fact the user typed. A claim "
    "that a fact survived passes when it is present, naming the tier; fails when it is absent, or "
    "altered (say what it became). A claim that two facts are told apart needs both halves. A claim "
    "that something is absent passes only when no tier holds it. Quote the evidence. Where a region is "
    "elided or truncated, say the claim cannot be settled there rather than calling the fact absent. "
    'Reply with JSON only: {"verdicts": [{"index": 0, "pass": true, "reason": "one sentence"}, ...]} '
    "with one entry per numbered claim."
)


def _cap_window(text: str) -> str:
    if len(text) <= MAX_MESSAGE_WINDOW_CHARS:
        return text
    half = MAX_MESSAGE_WINDOW_CHARS // 2
    omitted = len(text) - 2 * half
    return (text[:half] + f"\n[…{omitted} characters of the middle of the window omitted — treat absence here "
            "as unknown, not as evidence…]\n" + text[-half:])


def context_block(context: CapturedContext, anchor: Anchor) -> str:
    """The judge's view of the context at ``anchor`` (n8n's ``buildMemoryContextBlock`` layout)."""
    snapshot: Snapshot = context.at(anchor) or context.turn_end
    moment = "as the probe arrived" if anchor == "probe" and context.probe is not None else "at the end of the turn"
    observations = snapshot.observations or (
        "(none — the Observer never compressed this thread, so no facts were moved into observational memory. "
        "This is NOT itself a failure: on a thread this short the facts should still be present in the raw "
        "message window below, which is what the model actually received.)")
    window = _cap_window(render_window(snapshot.window, MAX_SEGMENT_PAYLOAD_CHARS)) if snapshot.window \
        else "(no message window captured)"
    system = snapshot.system if len(snapshot.system) <= MAX_SYSTEM_PROMPT_CHARS else \
        snapshot.system[:MAX_SYSTEM_PROMPT_CHARS] + "\n\n[…truncated]"
    summary = {"runs": context.runs, "steps": context.steps, "stepsCarryingObservations": context.steps_with_observations,
               "compressionRan": context.steps_with_observations > 0,
               "snapshot": ("as the probe arrived, before the agent answered it" if moment.startswith("as")
                            else "end of the graded turn")}
    return (f"## Compressed observation block ({moment})\n{observations}\n\n"
            f"## Raw message window (what the model had {moment})\n{window}\n\n"
            f"## System prompt ({moment})\n{system or '(no system prompt captured)'}\n\n"
            f"## Capture summary (ground truth — do not recount)\n```json\n{json.dumps(summary, indent=1)}\n```")


def memory_prompt(context: CapturedContext, anchor: Anchor, claims: list[str]) -> str:
    """The memory judge's user prompt: the context the agent had at ``anchor`` and the numbered claims
    (0-based), one verdict asked for each."""
    listing = "\n".join(f"{i}. {text}" for i, text in enumerate(claims))
    return (f"{context_block(context, anchor)}\n\n## Expectations\n{listing}\n\n"
            "Return a verdict for every numbered expectation, using its 0-based index.\n")


def not_graded(expectations: list[MemoryExpectation], reason: str) -> list[ExpectationResult]:
    """One ``incomplete`` result per memory expectation, each with ``reason`` (no thread to grade, the
    build failed…)."""
    return [ExpectationResult(kind="memory", text=e.text, verdict=Verdict.incomplete, reason=reason)
            for e in expectations]


async def judge_memory_expectations(expectations: list[MemoryExpectation], runs: list[dict[str, Any]] | None,
                                    judge: Judge) -> list[ExpectationResult]:
    """Every memory expectation of the case, judged per anchor group on the captured context."""
    if not expectations:
        return []
    context = captured_context(runs)
    if context is None:
        return not_graded(expectations, NO_RUN_DEBUG)
    rows: dict[int, ExpectationResult] = {}
    groups: dict[Anchor, list[int]] = {}
    for i, e in enumerate(expectations):
        groups.setdefault(e.anchor or "probe", []).append(i)
    for anchor, indices in groups.items():
        claims = [expectations[i].text for i in indices]
        prompt = memory_prompt(context, anchor, claims)
        verdicts = await judge.judge_expectations(MEMORY_SYSTEM, prompt, len(claims))
        group = [ExpectationResult(kind="memory", text=claims[n], verdict=j.verdict, attribution=j.attribution,
                                   reason=j.reason) for n, j in enumerate(verdicts)]
        group[0].judge_input = {"system": MEMORY_SYSTEM, "prompt": prompt, "count": len(claims), "texts": claims,
                                "kinds": ["memory"] * len(claims), "partial": True}
        rows.update(zip(indices, group, strict=True))
    return [rows[i] for i in range(len(expectations))]
