"""The claude builders' options (``mcp`` and ``remote``): how each ``claude -p`` attempt reaches the
lane's MCP server. Each field is the run config's field of the same name (``run/stack.py``), and
its description is that flag's help."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field

from orchestrator.builders.builder import BuilderOptions


class ClaudeOptions(BuilderOptions):
    """Options of :class:`~orchestrator.builders.claude.mcp.McpBuilder` and its ``remote`` kind."""

    flags: ClassVar[tuple[str, ...]] = ("build_mcp_timeout_ms", "mcp_server", "build_cwd")

    @property
    def mcp_server_name(self) -> str | None:
        """The MCP server name ``--mcp-server`` gave, or None for the default."""
        return self.mcp_server

    build_mcp_timeout_ms: int = Field(120_000, ge=1, description=(
        "claude's MCP_TIMEOUT: how long one call to the lane's MCP server may take, in ms"))
    build_max_retries: int | None = Field(None, ge=0, description=(
        "claude's CLAUDE_CODE_MAX_RETRIES for builds (default: the CLI's own, ~10 retries over minutes)"))
    mcp_server: str = Field("n8n-local", min_length=1, description=(
        "the name the lane's MCP server has in claude's config (the tool names the agent sees)"))
    build_cwd: Path | None = Field(None, description=(
        "the folder claude builds in (default: a fresh folder per attempt under the run's builds/)"))
