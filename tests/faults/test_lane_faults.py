"""Lane faults on real process lanes the run owns: a lane killed or hung mid-build, and a lane
that dies while it starts.

Builds are held at their first model request (``BuildGate``) so the fault lands while every unit
is in flight; the gate opens once the run has reacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from orchestrator.lanes.model import Lane, LaneState
from orchestrator.lanes.process.backend import INDEX_LABEL, _environ, labelled_processes
from orchestrator.procs import group_members
from orchestrator.run.pipeline import Run
from orchestrator.run.resolve import prepare
from orchestrator.scripted import scripts as ms

from .helpers import (
    SMOKE_CASES,
    BuildGate,
    LedgerTimeline,
    ModelDesk,
    assert_nothing_left,
    ledger_records,
    run_config,
    unique,
    units_of,
    wait_until,
)

pytestmark = [pytest.mark.n8n, pytest.mark.claude, pytest.mark.slow]


def _lane(run: Run, index: int) -> Lane:
    return next(lane for lane in run.lanes.values() if lane.index == index)


async def _fault_mid_build(model: ModelDesk, tmp_path: Path, prefix: str, fault: signal.Signals, *,
                           whole_group: bool, detect_within_s: float) -> None:
    gate = BuildGate()
    model.use(ms.demo_script(builder=gate))
    run_id = unique(prefix)
    cfg = run_config(tmp_path, run_id, lanes=2, filter=",".join(SMOKE_CASES), per_lane_builds=4)
    run = Run(await prepare(cfg))
    task = asyncio.create_task(run.execute())
    victim_pgid: int | None = None
    try:
        await wait_until(lambda: gate.waiting >= len(SMOKE_CASES) or task.done(), 300, "every build in flight")
        assert not task.done(), task.result()
        active = run.units.per_lane()
        victim = run.lanes[max(active, key=lambda lane_id: active[lane_id])]  # the lane with builds in flight
        assert active[victim.lane_id] > 0
        victim_pgid = int(victim.handle)  # lanes run in their own session: group id = n8n's pid
        if whole_group:
            os.killpg(victim_pgid, fault)  # n8n and its task runner
        else:
            os.kill(victim_pgid, fault)  # n8n only: its task runner is left for teardown to find
        took = await wait_until(lambda: victim.state == LaneState.dead, detect_within_s + 5, "the lane drained")
        assert took <= detect_within_s, f"{victim.describe()} drained {took:.1f} s after {fault.name}"
        gate.open()
        outcome = await asyncio.wait_for(task, 300)
    finally:
        gate.open()
        if victim_pgid is not None and group_members(victim_pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(victim_pgid, signal.SIGCONT)  # a failed test must not leave a stopped lane
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    assert outcome.ok and outcome.cleanup_failures == []
    units = units_of(cfg.output_dir)
    assert len(units) == len(SMOKE_CASES)  # none lost
    victim_id = victim.lane_id
    for unit in units:
        assert unit["build"]["status"] == "ok" and unit["build"]["workflow_id"], unit["build"]
        assert unit["lane"] != victim_id  # the drained lane's units finished on another one (the survivor or a replacement)
    assert all(s["verdict"] == "pass" for u in units for s in u["scenarios"])
    assert_nothing_left(run_id, cfg.state_dir)


async def test_lane_killed_mid_build_is_drained_and_its_units_finish_elsewhere(model: ModelDesk, tmp_path: Path) -> None:
    await _fault_mid_build(model, tmp_path, "lanekill", signal.SIGKILL, whole_group=False, detect_within_s=10)


async def test_hung_lane_times_out_its_health_check_and_is_drained(model: ModelDesk, tmp_path: Path) -> None:
    """SIGSTOP: the lane still accepts TCP connections but never answers; teardown still ends it."""
    await _fault_mid_build(model, tmp_path, "lanehang", signal.SIGSTOP, whole_group=True, detect_within_s=20)


class _LaneWatch(threading.Thread):
    """Kill lane 0 the moment its first process is recorded, and sample /proc meanwhile: how
    many lane-0 n8n processes (group leaders carrying the run label) ever lived at once."""

    def __init__(self, run_id: str, ledger_path: Path) -> None:
        super().__init__(daemon=True, name="lane-watch")
        self.run_id, self.ledger_path = run_id, ledger_path
        self.killed: int | None = None
        self.most_at_once = 0
        self.stop = threading.Event()

    def _first_lane_pid(self) -> int | None:
        try:
            lines = self.ledger_path.read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:  # the line being written
                continue
            if rec["op"] == "create" and rec["kind"] == "lane":
                return int(rec["meta"]["pid"])
        return None

    def _lane0_servers(self) -> int:
        count = 0
        for pid in labelled_processes(self.run_id):
            try:
                leader = os.getpgid(pid) == pid
            except ProcessLookupError:
                continue
            count += leader and _environ(pid).get(INDEX_LABEL) == "0"
        return count

    def run(self) -> None:
        while not self.stop.is_set():
            if self.killed is None and (pid := self._first_lane_pid()):
                os.killpg(pid, signal.SIGKILL)
                self.killed = pid
            self.most_at_once = max(self.most_at_once, self._lane0_servers())
            time.sleep(0.02)


async def test_lane_that_dies_while_starting_is_removed_before_its_replacement(model: ModelDesk, tmp_path: Path) -> None:
    run_id = unique("laneup")
    cfg = run_config(tmp_path, run_id, lanes=1, lane_retries=1)
    watch = _LaneWatch(run_id, cfg.state_dir / "runs" / run_id / "ledger.jsonl")
    watch.start()
    try:
        outcome = await Run(await prepare(cfg)).execute()
    finally:
        watch.stop.set()
        watch.join(5)
    assert watch.killed is not None
    assert outcome.ok and outcome.cleanup_failures == []
    [unit] = units_of(cfg.output_dir)
    assert unit["build"]["status"] == "ok"

    timeline = LedgerTimeline.of(run_id, cfg.state_dir)
    first, second = {lane for _, _, lane in timeline.events[:2]}, timeline.events[2][2]
    assert [(i, op) for i, op, _ in timeline.events] == [(0, "create"), (0, "delete"), (0, "create"), (0, "delete")]
    assert len(first) == 1 and second not in first  # the replacement is a new lane, started after the delete
    assert timeline.max_open_per_index() == 1
    assert watch.most_at_once == 1  # never two lane-0 servers alive at the same time
    pids = [r["meta"]["pid"] for r in ledger_records(run_id, cfg.state_dir) if r["op"] == "create" and r["kind"] == "lane"]
    assert pids[0] == watch.killed and unit["lane"] == second
    assert_nothing_left(run_id, cfg.state_dir)
