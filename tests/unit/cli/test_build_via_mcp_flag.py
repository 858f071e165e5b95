"""``--build-via-mcp`` is the reference harness's flag (README "--build-via-mcp folds the MCP build
into the eval run"; cli/args.ts): here it is ``--builder mcp``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.cli.run_options import _config
from orchestrator.errors import ConfigError


def _values(**kw: Any) -> dict[str, Any]:
    return {"cases": [Path("cases")], "outage_waits": "30,90", "env": [], "build_via_mcp": False, "builder": "mcp", **kw}


def test_the_flag_selects_the_mcp_builder_whatever_the_commands_default() -> None:
    assert _config(_values(build_via_mcp=True)).builder == "mcp"
    assert _config(_values(build_via_mcp=True, builder="instance-ai"), "instance-ai").builder == "mcp"


def test_the_flag_with_another_explicit_builder_is_refused() -> None:
    with pytest.raises(ConfigError, match="--build-via-mcp means --builder mcp"):
        _config(_values(build_via_mcp=True, builder="prebuilt"))


def test_the_cli_accepts_the_flag() -> None:
    result = CliRunner().invoke(app, ["run", "--help"])
    assert result.exit_code == 0 and "--build-via-mcp" in result.output
