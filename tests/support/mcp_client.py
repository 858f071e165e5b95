"""Test helper: a client for a lane's instance MCP server (``<base>/mcp-server/http``), on the ``mcp`` SDK's
streamable HTTP transport.

Seen on n8n 2.41.1: the server ("n8n MCP Server" 1.2.0) speaks the handshake-era protocol
(``initialize`` → protocolVersion 2025-11-25), answers as SSE, needs no session id, and lists 50
tools (``search_nodes``, ``validate_workflow``, ``create_workflow_from_code``, ``execute_workflow``,
``get_workflow_execution``, ``archive_workflow``, …). Auth is ``Authorization: Bearer <key>`` with a
key from ``POST /rest/mcp/api-key/rotate``; a wrong key gets HTTP 401 ``{"message":"Unauthorized"}``
(the SDK only reports "Server returned an error response", so the status is taken from an httpx
response hook). MCP access must be enabled instance-wide first (``PATCH /rest/mcp/settings``, owner
or admin), else 404 "MCP access is disabled". A tool failure is a normal result with
``isError: true`` (e.g. get_workflow_details of an unknown id); an unknown tool name is a JSON-RPC
error -32602. Tool results carry ``structuredContent`` (e.g. ``{"results": […]}``) and a text copy.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from orchestrator.n8n.errors import N8nError, N8nTransportError
from orchestrator.redact import redact, register_secret

MCP_PATH = "/mcp-server/http"


class McpError(N8nError):
    """The MCP server refused a request or answered with a protocol error."""


class McpAuthError(McpError):
    """The key was refused (HTTP 401/403) or MCP access is disabled on the lane (404)."""


class McpToolError(McpError):
    """A tool ran and reported failure (``isError: true``); ``message`` is its text."""


@dataclass(frozen=True)
class McpTool:
    name: str
    description: str
    input_schema: dict[str, Any] = field(default_factory=dict)


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups raised by the SDK's task groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def tool_result_value(structured: dict[str, Any] | None, texts: list[str]) -> dict[str, Any] | str:
    """Structured content when the tool sent it; else the text, parsed if it is a JSON object."""
    if structured:
        return structured
    text = "\n".join(texts)
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return parsed if isinstance(parsed, dict) else text


class LaneMcpClient:
    """``async with LaneMcpClient(base_url, key) as mcp: await mcp.list_tools()``.

    Enter and leave it in the same asyncio task (the SDK runs an anyio task group inside).
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 120.0) -> None:
        register_secret(api_key)
        self.url = base_url.rstrip("/") + MCP_PATH
        self._api_key = api_key
        self._timeout = timeout
        self._stack: AsyncExitStack | None = None
        self._client: Client | None = None
        self._last_error_status: int | None = None

    def __repr__(self) -> str:
        return f"LaneMcpClient({self.url})"

    async def _record_status(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self._last_error_status = response.status_code

    def _translate(self, what: str, exc: BaseException) -> N8nError:
        exc = _leaf(exc)
        if isinstance(exc, N8nError):
            return exc
        if isinstance(exc, (httpx2.TransportError, OSError, TimeoutError)):
            return N8nTransportError("POST", MCP_PATH, f"{what}: {type(exc).__name__}: {exc}")
        status = self._last_error_status
        message = redact(f"{what}: {exc}")
        if status in (401, 403, 404):
            hint = "MCP access disabled on the lane" if status == 404 else "key refused"
            return McpAuthError("POST", MCP_PATH, status, f"{message} ({hint})")
        return McpError("POST", MCP_PATH, status, message)

    async def __aenter__(self) -> LaneMcpClient:
        stack = AsyncExitStack()
        try:
            http = create_mcp_http_client(
                headers={"Authorization": f"Bearer {self._api_key}"},
                timeout=httpx2.Timeout(30.0, read=self._timeout),
            )
            http.event_hooks["response"] = [self._record_status]
            await stack.enter_async_context(http)
            transport = streamable_http_client(self.url, http_client=http, terminate_on_close=False)
            self._client = await stack.enter_async_context(
                Client(transport, mode="legacy", read_timeout_seconds=self._timeout)
            )
        except BaseException as exc:
            await _close_quietly(stack)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise self._translate("initialize", exc) from None
        self._stack = stack
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await _close_quietly(stack)

    def _connected(self) -> Client:
        if self._client is None:
            raise McpError("POST", MCP_PATH, None, "not connected: use `async with LaneMcpClient(...)`")
        return self._client

    async def list_tools(self) -> list[McpTool]:
        client = self._connected()
        tools: list[McpTool] = []
        cursor: str | None = None
        try:
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.extend(McpTool(t.name, t.description or "", dict(t.input_schema or {})) for t in page.tools)
                cursor = getattr(page, "next_cursor", None)
                if not cursor:
                    return tools
        except Exception as exc:
            raise self._translate("tools/list", exc) from None

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any] | str:
        """The tool's structured content (or text). A tool reporting failure raises :class:`McpToolError`."""
        client = self._connected()
        try:
            result = await client.call_tool(name, arguments or {})
        except Exception as exc:
            raise self._translate(f"tools/call {name}", exc) from None
        texts = [getattr(c, "text", "") for c in result.content if getattr(c, "type", "") == "text"]
        if result.is_error:
            raise McpToolError("POST", MCP_PATH, None, f"tool {name} failed: {' '.join(texts)}")
        return tool_result_value(result.structured_content, texts)


async def _close_quietly(stack: AsyncExitStack) -> None:
    try:
        await stack.aclose()
    except Exception:  # closing a broken transport must not mask the real error
        pass
