"""The OpenAI-compatible chat-completions face of the scripted model (``custom/…`` model arms).

n8n routes a ``custom/<model>`` Instance AI model through ``@ai-sdk/openai-compatible`` with the
lane's ``N8N_INSTANCE_AI_MODEL_URL`` as ``baseURL``: it POSTs ``<baseURL>/chat/completions``
(``stream: true`` for the agent). The request is translated into the Anthropic shape every script
already reads (``system``, ``messages`` with ``tool_use`` / ``tool_result`` blocks, ``tools`` by
name), the script answers, and the reply goes back as a chat completion (JSON, or SSE chunks
ending in ``data: [DONE]``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from orchestrator.scripted.replies import (
    HttpError,
    Reply,
    TextBlock,
    ToolUseBlock,
    _next_id,
)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") in ("text", None))
    return ""


def to_anthropic(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat-completions request as an Anthropic Messages request (for the scripts)."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []

    def push(role: str, block: dict[str, Any]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})

    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text_of(message.get("content")))
        elif role == "user":
            push("user", {"type": "text", "text": _text_of(message.get("content"))})
        elif role == "assistant":
            text = _text_of(message.get("content"))
            if text:
                push("assistant", {"type": "text", "text": text})
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    args = {}
                push("assistant", {"type": "tool_use", "id": call.get("id"), "name": fn.get("name"), "input": args})
        elif role == "tool":
            push("user", {"type": "tool_result", "tool_use_id": message.get("tool_call_id"),
                          "content": _text_of(message.get("content"))})
    tools = []
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict):
            tools.append({"name": fn.get("name"), "description": fn.get("description", ""),
                          "input_schema": fn.get("parameters") or {}})
    out: dict[str, Any] = {"model": body.get("model"), "messages": messages, "stream": bool(body.get("stream"))}
    if system:
        out["system"] = "\n".join(system)
    if tools:
        out["tools"] = tools
    return out


def _tool_calls(reply: Reply) -> list[dict[str, Any]]:
    return [{"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}
            for b in reply.blocks if isinstance(b, ToolUseBlock)]


def _finish_reason(reply: Reply) -> str:
    return "tool_calls" if any(isinstance(b, ToolUseBlock) for b in reply.blocks) else "stop"


def _usage(reply: Reply, request: dict[str, Any]) -> dict[str, int]:
    u = reply.resolved_usage(request)
    return {"prompt_tokens": u.input_tokens, "completion_tokens": u.output_tokens,
            "total_tokens": u.input_tokens + u.output_tokens}


def completion_json(reply: Reply, request: dict[str, Any], model: str) -> dict[str, Any]:
    """A scripted reply as an OpenAI chat completion (text, tool calls, finish reason, usage)."""
    text = "".join(b.text for b in reply.blocks if isinstance(b, TextBlock))
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    calls = _tool_calls(reply)
    if calls:
        message["tool_calls"] = calls
    return {"id": _next_id("chatcmpl"), "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(reply)}],
            "usage": _usage(reply, request)}


def completion_chunks(reply: Reply, request: dict[str, Any], model: str) -> list[bytes]:
    """The SSE frames of one streamed chat completion, ``data: [DONE]`` last."""
    cid, created = _next_id("chatcmpl"), int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
        body: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if usage is not None:
            body["usage"] = usage
        return f"data: {json.dumps(body)}\n\n".encode()

    frames = [chunk({"role": "assistant", "content": ""})]
    for block in reply.blocks:
        if isinstance(block, TextBlock):
            for i in range(0, max(1, len(block.text)), 40):
                frames.append(chunk({"content": block.text[i:i + 40]}))
    for index, call in enumerate(_tool_calls(reply)):
        frames.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                             "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        frames.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": call["function"]["arguments"]}}]}))
    frames.append(chunk({}, _finish_reason(reply), _usage(reply, request)))
    frames.append(b"data: [DONE]\n\n")
    return frames


def error_json(error: HttpError) -> dict[str, Any]:
    """A scripted HTTP error as OpenAI's error body."""
    body = error.body()["error"]
    return {"error": {"message": body["message"], "type": body["type"], "code": str(error.status)}}
