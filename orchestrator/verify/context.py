"""The agent's captured context (from the build's run debug), and the case's ``contextAssertions``.

n8n grades context cases on what the model was given, not on what it said
(``harness/context-capture.ts``, ``harness/context-assertions.ts`` at 135abd20 on n8n's
``context-hack-eval-prep`` branch; ``harness/memory-context.ts`` at aafa6938). Here:

- **the graded run** is the last run (by ``startedAt``) with at least one step — a follow-up turn is
  worded by the user proxy, so the run is picked structurally, not by its text;
- **a snapshot** has three tiers: the observation block (the ``<observations>…</observations>`` the
  Observer's memory is rendered into the prompt as; None when compression never ran), the message
  window (every message, ``role`` then its text, a tool call as its name and JSON input, a tool result
  likewise), and the system prompt (the instructions without the observation block); it is gradable
  when the system prompt and the message window are both non-empty;
- **the probe** is the graded run's first step (what the agent had when the request arrived); **the
  turn end** is the newest non-empty value of each tier over the run's steps. A turn end that is not
  gradable means nothing was captured;
- **a context assertion** is an exact, case-insensitive substring search of its ``text`` over the
  tiers, untruncated, no judge: ``mustAppear`` (default true) passes when a tier holds it, ``false``
  when none does; one unit per assertion, labelled ``context contains|excludes "<text>"`` (with
  `` [by turn end]`` and `` (<note>)``), kind ``context``. A probe claim that misses is checked at the
  turn end too, to say whether the agent re-derived it. No capture, or no probe for a probe claim:
  ``incomplete``. Measurements, not judgements: never re-attributed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.cases.model import ContextAssertion
from orchestrator.domain import Verdict
from orchestrator.n8n.run_debug import step_instructions
from orchestrator.results.model import ExpectationResult

Anchor = Literal["probe", "turn-end"]
_OBSERVATIONS = re.compile(r"<observations>(?P<body>[\s\S]*?)</observations>", re.I)
TIER_OBSERVATIONS, TIER_MESSAGES, TIER_SYSTEM = "observation block", "message window", "system prompt"

NO_CAPTURE = "not checked — no run debug was captured for this thread, so there was no context state to search"
NO_PROBE = ("not checked — the graded turn captured no usable state at the probe, so a retention claim cannot be "
            "answered")
NO_THREAD = "not judged — this run built no instance-ai thread, so no context state was captured to grade"
NO_AGENT_OUTPUT = "not judged — the build produced no agent output, so there was nothing to grade"


Window = tuple[tuple[str, tuple[str, ...]], ...]  # (role, its rendered parts) per message


def render_window(window: Window, part_limit: int | None = None) -> str:
    """The message window as text: each message as its role, then its parts (each cut at
    ``part_limit`` characters when given)."""
    def cut(part: str) -> str:
        return part if part_limit is None or len(part) <= part_limit else part[:part_limit] + "…[payload truncated]"
    return "\n\n".join(f"{role}\n" + "\n".join(cut(p) for p in parts) for role, parts in window)


@dataclass(frozen=True)
class Snapshot:
    """What the agent had at one moment: the three tiers."""

    observations: str | None
    window: Window
    system: str

    @property
    def messages(self) -> str:
        """The message window rendered as text (the judge's "message window" tier)."""
        return render_window(self.window)

    @property
    def gradable(self) -> bool:
        """Both the system prompt and the message window are non-empty (else the memory judge has nothing
        to grade)."""
        return bool(self.system.strip() and self.messages.strip())

    def tiers(self) -> dict[str, str]:
        """The tiers by name, the observation block first when the step had one."""
        found = {TIER_MESSAGES: self.messages, TIER_SYSTEM: self.system}
        if self.observations is not None:
            found = {TIER_OBSERVATIONS: self.observations, **found}
        return found


@dataclass(frozen=True)
class CapturedContext:
    """The graded run's snapshots and the capture's counts (the memory judge's ground truth)."""

    probe: Snapshot | None
    turn_end: Snapshot
    runs: int
    steps: int
    steps_with_observations: int

    def at(self, anchor: Anchor) -> Snapshot | None:
        """The snapshot an anchor grades: the turn's end, or the probe (None when no probe was captured)."""
        return self.turn_end if anchor == "turn-end" else self.probe


def render_segment(segment: Any) -> str:
    """One message content part as text: text and reasoning as they are, a tool call or result as
    ``[<type>: <name>] <payload JSON>``."""
    if isinstance(segment, str):
        return segment
    if not isinstance(segment, dict):
        return ""
    kind = str(segment.get("type") or "")
    if kind in ("text", "reasoning"):
        return str(segment.get("text") or "")
    name = segment.get("toolName") or segment.get("name") or segment.get("label") or ""
    payload = segment.get("input", segment.get("output", segment.get("args", segment.get("result"))))
    body = payload if isinstance(payload, str) else json.dumps(payload, default=str, ensure_ascii=False)
    return f"[{kind}: {name}] {body}"


def message_window(messages: Any) -> Window:
    """The step's messages as (role, rendered parts)."""
    out = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        parts = [content] if isinstance(content, str) else content if isinstance(content, list) else []
        out.append((str(message.get("role") or "?"), tuple(t for t in (render_segment(p) for p in parts) if t)))
    return tuple(out)


def snapshot_of(step: dict[str, Any]) -> Snapshot:
    """One agent step's snapshot: its observation block (cut out of the instructions), its message
    window and the rest of its instructions as the system prompt."""
    given = step.get("input") if isinstance(step.get("input"), dict) else {}
    prompt = step_instructions(given or {})
    found = _OBSERVATIONS.search(prompt)
    observations = found.group("body").strip() if found else None
    system = _OBSERVATIONS.sub("", prompt).strip()
    return Snapshot(observations or None, message_window((given or {}).get("messages")), system)


def _step_number(step: dict[str, Any]) -> int:
    number = step.get("stepNumber")
    return number if isinstance(number, int) else 0


def captured_context(runs: list[dict[str, Any]] | None) -> CapturedContext | None:
    """The graded run's probe and turn end (module doc), or None when nothing gradable was captured."""
    with_steps = [r for r in runs or [] if r.get("steps")]
    if not with_steps:
        return None
    graded = max(with_steps, key=lambda r: r.get("startedAt") or 0)
    steps = sorted((s for s in graded.get("steps") or [] if isinstance(s, dict)), key=_step_number)
    snaps = [snapshot_of(s) for s in steps]
    turn_end = Snapshot(next((s.observations for s in reversed(snaps) if s.observations), None),
                        next((s.window for s in reversed(snaps) if s.window), ()),
                        next((s.system for s in reversed(snaps) if s.system), ""))
    if not turn_end.gradable:
        return None
    all_steps = [snapshot_of(s) for r in with_steps for s in r.get("steps") or [] if isinstance(s, dict)]
    return CapturedContext(probe=snaps[0] if snaps and snaps[0].gradable else None, turn_end=turn_end,
                           runs=len(with_steps), steps=len(all_steps),
                           steps_with_observations=sum(1 for s in all_steps if s.observations))


def label(assertion: ContextAssertion) -> str:
    """The assertion's unit label (its identity across iterations)."""
    verb = "excludes" if assertion.must_appear is False else "contains"
    text = f'context {verb} "{assertion.text}"'
    if assertion.anchor == "turn-end":
        text += " [by turn end]"
    if assertion.note:
        text += f" ({assertion.note})"
    return text


def _holding(snapshot: Snapshot, needle: str) -> list[str]:
    wanted = needle.lower()
    return [tier for tier, value in snapshot.tiers().items() if wanted in value.lower()]


def check_assertion(assertion: ContextAssertion, context: CapturedContext | None) -> ExpectationResult:
    """One assertion's verdict (module doc)."""
    name = label(assertion)
    anchor: Anchor = assertion.anchor or "probe"
    if context is None:
        return ExpectationResult(kind="context", text=name, verdict=Verdict.incomplete, reason=NO_CAPTURE)
    snapshot = context.at(anchor)
    if snapshot is None:
        return ExpectationResult(kind="context", text=name, verdict=Verdict.incomplete, reason=NO_PROBE)
    where = _holding(snapshot, assertion.text)
    moment = "at the probe" if anchor == "probe" else "by the end of the turn"
    if assertion.must_appear is False:
        if not where:
            return ExpectationResult(kind="context", text=name, verdict=Verdict.passed,
                                     reason=f"correctly absent from every context tier {moment}")
        return ExpectationResult(kind="context", text=name, verdict=Verdict.failed,
                                 reason=f"still present {moment} in: {', '.join(where)}")
    if where:
        reason = (f"retained — present at the probe in: {', '.join(where)}" if anchor == "probe" else
                  f"present by the end of the turn in: {', '.join(where)} — carried in or fetched during it")
        return ExpectationResult(kind="context", text=name, verdict=Verdict.passed, reason=reason)
    if anchor == "probe":
        later = _holding(context.turn_end, assertion.text)
        reason = (f"NOT retained — absent at the probe, but present by the end of the turn in: {', '.join(later)}. "
                  "The agent re-derived it rather than carrying it forward." if later
                  else "not present at the probe, nor anywhere by the end of the turn")
    else:
        reason = "not present anywhere by the end of the turn"
    return ExpectationResult(kind="context", text=name, verdict=Verdict.failed, reason=reason)


def check_context_assertions(assertions: list[ContextAssertion],
                             runs: list[dict[str, Any]] | None) -> list[ExpectationResult]:
    """Every assertion of the case against the build's captured run debug."""
    if not assertions:
        return []
    context = captured_context(runs)
    return [check_assertion(a, context) for a in assertions]


def not_graded(assertions: list[ContextAssertion], reason: str) -> list[ExpectationResult]:
    """Every assertion ``incomplete`` with ``reason`` (no thread, no agent output)."""
    return [ExpectationResult(kind="context", text=label(a), verdict=Verdict.incomplete, reason=reason)
            for a in assertions]
