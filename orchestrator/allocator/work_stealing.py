"""The allocator: a thin async executor over the scheduler and lane health.

Three parts, each readable on its own:

* :mod:`orchestrator.allocator.scheduler` -- synchronous and pure: queues, which unit starts on
  which lane, lane speeds (:mod:`orchestrator.allocator.speeds`), the endgame;
* :mod:`orchestrator.allocator.health` -- quarantine, re-probe, drain, the abort timer;
* this module -- the public :class:`Allocator`: runs each started unit as a task, turns the
  worker's outcome into a retry or a final result, and reports events and results.

Outcomes. The worker is ``worker(lane_id, unit, attempt) -> (Outcome, value)``; ``attempt``
counts from 1. A unit survives ``max_lane_fault_retries`` lane faults (requeued elsewhere); one
more finishes it as ``lane_failure``. ``Outcome.retry_elsewhere`` retries up to
``max_retries_elsewhere`` times, then the unit finishes as ``failed``; with ``None`` the worker
decides alone (it answers ``done`` once its unit has no attempt left: the run's units do). A requeued unit goes to the
front of another lane's queue and is not taken by the lane that just failed it while another lane
accepts work. A drained lane's in-flight builds count as a lane fault for their unit.

Results reach ``on_result`` as units finish (a sync callback: write the record, don't block).
Not thread-safe: call every method on the event loop's thread (for SIGINT use
``loop.add_signal_handler`` and call ``stop_new`` from there). ``bench/allocator.py`` measures the
schedule against a lower bound.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.redact import redact

from .health import LaneHealth, Probe
from .model import (
    AllocatorEvent,
    AllocatorStats,
    EventKind,
    LaneStats,
    Outcome,
    ResultStatus,
    WorkResult,
    WorkUnit,
)
from .scheduler import Entry, ExpectedSource, Lane, Scheduler

log = logging.getLogger(__name__)

Worker = Callable[[str, WorkUnit, int], Awaitable[tuple[Outcome, Any]]]
EventHook = Callable[[AllocatorEvent], None]
ResultHook = Callable[[WorkResult], None]

__all__ = ["Allocator", "EventHook", "Probe", "ResultHook", "Worker"]


class Allocator:
    def __init__(
        self,
        lanes: Sequence[str],
        *,
        per_lane_cap: int = 4,
        global_cap: int | None = None,
        seed: int = 0,
        quarantine_after: int = 3,
        reprobe_interval_s: float = 30.0,
        abort_after_all_quarantined_s: float = 300.0,
        max_lane_fault_retries: int = 1,
        max_retries_elsewhere: int | None = 2,
        probe: Probe | None = None,
        on_event: EventHook | None = None,
        on_result: ResultHook | None = None,
        steal: bool = True,
        co_located: bool = False,
    ) -> None:
        """``global_cap=None`` means 2 x the lanes not drained (recomputed as lanes come and go).
        ``steal=False`` gives static sharding (each lane runs only its own queue), for comparison.
        ``co_located``: the lanes share one machine (process and Docker lanes), so they differ in
        speed only by when they were measured: builds are spread evenly, every idle lane first."""
        _require(per_lane_cap >= 1, f"per_lane_cap must be >= 1, got {per_lane_cap}")
        _require(global_cap is None or global_cap >= 1, f"global_cap must be >= 1, got {global_cap}")
        _require(quarantine_after >= 1, f"quarantine_after must be >= 1, got {quarantine_after}")
        _require(reprobe_interval_s > 0, f"reprobe_interval_s must be > 0, got {reprobe_interval_s}")
        _require(
            abort_after_all_quarantined_s >= 0,
            f"abort_after_all_quarantined_s must be >= 0, got {abort_after_all_quarantined_s}",
        )
        _require(max_lane_fault_retries >= 0, f"max_lane_fault_retries must be >= 0, got {max_lane_fault_retries}")
        _require(max_retries_elsewhere is None or max_retries_elsewhere >= 0,
                 f"max_retries_elsewhere must be >= 0, got {max_retries_elsewhere}")
        self.per_lane_cap = per_lane_cap
        self.max_lane_fault_retries = max_lane_fault_retries
        self.max_retries_elsewhere = max_retries_elsewhere
        self.steal = steal
        self._on_event = on_event
        self._on_result = on_result
        self._sched = Scheduler(lanes, per_lane_cap=per_lane_cap, global_cap=global_cap, seed=seed, steal=steal,
                                co_located=co_located, now=_now())
        self._health = LaneHealth(self._sched, self, quarantine_after=quarantine_after,
                                  reprobe_interval_s=reprobe_interval_s,
                                  abort_after_all_quarantined_s=abort_after_all_quarantined_s, probe=probe)
        self._keys: set[str] = set()
        self._pending = 0
        self._results: list[WorkResult] = []
        self._worker: Worker | None = None
        self._started_run = False
        self._all_final = asyncio.Event()
        self._crash: BaseException | None = None
        self._stop_reason: str | None = None
        self._cancel_reason: str | None = None

    # ----------------------------------------------------------------- public API

    @property
    def global_cap(self) -> int:
        return self._sched.global_cap

    def set_global_cap(self, cap: int | None) -> None:
        """Change the global cap while the run goes (the model gateway's concurrency rule; 0 while
        the provider is down): a higher cap starts waiting units at once, a lower one lets running
        builds finish. None: the default again (2 x the lanes not drained)."""
        _require(cap is None or cap >= 0, f"global_cap must be >= 0, got {cap}")
        self._sched.set_global_cap(cap)
        self.schedule()

    @property
    def quarantine_after(self) -> int:
        return self._health.quarantine_after

    @property
    def reprobe_interval_s(self) -> float:
        return self._health.reprobe_interval_s

    @property
    def abort_after_all_quarantined_s(self) -> float:
        return self._health.abort_after_all_quarantined_s

    def submit(
        self,
        units: Iterable[WorkUnit],
        *,
        lane: str | None = None,
        expected_s: ExpectedSource = None,
    ) -> None:
        """Queue units. ``lane`` puts them all on that lane's queue (others may steal them).

        ``expected_s`` (seconds per case slug, or a function of the unit; missing or non-positive:
        unknown, ordered last) makes the queues longest expected first."""
        units = list(units)
        for unit in units:
            if unit.key in self._keys:
                raise ValueError(f"unit {unit.key} was submitted twice")
        target = self._sched.lane(lane) if lane is not None else None
        if target is not None and target.dead:
            raise ValueError(f"lane {lane} is drained: it takes no units")
        entries = self._sched.prepare(units, expected_s)
        self._keys.update(e.unit.key for e in entries)
        self._pending += len(entries)
        if self._pending:
            self._all_final.clear()
        homes = self._sched.homes()
        for entry in entries:
            if self._refuse_waiting(entry, None):
                continue
            home = self._sched.deal(entry, target, homes)
            self.emit(EventKind.queued, lane=home.lane_id if home else None, unit=entry.unit)
        self._health.update_abort_timer()
        self.schedule()

    async def run(self, worker: Worker) -> list[WorkResult]:
        """Run every submitted unit (and any submitted meanwhile) to a final result; results come
        back in the order units finished."""
        if self._started_run:
            raise RuntimeError("Allocator.run() can only be called once")
        self._started_run = True
        self._worker = worker
        try:
            self._health.update_abort_timer()
            self.schedule()
            if self._pending:
                await self._all_final.wait()
            if self._crash is not None:
                raise RuntimeError("allocator bookkeeping failed") from self._crash
            return list(self._results)
        finally:
            self._worker = None
            self._health.close()
            for entry in [e for lane in self._sched.lanes.values() for e in lane.running]:
                if entry.task is not None:
                    entry.task.cancel()

    def drain(self, lane_id: str, reason: str) -> None:
        """Retire a lane: move its queue elsewhere, cancel its builds (each a lane fault for its unit)."""
        lane = self._sched.lane(lane_id)
        if not lane.dead:
            self._health.drain(lane, redact(reason))

    def add_lane(self, lane_id: str) -> None:
        """A (replacement) lane joins the pool. A drained lane id may come back as a fresh lane."""
        self._sched.add_lane(lane_id, _now())
        self.emit(EventKind.lane_added, lane=lane_id)
        self._health.end_abort()
        self._health.update_abort_timer()
        self.schedule()

    def stop_new(self, reason: str) -> None:
        """Start nothing more; waiting units finish as ``skipped``; running ones complete normally."""
        if self._stop_reason is not None:
            return
        self._stop_reason = redact(reason)
        self.emit(EventKind.stopped, reason=self._stop_reason)
        self.finish_waiting(ResultStatus.skipped, self._stop_reason)
        self._health.update_abort_timer()

    def cancel(self, reason: str = "cancelled") -> None:
        """Hard stop: waiting and running units finish as ``cancelled`` (running ones once their
        worker has unwound)."""
        if self._cancel_reason is not None:
            return
        self._cancel_reason = redact(reason)
        if self._stop_reason is None:
            self._stop_reason = self._cancel_reason
        self.emit(EventKind.cancelled, reason=self._cancel_reason)
        self.finish_waiting(ResultStatus.cancelled, self._cancel_reason)
        for lane in self._sched.lanes.values():
            self._cancel_running(lane, self._cancel_reason)
        self._health.update_abort_timer()

    def stats(self) -> AllocatorStats:
        """A snapshot of the pool now: per lane its running, queued, started and stolen units and its
        health, and the totals over lanes."""
        sched = self._sched
        return AllocatorStats(
            lanes={
                lane.lane_id: LaneStats(
                    lane=lane.lane_id,
                    active=len(lane.running),
                    queued=len(lane.queue),
                    max_active=lane.max_active,
                    started=lane.started,
                    stolen=lane.stolen,
                    quarantined=lane.quarantined,
                    dead=lane.dead,
                    consecutive_transport_failures=lane.consecutive_transport_failures,
                )
                for lane in sched.lanes.values()
            },
            active=sched.running,
            max_active=sched.max_running,
            queued=sched.queued,
            steals=sched.steals,
            pending=self._pending,
            finished=len(self._results),
        )

    @property
    def results(self) -> list[WorkResult]:
        """The results of the units final so far, in the order they finished (a copy)."""
        return list(self._results)

    # ----------------------------------------------------------------- the health host

    def live(self) -> bool:
        """The run is on (``run`` called, not stopped) with units not final."""
        return self._worker is not None and self._stop_reason is None and self._pending > 0

    def schedule(self) -> None:
        """Start what the scheduler picks, each as a task running the worker."""
        if (self._worker is None or self._stop_reason is not None or self._health.abort_reason is not None
                or self._crash is not None):
            return
        for start in self._sched.pick(_now()):
            lane, entry = start.lane, start.entry
            if start.victim is not None:
                self.emit(EventKind.stolen, lane=lane.lane_id, unit=entry.unit, from_lane=start.victim.lane_id)
            self.emit(EventKind.started, lane=lane.lane_id, unit=entry.unit, attempt=entry.attempts)
            task = asyncio.get_running_loop().create_task(
                self._execute(self._worker, lane, entry), name=f"allocator:{entry.unit.key}@{lane.lane_id}"
            )
            entry.task = task
            task.add_done_callback(self.on_task_done)

    def requeue_from(self, lane: Lane, moved: list[Entry], reason: str) -> None:
        """Place ``moved`` (drained ``lane``'s former queue) on other lanes, avoiding ``lane``, and cancel its
        running builds; a unit that may not wait (cancel, stop or abort under way) finishes instead."""
        for entry in moved:
            if not self._refuse_waiting(entry, None):
                self._place(entry, avoid=lane.lane_id, front=False, reason=f"drained: {reason}")
        self._cancel_running(lane, f"lane {lane.lane_id} drained: {reason}")

    def on_task_done(self, task: asyncio.Task[None]) -> None:
        """Done-callback of every task the allocator starts: an exception there is a bug in the bookkeeping,
        so it is logged and :meth:`run` ends with ``RuntimeError`` from it."""
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("allocator bookkeeping failed", exc_info=exc)
            self._crash = exc
            self._all_final.set()

    def finish_waiting(self, status: ResultStatus, reason: str) -> None:
        """Finish every waiting (not running) unit with ``status`` and ``reason``, without running it."""
        for entry in self._sched.take_waiting():
            self._finish(entry, None, status, entry.last_value, reason)

    def emit(
        self,
        kind: EventKind,
        *,
        lane: str | None = None,
        unit: WorkUnit | None = None,
        from_lane: str | None = None,
        attempt: int = 0,
        status: ResultStatus | None = None,
        reason: str | None = None,
    ) -> None:
        """Hand one :class:`AllocatorEvent` to the ``on_event`` hook, if any; a hook that raises is logged
        and the run goes on."""
        if self._on_event is None:
            return
        event = AllocatorEvent(kind, _now(), lane, unit, from_lane, attempt, status, reason)
        try:
            self._on_event(event)
        except Exception:
            log.exception("on_event hook failed for %s", kind.value)

    # ----------------------------------------------------------------- running a unit

    async def _execute(self, worker: Worker, lane: Lane, entry: Entry) -> None:
        outcome: Outcome | None = None
        value: Any = None
        error: Exception | None = None
        try:
            answer = await worker(lane.lane_id, entry.unit, entry.attempts)
            outcome, value = (answer, None) if isinstance(answer, Outcome) else answer
            if not isinstance(outcome, Outcome):
                raise TypeError(f"worker must return (Outcome, value), got {type(answer).__name__}")
        except asyncio.CancelledError:
            if entry.cancel_reason is None:  # not ours: the whole run is being torn down
                self._release(lane, entry)
                raise
        except Exception as exc:  # a worker bug must not hang the run
            error = exc
        cancel_reason, entry.cancel_reason = entry.cancel_reason, None
        if outcome is Outcome.done:
            self._sched.learn(lane, entry, _now())
        self._release(lane, entry)
        if outcome is None and error is None:  # cancelled by drain() or cancel()
            self._settle_cancelled(lane, entry, cancel_reason or "cancelled")
        elif error is not None:
            log.warning("worker raised on %s for %s: %s", lane.lane_id, entry.unit.key, type(error).__name__)
            self._finish(entry, lane, ResultStatus.failed, error, f"worker raised {type(error).__name__}")
        else:
            assert outcome is not None
            self._settle(lane, entry, outcome, value)
        self.schedule()

    def _release(self, lane: Lane, entry: Entry) -> None:
        self._sched.release(lane, entry, _now())
        entry.task = None

    def _cancel_running(self, lane: Lane, reason: str) -> None:
        for entry in list(lane.running):
            if entry.task is not None and entry.cancel_reason is None:
                entry.cancel_reason = reason
                entry.task.cancel()

    # ----------------------------------------------------------------- outcomes

    def _settle(self, lane: Lane, entry: Entry, outcome: Outcome, value: Any) -> None:
        entry.last_value = value
        self._health.answered(lane, lane_fault=outcome is Outcome.lane_fault)
        if outcome is Outcome.lane_fault:
            self._lane_fault(lane, entry, f"lane fault on {lane.lane_id}")
        elif outcome is Outcome.done:
            self._finish(entry, lane, ResultStatus.done, value, None)
        elif self.max_retries_elsewhere is not None and entry.retries_elsewhere >= self.max_retries_elsewhere:
            entry.retries_elsewhere += 1
            self._finish(entry, lane, ResultStatus.failed, value, f"no success after {entry.attempts} attempts")
        else:
            entry.retries_elsewhere += 1
            self._retry(lane, entry, f"retry elsewhere after attempt {entry.attempts} on {lane.lane_id}")

    def _settle_cancelled(self, lane: Lane, entry: Entry, reason: str) -> None:
        if self._cancel_reason is not None:
            self._finish(entry, lane, ResultStatus.cancelled, entry.last_value, reason)
        else:
            self._lane_fault(lane, entry, reason)

    def _lane_fault(self, lane: Lane, entry: Entry, reason: str) -> None:
        entry.lane_faults += 1
        if entry.lane_faults > self.max_lane_fault_retries:
            self._finish(entry, lane, ResultStatus.lane_failure, entry.last_value, reason)
        else:
            self._retry(lane, entry, reason)

    def _retry(self, lane: Lane, entry: Entry, reason: str) -> None:
        entry.avoid_lane = lane.lane_id
        if self._refuse_waiting(entry, lane):
            return
        self._place(entry, avoid=lane.lane_id, front=True, reason=reason)

    def _place(self, entry: Entry, *, avoid: str | None, front: bool, reason: str) -> None:
        home = self._sched.place(entry, avoid=avoid, front=front)
        self.emit(
            EventKind.requeued,
            lane=home.lane_id if home else None,
            unit=entry.unit,
            from_lane=avoid,
            attempt=entry.attempts,
            reason=reason,
        )

    def _refuse_waiting(self, entry: Entry, lane: Lane | None) -> bool:
        """Finish a unit that would wait, when nothing more may start; True when it was finished."""
        if self._cancel_reason is not None:
            self._finish(entry, lane, ResultStatus.cancelled, entry.last_value, self._cancel_reason)
        elif self._stop_reason is not None:
            self._finish(entry, lane, ResultStatus.skipped, entry.last_value, self._stop_reason)
        elif self._health.abort_reason is not None:
            self._finish(entry, lane, ResultStatus.aborted, entry.last_value, self._health.abort_reason)
        else:
            return False
        return True

    def _finish(self, entry: Entry, lane: Lane | None, status: ResultStatus, value: Any, reason: str | None) -> None:
        self._sched.forget(entry)
        result = WorkResult(
            unit=entry.unit,
            lane=lane.lane_id if lane is not None else None,
            status=status,
            value=value,
            attempts=entry.attempts,
            reason=reason,
            lanes_tried=tuple(entry.lanes_tried),
            finished_at=_now(),
        )
        self._results.append(result)
        self._pending -= 1
        self.emit(EventKind.finished, lane=result.lane, unit=entry.unit, attempt=entry.attempts, status=status,
                  reason=reason)
        if self._on_result is not None:
            try:
                self._on_result(result)
            except Exception:
                log.exception("on_result hook failed for %s", entry.unit.key)
        if self._pending == 0:
            self._all_final.set()


def _now() -> float:
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)
