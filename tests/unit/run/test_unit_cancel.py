"""A unit cancelled by a drain (its lane died) while its finished record is being written, or
while its user is cleaned up, still finishes: written once, reported done; so it is not run again
elsewhere and recorded twice (the 500-unit soak found 504 records for 500 units). Cancelled before
it finished, it is cancelled as before, with nothing written."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support.polling import eventually_async, settle

from orchestrator.allocator import Outcome, WorkUnit
from orchestrator.builders.builder import Builder, BuilderSettings, BuildRequest, BuildResult
from orchestrator.builders.lane import BuildLane
from orchestrator.builders.users import BuildUser
from orchestrator.cases import load_disk
from orchestrator.lanes.model import Lane, LaneState
from orchestrator.n8n.rest import N8nClient, N8nSession
from orchestrator.results.model import BuildStatus, UnitResult
from orchestrator.run.unit import UnitRunner, UnitSettings, run_to_end
from orchestrator.verify.judge import Judge, JudgeConfig

REPO = Path(__file__).resolve().parents[3]


class _GatedBuilder(Builder):
    """Answers a timed-out build (a final record that needs no verification) once ``go`` is set."""

    name = "gated"

    def __init__(self, settings: BuilderSettings) -> None:
        super().__init__(settings)
        self.started = asyncio.Event()
        self.go = asyncio.Event()

    async def build(self, request: BuildRequest, lane: BuildLane, user: BuildUser) -> BuildResult:
        self.started.set()
        await self.go.wait()
        return BuildResult(BuildStatus.timeout, error="build timed out")


class _Users:
    """The lane's build-user pool, without n8n: hands out one user and counts releases."""

    def __init__(self, user: BuildUser) -> None:
        self.user = user
        self.released = 0

    async def acquire(self, credentials: Any, *, mcp_key: bool = False) -> BuildUser:
        return self.user

    async def release(self, user: BuildUser, *, keep: bool = False) -> list[Any]:
        await asyncio.sleep(0)
        self.released += 1
        return []


class _WatchedLane(Lane):
    """A lane that counts how often its state is read (what the unit runner's settle() looks at)."""

    state_reads = 0

    @property
    def state(self) -> LaneState:
        self.state_reads += 1
        return self._state

    @state.setter
    def state(self, value: LaneState) -> None:
        self._state = value


class _Setup:
    def __init__(self, tmp_path: Path) -> None:
        loaded, issues = load_disk([REPO / "cases" / "seeded-repair-vat-code-attach.json"])
        assert not issues
        self.case = loaded[0]
        self.lane = _WatchedLane("cancel-0", 0, "http://127.0.0.1:9", "process", "cancel-test")
        self.client = N8nClient(self.lane.base_url)
        owner = N8nSession(self.client, "cookie", {"id": "owner"})
        self.users = _Users(BuildUser("member", "m@x.invalid", owner, None, "project"))
        ctx = BuildLane(self.lane, self.client, owner, self.users)
        self.builder = _GatedBuilder(BuilderSettings(run_id="cancel-test", run_dir=tmp_path, model="scripted"))
        self.runner = UnitRunner({self.case.slug: self.case}, {self.lane.lane_id: ctx}, self.builder,
                                 Judge(JudgeConfig(api_key=None)),
                                 UnitSettings(max_attempts=1, timeout_ms=60_000, build_timeout_ms=60_000,
                                              keep_workflows=False))
        self.written: list[UnitResult] = []
        self.writing = asyncio.Event()
        self.write_done = asyncio.Event()

        async def persist(record: UnitResult) -> None:  # a slow fsync in a worker thread
            self.writing.set()
            await self.write_done.wait()
            self.written.append(record)

        self.runner.persist = persist

    def start(self) -> asyncio.Task[Any]:
        return asyncio.create_task(self.runner(self.lane.lane_id, WorkUnit(self.case.slug, 0), 0))


async def test_a_unit_cancelled_while_its_record_is_written_finishes_once(tmp_path: Path) -> None:
    s = _Setup(tmp_path)
    task = s.start()
    s.builder.go.set()
    await asyncio.wait_for(s.writing.wait(), 10)
    task.cancel()  # the drain of a lane that died just now
    await settle()
    assert not task.done()  # the record is still being written: the unit waits for it
    s.write_done.set()
    outcome, record = await asyncio.wait_for(task, 10)
    assert not task.cancelled() and outcome is Outcome.done
    assert s.written == [record] and record.build.status == BuildStatus.timeout
    await asyncio.wait_for(s.runner.settle(), 10)  # the user's clean-up runs after the unit is done
    assert s.users.released == 1
    await s.client.aclose()


async def test_a_unit_cancelled_before_it_finished_is_cancelled_and_writes_nothing(tmp_path: Path) -> None:
    s = _Setup(tmp_path)
    task = s.start()
    await asyncio.wait_for(s.builder.started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert s.written == [] and s.users.released == 1
    await s.client.aclose()


async def test_run_to_end_raises_only_its_own_cancellation() -> None:
    inner_go = asyncio.Event()

    async def work() -> str:
        await inner_go.wait()
        return "done"

    async def caller() -> str:
        return await run_to_end(work())

    task = asyncio.create_task(caller())
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0)
    task.cancel()  # twice: both absorbed
    inner_go.set()
    assert await task == "done" and task.cancelling() == 0


async def _done_with_a_hung_clean_up(s: _Setup) -> tuple[Outcome, Any]:
    """Run the unit to its end on a lane whose clean-up never ends (it stopped answering); return
    the unit's answer once its clean-up has begun."""
    s.write_done.set()
    cleaning, never = asyncio.Event(), asyncio.Event()

    async def hung_release(user: BuildUser, *, keep: bool = False) -> list[Any]:
        cleaning.set()
        await never.wait()
        return []

    s.users.release = hung_release  # type: ignore[method-assign]
    task = s.start()
    s.builder.go.set()
    answer = await asyncio.wait_for(task, 10)
    await asyncio.wait_for(cleaning.wait(), 10)
    return answer


async def test_a_unit_is_done_while_its_user_is_cleaned_up_and_an_interrupt_abandons_the_clean_up(
        tmp_path: Path) -> None:
    """The lane's slot is given back once the record is written; the clean-up runs on its own
    (issue 25). An interrupted run abandons it: the user goes with the lane, as for a drained one."""
    s = _Setup(tmp_path)
    outcome, record = await _done_with_a_hung_clean_up(s)  # done although the clean-up never ends
    assert outcome is Outcome.done and s.written == [record]
    settling = asyncio.create_task(s.runner.settle())
    await settle()
    assert not settling.done()  # the run's end waits for clean-ups...
    s.runner.abandon_cleanups()  # ...unless it was interrupted
    await asyncio.wait_for(settling, 10)
    await s.client.aclose()


async def test_the_runs_end_cancels_the_clean_up_of_a_lane_that_died_meanwhile(tmp_path: Path) -> None:
    """A lane that stopped answering would hold the run's end for its requests' timeouts: its
    clean-up is cancelled and its user goes with the lane (as the drain cancelled it before)."""
    s = _Setup(tmp_path)
    await _done_with_a_hung_clean_up(s)
    settling = asyncio.create_task(s.runner.settle())
    assert isinstance(s.lane, _WatchedLane)
    looked = s.lane.state_reads
    # settle() looks at the lane once a round: two looks, and a wait between them, at a live lane
    await eventually_async(lambda: s.lane.state_reads >= looked + 2, what="settle() looked at the lane twice")
    assert not settling.done()  # a live lane's clean-up is waited for
    s.lane.state = LaneState.dead
    await asyncio.wait_for(settling, 5)
    await s.client.aclose()
