"""The memory-expectations judge, played deterministically (offline runs).

Our memory judge (``orchestrator.verify.memory``) gets the agent's captured context — observation
block, raw message window, system prompt — then numbered claims. This script grades each claim on
that context alone, by its literals: quoted text, e-mail addresses, ``#channels`` and numbers of two
or more digits. A claim that something is absent ("no", "not", "never", "absent", "without"…) passes
when none of its literals is in the context; any other claim passes when all of them are. A claim
without literals passes (nothing to check). So a memory case can pass and fail offline on what the
lane really gave the agent.
"""

from __future__ import annotations

import json
import re
from typing import Any

from orchestrator.scripted.replies import Action, text_reply

#: How the memory judge's system prompt starts (``orchestrator.verify.memory.MEMORY_SYSTEM``).
MEMORY_JUDGE_MARK = "You grade the context state of an AI assistant"
_LITERALS = re.compile(r"\"([^\"]+)\"|(?<!\w)'([^']+)'(?!\w)|`([^`]+)`|([\w.+-]+@[\w-]+\.[\w.]+)|(#[\w-]+)"
                       r"|\b(\d{2,})\b")
_NEGATIVE = re.compile(r"\b(?:no|not|never|nothing|none|absent|without|excludes?|does not|doesn't)\b", re.I)
_ITEMS = re.compile(r"^(\d+)\. (.+)$", re.M)


def _system(request: dict[str, Any]) -> str:
    system = request.get("system")
    if isinstance(system, list):
        return " ".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return system if isinstance(system, str) else ""


def _prompt(request: dict[str, Any]) -> str:
    parts: list[str] = []
    for message in request.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        else:
            parts += [str(b.get("text", "")) for b in content or [] if isinstance(b, dict)]
    return "\n".join(parts)


def is_memory_judge_request(request: dict[str, Any]) -> bool:
    """Whether the request is our memory judge's (its system prompt starts with the judge's mark)."""
    return _system(request).startswith(MEMORY_JUDGE_MARK)


def literals(claim: str) -> list[str]:
    """The quoted literals of a claim: what must appear in the context for it to hold."""
    return [next(g for g in m.groups() if g) for m in _LITERALS.finditer(claim)]


def grade(claim: str, context: str) -> tuple[bool, str]:
    """``(passed, reason)`` for one claim against the context text (module doc)."""
    found = literals(claim)
    if not found:
        return True, "no literal to check in the claim"
    present = [lit for lit in found if lit.lower() in context.lower()]
    if _NEGATIVE.search(claim):
        return (not present, "absent from every tier" if not present else f"still present: {', '.join(present)}")
    missing = [lit for lit in found if lit not in present]
    return (not missing, f"present: {', '.join(present)}" if not missing else f"missing: {', '.join(missing)}")


def memory_judge(request: dict[str, Any]) -> Action:
    """A verdict for each numbered claim of the prompt, graded against the context block above them."""
    prompt = _prompt(request)
    context, _, listing = prompt.partition("## Expectations")
    verdicts = []
    for index, claim in _ITEMS.findall(listing):
        passed, reason = grade(claim, context)
        verdicts.append({"index": int(index), "pass": passed, "reason": reason})
    return text_reply(json.dumps({"verdicts": verdicts}))
