"""Scripted parts of ``orchestrator routing``: the routing judge, and two routes the Instance AI
agent script (:mod:`orchestrator.scripted.instance_ai`) does not take by itself.

**The judge** (:mod:`orchestrator.harnesses.routing.judge`'s requests, recognised by
:data:`JUDGE_MARKER`) reads the trace (``Assistant text: …``, ``Tool call N: <tool> <args>``,
``User answer: …``) and decides by fixed rules:

- while the turn runs, the last call decides: ``build-agent`` → agent; ``create-tasks`` → multi;
  ``ask-user`` → clarify; ``build-workflow`` → multi when the Assistant's text plans two or more
  separate pieces of work, one-off when it says the workflow runs once, else workflow; a run or a
  write (``executions run/stop``, ``nodes execute``, row writes, publishing or deleting a workflow)
  → one-off; ``executions debug`` → debug; anything else (``workflows setup`` opens a credential
  card: not one-off) → continue;
- when the turn has ended: the last call that decides as above; else reading executions → debug;
  else the last text: a refusal → decline, a question → clarify, anything else → answer.

The steer follows the words of the question or text: an Agent's words → agent, a workflow's (nodes,
steps, workflow) → workflow, both → both, else none.

**The agent's routes** (one dispatch line in ``demo_script``, before the agent script): a request
to break into something is declined in text; a request for two separate automations is planned as
such in text, then built as the agent script builds (the judge stops it at the first build).
"""

from __future__ import annotations

import json
import re
from typing import Any

from orchestrator.scripted.instance_ai import system_text, user_texts
from orchestrator.scripted.replies import Action, Reply, Script, TextBlock, ToolUseBlock, text_reply

#: Must equal :data:`orchestrator.harnesses.routing.judge.JUDGE_MARKER` (a test holds them together).
JUDGE_MARKER = "[n8n-eval routing judge]"

_CALL = re.compile(r"^Tool call \d+: (?P<tool>\S+) (?P<args>.*)$")
_MULTI = re.compile(r"\b(two|three|several) (separate )?(workflows|automations|pieces of work)\b|"
                    r"\ban agent and a workflow\b", re.I)
_ONCE = re.compile(r"\b(run it once|just once|one-off|only once)\b", re.I)
_REFUSAL = re.compile(r"\b(can'?t help|cannot help|won'?t help|not something I (?:can|will) do)\b", re.I)
_AGENT_WORDS = re.compile(r"\bagent\b", re.I)
_WORKFLOW_WORDS = re.compile(r"\b(workflow|node|nodes|step|steps)\b", re.I)
_ONE_OFF_WORKFLOW_ACTIONS = frozenset({"publish", "unpublish", "delete", "archive", "activate", "deactivate", "run"})


def _user_text(request: dict[str, Any], which: int) -> str:
    texts = user_texts(request)
    return texts[which][1] if texts else ""


def is_routing_judge(request: dict[str, Any]) -> bool:
    """Whether the request is the routing judge's (its marker, no tools)."""
    return system_text(request).startswith(JUDGE_MARKER) and not request.get("tools")


def steer_of(text: str) -> str:
    """Which way a text leans: ``agent``, ``workflow``, ``both`` or ``none``."""
    agent, workflow = bool(_AGENT_WORDS.search(text)), bool(_WORKFLOW_WORDS.search(text))
    return "both" if agent and workflow else "agent" if agent else "workflow" if workflow else "none"


def route_of_call(tool: str, args: dict[str, Any], said: str) -> tuple[str, str] | None:
    """(route, steer) a call decides, or None when it does not."""
    action = args.get("action")
    if tool == "build-agent" and args.get("operation") != "exploring":
        return "agent", "agent"
    if tool == "create-tasks":
        return "multi", "none"
    if tool == "ask-user":
        return "clarify", steer_of(json.dumps(args))
    if tool == "build-workflow":
        if _MULTI.search(said):
            return "multi", "none"
        return ("one-off", "none") if _ONCE.search(said) else ("workflow", "workflow")
    if (tool == "executions" and action in ("run", "stop")) or (tool == "nodes" and action == "execute") or (
            tool == "data-tables" and action in ("insert-rows", "update-rows", "delete-rows", "delete")) or (
            tool == "workflows" and action in _ONE_OFF_WORKFLOW_ACTIONS):
        return "one-off", "none"
    if tool == "executions" and action == "debug":
        return "debug", "none"
    return None


def decide(trace: str) -> dict[str, str]:
    """The routing judge's decision on a trace: while the turn runs, stop when the latest call picks a
    route, else continue; an ended turn is routed by its calls, then by its last text."""
    ended = "The turn has ended" in trace
    texts: list[str] = []
    calls: list[tuple[str, dict[str, Any], str]] = []  # tool, args, what was said before it
    for line in trace.split("<trace>", 1)[-1].split("</trace>", 1)[0].splitlines():
        if line.startswith("Assistant text: "):
            texts.append(line[len("Assistant text: "):])
        elif match := _CALL.match(line):
            try:
                args = json.loads(match.group("args"))
            except ValueError:
                args = {}
            calls.append((match.group("tool"), args if isinstance(args, dict) else {}, " ".join(texts)))
    if not ended:
        decided = route_of_call(*calls[-1]) if calls else None
        if decided is None:
            return {"reason": "The Assistant only explored so far.", "decision": "continue", "route": "none",
                    "steer": "none"}
        return {"reason": f"The latest call ({calls[-1][0]}) picks the route.", "decision": "stop",
                "route": decided[0], "steer": decided[1]}
    for tool, args, said in reversed(calls):
        decided = route_of_call(tool, args, said)
        if decided is not None:
            return {"reason": f"The turn ended; {tool} picked the route.", "decision": "stop", "route": decided[0],
                    "steer": decided[1]}
    if any(tool == "executions" and args.get("action") in ("list", "get") for tool, args, _ in calls):
        return {"reason": "The Assistant read the executions of a failed run.", "decision": "stop", "route": "debug",
                "steer": "none"}
    last = texts[-1] if texts else ""
    if _REFUSAL.search(last):
        route = "decline"
    elif last.rstrip().endswith("?"):
        route = "clarify"
    else:
        route = "answer" if last else "none"
    steer = steer_of(last) if route == "clarify" else "none"
    return {"reason": f"The turn ended on text: {route}.", "decision": "stop", "route": route, "steer": steer}


def routing_judge(request: dict[str, Any]) -> Action:
    """The routing judge's reply for the trace in the last user message."""
    return text_reply(json.dumps(decide(_user_text(request, -1))))


# --------------------------------------------------------------------------------------------- the agent

_DECLINE = re.compile(r"\b(hack into|break into|steal|crack (?:the|their|a) password)\b", re.I)
DECLINE_TEXT = ("I can't help with that: getting into someone else's system without permission is not something "
                "I will do. I can help you automate your own accounts instead.")
MULTI_TEXT = ("This is two separate pieces of work, so I'll plan it as two separate workflows and build them one "
              "after the other.")


def _assistant_spoke(request: dict[str, Any]) -> bool:
    return any(m.get("role") == "assistant" for m in request.get("messages") or [])


def is_routing_archetype(request: dict[str, Any]) -> bool:
    """The Instance AI agent (it offers ``build-workflow``) on a request to decline or to split."""
    offered = {t.get("name") for t in request.get("tools") or [] if isinstance(t, dict)}
    opening = _user_text(request, 0)
    return "build-workflow" in offered and bool(_DECLINE.search(opening) or _MULTI.search(opening))


def routing_agent(agent: Script) -> Script:
    """Decline, or plan two workflows and then build as ``agent`` builds."""

    def script(request: dict[str, Any]) -> Action:
        if _DECLINE.search(_user_text(request, 0)):
            return text_reply(DECLINE_TEXT)
        if not _assistant_spoke(request):
            return Reply([TextBlock(MULTI_TEXT), ToolUseBlock("load_skill", {"skillId": "workflow-builder"})])
        return agent(request)

    return script
