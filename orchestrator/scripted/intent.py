"""The scripted agent's answer to an intent-classification request (the agents-exam tier).

When the opening turn asks for a classification ending in a fenced ```` ```intent ```` block (the
preamble of :mod:`orchestrator.cases.intent`, or any prompt that asks for such a block), the agent
builds nothing: it classifies the request — the last line of the turn, after the instructions —
with a few deterministic rules of thumb and ends its reply with the block, so an agents-exam case
is graded offline. The rules read the request's words only (no case slugs): a question that asks
for nothing to be built (or any question opening with what / how / which / why) is out of scope; numbered or "and separately" parts are classified one by
one; chat, memory, investigation or open-ended judgment makes a part agent-anchored; an agent named
inside a scheduled or triggered flow makes it workflow-anchored with an embedded agent; anything
else is a workflow. The answer is a stand-in's, right or wrong: the grader decides.
"""

from __future__ import annotations

import json
import re

_ASKS_FOR_BLOCK = re.compile(r"```intent\b")
_PARTS = re.compile(r"(?:^|\s)\d\)\s*|\band separately\b", re.I)
_AGENTIC = re.compile(r"\b(?:chat\w*|tutor|remember\w*|memory|investigat\w*|decides?|judg\w*|learns?|"
                      r"assistant|proactive\w*|coordinat\w*)\b", re.I)
_AGENT_WORD = re.compile(r"\bagent\b", re.I)
_FLOW = re.compile(r"\b(?:every|each|when|whenever|daily|weekly|schedule\w*|for each)\b", re.I)
_BUILD_WORDS = re.compile(r"\b(?:build|create|make|set up|automate|notify|send|post|watch)\b", re.I)
_QUESTION = re.compile(r"^\s*(?:what|how|which|why|is|are|do|does|can you)\b", re.I)
_VAGUE = re.compile(r"^\s*(?:help me|handle|deal with)\b|\bimportant\b", re.I)


def asks_for_intent_block(opening: str) -> bool:
    """The opening turn wants the reply to end with a fenced ``intent`` block."""
    return bool(_ASKS_FOR_BLOCK.search(opening))


def request_of(opening: str) -> str:
    """The request under classification: the last non-empty line of the turn."""
    lines = [line.strip() for line in opening.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def classify(part: str) -> dict[str, object]:
    """One request (or part) classified by wording: a question is ``out-of-scope``, a vague ask
    ``needs-clarification``, else agent- or workflow-anchored with ``embeds_other``."""
    text = part.strip()
    if text.endswith("?") and (_QUESTION.search(text) or not _BUILD_WORDS.search(text)):
        return {"anchor": "out-of-scope", "embeds_other": "n/a"}
    if _VAGUE.search(text) and not _FLOW.search(text):
        return {"anchor": "needs-clarification", "embeds_other": "n/a"}
    agentic = bool(_AGENTIC.search(text))
    named_agent = bool(_AGENT_WORD.search(text))
    if named_agent and _FLOW.search(text) and not agentic:
        return {"anchor": "workflow-anchored", "embeds_other": True}
    if agentic or named_agent:
        return {"anchor": "agent-anchored", "embeds_other": bool(re.search(r"\bworkflows?\b", text, re.I))}
    return {"anchor": "workflow-anchored", "embeds_other": False}


def intent_answer(opening: str) -> str:
    """The reply: a short justification, then the fenced block (one classification, or parts)."""
    request = request_of(opening)
    parts = [p.strip(" .;,") for p in _PARTS.split(request) if p and p.strip(" .;,")]
    if len(parts) > 1:
        classes = [classify(p) for p in parts]
        block: dict[str, object] = {"parts": classes}
        why = "; ".join(f"part {i + 1} is {c['anchor']}" for i, c in enumerate(classes))
    else:
        block = classify(request)
        why = f"the request is {block['anchor']}"
    return (f"I did not build anything. Classification: {why}, judged from who owns the control flow.\n\n"
            f"```intent\n{json.dumps(block)}\n```")
