"""pytest hooks and fixtures shared by the whole suite (the helpers themselves are in ``_tools``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import _tools
import pytest

from orchestrator.toolchain import Toolchain, default_cache_dir


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _tools.current[:] = [item]


def pytest_runtest_teardown(item: pytest.Item) -> None:
    _tools.current.clear()


@pytest.fixture
def orchestrator_cmd() -> Iterator[list[str]]:
    """The real CLI, run by this interpreter (whatever venv the tests run in)."""
    yield [sys.executable, "-m", "orchestrator"]


@pytest.fixture(scope="module")
def claude_bin() -> Path:
    """The toolchain's pinned claude CLI (a test using it is marked ``claude``)."""
    tc = Toolchain(default_cache_dir())
    _tools.require("claude", tc.claude_ready, "run `orchestrator lanes install`")
    return tc.claude_bin
