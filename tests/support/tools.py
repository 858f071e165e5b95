"""Test plumbing shared by every test module: loopback ports, and the real tools a test needs.

``require(tool, ready, hint)`` is how a test (or a helper it calls) asks for n8n, claude, dockerd
or chromium. The test must carry the marker of that tool (``n8n``, ``claude``, ``docker``,
``chromium``) — so ``-m n8n`` really selects every test that starts a lane — and when the tool is
missing the test is *skipped* on a developer machine but *fails* in CI (``CI=true``), where a
missing install step must never pass as a quiet skip. ``conftest.py`` tells this module which test
is running.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

import pytest

TOOL_MARKERS = ("n8n", "claude", "docker", "chromium")
current: list[pytest.Item] = []


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(tool: str, ready: bool | Callable[[], bool], hint: str) -> None:
    """The current test needs ``tool``: it must be marked so, and the tool must be there."""
    assert tool in TOOL_MARKERS, tool
    item = current[0] if current else None
    if item is not None and item.get_closest_marker(tool) is None:
        pytest.fail(f"{item.nodeid} uses {tool} but is not marked @pytest.mark.{tool}", pytrace=False)
    if ready() if callable(ready) else ready:
        return
    message = f"{tool} is not available: {hint}"
    if in_ci():
        pytest.fail(f"CI must install it — {message}", pytrace=False)
    pytest.skip(message)


def free_port(start: int = 0, end: int = 0) -> int:
    """A loopback port nothing listens on (bound, never listened, released): a connect is refused.
    With ``start``/``end``, the first free one of that range (some tests keep to a known range)."""
    for port in range(start, end) if end else [0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise RuntimeError(f"no free port in {start}-{end - 1}")


def need(ready: bool, message: str) -> None:
    """A host facility the test needs (bubblewrap, root, setpriv…): skipped here when missing, but a
    failure in CI, which installs everything (``.ci/run``)."""
    if ready:
        return
    if in_ci():
        pytest.fail(f"CI must provide it — {message}", pytrace=False)
    pytest.skip(message)
