"""The scripted pairwise judge (:mod:`orchestrator.harnesses.pairwise.panel`'s requests).

A panel request is recognised by its system prompt (it starts with :data:`PANEL_MARKER`); its user
message lists the criteria under ``[DO]`` and ``[DON'T]`` and the workflow as fenced JSON. Each
criterion is decided from the node types it names — ``n8n-nodes-base.<type>``, or ``<Name> node`` /
``<Name> Trigger`` (``Manual Trigger``, ``HTTP Request node``, ``Set node``): a ``[DO]`` line passes
when every type it names is in the workflow, a ``[DON'T]`` line is violated when one is; a line
naming no node type passes. Every judge of a panel gives the same answer, so a panel's verdict
follows the workflow alone.
"""

from __future__ import annotations

import json
import re
from typing import Any

from orchestrator.scripted.instance_ai import system_text, user_texts
from orchestrator.scripted.replies import Action, text_reply

#: Must equal :data:`orchestrator.harnesses.pairwise.panel.PANEL_MARKER` (a test holds them together).
PANEL_MARKER = "[n8n-eval pairwise judge]"

_TYPE = re.compile(r"(?:n8n-nodes-base|@n8n/n8n-nodes-langchain)\.([A-Za-z0-9]+)")
_NAMED = re.compile(r"\b((?:[A-Z][A-Za-z0-9]*\s+)*[A-Z][A-Za-z0-9]*)\s+(node|Trigger)\b")
_FENCE = re.compile(r"```json\s*(?P<doc>\{.*\})\s*```", re.S)


def is_pairwise_judge(request: dict[str, Any]) -> bool:
    """Whether the request is a pairwise panel judge's (its marker, no tools)."""
    return system_text(request).startswith(PANEL_MARKER) and not request.get("tools")


def _prompt(request: dict[str, Any]) -> str:
    texts = user_texts(request)
    return texts[-1][1] if texts else ""


def named_types(line: str) -> set[str]:
    """The node types a criterion names, as lower-case short type names (``manualtrigger``)."""
    found = {m.group(1).lower() for m in _TYPE.finditer(line)}
    for m in _NAMED.finditer(line):
        words = m.group(1).split()
        while words and words[0].lower() in ("use", "add", "a", "an", "the", "do", "not", "dont"):
            words = words[1:]
        if words:
            name = "".join(words).lower()
            found.add(name + "trigger" if m.group(2) == "Trigger" else name)
    return found


def criteria(prompt: str) -> tuple[list[str], list[str]]:
    """The do and don't criteria of a panel prompt."""
    body = prompt.split("## Workflow", 1)[0]
    dos_part, _, donts_part = body.partition("[DON'T]")
    dos_part = dos_part.split("[DO]", 1)[-1]

    def lines(text: str) -> list[str]:
        return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]

    return lines(dos_part), lines(donts_part)


def pairwise_judge(request: dict[str, Any]) -> Action:
    """The panel judge's verdict: a criterion that names node types passes when the workflow has them
    (a don't when it has none of them)."""
    prompt = _prompt(request)
    match = _FENCE.search(prompt)
    workflow = json.loads(match.group("doc")) if match else {}
    present = {str(n.get("type", "")).rsplit(".", 1)[-1].lower() for n in workflow.get("nodes") or [] if isinstance(n, dict)}
    dos, donts = criteria(prompt)
    passes: list[dict[str, str]] = []
    violations: list[dict[str, str]] = []
    for line in dos:
        missing = named_types(line) - present
        (violations if missing else passes).append(
            {"rule": line, "justification": f"no {', '.join(sorted(missing))} node" if missing else "the workflow has it"})
    for line in donts:
        there = named_types(line) & present
        (violations if there else passes).append(
            {"rule": line, "justification": f"the workflow has a {', '.join(sorted(there))} node" if there
             else "the workflow does not"})
    return text_reply(json.dumps({"passes": passes, "violations": violations}))
