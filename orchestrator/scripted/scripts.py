"""Built-in scripts for :class:`~orchestrator.scripted.server.ScriptedModelServer`.

A script maps one ``POST /v1/messages`` body to an action. Scripts that hold state (counters) lock
it: the server answers requests on several threads.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

from orchestrator.scripted.replies import (
    Action,
    Hang,
    HttpError,
    Malformed,
    Reply,
    Script,
    TextBlock,
    ToolUseBlock,
    text_reply,
    tool_names,
)

# --------------------------------------------------------------------------------------------
# request helpers


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def tool_result_text(block: dict[str, Any]) -> str:
    """The text of a ``tool_result`` block (its content is a string or a list of text blocks)."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    parts = []
    for item in content or []:
        if isinstance(item, dict) and item.get("type") == "text":
            parts.append(str(item.get("text", "")))
    return "\n".join(parts)


def tool_calls(request: dict[str, Any], name: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Every earlier assistant call of tool ``name`` paired with its ``tool_result`` (None if none yet)."""
    results: dict[str, dict[str, Any]] = {}
    calls: list[dict[str, Any]] = []
    for message in request.get("messages") or []:
        for block in _blocks(message):
            if message.get("role") == "assistant" and block.get("type") == "tool_use" and block.get("name") == name:
                calls.append(block)
            elif block.get("type") == "tool_result":
                results[str(block.get("tool_use_id"))] = block
    return [(call, results.get(str(call.get("id")))) for call in calls]


def last_user_text(request: dict[str, Any]) -> str:
    """The text blocks of the request's last user message, joined."""
    for message in reversed(request.get("messages") or []):
        if message.get("role") == "user":
            return "\n".join(b.get("text", "") for b in _blocks(message) if b.get("type") == "text")
    return ""


# --------------------------------------------------------------------------------------------
# simple scripts


def text_only(text: str) -> Script:
    """Always answer ``text`` (end_turn, no tools)."""
    return lambda request: text_reply(text)


def no_trailer(text: str = "I looked at the request but did not create a workflow.") -> Script:
    """A build that finishes without a ``WORKFLOW_ID=`` line."""
    return text_only(text)


def sequence(*actions: Action | Script) -> Script:
    """Answer with each action in turn (a callable is called with the request); the last one repeats."""
    if not actions:
        raise ValueError("sequence() needs at least one action")
    lock = threading.Lock()
    state = {"i": 0}

    def script(request: dict[str, Any]) -> Action:
        with lock:
            item = actions[min(state["i"], len(actions) - 1)]
            state["i"] += 1
        return item(request) if callable(item) else item

    return script


Verdict = dict[str, Any] | str | Callable[[dict[str, Any]], Any]

_EXPECTATION_LINE = re.compile(r"^(\d+)\. ", re.M)
_SCENARIO_HEADER = re.compile(r"^## Scenario (\d+)", re.M)


def judged_item_count(request: dict[str, Any]) -> int:
    """How many numbered items the judge prompt asks about (``## Expectations`` lines or scenarios)."""
    text = last_user_text(request)
    for section in ("## Expectations", "## Checks"):  # expectations judge; workflow LLM checks
        if section in text:
            text = text.split(section, 1)[1]
            return max(1, len(_EXPECTATION_LINE.findall(text)))
    return max(1, len(_SCENARIO_HEADER.findall(text)))


def verdict_list(passed: bool | list[bool] = True, reason: str = "scripted judge",
                 category: str = "builder_issue") -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A verdict callable for :func:`judge`: ``{"verdicts": [{index, pass, reason, category?}]}``
    with one entry per item the prompt numbers (``passed`` as a list sets them one by one)."""

    def make(request: dict[str, Any]) -> dict[str, Any]:
        count = judged_item_count(request)
        flags = passed if isinstance(passed, list) else [passed] * count
        items = []
        for index in range(count):
            ok = flags[min(index, len(flags) - 1)]
            item: dict[str, Any] = {"index": index, "pass": ok, "reason": reason}
            if not ok:
                item["category"] = category
            items.append(item)
        return {"verdicts": items}

    return make


def judge(*verdicts: Verdict, render: Callable[[Any], str] | None = None) -> Script:
    """A judge model: the n-th request gets the n-th verdict (the last one repeats).

    A verdict is a dict (rendered as JSON text), a ready string, or a callable of the request that
    returns either; ``render`` replaces the default ``json.dumps`` to shape the text as the judge
    parser expects. Without verdicts every numbered item passes (:func:`verdict_list`).
    """
    if not verdicts:
        verdicts = (verdict_list(True),)
    to_text = render or (lambda v: v if isinstance(v, str) else json.dumps(v))

    lock = threading.Lock()
    state = {"i": 0}

    def script(request: dict[str, Any]) -> Action:
        with lock:
            verdict = verdicts[min(state["i"], len(verdicts) - 1)]
            state["i"] += 1
        if callable(verdict):
            verdict = verdict(request)
        return text_reply(to_text(verdict))

    return script


def route_by_tools(with_tools: Script, without_tools: Script) -> Script:
    """One server for both callers of a demo run: the claude CLI always offers tools, the judge never."""
    return lambda request: (with_tools if request.get("tools") else without_tools)(request)


# --------------------------------------------------------------------------------------------
# faults


def status_storm(status: int = 529, count: int | None = None, then: Script | None = None,
                 headers: dict[str, str] | None = None) -> Script:
    """The first ``count`` requests (all of them when ``None``) get an HTTP error, then ``then``."""
    fallback = then or text_only("storm over")
    lock = threading.Lock()
    state = {"n": 0}

    def script(request: dict[str, Any]) -> Action:
        with lock:
            state["n"] += 1
            stormy = count is None or state["n"] <= count
        if stormy:
            return HttpError(status, headers=dict(headers or {}))
        return fallback(request)

    return script


def hang(seconds: float = 3600.0) -> Script:
    """Accept every request and never answer (the connection drops after ``seconds``)."""
    return lambda request: Hang(seconds)


def malformed(body: bytes | None = None) -> Script:
    """Answer 200 with a body that is not JSON."""
    return lambda request: Malformed(body) if body is not None else Malformed()


# --------------------------------------------------------------------------------------------
# the builder: drives a real claude CLI through the lane's MCP server

#: A Manual Trigger feeding a Set node, in ``@n8n/workflow-sdk`` code accepted by n8n 2.41.1's
#: ``validate_workflow`` / ``create_workflow_from_code``.
HELLO_WORKFLOW_CODE = """\
import { workflow, node, trigger } from '@n8n/workflow-sdk';

const start = trigger({
  type: 'n8n-nodes-base.manualTrigger',
  version: 1,
  config: { name: 'Start' }
});

const setGreeting = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Set Greeting',
    parameters: {
      mode: 'manual',
      includeOtherFields: false,
      assignments: {
        assignments: [
          { id: 'greeting', name: 'greeting', value: 'hello from the scripted model', type: 'string' }
        ]
      }
    }
  }
});

export default workflow('scripted-hello', 'Scripted hello')
  .add(start)
  .to(setGreeting);
"""

#: The fallback after a failed create: a lone Manual Trigger.
MINIMAL_WORKFLOW_CODE = """\
import { workflow, trigger } from '@n8n/workflow-sdk';

export default workflow('scripted-minimal', 'Scripted minimal')
  .add(trigger({ type: 'n8n-nodes-base.manualTrigger', version: 1, config: { name: 'Start' } }));
"""

TOOL_SEARCH = "ToolSearch"
_WORKFLOW_ID = re.compile(r'"workflowId"\s*:\s*"([A-Za-z0-9_-]+)"')


def created_workflow_id(result_block: dict[str, Any]) -> str | None:
    """The ``workflowId`` a ``create_workflow_from_code`` tool result reports, if it succeeded."""
    if result_block.get("is_error"):
        return None
    text = tool_result_text(result_block)
    try:
        payload = json.loads(text)
    except ValueError:
        match = _WORKFLOW_ID.search(text)
        return match.group(1) if match else None
    workflow_id = payload.get("workflowId") if isinstance(payload, dict) and not payload.get("error") else None
    return workflow_id if isinstance(workflow_id, str) else None


def mcp_builder(server_name: str = "n8n-local", code: str | None = None,
                fallback_code: str | None = MINIMAL_WORKFLOW_CODE, side_text: str = "OK") -> Script:
    """Build one workflow through ``mcp__<server>__create_workflow_from_code``.

    Stateless (the conversation carries the state): no call yet → call the tool with ``code``;
    a successful result → final text ending in ``WORKFLOW_ID=<id>``; a failed result → one more
    call with ``fallback_code`` (when given), then give up with text and no trailer. Requests
    that do not offer the tool (the CLI's side calls) get ``side_text``.
    """
    tool = f"mcp__{server_name}__create_workflow_from_code"
    attempts_allowed = [code or HELLO_WORKFLOW_CODE] + ([fallback_code] if fallback_code else [])

    def script(request: dict[str, Any]) -> Action:
        calls = tool_calls(request, tool)
        offered = tool_names(request)
        if not calls and tool not in offered:
            if not offered:
                return text_reply(side_text)
            # The CLI defers MCP tools behind ToolSearch: load the schema first, as a model would.
            if TOOL_SEARCH in offered and tool in json.dumps(request.get("messages") or []) \
                    and not tool_calls(request, TOOL_SEARCH):
                return Reply([ToolUseBlock(TOOL_SEARCH, {"query": f"select:{tool}", "max_results": 1})])
            return text_reply(f"The tool {tool} is not available, so I cannot build the workflow.")
        if calls:
            last_call, last_result = calls[-1]
            if last_result is None:  # should not happen: the CLI sends the result back first
                return text_reply("Waiting for the workflow tool result.")
            workflow_id = created_workflow_id(last_result)
            if workflow_id:
                return text_reply(f"I created the workflow in n8n.\nWORKFLOW_ID={workflow_id}")
        if len(calls) >= len(attempts_allowed):
            return text_reply("creating the workflow failed every time; giving up without a workflow.")
        source = attempts_allowed[len(calls)]
        return Reply([
            TextBlock("I will create the workflow from SDK code."),
            ToolUseBlock(tool, {"code": source, "versionName": "Initial scripted workflow"}),
        ])

    return script


__all__ = [
    "HELLO_WORKFLOW_CODE",
    "MINIMAL_WORKFLOW_CODE",
    "Reply",
    "TextBlock",
    "ToolUseBlock",
    "created_workflow_id",
    "demo_script",
    "hang",
    "is_judge_request",
    "judge",
    "judged_item_count",
    "lane_mock",
    "last_user_text",
    "malformed",
    "mcp_builder",
    "no_trailer",
    "route_by_tools",
    "sequence",
    "status_storm",
    "text_only",
    "tool_calls",
    "tool_names",
    "tool_result_text",
    "verdict_list",
]


def _system_text(request: dict[str, Any]) -> str:
    system = request.get("system")
    if isinstance(system, list):
        return " ".join(b.get("text", "") for b in system if isinstance(b, dict))
    return system if isinstance(system, str) else ""


def lane_mock(body: dict[str, Any] | None = None, trigger_content: Any = None) -> Script:
    """The lane's server-side eval LLM (``execute-with-llm-mock``): a JSON plan for hint generation
    (no tools), then one ``submit_response`` tool call per intercepted HTTP request."""
    mock_body = body if body is not None else {"ok": True, "items": [{"id": 1, "name": "Ada"}]}
    plan = {"globalContext": "scripted scenario", "nodeHints": {}, "triggerContent": trigger_content or {"n": 1}}

    def script(request: dict[str, Any]) -> Action:
        if "submit_response" in tool_names(request):
            last = (request.get("messages") or [{}])[-1]
            answered = any(b.get("type") == "tool_result" for b in _blocks(last))
            if answered:
                return text_reply("submitted")
            return Reply([ToolUseBlock("submit_response", {"type": "json", "body": mock_body})])
        return text_reply(json.dumps(plan))

    return script


def is_judge_request(request: dict[str, Any]) -> bool:
    """Our judge's prompts (:mod:`orchestrator.verify.judge`) ask for a JSON verdict list."""
    return '"verdicts"' in _system_text(request)


def demo_script(server_name: str = "n8n-local", *, judge_script: Script | None = None,
                builder: Script | None = None, agent: Script | None = None) -> Script:
    """One scripted model for a whole offline run, whichever builder runs.

    - the lane's Instance AI agent (it offers ``build-workflow``) → ``instance_ai_agent``; asked to
      set a credential up in the user's browser → ``credential_setup.browser_credential_agent``;
    - the agent builder behind ``build-agent``, and an Agent an execution scenario runs
      (:mod:`orchestrator.scripted.agents`);
    - the lane's eval mock per HTTP request (``submit_response``) → :func:`lane_mock`;
    - any other caller with tools (the claude CLI of the ``mcp`` builder) → :func:`mcp_builder`;
    - no tools: the user proxy (:mod:`orchestrator.scripted.user_proxy`), our memory judge (on the
      literals of each claim, :mod:`orchestrator.scripted.memory_judge`), our judge (passes, or
      ``judge_script``), the thread-title generator (a title), the
      mock planners (a JSON plan).
    """
    from orchestrator.scripted import agents as ag
    from orchestrator.scripted import credential_setup as cs
    from orchestrator.scripted import instance_ai as ia
    from orchestrator.scripted import memory_judge as mj
    from orchestrator.scripted import pairwise as pw
    from orchestrator.scripted import routing as rt
    from orchestrator.scripted import user_proxy as up

    build = builder or mcp_builder(server_name)
    chat_agent = agent or ia.instance_ai_agent()
    browser_agent = None if agent else cs.browser_credential_agent()
    grade = judge_script or judge()
    mock = lane_mock()

    def script(request: dict[str, Any]) -> Action:
        if "submit_response" in tool_names(request):
            return mock(request)
        if pw.is_pairwise_judge(request):  # orchestrator pairwise's judge panel
            return pw.pairwise_judge(request)
        if rt.is_routing_judge(request):  # orchestrator routing's judge
            return rt.routing_judge(request)
        if rt.is_routing_archetype(request):  # routes the agent script does not take: decline, multi
            return rt.routing_agent(chat_agent)(request)
        if ia.is_instance_ai_agent(request):
            if browser_agent is not None and cs.wants_browser_credential(request):
                return browser_agent(request)
            return chat_agent(request)
        if ag.is_agent_builder(request):
            return ag.agent_builder(request)
        if ag.is_agent_under_test(request):
            return ag.agent_under_test(request)
        if request.get("tools"):
            return build(request)
        if up.is_user_proxy_request(request):
            return up.user_proxy_reply(request)
        if mj.is_memory_judge_request(request):  # graded on the context it is shown (its literals)
            return mj.memory_judge(request)
        if is_judge_request(request):
            return grade(request)
        if ia.is_title_request(request):
            return ia.title_reply(request)
        if ia.is_planner_request(request):
            return ia.planner_reply(request)
        return mock(request)

    return script
