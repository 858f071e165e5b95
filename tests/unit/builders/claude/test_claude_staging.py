"""Staging a build works from a relative state dir (the default ``.orchestrator``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from orchestrator.builders.claude.runner import ClaudeConfig, stage_build


def test_relative_work_root_gives_absolute_private_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path(".orchestrator/builds").mkdir(parents=True)
    cfg = ClaudeConfig(claude_bin=Path("/bin/true"), work_root=Path(".orchestrator/builds"), timeout_ms=60_000)
    staged = stage_build("http://127.0.0.1:1", "mcp-key-for-staging-test", cfg)
    for path in (staged.root, staged.mcp_config, staged.home, staged.cwd):
        assert path.is_absolute(), path
    os.chdir(staged.cwd)  # claude runs here: the config must still be found
    assert staged.mcp_config.is_file()
    assert stat.S_IMODE(staged.mcp_config.stat().st_mode) == 0o600
    assert stat.S_IMODE(staged.root.stat().st_mode) == 0o700
