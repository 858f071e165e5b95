"""The scripted user proxy: deterministic answers to :mod:`orchestrator.builders.instance_ai.user_proxy`'s requests.

A proxy request is recognised by its system prompt (it starts with :data:`PROXY_MARKER`); its user
message carries the state as one fenced JSON document (the screenplay, the pending stage
directions, the messages already sent, the conversation, the situation). The reply is the JSON
decision the real proxy would give, chosen by fixed rules:

- **reply** (the agent finished a run): when the agent's last message asks something (``?``), a
  pending direction that withholds a value ("… unless the agent asks. If it asks, answer: X" /
  "then say 'X'") gives X and is done — and when that direction has the user run the workflow
  themselves and the state lists ``saved_workflows``, the last saved one goes in ``run_workflow_id``; a direction that refuses ("won't provide", "skip it")
  answers that the user has none; any other question gets a neutral answer. Otherwise the next
  unsent item of a listed direction ("1. … 2. …"), else the next scripted user turn (with
  ``rename_workflow_to`` when a pending direction renames the workflow outside the chat), else stop;
- **questions** (``ask-user``): the withheld value when a direction holds one, else the first
  option (or a neutral text); a refusing direction skips them;
- **network**: denied when a pending direction denies web/network access, else approved;
- **setup**: dismissed when a pending direction defers/withholds/dismisses, else filled;
- **plan-review** / **approval**: approved.
"""

from __future__ import annotations

import json
import re
from typing import Any

from orchestrator.scripted.replies import Action, text_reply

#: Must equal :data:`orchestrator.builders.instance_ai.proxy_decision.PROXY_MARKER` (a test holds them together).
PROXY_MARKER = "[n8n-eval user proxy]"
NEUTRAL_ANSWER = "Use your best judgement and sensible defaults."
NONE_ANSWER = "I don't have one. Please skip it and carry on without it."

_FENCE = re.compile(r"```json\s*(?P<doc>\{.*\})\s*```", re.S)
_WITHHELD = re.compile(
    r"(?:if (?:it|the agent|they) asks?\b[^.:]*?[,:]?\s*|then\s+)(?:answer|say|reply|tell it)\s*:?\s*(?P<value>.+?)(?:\.(?=\s|$)|\n|$)",
    re.I | re.S)
_REFUSES = re.compile(r"won'?t provide|will not provide|has no \w+ and|never invent|skip it", re.I)
_DENIES_NETWORK = re.compile(r"\b(deny|refuse|reject|don'?t allow|do not allow)\b[^.]*\b(web|search|network|fetch|url|internet)", re.I)
_DISMISSES = re.compile(r"\b(dismiss|defer|withhold|hasn'?t decided|skip)\b", re.I)
_RUNS_IT = re.compile(r"\brun (?:it|the workflow)(?: once)? (?:yourself|themselves)\b", re.I)
_ITEM = re.compile(r"^\s*\d+[.)]\s+(?P<item>.+?)\s*$", re.M)
#: a direction that has the workflow renamed outside the chat: "… rename the workflow … to 'X' …"
_RENAMES = re.compile(r"\brenames?\b[^.]*?\bto\s+['\"“](?P<name>[^'\"”]+)['\"”]", re.I)


def is_user_proxy_request(request: dict[str, Any]) -> bool:
    """Whether the request is our user proxy's (its marker, no tools)."""
    system = request.get("system")
    if isinstance(system, list):
        system = " ".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return isinstance(system, str) and system.startswith(PROXY_MARKER) and not request.get("tools")


def proxy_state(request: dict[str, Any]) -> dict[str, Any]:
    """The JSON state document of the request's last user message ({} when there is none)."""
    for message in reversed(request.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else " ".join(
            str(b.get("text", "")) for b in content or [] if isinstance(b, dict))
        match = _FENCE.search(text)
        if match:
            try:
                doc = json.loads(match.group("doc"))
            except ValueError:
                return {}
            return doc if isinstance(doc, dict) else {}
    return {}


def withheld_value(direction: str) -> str | None:
    """The value a direction gives only when asked: ``If it asks, answer: X.`` / ``then say 'X'``."""
    if not re.search(r"\b(unless|if|when)\b[^.]*\basks?\b", direction, re.I):
        return None
    match = _WITHHELD.search(direction)
    if not match:
        return None
    value = match.group("value").strip()
    if value[:1] in "'\"“" and value[-1:] in "'\"”" and len(value) > 1:  # a quoted line: say what is inside
        value = value[1:-1]
    value = value.strip().rstrip(".").strip()
    if value.lower().startswith("you "):  # "tell it you ran it" → "I ran it"
        value = "I " + value[4:]
    return value or None


def list_items(direction: str) -> list[str]:
    """The items a direction lists, in order."""
    return [m.group("item") for m in _ITEM.finditer(direction)]


def _last_agent_text(state: dict[str, Any]) -> str:
    said = state.get("agent_said") or state.get("conversation") or []
    texts = [str(e.get("text", "")) for e in said if isinstance(e, dict) and e.get("from") == "agent" and e.get("text")]
    return texts[-1] if texts else ""


def _pending(state: dict[str, Any]) -> list[tuple[int, str]]:
    out = []
    for d in state.get("pending_directions") or []:
        if isinstance(d, dict) and isinstance(d.get("id"), int):
            out.append((d["id"], str(d.get("text", ""))))
    return out


def _decision(action: str, reason: str, *, text: str = "", answers: dict[str, str] | None = None,
              done: list[int] | None = None, run_workflow_id: str | None = None,
              rename_workflow_to: str | None = None) -> dict[str, Any]:
    out = {"action": action, "text": text, "answers": answers or {}, "reason": reason, "directions_done": done or []}
    if run_workflow_id:
        out["run_workflow_id"] = run_workflow_id
    if rename_workflow_to:
        out["rename_workflow_to"] = rename_workflow_to
    return out


def decide(state: dict[str, Any]) -> dict[str, Any]:
    """The scripted decision for one proxy request's state (see the module doc)."""
    situation = state.get("situation")
    pending = _pending(state)
    done = [int(i) for i in state.get("directions_done") or [] if isinstance(i, int)]
    withheld = [(i, v) for i, t in pending if (v := withheld_value(t))]
    refusing = [i for i, t in pending if _REFUSES.search(t)]
    if situation == "reply":
        asked = "?" in _last_agent_text(state)
        if asked and withheld:
            i, value = withheld[0]
            saved = [w for w in state.get("saved_workflows") or [] if isinstance(w, dict) and w.get("id")]
            run = str(saved[-1]["id"]) if saved and _RUNS_IT.search(dict(pending)[i]) else None
            return _decision("answer", f"the agent asked; direction {i} gives its withheld value now", text=value,
                             done=done + [i], run_workflow_id=run)
        if asked and refusing:
            return _decision("answer", f"direction {refusing[0]} refuses the value", text=NONE_ANSWER, done=done)
        if asked:
            return _decision("answer", "the agent asked a question the script does not cover", text=NEUTRAL_ANSWER,
                             done=done)
        sent = [str(s) for s in state.get("sent_messages") or []]
        for i, text in pending:
            items = list_items(text)
            unsent = [item for item in items if item not in sent]
            if unsent:
                finished = done + [i] if len(unsent) == 1 else done
                return _decision("send", f"direction {i}: the next change from its list", text=unsent[0], done=finished)
        rest = [str(s) for s in state.get("script_turns_not_yet_sent") or []]
        if rest:
            renames = [(i, m.group("name")) for i, t in pending if (m := _RENAMES.search(t))]
            if renames:  # the workflow is renamed outside the chat before this turn goes out
                i, name = renames[0]
                return _decision("send", f"direction {i}: the workflow is renamed outside the chat first", text=rest[0],
                                 done=done + [i], rename_workflow_to=name)
            return _decision("send", "the next scripted user turn is due", text=rest[0], done=done)
        return _decision("stop", "the script is exhausted and the agent asked nothing", done=done)
    if situation == "questions":
        questions = (state.get("request") or {}).get("questions") or []
        if refusing and not withheld:
            return _decision("deny", f"direction {refusing[0]} refuses to answer", done=done)
        answers: dict[str, str] = {}
        given: list[int] = []
        for q in questions:
            if not isinstance(q, dict):
                continue
            if withheld:
                i, value = withheld[0]
                answers[str(q.get("id"))] = value
                given.append(i)
            else:
                options = q.get("options") or []
                answers[str(q.get("id"))] = str(options[0]) if options else NEUTRAL_ANSWER
        reason = f"direction {given[0]} gives its withheld value to the question" if given else "first option of each question"
        return _decision("answer", reason, answers=answers, done=done + sorted(set(given)))
    if situation == "network":
        denying = [i for i, t in pending if _DENIES_NETWORK.search(t)]
        if denying:
            return _decision("deny", f"direction {denying[0]} denies network access", done=done + denying[:1])
        return _decision("approve", "no direction restricts network access", done=done)
    if situation == "setup":
        dismissing = [i for i, t in pending if _DISMISSES.search(t)]
        if dismissing:
            return _decision("deny", f"direction {dismissing[0]} withholds the card's value", done=done)
        cards = (state.get("request") or {}).get("setupCards") or []
        answers = {f"{c.get('node')}.{p}": "placeholder" for c in cards if isinstance(c, dict)
                   for p in c.get("openParameters") or []}
        return _decision("approve", "fill the setup card", answers=answers, done=done)
    return _decision("approve", "the plan fits the script", done=done)


def user_proxy_reply(request: dict[str, Any]) -> Action:
    """The user proxy's decision for the state the request shows."""
    return text_reply(json.dumps(decide(proxy_state(request))))
