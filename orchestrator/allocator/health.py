"""Lane health: quarantine, re-probe, drain, and the abort timer.

* ``Outcome.lane_fault`` is a transport-level failure. ``quarantine_after`` consecutive ones
  quarantine the lane (no new units); any other outcome resets the count. A quarantined lane is
  re-probed every ``reprobe_interval_s`` with ``probe(lane_id)``; a passing probe un-quarantines it.
  Without a probe a quarantined lane stays quarantined.
* :meth:`LaneHealth.drain` retires a lane for good: its queue moves to the other lanes, its
  in-flight builds are cancelled (the executor counts each as a lane fault for its unit).
* When no lane has accepted work (all quarantined or dead) for ``abort_after_all_quarantined_s``
  continuously, every waiting unit -- and any unit requeued while that lasts -- finishes as
  ``aborted``. A lane coming back ends the abort.

The timers are asyncio tasks on the running loop; what they do to units goes through the
:class:`HealthHost` (the executor), and what they do to lanes through the
:class:`~orchestrator.allocator.scheduler.Scheduler`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from .model import EventKind, ResultStatus
from .scheduler import Entry, Lane, Scheduler

log = logging.getLogger(__name__)

Probe = Callable[[str], Awaitable[bool]]


class HealthHost(Protocol):
    """What lane health needs from the executor."""

    def emit(self, kind: EventKind, *, lane: str | None = None, reason: str | None = None) -> None: ...

    def live(self) -> bool:
        """The run is on (``run`` called, not stopped) with units not final."""
        ...

    def finish_waiting(self, status: ResultStatus, reason: str) -> None: ...

    def requeue_from(self, lane: Lane, moved: list[Entry], reason: str) -> None:
        """Place ``moved`` (``lane``'s former queue) elsewhere and cancel ``lane``'s running builds."""
        ...

    def schedule(self) -> None: ...

    def on_task_done(self, task: asyncio.Task[None]) -> None: ...


class LaneHealth:
    def __init__(self, scheduler: Scheduler, host: HealthHost, *, quarantine_after: int,
                 reprobe_interval_s: float, abort_after_all_quarantined_s: float,
                 probe: Probe | None) -> None:
        self._sched = scheduler
        self._host = host
        self.quarantine_after = quarantine_after
        self.reprobe_interval_s = reprobe_interval_s
        self.abort_after_all_quarantined_s = abort_after_all_quarantined_s
        self._probe = probe
        self.abort_reason: str | None = None
        self._abort_timer: asyncio.Task[None] | None = None

    # ----------------------------------------------------------------- outcomes

    def answered(self, lane: Lane, *, lane_fault: bool) -> None:
        """A worker answered on ``lane``: a lane fault counts towards quarantine, anything else resets."""
        if not lane_fault:
            lane.consecutive_transport_failures = 0
            return
        lane.consecutive_transport_failures += 1
        if lane.consecutive_transport_failures >= self.quarantine_after and lane.accepting:
            self.quarantine(lane)

    # ----------------------------------------------------------------- quarantine

    def quarantine(self, lane: Lane) -> None:
        """Stop new units on ``lane``, emit ``quarantined`` and, with a probe, re-probe it every
        ``reprobe_interval_s`` until a probe passes or the lane is drained."""
        self._sched.set_quarantined(lane, True)
        reason = f"{lane.consecutive_transport_failures} consecutive transport failures"
        log.warning("lane %s quarantined: %s", lane.lane_id, reason)
        self._host.emit(EventKind.quarantined, lane=lane.lane_id, reason=reason)
        if self._probe is not None:
            lane.probe_task = asyncio.get_running_loop().create_task(
                self._reprobe(lane), name=f"allocator:reprobe@{lane.lane_id}"
            )
            lane.probe_task.add_done_callback(self._host.on_task_done)
        self.update_abort_timer()

    def _unquarantine(self, lane: Lane) -> None:
        self._sched.set_quarantined(lane, False)
        lane.consecutive_transport_failures = 0
        log.info("lane %s back from quarantine", lane.lane_id)
        self._host.emit(EventKind.unquarantined, lane=lane.lane_id, reason="probe passed")
        self.end_abort()
        self.update_abort_timer()
        self._host.schedule()

    async def _reprobe(self, lane: Lane) -> None:
        assert self._probe is not None
        try:
            while lane.quarantined and not lane.dead:
                await asyncio.sleep(self.reprobe_interval_s)
                try:
                    healthy = bool(await self._probe(lane.lane_id))
                except Exception as exc:
                    healthy = False
                    log.info("probe of lane %s raised %s", lane.lane_id, type(exc).__name__)
                if not lane.quarantined or lane.dead:
                    return
                if healthy:
                    self._unquarantine(lane)
                    return
                self._host.emit(EventKind.probe_failed, lane=lane.lane_id)
        finally:
            if lane.probe_task is asyncio.current_task():
                lane.probe_task = None

    # ----------------------------------------------------------------- drain

    def drain(self, lane: Lane, reason: str) -> None:
        """Retire ``lane`` for good (``reason`` already redacted)."""
        if lane.dead:
            return
        moved = self._sched.retire(lane)
        _cancel_task(lane.probe_task)
        lane.probe_task = None
        log.info("lane %s drained: %s", lane.lane_id, reason)
        self._host.emit(EventKind.drained, lane=lane.lane_id, reason=reason)
        self._host.requeue_from(lane, moved, reason)
        self.update_abort_timer()
        self._host.schedule()

    # ----------------------------------------------------------------- abort

    def update_abort_timer(self) -> None:
        """Keep a timer running exactly while the run is live and no lane accepts work."""
        wanted = self._host.live() and self._sched.accepting == 0 and self.abort_reason is None
        if wanted and self._abort_timer is None:
            self._abort_timer = asyncio.get_running_loop().create_task(
                self._abort_when_due(), name="allocator:abort-timer"
            )
            self._abort_timer.add_done_callback(self._host.on_task_done)
        elif not wanted and self._abort_timer is not None:
            _cancel_task(self._abort_timer)
            self._abort_timer = None

    async def _abort_when_due(self) -> None:
        await asyncio.sleep(self.abort_after_all_quarantined_s)
        self._abort_timer = None
        if self._sched.accepting != 0:
            return
        self.abort_reason = (
            f"no lane accepted work for {self.abort_after_all_quarantined_s:g} s (all quarantined or drained)"
        )
        log.error("allocator: %s; aborting waiting units", self.abort_reason)
        self._host.emit(EventKind.aborted, reason=self.abort_reason)
        self._host.finish_waiting(ResultStatus.aborted, self.abort_reason)

    def end_abort(self) -> None:
        """End an abort once some lane accepts work again (units already aborted stay aborted)."""
        if self.abort_reason is not None and self._sched.accepting > 0:
            self.abort_reason = None

    def close(self) -> None:
        """Stop every timer (the run is over)."""
        _cancel_task(self._abort_timer)
        self._abort_timer = None
        for lane in self._sched.lanes.values():
            _cancel_task(lane.probe_task)
            lane.probe_task = None


def _cancel_task(task: asyncio.Task[None] | None) -> None:
    if task is not None and not task.done():
        task.cancel()
