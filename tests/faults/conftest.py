"""Fixtures of the fault tests: real n8n lanes, the real claude CLI, one scripted model.

- ``model``: the session's scripted Anthropic-compatible server (the only stand-in). Each test
  sets its script (:meth:`ModelDesk.use`); it is reset to the demo script after every test. Lanes
  point their eval mock at it and runs use it as ``--model-server real`` with ANTHROPIC_BASE_URL.
- ``shared_lane``: one process lane started once for the session with a known owner; tests that
  only need *a* lane run against it with the ``static`` backend (optionally through the fault
  proxy) and compare its users, workflows and credentials before and after.

Helpers (inventories, the build gate, run configs) are in :mod:`faults.helpers`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from orchestrator.lanes.bringup import bring_up, make_owner, teardown_pool
from orchestrator.lanes.model import Lane
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process.backend import ProcessBackend
from orchestrator.ledger import Ledger
from orchestrator.scripted.scripts import demo_script
from orchestrator.toolchain import Toolchain, default_cache_dir

from .helpers import FAKE_API_KEY, LANE_MODEL_KEY, ModelDesk, SharedLane, host_leftovers, unique


@pytest.fixture(scope="session")
def toolchain() -> Toolchain:
    tc = Toolchain(default_cache_dir())
    if not (tc.n8n_ready() and tc.claude_ready()):
        pytest.fail("n8n or the claude CLI is not installed: run `orchestrator lanes install`")
    return tc


@pytest.fixture(scope="session")
def model_desk() -> Iterator[ModelDesk]:
    desk = ModelDesk()
    desk.server.start()
    yield desk
    desk.server.stop()


@pytest.fixture
def model(model_desk: ModelDesk, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelDesk]:
    """The model for one test, wired into this process's env: runs use it as ``--model-server real``
    (claude and the judge) and lanes started now point their eval mock at it."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model_desk.base_url)
    monkeypatch.setenv("N8N_INSTANCE_AI_MODEL_URL", model_desk.base_url)
    monkeypatch.setenv("N8N_INSTANCE_AI_MODEL_API_KEY", LANE_MODEL_KEY)
    model_desk.use(demo_script())
    yield model_desk
    model_desk.use(demo_script())


@pytest.fixture(scope="session")
def shared_lane(toolchain: Toolchain, model_desk: ModelDesk, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedLane]:
    run_id = unique("faults-shared")  # unique: concurrent sessions must not see each other's lanes
    state = tmp_path_factory.mktemp("shared-lane-state")
    ledger = Ledger.for_run(run_id, state)
    owner = make_owner(run_id)
    spec = make_spec("eval", [f"N8N_INSTANCE_AI_MODEL_URL={model_desk.base_url}",
                              f"N8N_INSTANCE_AI_MODEL_API_KEY={LANE_MODEL_KEY}"])

    async def up() -> Lane:
        backend = ProcessBackend(run_id, ledger, state)
        try:
            return (await bring_up(backend, 1, spec, owner)).lanes[0]
        finally:
            await backend.close()

    async def down(lane: Lane) -> list[str]:
        backend = ProcessBackend(run_id, ledger, state)
        try:
            return await teardown_pool(backend, [lane])
        finally:
            await backend.close()

    lane = asyncio.run(up())
    try:
        yield SharedLane(lane, owner)
    finally:
        assert asyncio.run(down(lane)) == []
        assert host_leftovers(run_id, state) == []
