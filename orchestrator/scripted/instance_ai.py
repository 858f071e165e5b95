"""Scripts for the lane's own model calls on the Instance AI path (offline runs, no key).

Three callers share a lane's model route (seen on n8n 2.41.1):

- the **agent** ("orchestrator"): streamed, with the Instance AI tools (``build-workflow``,
  ``load_skill``, ``workspace_write_file`` when a sandbox is attached, …). :func:`instance_ai_agent`
  answers it statelessly from the conversation: load the ``workflow-builder`` skill once, write the
  workflow as WorkflowJSON to ``src/workflows/<slug>.workflow.json`` in the sandbox workspace
  (``workspace_write_file``; without it, inline ``sourceCode``), call ``build-workflow
  {filePath, name}``, and finish with text naming the workflow. ``build-workflow`` compiles a
  ``.json`` source by parsing it (``workflow-source-compiler.js``: ``name``, ``nodes`` and
  ``connections`` required), so no TypeScript toolchain is needed in the sandbox. A later user turn
  rebuilds the same file (an update of the bound workflow, which asks for approval);
  When the current user turn says "ask me", the agent first asks one ``ask-user`` question (a
  ``questions`` confirmation the harness answers) and mentions the answer in its final text.
  An opening turn that asks for a standalone Agent (:func:`agent_action`) gets ``build-agent
  {name, message}`` (n8n creates the Agent and announces it in ``agent-spawned``) and no workflow.
  An opening turn that asks for an evaluation gets, once the workflow is built, a config-based
  evaluation on it (:func:`config_eval_action`: ``credentials list``, ``data-tables create`` and
  ``insert-rows``, ``eval-config create``; the tool is there when the lane runs with
  ``N8N_CONFIG_EVALS_ENABLED=true``).
  An opening turn that asks for an intent classification ending in a fenced ``intent`` block
  (the agents-exam preamble) is answered with one, nothing built (:mod:`orchestrator.scripted.intent`).
  Seeded cases (:func:`seeded_action`): a turn naming a folder lists it (``workflows {action: list,
  folderPath}``); an attached workflow (the ``<thread-artifacts>`` block n8n adds) is run when the
  user asks for a run (``executions {action: run}``, which asks for confirmation), greeted with a
  question when the opening turn has no text, else edited in place (``build-workflow`` with the
  attached ``workflowId``); a seeded workflow named in the turn gets its executions listed;
  a first turn that wants someone notified without saying where gets a plain-text question instead
  of a build (:func:`clarifying_question`), and a turn that only asks something ("just tell me …",
  "unrelated question: …?") is answered without building (:func:`answers_without_building`);
  a prompt that opens a GitHub issue is built with an unset GitHub credential and then raises the
  workflow's setup card (``workflows {action: setup}``, :func:`credential_setup`); a workflow with
  random output ends its first reply asking the user to run it, and a user who says "I ran it" is
  thanked without a rebuild;
- the **thread-title generator** (no tools, "short descriptive title"): a title;
- the **eval mock planners** ("test data planner"): JSON ``{globalContext, nodeHints,
  triggerContent}`` for workflows, ``{globalContext, openingMessage, toolHints}`` for agents.

The workflow is derived from the user's opening prompt deterministically: a Manual Trigger feeding
one Set node (``n8n-nodes-base.set`` 3.4) whose fields come from the prompt when it spells them
(``status, the string "ok"``), else a greeting.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from orchestrator.scripted.intent import asks_for_intent_block, intent_answer
from orchestrator.scripted.replies import (
    BUILD_TOOL,
    Action,
    Reply,
    Script,
    TextBlock,
    ToolUseBlock,
    text_reply,
    tool_names,
)

ASK_USER = "ask-user"
LOAD_SKILL = "load_skill"
WRITE_FILE = "workspace_write_file"
BUILDER_SKILL = "workflow-builder"
MAX_BUILDS_PER_TURN = 2


# ------------------------------------------------------------------------------------------------
# reading the conversation


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def system_text(request: dict[str, Any]) -> str:
    """The request's system prompt as one string (blocks joined)."""
    system = request.get("system")
    if isinstance(system, list):
        return " ".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return system if isinstance(system, str) else ""


def user_texts(request: dict[str, Any]) -> list[tuple[int, str]]:
    """(message index, text) of every user message that carries text (not only tool results)."""
    out = []
    for index, message in enumerate(request.get("messages") or []):
        if message.get("role") != "user":
            continue
        texts = [str(b.get("text", "")) for b in _blocks(message) if b.get("type") == "text" and b.get("text")]
        if texts and not any(b.get("type") == "tool_result" for b in _blocks(message)):
            out.append((index, "\n".join(texts)))
    return out


# a tool call (an Anthropic ``tool_use`` block) and its ``tool_result`` block, None while it is pending
CallPair = tuple[dict[str, Any], dict[str, Any] | None]


def calls_since(request: dict[str, Any], start: int) -> list[CallPair]:
    """Every tool call after message ``start``, paired with its ``tool_result`` block (or None)."""
    calls: list[dict[str, Any]] = []
    results: dict[str, dict[str, Any]] = {}
    for message in (request.get("messages") or [])[start:]:
        for block in _blocks(message):
            if message.get("role") == "assistant" and block.get("type") == "tool_use":
                calls.append(block)
            elif block.get("type") == "tool_result":
                results[str(block.get("tool_use_id"))] = block
    return [(c, results.get(str(c.get("id")))) for c in calls]


def result_json(block: dict[str, Any] | None) -> dict[str, Any]:
    """A tool result's JSON object ({} when it is not JSON)."""
    if block is None:
        return {}
    content = block.get("content")
    if isinstance(content, list):
        content = "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    if isinstance(content, dict):
        return content
    try:
        value = json.loads(str(content or ""))
    except ValueError:
        match = re.search(r'"workflowId"\s*:\s*"([^"]+)"', str(content or ""))
        ok = re.search(r'"success"\s*:\s*true', str(content or ""))
        return {"workflowId": match.group(1), "success": bool(ok)} if match else {}
    return value if isinstance(value, dict) else {}


# ------------------------------------------------------------------------------------------------
# the workflow derived from the prompt

_FIELD = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_]*),\s*the\s+(?P<kind>string|number|boolean)\s+(?P<value>\"[^\"]*\"|[-\d.]+|true|false)",
    re.I,
)
_CONTEXT_TAGS = re.compile(r"<([a-z-]+)>.*?</\1>", re.S)


def clean_prompt(text: str) -> str:
    """The user's words without the context blocks n8n wraps around a message."""
    return " ".join(_CONTEXT_TAGS.sub(" ", text).split())


def prompt_fields(prompt: str) -> list[dict[str, Any]]:
    """The fields a prompt names as ``<name>, the string|number|boolean <value>``, typed, in order."""
    fields = []
    for match in _FIELD.finditer(prompt):
        kind, raw = match.group("kind").lower(), match.group("value")
        value: Any
        if kind == "string":
            value = raw.strip('"')
        elif kind == "number":
            value = float(raw) if "." in raw else int(raw)
        else:
            value = raw.lower() == "true"
        fields.append({"name": match.group("name"), "type": kind, "value": value})
    return fields


def slug_of(prompt: str) -> str:
    """A stable slug for a prompt: up to four content words and a short hash of the whole prompt."""
    words = re.findall(r"[a-z0-9]+", prompt.lower())
    stop = {"a", "an", "the", "that", "build", "create", "make", "workflow", "with", "and", "me", "please", "i", "want"}
    picked = [w for w in words if w not in stop][:4] or ["scripted"]
    return "-".join(picked) + "-" + hashlib.sha1(prompt.encode()).hexdigest()[:6]


def workflow_for(prompt: str, turns: int = 1) -> dict[str, Any]:
    """WorkflowJSON for a prompt: Manual Trigger → Set (fields from the prompt, else a greeting)."""
    fields = prompt_fields(prompt) or [
        {"name": "greeting", "type": "string", "value": "hello from the scripted model"},
    ]
    if turns > 1:
        fields.append({"name": "turns", "type": "number", "value": turns})
    slug = slug_of(prompt)
    name = "Scripted " + " ".join(slug.split("-")[:-1])
    assignments = [{"id": f"f{i}", "name": f["name"], "value": f["value"], "type": f["type"]} for i, f in enumerate(fields)]
    return {
        "name": name[:100],
        "nodes": [
            {"id": "0f5532f9-36ba-4bef-86c7-30d607400b15", "name": "Start", "type": "n8n-nodes-base.manualTrigger",
             "typeVersion": 1, "position": [0, 0], "parameters": {}},
            {"id": "2b1cc2d2-1b2a-4c44-9a8e-6f3c7b1e0d21", "name": "Set Fields", "type": "n8n-nodes-base.set",
             "typeVersion": 3.4, "position": [220, 0],
             "parameters": {"mode": "manual", "includeOtherFields": False,
                            "assignments": {"assignments": assignments}, "options": {}}},
        ],
        "connections": {"Start": {"main": [[{"node": "Set Fields", "type": "main", "index": 0}]]}},
    }


# ------------------------------------------------------------------------------------------------
# the scripts


def is_instance_ai_agent(request: dict[str, Any]) -> bool:
    """Whether the request is the Instance AI agent's (it offers the build tool)."""
    return BUILD_TOOL in tool_names(request)


def instance_ai_agent(*, load_skill: bool = True, use_workspace: bool = True) -> Script:
    """The Instance AI agent, stateless (the conversation carries the state); see the module doc."""

    def script(request: dict[str, Any]) -> Action:
        offered = set(tool_names(request))
        texts = user_texts(request)
        if not texts:
            return text_reply("There is no request to work on.")
        turn_start, turn_text = texts[-1]
        opening = clean_prompt(texts[0][1])
        everything = calls_since(request, 0)
        this_turn = calls_since(request, turn_start)
        if load_skill and LOAD_SKILL in offered and not any(c.get("name") == LOAD_SKILL for c, _ in everything):
            return Reply([ToolUseBlock(LOAD_SKILL, {"skillId": BUILDER_SKILL})])
        builds = [(c, r) for c, r in this_turn if c.get("name") == BUILD_TOOL]
        pending = [c for c, r in this_turn if r is None]
        if pending:  # a call without its result (should not happen): wait for it by saying so
            return text_reply("Waiting for the previous tool call to finish.")
        if len(texts) == 1 and asks_for_intent_block(texts[0][1]):
            return text_reply(intent_answer(texts[0][1]))
        seeded = seeded_action(request, turn_text, this_turn, offered)
        if seeded is not None:
            return seeded
        agent = agent_action(opening, this_turn, offered) if len(texts) == 1 else None
        if agent is not None:
            return agent
        setup = credential_setup(opening, everything, offered)
        if isinstance(setup, Reply):
            return setup
        if not builds and not any(c.get("name") == WRITE_FILE for c, _ in this_turn):
            early = before_building(texts, turn_text)
            if early is not None:
                return early
        asked = [(c, r) for c, r in this_turn if c.get("name") == ASK_USER]
        if ASK_USER in offered and "ask me" in clean_prompt(turn_text).lower() and not asked:
            return Reply([ToolUseBlock(ASK_USER, {"introMessage": "One question before I build.", "questions": [
                {"id": "style", "question": "Which output style do you want?", "type": "single",
                 "options": ["Compact", "Detailed"]}]})])
        answer = ""
        if asked:
            got = result_json(asked[-1][1])
            picked = [o for a in got.get("answers") or [] if isinstance(a, dict) for o in a.get("selectedOptions") or []]
            answer = f" You chose: {', '.join(picked) or 'no option'}."
        if builds:
            result = result_json(builds[-1][1])
            resync = resync_after_external_edit(result, this_turn)
            if isinstance(resync, Reply):
                return resync
            if isinstance(resync, str):  # re-apply the change onto the saved state: keep its name
                workflow = workflow_for(opening, turns=len(texts))
                workflow["name"] = resync
                return Reply([ToolUseBlock(BUILD_TOOL, {"filePath": f"src/workflows/{slug_of(opening)}.workflow.json",
                                                        "name": resync, "sourceCode": json.dumps(workflow, indent=2)})])
            if result.get("success") is True and len(texts) == 1:
                evaluation = config_eval_action(opening, str(result.get("workflowId", "")), this_turn, offered)
                if evaluation is not None:
                    return evaluation
            if result.get("success") is True:
                wf = result.get("workflowId", "")
                name = result.get("workflowName") or workflow_for(opening)["name"]
                if isinstance(setup, dict):
                    return text_reply(f"I built the workflow \"{name}\" (id {wf}): a Schedule Trigger followed by a "
                                      f"GitHub node that creates the issue, {setup_outcome(everything)}.")
                ask_run = " Since its output is random, could you run it once and tell me what you got?" \
                    if _RANDOM.search(opening) and len(texts) == 1 else ""
                return text_reply(f"I built the workflow \"{name}\" (id {wf}): a Manual Trigger followed by a Set node. "
                                  f"You can run it from the editor.{answer}{ask_run}")
            if len(builds) >= MAX_BUILDS_PER_TURN:
                errors = result.get("errors") or [result.get("error") or "unknown error"]
                return text_reply(f"I could not build the workflow: {'; '.join(str(e) for e in errors)[:500]}")
        workflow = setup if isinstance(setup, dict) else workflow_for(opening, turns=len(texts))
        path = f"src/workflows/{slug_of(opening)}.workflow.json"
        source = json.dumps(workflow, indent=2)
        writes = [c for c, _ in this_turn if c.get("name") == WRITE_FILE]
        if use_workspace and WRITE_FILE in offered and not writes:
            return Reply([TextBlock("I'll write the workflow file and build it."),
                          ToolUseBlock(WRITE_FILE, {"path": path, "content": source})])
        args: dict[str, Any] = {"filePath": path, "name": workflow["name"]}
        if not (use_workspace and WRITE_FILE in offered) or builds:
            args["sourceCode"] = source
        return Reply([ToolUseBlock(BUILD_TOOL, args)])

    return script


def resync_after_external_edit(result: dict[str, Any], this_turn: list[CallPair]) -> Reply | str | None:
    """A save refused because the workflow changed outside the conversation (n8n's remediation
    ``workflow_modified_externally``): read the saved workflow back (``workflows get-as-code``),
    then the name it has now, to rebuild onto it. None: nothing to resync."""
    remediation = result.get("remediation")
    if result.get("success") is True or not isinstance(remediation, dict) \
            or remediation.get("reason") != "workflow_modified_externally":
        return None
    fetched = _last(this_turn, "workflows", action="get-as-code")
    if fetched is None:
        return Reply([TextBlock("The workflow changed outside our conversation; I'll read the saved version first."),
                      ToolUseBlock("workflows", {"action": "get-as-code", "workflowId": result.get("workflowId")})])
    got = result_json(fetched[1])
    name = got.get("workflowName") or got.get("name") or _code_name(str(got.get("code") or ""))
    return str(name or result.get("workflowName") or "")


_CODE_NAME = re.compile(r"""\bname\s*:\s*['"](?P<name>[^'"]+)['"]""")


def _code_name(code: str) -> str | None:
    found = _CODE_NAME.search(code)
    return found.group("name") if found else None


# ------------------------------------------------------------------------------------------------
# standalone Agents (n8n's ``build-agent`` tool)

BUILD_AGENT = "build-agent"
_AGENT_REQUEST = re.compile(r"\b(?:create|build|make|set up|give me)\b[^.?!]*?\bagent\b", re.I)
_AGENT_NAME = re.compile(r"\b(?:called|named)\s+[\"“']?(?P<name>[A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)", re.S)


def asks_for_agent(prompt: str) -> bool:
    """The opening turn asks for a standalone Agent (not a workflow, not an AI Agent node in one)."""
    return bool(_AGENT_REQUEST.search(prompt)) and not re.search(r"\bworkflows?\b", prompt, re.I)


def agent_name(prompt: str) -> str:
    """The name the prompt gives the Agent to build, else one made from its slug (at most 60 characters)."""
    match = _AGENT_NAME.search(prompt)
    if match:
        return match.group("name")[:60]
    return ("Scripted " + " ".join(slug_of(prompt).split("-")[:-1]) + " agent")[:60]


def agent_action(prompt: str, this_turn: list[CallPair], offered: set[str]) -> Action | None:
    """Build a standalone Agent through ``build-agent`` when the opening turn asks for one; the
    builder gets the user's words as its hand-off message. None: not an agent request."""
    if BUILD_AGENT not in offered or not asks_for_agent(prompt):
        return None
    name = agent_name(prompt)
    done = _last(this_turn, BUILD_AGENT)
    if done is None:
        return Reply([TextBlock(f'I\'ll create the agent "{name}".'),
                      ToolUseBlock(BUILD_AGENT, {"name": name, "message": prompt})])
    result = result_json(done[1])
    agent_id = result.get("agentId") or "?"
    status = "created" if result.get("ok") is not False else f"created, but its builder reported: {result.get('error')}"
    return text_reply(f'I {status} the agent "{name}" (id {agent_id}); no workflow was needed.')


# ------------------------------------------------------------------------------------------------
# config-based evaluations (n8n's ``eval-config`` tool, behind the config-evals flag)

EVAL_CONFIG = "eval-config"
LOAD_TOOL = "load_tool"
DATA_TABLES = "data-tables"
CREDENTIALS_TOOL = "credentials"
#: credential types n8n's LLM-judge providers accept (``LLM_JUDGE_PROVIDERS``)
JUDGE_CREDENTIAL_TYPES = ("openAiApi", "anthropicApi", "googlePalmApi", "azureOpenAiApi", "mistralCloudApi", "groqApi")
_EVAL_REQUEST = re.compile(r"\b(?:evaluation|evaluate|eval)\b", re.I)
EVAL_COLUMNS = [{"name": "question", "type": "string"}, {"name": "expected_answer", "type": "string"}]
EVAL_ROWS = [{"question": "Say hello", "expected_answer": "hello from the scripted model"},
             {"question": "Greet the team", "expected_answer": "hello from the scripted model"}]


def asks_for_config_eval(prompt: str) -> bool:
    return bool(_EVAL_REQUEST.search(prompt))


def config_eval_action(prompt: str, workflow_id: str, this_turn: list[CallPair], offered: set[str]) -> Action | None:
    """After building the workflow, set up a config-based evaluation on it when the opening turn asks
    for one: find an LLM credential for the judge metric (``credentials list``), create the dataset
    data table and fill it (``data-tables create`` / ``insert-rows``), then ``eval-config create`` on
    the built workflow (start and end: its Set node). None: not an evaluation request, or done."""
    if not asks_for_config_eval(prompt) or not {DATA_TABLES, CREDENTIALS_TOOL} <= offered or not workflow_id:
        return None
    if EVAL_CONFIG not in offered:  # a deferred tool: loaded by name (n8n's load_tool)
        if LOAD_TOOL not in offered or _last(this_turn, LOAD_TOOL, toolName=EVAL_CONFIG) is not None:
            return None
        return Reply([TextBlock("I'll load the evaluation tool."), ToolUseBlock(LOAD_TOOL, {"toolName": EVAL_CONFIG})])
    creds = _last(this_turn, CREDENTIALS_TOOL, action="list")
    if creds is None:
        return Reply([TextBlock("Now the evaluation: first the judge model's credential."),
                      ToolUseBlock(CREDENTIALS_TOOL, {"action": "list"})])
    judge_cred = next((c for c in result_json(creds[1]).get("credentials") or []
                       if isinstance(c, dict) and c.get("type") in JUDGE_CREDENTIAL_TYPES), None)
    if judge_cred is None:
        return text_reply("I built the workflow, but there is no LLM credential for the evaluation's judge, "
                          "so I did not set up the evaluation.")
    created = _last(this_turn, DATA_TABLES, action="create")
    if created is None:
        name = ("Eval " + " ".join(slug_of(prompt).split("-")[:-1]))[:60]
        return Reply([ToolUseBlock(DATA_TABLES, {"action": "create", "name": name, "columns": EVAL_COLUMNS})])
    table = result_json(created[1]).get("table") or {}
    table_id = str(table.get("id") or "") if isinstance(table, dict) else ""
    if not table_id:
        return text_reply(f"I could not create the evaluation dataset: {result_json(created[1])}"[:500])
    if _last(this_turn, DATA_TABLES, action="insert-rows") is None:
        return Reply([ToolUseBlock(DATA_TABLES, {"action": "insert-rows", "dataTableId": table_id, "rows": EVAL_ROWS})])
    made = _last(this_turn, EVAL_CONFIG, action="create")
    if made is None:
        provider_model = "claude-haiku-4-5" if judge_cred.get("type") == "anthropicApi" else "gpt-4o-mini"
        return Reply([ToolUseBlock(EVAL_CONFIG, {
            "action": "create", "workflowId": workflow_id, "name": "Greeting correctness",
            "startNodeName": "Set Fields", "endNodeName": "Set Fields", "dataTableId": table_id,
            "metrics": [{"name": "Correctness", "preset": "correctness", "credentialId": str(judge_cred.get("id")),
                         "model": provider_model, "outputType": "numeric", "actualAnswer": "={{ $json.greeting }}",
                         "expectedAnswer": "={{ $json.expected_answer }}"}]})])
    result = result_json(made[1])
    if isinstance(result.get("config"), dict):
        return text_reply(f'I built the workflow and set up the evaluation "Greeting correctness" on it, with a '
                          f"{len(EVAL_ROWS)}-row dataset (question, expected_answer) and a correctness metric.")
    return text_reply(f"I built the workflow, but the evaluation could not be set up: {result.get('error') or result}"[:500])


# ------------------------------------------------------------------------------------------------
# the credential archetype: a GitHub issue needs a credential set up through the card

_GITHUB_ISSUE = re.compile(r"\b(?:open|create)s?\s+an\s+issue\b.*\bgithub\b|\bgithub\b.*\b(?:open|create)s?\s+an\s+issue\b", re.I | re.S)
_TITLED = re.compile(r"titled\s+['\"]([^'\"]+)['\"]", re.I)
_REPO = re.compile(r"\b([\w.-]+)/([\w.-]+)\b")
_RANDOM = re.compile(r"\brandom\b", re.I)


def credential_setup(opening: str, everything: list[CallPair], offered: set[str]) -> Reply | dict[str, Any] | None:
    """A prompt that opens a GitHub issue (None: not this archetype): the workflow is built with an
    unset GitHub credential (the dict returned), then the workflow's setup card is raised
    (``workflows {action: setup}`` for ``githubApi``, the Reply returned) for the harness to
    answer; its result decides the final words."""
    if not _GITHUB_ISSUE.search(opening) or WORKFLOWS_TOOL not in offered:
        return None
    built = [result_json(r) for c, r in everything if c.get("name") == BUILD_TOOL and result_json(r).get("success") is True]
    if built and _last(everything, WORKFLOWS_TOOL, action="setup") is None:
        return Reply([TextBlock("The workflow needs a GitHub credential; here is its setup card."),
                      ToolUseBlock(WORKFLOWS_TOOL, {"action": "setup", "workflowId": str(built[-1].get("workflowId")),
                                                    "preferNewCredentials": ["githubApi"]})])
    return github_issue_workflow(opening)


def setup_outcome(everything: list[CallPair]) -> str:
    """What the closing message says of the GitHub credential: attached when the last setup call
    succeeded and was not deferred."""
    done = _last(everything, WORKFLOWS_TOOL, action="setup")
    result = result_json(done[1]) if done else {}
    if result.get("success") is True and not result.get("deferred"):
        return "with your GitHub credential attached"
    return "the GitHub credential is still to be set up"


def github_issue_workflow(opening: str) -> dict[str, Any]:
    """The scripted GitHub "create issue" workflow for the opening prompt (title and repository taken
    from it when named)."""
    title = _TITLED.search(opening)
    repo = _REPO.search(opening)
    owner, name = (repo.group(1), repo.group(2)) if repo else ("acme", "widgets")
    issue: dict[str, Any] = {
        "id": "5d1c7f4e-2a3b-4c5d-8e9f-0a1b2c3d4e5f", "name": "Create Issue", "type": "n8n-nodes-base.github",
        "typeVersion": 1.1, "position": [220, 0],
        "parameters": {"resource": "issue", "operation": "create",
                       "owner": {"__rl": True, "mode": "name", "value": owner},
                       "repository": {"__rl": True, "mode": "name", "value": name},
                       "title": title.group(1) if title else "Scripted issue", "body": "", "labels": [], "assignees": []},
    }
    return {
        "name": "Scripted weekly GitHub issue",
        "nodes": [
            {"id": "8c2d4e6f-1a3b-4c5d-9e8f-7a6b5c4d3e2f", "name": "Every Monday", "type": "n8n-nodes-base.scheduleTrigger",
             "typeVersion": 1.2, "position": [0, 0],
             "parameters": {"rule": {"interval": [{"field": "weeks", "triggerAtDay": [1], "triggerAtHour": 9}]}}},
            issue,
        ],
        "connections": {"Every Monday": {"main": [[{"node": "Create Issue", "type": "main", "index": 0}]]}},
    }


# ------------------------------------------------------------------------------------------------
# conversation archetypes: ask before building, answer without building

_NOTIFY = re.compile(r"\b(let(?:s|ting)? (?:the team|us|me|everyone) know|notif(?:y|ies|ication)|alert the team|tell the team)\b", re.I)
_CHANNELS = re.compile(r"slack|\bteams\b|microsoft|e-?mail (?:them|us|me|the)|gmail|discord|telegram|whatsapp|\bsms\b|#\w", re.I)
_NO_BUILD = re.compile(r"just tell me|don'?t build|do not build|without building|no need to build|unrelated question", re.I)
_BUILD_WORDS = re.compile(r"\b(build|create|make|set up|setup|add|change|fix|repair|update|automate|generate|post|send|"
                          r"schedule a|modify|edit)\b", re.I)
CLARIFYING_QUESTION = "Before I build this: which chat tool and channel should the team be notified in?"


def clarifying_question(texts: list[tuple[int, str]]) -> str | None:
    """The multi-turn "asks before building" archetype: on the conversation's first turn, a prompt
    that wants someone notified without naming where gets a plain-text question instead of a build
    (the user proxy answers it; the next turn builds)."""
    if len(texts) != 1:
        return None
    prompt = clean_prompt(texts[0][1])
    if _NOTIFY.search(prompt) and not _CHANNELS.search(prompt):
        return CLARIFYING_QUESTION
    return None


def answers_without_building(turn_text: str) -> bool:
    """The "answer, don't build" archetype: the turn says so ("just tell me", "unrelated
    question", "don't build"), or it is a question that asks for nothing to be built."""
    text = clean_prompt(turn_text)
    if _NO_BUILD.search(text):
        return True
    return text.endswith("?") and not _BUILD_WORDS.search(text)


def answer_text(turn_text: str) -> str:
    """A plain answer (no question mark: the user proxy reads ``?`` as the agent asking)."""
    text = clean_prompt(turn_text).lower()
    if "cron" in text:
        body = ("pick a cron expression for calendar-shaped schedules such as weekdays at 08:30, and an interval "
                "for every-N-minutes or every-N-hours schedules.")
    else:
        body = "this is a question, not a build request, so I answered it from what I know."
    return f"No workflow needed for this, so I did not build one: {body}"


_RAN_IT = re.compile(r"^\s*I ran it\b", re.I)


def before_building(texts: list[tuple[int, str]], turn_text: str) -> Action | None:
    """What the agent says instead of building this turn, if anything (see the archetypes; a user
    who reports having run the workflow is thanked, nothing rebuilt)."""
    if len(texts) > 1 and _RAN_IT.search(clean_prompt(turn_text)):
        return text_reply("Thanks for running it yourself; I take your result as the test of the workflow.")
    question = clarifying_question(texts)
    if question is not None:
        return text_reply(question)
    if answers_without_building(turn_text):
        return text_reply(answer_text(turn_text))
    return None


def is_title_request(request: dict[str, Any]) -> bool:
    """Whether the request is n8n's thread-title call (no tools; a system prompt about a title)."""
    return not request.get("tools") and "title" in system_text(request).lower() and "conversation" in system_text(request).lower()


def title_reply(request: dict[str, Any]) -> Action:
    """A thread title from the first user prompt's first words (as JSON with an emoji when asked)."""
    texts = user_texts(request)
    prompt = clean_prompt(texts[0][1]) if texts else ""
    words = [w for w in re.findall(r"[A-Za-z0-9]+", prompt) if w.lower() not in {"build", "create", "make", "a", "the"}]
    title = " ".join(words[:4]).capitalize() or "Scripted conversation"
    if '"emoji"' in system_text(request):
        return text_reply(json.dumps({"title": title, "emoji": "🤖"}))
    return text_reply(title)


def is_planner_request(request: dict[str, Any]) -> bool:
    """Whether the request is the eval mock layer's test-data planner (no tools)."""
    return not request.get("tools") and "test data planner" in system_text(request).lower()


_TEST_SCENARIO = re.compile(r"## Test Scenario\s*\n(?P<text>.*?)(?:\n\s*##|\Z)", re.S)


def planner_reply(request: dict[str, Any], trigger_content: Any = None) -> Action:
    """The test-data planner's plan: for an Agent, the scenario's opening message; for a workflow, the
    trigger content (``trigger_content``, else a placeholder)."""
    if "openingMessage" in system_text(request):  # an Agent's: the scenario, said by the user
        texts = [t for _, t in user_texts(request)]
        found = _TEST_SCENARIO.search(texts[-1]) if texts else None
        opening = " ".join(found.group("text").split()) if found and found.group("text").strip() else ""
        plan: dict[str, Any] = {"globalContext": "scripted scenario",
                                "openingMessage": opening or "Hello, please help me with my request.", "toolHints": {}}
    else:
        plan = {"globalContext": "scripted scenario", "nodeHints": {}, "triggerContent": trigger_content or {"n": 1}}
    return text_reply(json.dumps(plan))


# ------------------------------------------------------------------------------------------------
# seeded cases (restored history, attachments, folders)

WORKFLOWS_TOOL = "workflows"
EXECUTIONS_TOOL = "executions"
_ARTIFACTS = re.compile(r"<thread-artifacts>\s*(\[.*?\])\s*\n", re.S)
_FOLDER = re.compile(r"\b(?:my|the|in)\s+([A-Z][\w&-]*(?:\s+[A-Z][\w&-]*)*)\s+folder\b")
#: a request to run (imperative "Run …"/"Execute …", or "test execution"), not "fails when I run it"
_RUN_WORDS = re.compile(r"^\s*(?:please\s+)?(?:run|execute|test)\b|\btest (?:execution|run)\b", re.I)
_SEED_NAME = re.compile(r"^(?P<base>.*) \[seed [0-9a-f]{8}\]$")


def attached_resources(text: str) -> list[dict[str, Any]]:
    """The editor hand-off n8n puts in the user message: ``<thread-artifacts>[{type, id, name?}]…``."""
    match = _ARTIFACTS.search(text)
    if not match:
        return []
    try:
        items = json.loads(match.group(1))
    except ValueError:
        return []
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def named_folder(prompt: str) -> str | None:
    """The folder the prompt names, if any."""
    match = _FOLDER.search(prompt)
    return match.group(1) if match else None


def _rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    for key in ("workflows", "executions", "data", "items", "results"):
        value = result.get(key)
        if isinstance(value, list):
            return [r for r in value if isinstance(r, dict)]
    return []


def _last(calls: list[tuple[dict[str, Any], dict[str, Any] | None]], tool: str,
          **args: Any) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    for call, result in reversed(calls):
        given = call.get("input") or {}
        if call.get("name") == tool and all(given.get(k) == v for k, v in args.items()):
            return call, result
    return None


def seeded_action(request: dict[str, Any], turn_text: str, this_turn: list[CallPair], offered: set[str]) -> Action | None:
    """What the agent does in a seeded case (None: not a seeded situation, build as usual)."""
    prompt = clean_prompt(turn_text)
    attached = attached_resources(turn_text)
    workflow = next((a for a in attached if a.get("type") == "workflow" and a.get("id")), None)
    asks = "?" in prompt or bool(re.match(r"\s*(which|what|list|show)\b", prompt, re.I))
    folder = named_folder(prompt) if asks else None  # "upload to the Reports folder" is a build request
    if folder and WORKFLOWS_TOOL in offered:
        done = _last(this_turn, WORKFLOWS_TOOL, action="list")
        if done is None:
            recursive = not re.search(r"\b(only|directly)\b", prompt, re.I)
            return Reply([ToolUseBlock(WORKFLOWS_TOOL, {"action": "list", "folderPath": folder, "recursive": recursive})])
        names = [str(r.get("name")) for r in _rows(result_json(done[1]))]
        listing = ", ".join(f'"{n}"' for n in names) or "no workflows"
        return text_reply(f"The {folder} folder holds {len(names)} workflow(s): {listing}.")
    if workflow is not None:
        wf_id, wf_name = str(workflow["id"]), str(workflow.get("name") or workflow["id"])
        if not prompt:
            return text_reply(f'I see you have "{wf_name}" open. What would you like me to change in it?')
        if _RUN_WORDS.search(prompt) or "<workflow-test-request>" in turn_text:
            if EXECUTIONS_TOOL not in offered:
                return None
            done = _last(this_turn, EXECUTIONS_TOOL, action="run")
            if done is None:
                return Reply([TextBlock(f'I\'ll run "{wf_name}" once.'),
                              ToolUseBlock(EXECUTIONS_TOOL, {"action": "run", "workflowId": wf_id})])
            result = result_json(done[1])
            status = result.get("status") or ("success" if result.get("success") else "unknown")
            return text_reply(f'I ran "{wf_name}" (execution {result.get("executionId", "?")}): status {status}.')
        return _edit_seeded(request, prompt, this_turn, offered, wf_id, wf_name)
    if asks and EXECUTIONS_TOOL in offered and WORKFLOWS_TOOL in offered and \
            re.search(r"\b(last run|broke|went wrong|failed)\b", prompt, re.I):
        listed = _last(this_turn, WORKFLOWS_TOOL, action="list")
        if listed is None:
            return Reply([ToolUseBlock(WORKFLOWS_TOOL, {"action": "list"})])
        rows = _rows(result_json(listed[1]))
        target = next((r for r in rows if (m := _SEED_NAME.match(str(r.get("name") or ""))) and m.group("base").lower() in prompt.lower()), None)
        if target is None:
            return None
        runs = _last(this_turn, EXECUTIONS_TOOL, action="list")
        if runs is None:
            return Reply([ToolUseBlock(EXECUTIONS_TOOL, {"action": "list", "workflowId": str(target.get("id")), "limit": 5})])
        executions = _rows(result_json(runs[1]))
        last = executions[0] if executions else {}
        return text_reply(f'The last run of "{target.get("name")}" (execution {last.get("id", "none")}) ended with status '
                          f'{last.get("status", "unknown")}.')
    return None


def _edit_seeded(request: dict[str, Any], prompt: str, this_turn: list[CallPair], offered: set[str], wf_id: str, wf_name: str) -> Action:
    """Rebuild the attached (seeded) workflow in place: the same id, its name, a source derived from the turn."""
    builds = [(c, r) for c, r in this_turn if c.get("name") == BUILD_TOOL]
    if builds:
        result = result_json(builds[-1][1])
        if result.get("success") is True:
            return text_reply(f'I updated "{wf_name}" (id {result.get("workflowId", wf_id)}) as you asked.')
        if len(builds) >= MAX_BUILDS_PER_TURN:
            return text_reply(f"I could not update the workflow: {result.get('errors') or result.get('error')}")
    workflow = workflow_for(prompt)
    workflow["name"] = wf_name
    path = f"src/workflows/{slug_of(wf_id)}.workflow.json"
    source = json.dumps(workflow, indent=2)
    if WRITE_FILE in offered and not any(c.get("name") == WRITE_FILE for c, _ in this_turn):
        return Reply([TextBlock(f'I\'ll update "{wf_name}".'), ToolUseBlock(WRITE_FILE, {"path": path, "content": source})])
    args: dict[str, Any] = {"filePath": path, "workflowId": wf_id, "name": wf_name}
    if WRITE_FILE not in offered or builds:
        args["sourceCode"] = source
    return Reply([ToolUseBlock(BUILD_TOOL, args)])
