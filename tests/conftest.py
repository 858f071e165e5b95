"""pytest hooks and fixtures shared by the whole suite (the helpers themselves are in ``_tools``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import _tools
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _tools.current[:] = [item]


def pytest_runtest_teardown(item: pytest.Item) -> None:
    _tools.current.clear()


@pytest.fixture
def orchestrator_cmd() -> Iterator[list[str]]:
    """The real CLI, run by this interpreter (whatever venv the tests run in)."""
    yield [sys.executable, "-m", "orchestrator"]
