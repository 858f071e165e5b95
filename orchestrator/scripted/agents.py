"""Scripts for n8n Agents on a lane (offline runs): the agent builder behind ``build-agent``, and the
Agent itself when an execution scenario runs it.

- The **agent builder** (the sub-agent ``build-agent`` spawns; it offers ``read_config``,
  ``write_config``, ``resolve_llm``…): reads the fresh Agent's config, resolves its model silently
  (``resolve_llm`` without arguments picks a credential the user already has, e.g. the case's
  declared ``anthropicApi``), and writes the whole config back with that model and credential and
  instructions made from the hand-off message (:data:`INSTRUCTIONS_PREFIX` first). With no usable
  credential the model stays ``""``: the Agent is a draft, which n8n's harness does not run.
- The **Agent under test** (``POST /rest/instance-ai/eval/execute-agent-with-llm-mock/:agentId``
  runs it with its real model, here this server through the credential's URL): its system prompt
  starts with the instructions the builder wrote. It answers the opening message from them: a
  refund request is handed to a human colleague, anything else gets a status answer naming the
  order it was asked about.
"""

from __future__ import annotations

import json
import re
from typing import Any

from orchestrator.scripted.replies import Action, Reply, TextBlock, ToolUseBlock, text_reply, tool_names

READ_CONFIG = "read_config"
WRITE_CONFIG = "write_config"
RESOLVE_LLM = "resolve_llm"
#: How the builder's instructions start: the Agent's own requests are recognised by it.
INSTRUCTIONS_PREFIX = "You are {name}, an n8n agent built by the scripted model."
_UNDER_TEST = re.compile(r"^You are (?P<name>.+?), an n8n agent built by the scripted model\.", re.M)
_ORDER = re.compile(r"\b(?:order|parcel|package)\s*(?:number\s*)?#?\s*(?P<id>[A-Z0-9-]{2,})", re.I)
_REFUND = re.compile(r"\b(?:refund|money back|reimburse)", re.I)


def _tool_names(request: dict[str, Any]) -> set[str]:
    return set(tool_names(request))


def _system(request: dict[str, Any]) -> str:
    system = request.get("system")
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return system if isinstance(system, str) else ""


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _calls(request: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every tool call of the conversation with its parsed result ({} when not JSON or not back)."""
    calls: list[dict[str, Any]] = []
    results: dict[str, dict[str, Any]] = {}
    for message in request.get("messages") or []:
        for block in _blocks(message):
            if message.get("role") == "assistant" and block.get("type") == "tool_use":
                calls.append(block)
            elif block.get("type") == "tool_result":
                results[str(block.get("tool_use_id"))] = _json(block.get("content"))
    return [(c, results.get(str(c.get("id")), {})) for c in calls]


def _json(content: Any) -> dict[str, Any]:
    text = content if isinstance(content, str) else "".join(
        str(b.get("text", "")) for b in content or [] if isinstance(b, dict))
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _first_user_text(request: dict[str, Any]) -> str:
    for message in request.get("messages") or []:
        if message.get("role") == "user":
            texts = [str(b.get("text", "")) for b in _blocks(message) if b.get("type") == "text"]
            if texts:
                return "\n".join(texts)
    return ""


def is_agent_builder(request: dict[str, Any]) -> bool:
    """Whether the request is an Agent builder's turn (it may read and write an agent's config)."""
    return {READ_CONFIG, WRITE_CONFIG} <= _tool_names(request)


def agent_builder(request: dict[str, Any]) -> Action:
    """read_config → resolve_llm → write_config (model, credential, instructions) → a summary."""
    done = {str(c.get("name")): r for c, r in _calls(request)}
    if READ_CONFIG not in done:
        return Reply([ToolUseBlock(READ_CONFIG, {})])
    if RESOLVE_LLM not in done and RESOLVE_LLM in _tool_names(request):
        return Reply([ToolUseBlock(RESOLVE_LLM, {})])
    if WRITE_CONFIG not in done:
        read = done[READ_CONFIG]
        config = dict(read.get("config") or {})
        name = str(config.get("name") or "Scripted Agent")
        resolved = done.get(RESOLVE_LLM) or {}
        model, credential = _resolved_model(resolved)
        config.update(name=name, model=model, instructions=_instructions(name, _first_user_text(request)))
        if credential:
            config["credential"] = credential
        return Reply([TextBlock("Writing the agent's configuration."),
                      ToolUseBlock(WRITE_CONFIG, {"json": json.dumps(config), "baseConfigHash": read.get("configHash")})])
    written = done[WRITE_CONFIG]
    if written.get("ok") is False:
        return text_reply(f"The configuration was refused: {json.dumps(written.get('errors'))[:400]}")
    return text_reply("The agent is configured: its model, credential and instructions are set.")


def _resolved_model(result: dict[str, Any]) -> tuple[str, str | None]:
    """``(model, credential id)`` from ``resolve_llm``'s answer; ``("", None)`` when it found none."""
    if result.get("ok") is not True:
        return "", None
    model = result.get("model")
    provider = result.get("provider")
    credential = result.get("credentialId") or result.get("credential")
    if isinstance(model, str) and model and "/" not in model and isinstance(provider, str):
        model = f"{provider}/{model}"
    return (model if isinstance(model, str) else ""), (str(credential) if credential else None)


def _instructions(name: str, hand_off: str) -> str:
    purpose = " ".join(hand_off.split())[:600] or "Help the user."
    return (INSTRUCTIONS_PREFIX.format(name=name) + "\n\nWhat the user asked for: " + purpose
            + "\n\nAnswer order and parcel status questions; hand refund requests to a human colleague.")


def is_agent_under_test(request: dict[str, Any]) -> bool:
    """Whether the request is a call of an Agent the scripted model built (its system prompt says so)."""
    return bool(_UNDER_TEST.search(_system(request)))


def agent_under_test(request: dict[str, Any]) -> Action:
    """The Agent's answer to the scenario's opening message."""
    match = _UNDER_TEST.search(_system(request))
    name = match.group("name") if match else "the agent"
    asked = _first_user_text(request)
    if _REFUND.search(asked):
        return text_reply(f"I'm {name}. Refunds are handled by a human colleague: I've passed your request on, "
                          "and someone from the team will get back to you.")
    order = _ORDER.search(asked)
    which = f"order {order.group('id')}" if order else "your order"
    return text_reply(f"I'm {name}. I checked {which}: it has shipped and is on its way; "
                      "you will get a tracking update by email.")
