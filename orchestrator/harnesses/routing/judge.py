"""The routing judge and the rules around it.

*Committing calls* (n8n's ``routing/route-rules.ts``): only a call that can pick a route is shown to
the judge while the trial runs — ``build-agent`` (not ``operation: exploring``), ``build-workflow``,
``create-tasks``, ``ask-user``, ``nodes`` ``execute``, ``executions`` ``run``/``debug``/``stop``,
``data-tables`` row writes and deletes (not ``list``/``get``/``query``/``schema``, nor schema set-up:
``create``/``add-column``/``rename-column``/``delete-column``), and ``workflows`` actions other than
its reads (``list``, ``get``, ``get-as-code``, ``node-usage``, ``list-versions``, ``validate``).
Loading skills or tools, docs, nodes, credentials and web reads skip the judge. Only the
orchestrator's own calls count: sub-agents act on its choice.

The judge (our prompt; n8n's ``routing/judge.ts`` for what it decides) never sees the user's
message: it reads what the Assistant did — its text, its calls, the user's answers to question
cards — and answers ``{reason, decision: continue|stop, route, steer}``. While the turn runs it may
stop the trial once a route is picked; when the turn ended it must pick one. Two attempts; a judge
that fails leaves the check undecided (the next committing call, or the end of the turn, decides).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestrator.harnesses.common import json_object
from orchestrator.verify.judge import Judge

#: Must equal :data:`orchestrator.scripted.routing.JUDGE_MARKER` (a test holds them together).
JUDGE_MARKER = "[n8n-eval routing judge]"
ROUTE_VALUES = ("agent", "workflow", "one-off", "debug", "multi", "clarify", "answer", "decline", "none")
STEERS = ("agent", "workflow", "both", "none")
ATTEMPTS = 2
MAX_STEP_CHARS = 3_000

_DATA_TABLE_READS = frozenset({"list", "get", "query", "schema"})
_DATA_TABLE_SETUP = frozenset({"create", "add-column", "rename-column", "delete-column"})
_WORKFLOW_READS = frozenset({"list", "get", "get-as-code", "node-usage", "list-versions", "validate"})
_EXECUTION_COMMITS = frozenset({"run", "debug", "stop"})


def committing(tool: str, args: dict[str, Any]) -> bool:
    """Whether a tool call commits the agent to a route (a build, a plan, a question, an execution or
    a write), so the judge is asked before it runs; reads are not."""
    action = args.get("action") if isinstance(args.get("action"), str) else None
    if tool == "build-agent":
        return args.get("operation") != "exploring"
    if tool in ("build-workflow", "create-tasks", "ask-user"):
        return True
    if tool == "nodes":
        return action == "execute"
    if tool == "executions":
        return action in _EXECUTION_COMMITS
    if tool == "data-tables":
        return action is not None and action not in _DATA_TABLE_READS and action not in _DATA_TABLE_SETUP
    if tool == "workflows":
        return action is not None and action not in _WORKFLOW_READS
    return False


def is_orchestrator(agent_id: str | None) -> bool:
    """The lane's orchestrator agent (``orchestrator-<runId>`` on n8n 2.41.1; no id on older events)."""
    return agent_id is None or agent_id.startswith(("orchestrator", "n8n-instance-agent"))


SYSTEM_PROMPT = f"""{JUDGE_MARKER}
You watch the n8n Assistant handle one request. You are not shown the request, only what the
Assistant did: its text and its tool calls in order, and the user's answers to its question cards.
Decide whether it has picked a route.

n8n builds two artifacts. A workflow: a trigger and a fixed graph of nodes that runs the same way
each time (an "AI Agent" node inside it keeps it a workflow). An Agent: a standalone n8n Agent from
the Agent Builder, with instructions, tools and memory, for conversations or an ongoing role.

Routes:
- agent: it starts building or changing an Agent.
- workflow: it starts building or changing a workflow the user keeps and runs again later.
- one-off: it does a task once, now, with an effect (runs a node or workflow, writes or deletes data,
  publishes or deletes a workflow). A workflow built only to run once is one-off. Opening a setup
  card for credentials is not one-off.
- debug: it looks for why a run failed or went wrong (reads the run's executions, or the workflow or
  Agent to find the cause).
- multi: it plans two or more separate pieces of work (two workflows, an Agent and a workflow).
- clarify: it asks the user for a decision or a missing detail and waits (a question card, or a
  reply that ends with questions it needs answered first).
- answer: it gives information, instructions or a result and needs nothing from the user (an
  optional offer at the end is still an answer).
- decline: it refuses, or says it cannot help (it may suggest something else).
- none: none of these.

Decision: continue while it only explores (loading skills or tools, searching docs or nodes,
reading workflows, tables or credentials, creating an empty table) or when the latest call could
still end on more than one route; stop as soon as the latest call picks a route (a build starts, a
task with an effect runs, tasks are planned, a failure is looked into, the user is asked), or its
text says what it will build or do. When the turn has ended, stop and pick the route from all it did.

Steer, the artifact it pushes the user toward: agent, workflow, both (it offers both as real
options), or none (neither: it asks about the goal, the data, the channel or the timing, or it only
answers or declines). Judge what it did, not what it should have done; the words "agent" or "bot"
alone decide nothing.

Answer with one JSON object and no other text:
{{"reason": "two or three sentences", "decision": "continue" | "stop", "route": "...", "steer": "..."}}"""


@dataclass(frozen=True)
class RouteVerdict:
    decision: str
    route: str
    steer: str
    reason: str


def _clip(text: str) -> str:
    return text if len(text) <= MAX_STEP_CHARS else f"{text[:MAX_STEP_CHARS]}… [{len(text) - MAX_STEP_CHARS} more characters]"


def render_trace(steps: list[dict[str, Any]], end_status: str | None = None) -> str:
    """What the judge reads: the trial's steps (text, answers, numbered tool calls) and whether the turn
    has ended or a call waits for a decision."""
    lines, number = [], 0
    for step in steps:
        if step["kind"] == "text":
            lines.append(f"Assistant text: {_clip(step['text'])}")
        elif step["kind"] == "answer":
            lines.append(f"User answer: {_clip(json.dumps(step['answer'], default=str))}")
        else:
            number += 1
            lines.append(f"Tool call {number}: {step['tool']} {_clip(json.dumps(step.get('args') or {}, default=str))}")
    footer = (f"The turn has ended (status: {end_status}). Stop and pick the route." if end_status else
              "The turn is still running; the last tool call has not run yet. Decide: stop or continue.")
    return "<trace>\n" + ("\n".join(lines) or "(nothing)") + f"\n</trace>\n\n{footer}"


def parse_verdict(text: str) -> RouteVerdict | None:
    """The judge's reply as a :class:`RouteVerdict`, or None when it is not one (a bad decision, route or
    steer)."""
    data = json_object(text)
    if data is None or data.get("decision") not in ("continue", "stop") \
            or data.get("route") not in ROUTE_VALUES or data.get("steer") not in STEERS:
        return None
    return RouteVerdict(data["decision"], data["route"], data["steer"], str(data.get("reason") or ""))


class RoutingJudge:
    """One judge per trial builder (on the run's model route); :meth:`decide` never raises."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge

    async def decide(self, steps: list[dict[str, Any]], end_status: str | None = None) -> tuple[RouteVerdict | None, str | None]:
        """The verdict, or None and why not."""
        prompt = render_trace(steps, end_status)
        last = "no attempt"
        for _ in range(ATTEMPTS):
            try:
                text = await self.judge.ask(SYSTEM_PROMPT, prompt)
            except Exception as exc:  # an outage or timeout: the attempt failed
                last = f"{type(exc).__name__}: {exc}"[:300]
                continue
            verdict = parse_verdict(text)
            if verdict is not None:
                return verdict, None
            last = "the reply was not the verdict asked for"
        return None, f"routing judge failed: {last}"

    async def aclose(self) -> None:
        await self.judge.aclose()
