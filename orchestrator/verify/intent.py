"""The deterministic grader of an agents-exam case's ``intentExpectation``.

As n8n's harness grades it (``build-expectations/intent.ts`` ``parseIntentBlock`` /
``gradeIntentExpectation``), with no judge call:

- the agent's reply is searched for its LAST fenced ```` ```intent ```` block (leading blanks before
  the fence and ``\\r\\n`` line ends are tolerated); the block must be a JSON object, either one
  classification ``{anchor, embeds_other}`` or ``{"parts": [...]}``;
- ``anchor`` is normalized case-insensitively (``workflow-anchored`` / ``wf-anchored`` / ``workflow``
  / ``wf`` → ``wf``; ``agent-anchored`` / ``agent`` → ``agent``; ``needs-clarification`` / ``clarify``
  / ``clarification`` → ``clarify``; ``out-of-scope`` / ``out_of_scope`` / ``meta`` →
  ``out-of-scope``); ``embeds_other`` (or ``embedsOther``) is a boolean, ``"true"`` / ``"false"``, or
  ``"n/a"`` / null / absent; anything else fails the block, naming the value;
- a produced classification matches an accepted one when the anchors agree and either the accepted
  anchor is ``clarify`` / ``out-of-scope`` (``embeds_other`` is then not compared), or the accepted
  ``embedsOther`` is ``"n/a"``, or the two ``embeds_other`` values are equal;
- ``accepts``: one unit, passed when the single classification matches any accepted one (a
  ``parts`` block fails it); ``parts``: one unit per expected part, the block must carry exactly as
  many parts (else every unit fails naming both counts), and part *i* is matched against expected
  part *i*'s ``accepts``;
- no block, or a malformed one: every unit fails (not incomplete); no agent output at all: every
  unit is incomplete ("no agent output captured").

The units are recorded as process expectations (they grade the agent's reply), named as n8n names
them: ``intent: anchor + embeds_other exact-match`` or ``intent [<label>]: …`` per part.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.cases.model import IntentAccept, IntentExpectation
from orchestrator.domain import Verdict
from orchestrator.errors import ModelCallError
from orchestrator.results.model import ExpectationResult

NO_AGENT_OUTPUT = "no agent output captured"
NO_BLOCK = "no intent block found"
UNIT_NAME = "intent: anchor + embeds_other exact-match"

_BLOCK = re.compile(r"[ \t]*```intent[ \t]*\r?\n([\s\S]*?)\r?\n?[ \t]*```")
_ANCHORS = {
    "workflow-anchored": "wf", "wf-anchored": "wf", "workflow": "wf", "wf": "wf",
    "agent-anchored": "agent", "agent": "agent",
    "needs-clarification": "clarify", "clarify": "clarify", "clarification": "clarify",
    "out-of-scope": "out-of-scope", "out_of_scope": "out-of-scope", "meta": "out-of-scope",
}
NA = "n/a"


class IntentBlockError(ModelCallError, ValueError):
    """The fenced block is there but is not a classification (the message says why)."""


@dataclass(frozen=True)
class IntentTuple:
    anchor: str
    embeds_other: bool | str  # True / False / "n/a"

    def __str__(self) -> str:
        value = self.embeds_other if isinstance(self.embeds_other, str) else str(self.embeds_other).lower()
        return f"{{anchor: {self.anchor}, embeds_other: {value}}}"


def last_intent_block(text: str) -> str | None:
    """The body of the last fenced ``intent`` block in ``text``, or None."""
    bodies = _BLOCK.findall(text)
    return bodies[-1] if bodies else None


def _anchor(raw: Any) -> str:
    anchor = _ANCHORS.get(raw.strip().lower()) if isinstance(raw, str) else None
    if anchor is None:
        raise IntentBlockError(f"unrecognized anchor value: {json.dumps(raw)}")
    return anchor


def _embeds(raw: Any) -> bool | str:
    if isinstance(raw, bool):
        return raw
    if raw is None:
        return NA
    if isinstance(raw, str) and raw.strip().lower() in ("n/a", "true", "false"):
        value = raw.strip().lower()
        return NA if value == NA else value == "true"
    raise IntentBlockError(f"unrecognized embeds_other value: {json.dumps(raw)}")


def _tuple(obj: dict[str, Any]) -> IntentTuple:
    anchor = _anchor(obj.get("anchor"))
    return IntentTuple(anchor, _embeds(obj["embeds_other"] if "embeds_other" in obj else obj.get("embedsOther")))


def parse_intent_block(text: str) -> list[IntentTuple] | IntentTuple | None:
    """The classification(s) of the reply's last ``intent`` block: one tuple, a list (a ``parts``
    block), or None when there is no block. Raises :class:`IntentBlockError` for a malformed one."""
    body = last_intent_block(text)
    if body is None:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        raise IntentBlockError("intent block is not valid JSON") from None
    if not isinstance(data, dict):
        raise IntentBlockError("intent block is not a JSON object")
    if "parts" in data:
        if not isinstance(data["parts"], list):
            raise IntentBlockError('intent block "parts" is not an array')
        if not all(isinstance(p, dict) for p in data["parts"]):
            raise IntentBlockError("intent block part is not a JSON object")
        return [_tuple(p) for p in data["parts"]]
    return _tuple(data)


def _accepted(accept: IntentAccept) -> IntentTuple:
    anchor = _ANCHORS.get(accept.anchor.strip().lower(), accept.anchor)
    raw = accept.embeds_other
    embeds: bool | str = raw if isinstance(raw, bool) else (
        raw.strip().lower() == "true" if isinstance(raw, str) and raw.strip().lower() in ("true", "false") else NA)
    return IntentTuple(anchor, embeds)


def matches(produced: IntentTuple, accepted: IntentTuple) -> bool:
    """Whether the produced intent matches an accepted one: the anchor must be equal, and so must
    ``embeds_other`` unless the accepted anchor is ``clarify``/``out-of-scope`` or it is ``n/a``."""
    if produced.anchor != accepted.anchor:
        return False
    if accepted.anchor in ("clarify", "out-of-scope") or accepted.embeds_other == NA:
        return True
    return produced.embeds_other == accepted.embeds_other


def _against(produced: IntentTuple, accepts: list[IntentAccept]) -> tuple[bool, str]:
    wanted = [_accepted(a) for a in accepts]
    if any(matches(produced, a) for a in wanted):
        return True, f"matched {produced}"
    return False, f"got {produced}; accepted: [{', '.join(str(a) for a in wanted)}]"


def unit_names(expectation: IntentExpectation) -> list[str]:
    """The result-row names of an intent expectation: one, or one per labelled part."""
    if expectation.parts is None:
        return [UNIT_NAME]
    return [UNIT_NAME if p.label is None else f"intent [{p.label}]: anchor + embeds_other exact-match"
            for p in expectation.parts]


def _row(name: str, verdict: Verdict, reason: str) -> ExpectationResult:
    return ExpectationResult(kind="process", text=name, verdict=verdict, reason=reason)


def grade_intent(expectation: IntentExpectation, final_text: str | None) -> list[ExpectationResult]:
    """One row per unit of ``expectation``, graded on the agent's reply ``final_text`` (None: the
    build left no agent output, every unit incomplete). See the module doc."""
    names = unit_names(expectation)
    if final_text is None:
        return [_row(n, Verdict.incomplete, NO_AGENT_OUTPUT) for n in names]
    try:
        parsed = parse_intent_block(final_text)
    except IntentBlockError as exc:
        return [_row(n, Verdict.failed, str(exc)) for n in names]
    if parsed is None:
        return [_row(n, Verdict.failed, NO_BLOCK) for n in names]
    if expectation.parts is not None:
        produced = parsed if isinstance(parsed, list) else [parsed]
        if len(produced) != len(expectation.parts):
            reason = f"expected {len(expectation.parts)} parts, got {len(produced)}"
            return [_row(n, Verdict.failed, reason) for n in names]
        rows = []
        for name, part, got in zip(names, expectation.parts, produced):
            ok, reason = _against(got, part.accepts)
            rows.append(_row(name, Verdict.passed if ok else Verdict.failed, reason))
        return rows
    if isinstance(parsed, list):
        return [_row(names[0], Verdict.failed, f"expected a single classification, got {len(parsed)} parts")]
    ok, reason = _against(parsed, expectation.accepts or [])
    return [_row(names[0], Verdict.passed if ok else Verdict.failed, reason)]


def agent_reply_text(entries: list[dict[str, Any]]) -> str | None:
    """Everything the agent said in the transcript (its text segments in order), or None when it
    said nothing: the last ``intent`` block of it is the one graded."""
    said = [str(e.get("text") or "") for e in entries if e.get("kind") == "assistant" and str(e.get("text") or "").strip()]
    return "\n".join(said) if said else None


def intent_not_graded(expectation: IntentExpectation | None, verdict: Verdict, reason: str) -> list[ExpectationResult]:
    """Every unit of ``expectation`` with one verdict and reason (nothing was graded)."""
    return [] if expectation is None else [_row(n, verdict, reason) for n in unit_names(expectation)]
