"""The pool grows and heals while units run: no barrier at bring-up, a lane configured unlike the
first ready one is removed (and why is said), a lane lost mid-run is replaced and its units finish
elsewhere. Real process lanes, the real claude CLI, the scripted model.

The backends below are the real process backend with one twist each (a late start, one odd env
value), registered by name the way any third-party backend would be.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.lanes.backend import register_backend
from orchestrator.lanes.model import Lane, LaneSpec, LaneState
from orchestrator.lanes.process.backend import ProcessBackend
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import Run, RunOutcome
from orchestrator.run.resolve import prepare
from orchestrator.scripted import scripts as ms

from .helpers import (
    SMOKE_CASES,
    BuildGate,
    ModelDesk,
    assert_nothing_left,
    ledger_records,
    run_config,
    unique,
    units_of,
    wait_until,
)

pytestmark = [pytest.mark.n8n, pytest.mark.claude, pytest.mark.slow]
LATE_S = 30.0


@register_backend
class LateSecondLane(ProcessBackend):
    """Lane 1 starts ``LATE_S`` seconds after lane 0 (a slow node, an image pull)."""

    name = "process-late-second"

    async def start_lane(self, index: int, spec: LaneSpec) -> Lane:
        if index == 1:
            await asyncio.sleep(LATE_S)
        return await super().start_lane(index, spec)


@register_backend
class OddSecondLane(ProcessBackend):
    """Lane 1 runs with a web-search service configured for Instance AI: its fingerprint differs (a
    difference an editor-less lane reports, through its Instance AI settings)."""

    name = "process-odd-second"

    async def start_lane(self, index: int, spec: LaneSpec) -> Lane:
        if index == 1:
            spec = dataclasses.replace(spec, env={**spec.env, "N8N_INSTANCE_AI_SEARXNG_URL": "http://127.0.0.1:9"})
        return await super().start_lane(index, spec)


async def _run_holding_builds(cfg: RunConfig, gate: BuildGate,
                              act: Callable[[Run, asyncio.Task[RunOutcome]], Awaitable[None]]) -> RunOutcome:
    """Run ``cfg`` while ``gate`` holds its builds; ``act`` does the test's part meanwhile, then the
    builds go on. The run never outlives the test."""
    run = Run(await prepare(cfg))
    task = asyncio.create_task(run.execute())
    try:
        await act(run, task)
        gate.open()
        return await asyncio.wait_for(task, 300)
    finally:
        gate.open()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _lane_creates(run_id: str, state_dir: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in ledger_records(run_id, state_dir) if r.get("kind") == "lane" and r["op"] == "create"}


async def test_builds_start_while_another_lane_is_still_starting(model: ModelDesk, tmp_path: Path) -> None:
    gate = BuildGate()
    model.use(ms.demo_script(builder=gate))
    run_id = unique("nobarrier")
    cfg = run_config(tmp_path, run_id, backend=LateSecondLane.name, lanes=2, filter=",".join(SMOKE_CASES[:2]))

    async def act(run: Run, task: asyncio.Task[RunOutcome]) -> None:
        await wait_until(lambda: gate.waiting >= 1 or task.done(), 240, "a build in flight")
        assert not task.done(), task.result()
        # a build runs on lane 0 while lane 1 has not even been created yet
        assert [r["meta"]["index"] for r in _lane_creates(run_id, cfg.state_dir).values()] == [0]
        await wait_until(lambda: len(_lane_creates(run_id, cfg.state_dir)) == 2 or task.done(), LATE_S + 30,
                         "the late lane created")

    outcome = await _run_holding_builds(cfg, gate, act)
    assert outcome.ok and outcome.cleanup_failures == []
    units = units_of(cfg.output_dir)
    assert [u["build"]["status"] for u in units] == ["ok", "ok"]
    first_ready = outcome.results.config["first_lane_ready_s"]
    assert isinstance(first_ready, (int, float)) and first_ready < LATE_S
    assert_nothing_left(run_id, cfg.state_dir)


async def test_a_lane_configured_differently_is_removed_and_the_reason_recorded(model: ModelDesk, tmp_path: Path) -> None:
    gate = BuildGate()
    model.use(ms.demo_script(builder=gate))
    run_id = unique("oddlane")
    cfg = run_config(tmp_path, run_id, backend=OddSecondLane.name, lanes=2, filter=",".join(SMOKE_CASES[:2]))

    async def act(run: Run, task: asyncio.Task[RunOutcome]) -> None:
        # builds wait until the later lane was compared (and one of the two removed): the first
        # lane alone could finish both units before the second (started at a lower priority) is up
        def removed() -> bool:
            return any(r.get("kind") == "lane" and r["op"] == "delete" for r in ledger_records(run_id, cfg.state_dir))
        await wait_until(lambda: removed() or task.done(), 240, "a lane removed")

    outcome = await _run_holding_builds(cfg, gate, act)
    assert outcome.ok and outcome.cleanup_failures == []
    creates = _lane_creates(run_id, cfg.state_dir)
    odd = next(lane_id for lane_id, r in creates.items() if r["meta"]["index"] == 1)
    good = next(lane_id for lane_id, r in creates.items() if r["meta"]["index"] == 0)
    # whichever came up first set the pool's fingerprint; the other one was removed, saying why
    [failure] = outcome.results.lane_failures
    assert "configured differently" in failure and "instance_ai.searchEnvConfigured" in failure
    removed = odd if odd in failure.split(" removed:")[0] else good
    units = units_of(cfg.output_dir)
    assert {u["lane"] for u in units} == {odd, good} - {removed}
    assert all(u["build"]["status"] == "ok" for u in units)
    assert_nothing_left(run_id, cfg.state_dir)


async def test_a_lane_killed_mid_run_is_replaced_and_its_units_finish_elsewhere(model: ModelDesk, tmp_path: Path) -> None:
    gate = BuildGate()
    model.use(ms.demo_script(builder=gate))
    run_id = unique("replace")
    cases = SMOKE_CASES[:2]
    cfg = run_config(tmp_path, run_id, lanes=1, filter=",".join(cases), per_lane_builds=4)
    victims: list[Lane] = []

    async def act(run: Run, task: asyncio.Task[RunOutcome]) -> None:
        await wait_until(lambda: gate.waiting >= len(cases) or task.done(), 300, "both builds in flight")
        assert not task.done(), task.result()
        [victim] = run.lanes.values()
        victims.append(victim)
        os.killpg(int(victim.handle), signal.SIGKILL)
        await wait_until(lambda: victim.state == LaneState.dead, 20, "the killed lane drained")
        await wait_until(lambda: len(run.lanes) >= 2 or task.done(), 60, "a replacement lane started")
        await wait_until(lambda: any(lane.state == LaneState.ready and lane is not victim
                                     for lane in run.lanes.values()) or task.done(), 240, "the replacement ready")

    outcome = await _run_holding_builds(cfg, gate, act)
    [victim] = victims
    assert outcome.ok and outcome.cleanup_failures == []
    units = units_of(cfg.output_dir)
    assert sorted(u["case"] for u in units) == sorted(cases)  # none lost
    for unit in units:
        assert unit["build"]["status"] == "ok", unit["build"]
        assert unit["lane"] != victim.lane_id
    assert len(_lane_creates(run_id, cfg.state_dir)) == 2  # the lost lane and its one replacement
    assert_nothing_left(run_id, cfg.state_dir)
