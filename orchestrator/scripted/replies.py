"""What a scripted model answers: content blocks, a reply, or a fault (HTTP error, hang, garbage).

A *script* is any callable ``(request_json) -> Action``; :mod:`orchestrator.scripted.server`
turns the action into Anthropic Messages API bytes (SSE when the request asked to stream, JSON
otherwise).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Union

_ids = itertools.count(1)


def _next_id(prefix: str) -> str:
    return f"{prefix}_scripted{next(_ids):06d}"


BUILD_TOOL = "build-workflow"  # the Instance AI agent's build tool


def tool_names(request: dict[str, Any]) -> list[str]:
    """The tools a request offers, Anthropic (``name``) or OpenAI (``function.name``) shape alike."""
    names = []
    for tool in request.get("tools") or []:
        if isinstance(tool, dict):
            fn = tool.get("function")
            names.append(str((fn or {}).get("name", "") if isinstance(fn, dict) else tool.get("name", "")))
    return names


def is_build_request(request: dict[str, Any]) -> bool:
    """A build step: an Instance AI agent step (it offers ``build-workflow``) or a claude build step
    (it offers MCP tools)."""
    names = tool_names(request)
    return BUILD_TOOL in names or any(n.startswith("mcp__") for n in names)


@dataclass(frozen=True)
class TextBlock:
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@dataclass(frozen=True)
class ToolUseBlock:
    name: str
    input: dict[str, Any]
    id: str = field(default_factory=lambda: _next_id("toolu"))

    def to_json(self) -> dict[str, Any]:
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": self.input}


Block = Union[TextBlock, ToolUseBlock]


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }


@dataclass(frozen=True)
class Reply:
    """One assistant message. ``stop_reason`` defaults to ``tool_use`` when a tool is called."""

    blocks: list[Block]
    stop_reason: str | None = None
    usage: Usage | None = None

    def resolved_stop_reason(self) -> str:
        """The stop reason given, else ``tool_use`` when the reply calls a tool, ``end_turn`` otherwise."""
        if self.stop_reason:
            return self.stop_reason
        return "tool_use" if any(isinstance(b, ToolUseBlock) for b in self.blocks) else "end_turn"

    def resolved_usage(self, request: dict[str, Any]) -> Usage:
        """Explicit usage, else a deterministic estimate (~4 characters a token) so costs are > 0."""
        if self.usage is not None:
            return self.usage
        prompt_chars = len(json.dumps(request.get("messages", []))) + len(json.dumps(request.get("system", "")))
        out_chars = sum(len(json.dumps(b.to_json())) for b in self.blocks)
        return Usage(input_tokens=max(1, prompt_chars // 4), output_tokens=max(1, out_chars // 4))


#: Anthropic error ``type`` for each HTTP status the API uses.
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "api_error",
    529: "overloaded_error",
}

_ERROR_MESSAGES: dict[str, str] = {
    "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit",
    "overloaded_error": "Overloaded",
    "api_error": "Internal server error",
}


@dataclass(frozen=True)
class HttpError:
    """An Anthropic-shaped error response: ``{"type":"error","error":{"type":…,"message":…}}``."""

    status: int
    error_type: str | None = None
    message: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def resolved_type(self) -> str:
        """The error type given, else the one Anthropic uses for the status."""
        return self.error_type or ERROR_TYPES.get(self.status, "api_error")

    def body(self) -> dict[str, Any]:
        """The error as Anthropic's error body."""
        etype = self.resolved_type()
        return {
            "type": "error",
            "error": {"type": etype, "message": self.message or _ERROR_MESSAGES.get(etype, etype)},
        }


@dataclass(frozen=True)
class Hang:
    """Accept the request and never answer (the connection is dropped after ``seconds``)."""

    seconds: float


@dataclass(frozen=True)
class Malformed:
    """A 200 whose body is not valid JSON / SSE."""

    body: bytes = b'{"type": "message", "content": [ this is not json'


Action = Union[Reply, HttpError, Hang, Malformed]
Script = Callable[[dict[str, Any]], Action]


def text_reply(text: str, **kwargs: Any) -> Reply:
    """A reply of one text block."""
    return Reply([TextBlock(text)], **kwargs)
