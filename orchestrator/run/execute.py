"""Execute stage: every unit through the allocator on the pool; each finished unit is recorded
(``units.jsonl`` + ``eval-results.json``) the moment it finishes, then handed to the observers.

A health monitor drains a lane that stops answering (process died, container gone) within a few
seconds; the allocator announces the drain, and the observers mirror it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from orchestrator.allocator import Allocator, Worker, WorkUnit
from orchestrator.allocator.model import ResultStatus, WorkResult
from orchestrator.lanes.backend import LaneBackend
from orchestrator.lanes.model import Lane, LaneState
from orchestrator.redact import redact
from orchestrator.results.model import UnitResult
from orchestrator.results.writer import ResultsWriteError, ResultsWriter
from orchestrator.run.config import RunConfig
from orchestrator.run.observers import RunObserver
from orchestrator.run.provision import Pool
from orchestrator.run.unit import UnitRunner

log = logging.getLogger(__name__)


def record_for(res: WorkResult, runner: UnitRunner) -> UnitResult:
    """The unit record for the allocator's final word on a unit."""
    if res.status == ResultStatus.done and isinstance(res.value, UnitResult):
        return res.value
    if res.status == ResultStatus.lane_failure:
        return runner.lane_failure_record(res.unit, res.lane, redact(str(res.value or res.reason or "lane failure")))
    if res.status == ResultStatus.aborted:  # every lane was lost for the abort window: the framework's
        # failure, counted as n8n counts a build whose lane wait was aborted (a framework_issue row)
        return runner.lane_failure_record(res.unit, res.lane, redact(res.reason or "every lane was lost"))
    if res.status == ResultStatus.failed:
        value = res.value
        reason = f"{type(value).__name__}: {value}" if isinstance(value, BaseException) else str(value or res.reason)
        if isinstance(value, BaseException):
            log.error("unit %s crashed: %s", res.unit.key, redact(reason))
        return runner.error_record(res.unit, res.lane, redact(reason))
    return runner.skipped_record(res.unit, redact(res.reason or res.status.value))


#: Health checks in flight at once (each one HTTP request to a lane).
HEALTH_CHECKS_AT_ONCE = 64


async def monitor(cfg: RunConfig, backend: LaneBackend, pool: Pool, allocator: Allocator,
                  on_lost: Callable[[str, str], object] | None = None) -> None:
    """Drain a lane that stops answering (gone at once, or after two failed health checks) and
    report it to ``on_lost`` (the provisioner replaces it while units still wait)."""
    misses: dict[str, int] = {}
    gate = asyncio.Semaphore(HEALTH_CHECKS_AT_ONCE)

    async def check(lane: Lane) -> tuple[Lane, bool, bool]:
        async with gate:
            healthy = await backend.health(lane)
            return lane, healthy, not healthy and await backend.is_gone(lane)

    while True:
        await asyncio.sleep(cfg.health_interval_s)
        # every ready lane at once (500 lanes one after another would take a whole interval)
        results = await asyncio.gather(*(check(lane) for lane in list(pool.lanes.values())
                                         if lane.state == LaneState.ready))
        for lane, healthy, gone in results:
            if lane.state != LaneState.ready:  # drained or replaced while the checks ran
                continue
            misses[lane.lane_id] = 0 if healthy else misses.get(lane.lane_id, 0) + 1
            if gone or misses[lane.lane_id] >= 2:
                reason = "lane process exited" if gone else "health check failed twice"
                allocator.drain(lane.lane_id, reason)
                if on_lost is not None and allocator.stats().pending:
                    on_lost(lane.lane_id, reason)


def make_allocator(cfg: RunConfig, backend: LaneBackend, pool: Pool, runner: UnitRunner, writer: ResultsWriter,
                   observer: RunObserver, errors: list[str], *, global_cap: int | None = None,
                   settle: Callable[[UnitResult], None] | None = None) -> Allocator:
    """``global_cap``: the cap to start with (default ``cfg.global_cap``); ``settle``: completes a
    unit's record before it is written (the model gateway's cost and outage attribution)."""
    async def probe(lane_id: str) -> bool:
        return await backend.health(pool.lanes[lane_id])

    allocator: Allocator
    persisted: set[int] = set()

    def write_failed(exc: ResultsWriteError) -> None:  # the record is kept in memory by the writer
        if not any("cannot write" in e for e in errors):
            errors.append(redact(str(exc)))
        allocator.stop_new(f"results cannot be written: {exc}")

    async def persist(record: UnitResult) -> None:
        """A built unit's record, fsynced in a worker thread while its lane slot is still held: a
        write failure stops new builds before the next one can start."""
        persisted.add(id(record))
        if settle is not None:
            settle(record)
        try:
            await writer.add_async(record)
        except ResultsWriteError as exc:
            write_failed(exc)

    def on_result(res: WorkResult) -> None:
        record = record_for(res, runner)
        if id(record) not in persisted:  # lane failures, crashes, skips: rare, written here
            if settle is not None:
                settle(record)
            try:
                writer.add(record)
            except ResultsWriteError as exc:
                write_failed(exc)
        persisted.discard(id(record))
        observer.on_unit(record)

    runner.persist = persist

    allocator = Allocator(
        list(pool.joined),  # the lanes that joined so far; later ones join with add_lane
        per_lane_cap=cfg.per_lane_builds, global_cap=global_cap or cfg.global_cap, seed=cfg.seed,
        reprobe_interval_s=cfg.reprobe_interval_s, abort_after_all_quarantined_s=cfg.abort_after_all_quarantined_s,
        # --build-max-attempts is the unit's to count (run/unit.py): it answers done when none is left
        max_retries_elsewhere=None, probe=probe, co_located=backend.co_located,
        on_event=observer.on_event, on_result=on_result,
    )
    return allocator


async def execute(cfg: RunConfig, backend: LaneBackend, pool: Pool, allocator: Allocator, runner: UnitRunner,
                  units: list[WorkUnit], observer: RunObserver, *,
                  expected_s: Mapping[str, float] | None = None,
                  on_lost: Callable[[str, str], object] | None = None,
                  worker: Worker | None = None) -> None:
    """``worker``: what runs a unit on a lane (default ``runner``; the model gateway wraps it)."""
    allocator.submit(units, expected_s=expected_s)  # longest expected first (history, else complexity)
    observer.on_queued(len(units))
    watch = asyncio.create_task(monitor(cfg, backend, pool, allocator, on_lost))
    try:
        await allocator.run(worker or runner)
    except BaseException:
        runner.abandon_cleanups()  # interrupted: their users go with the lanes, as for a drained lane
        raise
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await runner.settle()  # the finished units' clean-ups, before results and teardown
        for failure in runner.cleanup_failures:  # retried at teardown; what stays open is reported there
            log.warning("during the run: %s", failure)
