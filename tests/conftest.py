"""pytest hooks and fixtures shared by the whole suite (the helpers themselves are in ``support``:
``support.tools``, ``support.static_lane`` and ``support.model_switch``)."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import tools
from support.lanes import StartedLane, process_lane
from support.model_switch import SharedModel
from support.static_lane import StaticLane, started_static_lane

from orchestrator.toolchain import Toolchain, default_cache_dir


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    tools.current[:] = [item]


def pytest_runtest_teardown(item: pytest.Item) -> None:
    tools.current.clear()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for ``pytest -n N --dist loadgroup`` (the test command runs two workers): a module's
    tests stay on one worker, so its module-scoped lanes start once; every ``docker`` test shares
    one worker, as they share one dockerd, its images and the lanes' fixed host ports."""
    for item in items:
        group = "docker" if item.get_closest_marker("docker") else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def orchestrator_cmd() -> Iterator[list[str]]:
    """The real CLI, run by this interpreter (whatever venv the tests run in)."""
    yield [sys.executable, "-m", "orchestrator"]


@pytest.fixture(scope="module")
def claude_bin() -> Path:
    """The toolchain's pinned claude CLI (a test using it is marked ``claude``)."""
    tc = Toolchain(default_cache_dir())
    tools.require("claude", tc.claude_ready, "run `orchestrator lanes install`")
    return tc.claude_bin


@pytest.fixture(scope="session")
def shared_model() -> Iterator[SharedModel]:
    """The session's scripted model server, leased by the modules sharing a lane (``lane_turn``)."""
    shared = SharedModel()
    shared.server.start()
    yield shared
    shared.server.stop()


@pytest.fixture(scope="session")
def shared_sandbox_lane(shared_model: SharedModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StaticLane]:
    """One seeded process lane with the embedded sandbox for the whole session, its Instance AI model
    route ``/route/lane-a`` on :func:`shared_model` (see ``_static_lane``). The run id is unique: a
    concurrent pytest session sweeps only its own."""
    run_id = f"shared-sandbox-{secrets.token_hex(3)}"
    state = tmp_path_factory.mktemp("shared-sandbox-state")
    with started_static_lane(run_id, state, f"{shared_model.server.base_url}/route/lane-a", sandbox=True) as lane:
        yield lane
    sandboxes = state / "runs" / run_id / "sandboxes"
    assert not (sandboxes.exists() and list(sandboxes.glob("*/*"))), "a sandbox of the shared lane was left behind"


@pytest.fixture(scope="session")
def shared_plain_lane() -> Iterator[StartedLane]:
    """One default process lane (no extra env, unseeded) for the whole session; each user resets it
    (``/rest/e2e/reset``, or ``_lanes.seed``) before it looks at it."""
    with process_lane() as lane:
        yield lane
