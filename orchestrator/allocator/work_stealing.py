"""Work-stealing allocator: which lane runs which (case, iteration), and what happens when a lane fails.

Every lane has its own FIFO queue. ``submit`` shuffles the units with a seeded RNG and deals them
round-robin over the lanes, so a seed fixes the schedule. A lane with a free slot takes the first
unit of its own queue it may run; with nothing of its own it steals from the tail of the most
loaded queue (quarantined lanes' queues first: nobody else drains them).

Longest expected first: ``submit(units, expected_s=...)`` (seconds per case slug, or a function of
the unit; see :mod:`orchestrator.allocator.durations`) sorts the shuffled units longest first
before dealing them (ties keep the seeded shuffle, so iterations of one case still land on
different lanes), and keeps every queue in that order. Then a lane with a free slot runs the
longest waiting unit of the pool (its own queue's head, or a longer head elsewhere), a thief steals
from the head instead of the tail, and the allocator learns each lane's speed (expected / actual
seconds of its finished units; a lane's second unit is the shortest of its queue, a probe) and
gives free slots to the fastest lanes first -- under a global cap below lanes x per-lane cap, the
fast lanes do more. There, with a long queue, each lane's first two units are probes, and a lane
that looks too slow for a place runs short units until it has finished ``EXPLORE_UNITS``; slots go
by an optimistic speed (``SPEED_SIGMA``), so an unlucky first measure is not final. Near the end of
the queue a slower lane leaves a unit to the faster ones when they would clear the whole queue
sooner than the time the unit would lose on it. The first iteration of each case runs early
(``SCOUT_SPREAD``), the others a little apart (``ITERATION_SPREAD``), and each finished one
corrects the estimate of its waiting siblings (history is per case, so is its error).
``bench/allocator.py`` measures all this against a lower bound.
Without ``expected_s`` the schedule is exactly the plain one above. A lane may run a unit
when it is not quarantined or dead, runs fewer than ``per_lane_cap`` builds ("n8n degrades above
~4 concurrent builds per lane"), is not already building the same case slug, and the global cap
has room. Under the global cap, free slots go to the least-loaded lanes first.

Lane health:

* ``Outcome.lane_fault`` is a transport-level failure. ``quarantine_after`` consecutive ones
  quarantine the lane (no new units); any other outcome resets the count. A quarantined lane is
  re-probed every ``reprobe_interval_s`` with ``probe(lane_id)``; a passing probe un-quarantines it.
  Without a probe a quarantined lane stays quarantined.
* ``drain(lane_id, reason)`` retires a lane for good: its queue moves to the other lanes, its
  in-flight builds are cancelled and count as a lane fault for their unit.
* A unit survives ``max_lane_fault_retries`` lane faults (requeued elsewhere); one more finishes it
  as ``lane_failure``. ``Outcome.retry_elsewhere`` retries up to ``max_retries_elsewhere`` times,
  then the unit finishes as ``failed``. A requeued unit goes to the front of another lane's queue
  and is not taken by the lane that just failed it while another lane accepts work.
* When no lane has accepted work (all quarantined or dead) for ``abort_after_all_quarantined_s``
  continuously, every waiting unit -- and any unit requeued while that lasts -- finishes as
  ``aborted``. A lane coming back ends the abort.

The worker is ``worker(lane_id, unit, attempt) -> (Outcome, value)``; ``attempt`` counts from 1.
Results reach ``on_result`` as units finish (a sync callback: write the record, don't block).
Not thread-safe: call every method on the event loop's thread (for SIGINT use
``loop.add_signal_handler`` and call ``stop_new`` from there).
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import logging
import math
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.redact import redact

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

log = logging.getLogger(__name__)

Worker = Callable[[str, WorkUnit, int], Awaitable[tuple[Outcome, Any]]]
Probe = Callable[[str], Awaitable[bool]]
EventHook = Callable[[AllocatorEvent], None]
ResultHook = Callable[[WorkResult], None]

#: How deep a lane looks into a queue for a unit whose slug it is not already building.
SCAN_DEPTH = 64

#: A lane's speed starts as if it had finished this many median units at speed 1.0.
SPEED_PRIOR_UNITS = 2.0

#: Sigma of log(actual / expected) of one unit on a lane of known speed (history's own error):
#: free slots go to lanes by speed x exp(SPEED_SIGMA / sqrt(median units measured)), an optimistic
#: estimate, so a fast lane that was unlucky in its first units is tried again.
SPEED_SIGMA = 0.3

#: When the global cap leaves a choice of lanes and the queue is long (each slot's share of it at
#: least PROBE_FIRST_SLACK x the longest unit), a lane's first PROBE_UNITS units are its shortest:
#: lane speeds show before the long units are committed to lanes.
PROBE_UNITS = 2
PROBE_FIRST_SLACK = 2.0

#: A lane that looks too slow to get a place under the global cap runs its shortest units until
#: it has finished this many: its speed is measured on short units, not by tying up a long one.
EXPLORE_UNITS = 6

#: With history, the k-th iteration of a case is ordered as if it took (1 - SPREAD x k) of its
#: expected time: iterations of a case start a little apart, so the first to finish corrects the
#: estimate of the ones still waiting (history is per case, and a case's error is shared).
ITERATION_SPREAD = 0.03

#: ... and its first iteration as if it took SCOUT_SPREAD x its expected time: it runs well before
#: its siblings, so even the short cases at the end of the queue (whose iterations would otherwise
#: all start together, too late to learn from each other) have their estimate corrected by then.
SCOUT_SPREAD = 2.0


@dataclass(eq=False)
class _Entry:
    """A unit and its history while it is not final."""

    unit: WorkUnit
    attempts: int = 0
    lane_faults: int = 0
    retries_elsewhere: int = 0
    avoid_lane: str | None = None
    lanes_tried: list[str] = field(default_factory=list)
    last_value: Any = None
    cancel_reason: str | None = None
    expected: float = 0.0  # expected seconds (0: unknown)
    key: float = 0.0  # queue order, largest first: expected, lowered a little for later iterations
    spread: float = 1.0  # key / expected
    queued_on: _Lane | None = None  # the lane whose queue holds it
    started_at: float = 0.0  # loop time of the current attempt's start
    task: asyncio.Task[None] | None = None


@dataclass(eq=False)
class _Lane:
    lane_id: str
    index: int
    queue: deque[_Entry] = field(default_factory=deque)
    running: dict[_Entry, None] = field(default_factory=dict)  # insertion-ordered: deterministic
    slugs: set[str] = field(default_factory=set)
    quarantined: bool = False
    dead: bool = False
    consecutive_transport_failures: int = 0
    max_active: int = 0
    started: int = 0
    stolen: int = 0
    probe_task: asyncio.Task[None] | None = None
    expected_done: float = 0.0  # sum of expected seconds of units finished here
    actual_done: float = 0.0  # their measured seconds
    speed: float = 1.0  # cached estimate, see Allocator._refresh_speeds
    rank_speed: float = 1.0  # the estimate plus its uncertainty: the order free slots are filled in
    probes: int = 0  # speed probes it ran (the shortest units of its queue)
    timed: int = 0  # units with an expected time it finished

    @property
    def accepting(self) -> bool:
        return not self.dead and not self.quarantined


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
        max_retries_elsewhere: int = 2,
        probe: Probe | None = None,
        on_event: EventHook | None = None,
        on_result: ResultHook | None = None,
        steal: bool = True,
    ) -> None:
        """``global_cap=None`` means 2 x the lanes not drained (recomputed as lanes come and go).
        ``steal=False`` gives static sharding (each lane runs only its own queue), for comparison."""
        _require(per_lane_cap >= 1, f"per_lane_cap must be >= 1, got {per_lane_cap}")
        _require(global_cap is None or global_cap >= 1, f"global_cap must be >= 1, got {global_cap}")
        _require(quarantine_after >= 1, f"quarantine_after must be >= 1, got {quarantine_after}")
        _require(reprobe_interval_s > 0, f"reprobe_interval_s must be > 0, got {reprobe_interval_s}")
        _require(
            abort_after_all_quarantined_s >= 0,
            f"abort_after_all_quarantined_s must be >= 0, got {abort_after_all_quarantined_s}",
        )
        _require(max_lane_fault_retries >= 0, f"max_lane_fault_retries must be >= 0, got {max_lane_fault_retries}")
        _require(max_retries_elsewhere >= 0, f"max_retries_elsewhere must be >= 0, got {max_retries_elsewhere}")
        self.per_lane_cap = per_lane_cap
        #: Lanes that may start a build now (not dead, not quarantined, under the per-lane cap), kept
        #: up to date by :meth:`_reopen` at every change of those three, so scheduling after each
        #: finished unit does not rescan the whole pool.
        self._open: dict[str, _Lane] = {}
        self._fixed_global_cap = global_cap
        self.quarantine_after = quarantine_after
        self.reprobe_interval_s = reprobe_interval_s
        self.abort_after_all_quarantined_s = abort_after_all_quarantined_s
        self.max_lane_fault_retries = max_lane_fault_retries
        self.max_retries_elsewhere = max_retries_elsewhere
        self.steal = steal
        self._probe = probe
        self._on_event = on_event
        self._on_result = on_result
        self._rng = random.Random(seed)

        self._lanes: dict[str, _Lane] = {}
        self._accepting = 0
        self._live = 0  # lanes not drained
        for lane_id in lanes:
            self._new_lane(lane_id)
        self._orphans: deque[_Entry] = deque()  # waiting while no lane is live
        self._deal_cursor = 0
        self._keys: set[str] = set()
        self._queued = 0
        self._queued_expected = 0.0  # expected seconds waiting in queues
        self._running = 0
        self._max_running = 0
        self._steals = 0
        self._pending = 0
        self._results: list[WorkResult] = []
        self._prioritized = False  # some unit came with an expected duration
        self._speed_prior_s = 0.0  # pseudo-seconds at speed 1.0 that each lane's speed starts from
        self._speeds_at = float("-inf")  # loop time the lane speeds were last estimated
        self._max_expected = 0.0
        self._by_case: dict[str, list[_Entry]] = {}  # units with history, by case, until final
        self._case_log_sum: dict[str, tuple[float, int]] = {}  # sum of log seconds seen, count (history first)
        self._speed_summary: tuple[float, float, float] | None = None  # capacity rate, fastest, slowest
        self._heads: list[tuple[float, int, _Lane]] = []  # (-head key, seq, lane): queue heads, with history
        self._head_seq = 0
        self._admit_speed = 0.0  # speed of the slowest lane the global cap has room for
        self._probe_first = False
        self._faster: dict[str, float] = {}  # lane -> capacity of the lanes faster than it; "" -> fastest speed

        self._worker: Worker | None = None
        self._started_run = False
        self._all_final = asyncio.Event()
        self._crash: BaseException | None = None
        self._stop_reason: str | None = None
        self._cancel_reason: str | None = None
        self._abort_reason: str | None = None
        self._abort_timer: asyncio.Task[None] | None = None

    # ----------------------------------------------------------------- public API

    @property
    def global_cap(self) -> int:
        return self._fixed_global_cap if self._fixed_global_cap is not None else 2 * self._live

    def submit(
        self,
        units: Iterable[WorkUnit],
        *,
        lane: str | None = None,
        expected_s: Mapping[str, float] | Callable[[WorkUnit], float | None] | None = None,
    ) -> None:
        """Queue units. ``lane`` puts them all on that lane's queue (others may steal them).

        ``expected_s`` (seconds per case slug, or a function of the unit; missing or non-positive:
        unknown, ordered last) makes the queues longest expected first."""
        entries: list[_Entry] = []
        batch: set[str] = set()
        for unit in units:
            if unit.key in self._keys or unit.key in batch:
                raise ValueError(f"unit {unit.key} was submitted twice")
            batch.add(unit.key)
            entries.append(_Entry(unit, expected=_expected(expected_s, unit)))
        target = self._lane(lane) if lane is not None else None
        if target is not None and target.dead:
            raise ValueError(f"lane {lane} is drained: it takes no units")
        self._keys.update(batch)
        self._rng.shuffle(entries)
        if expected_s is not None:
            ranks: dict[str, int] = {}
            for entry in sorted(entries, key=lambda e: e.unit.iteration):
                rank = ranks.get(entry.unit.case, 0)
                ranks[entry.unit.case] = rank + 1
                entry.spread = SCOUT_SPREAD if rank == 0 else max(1.0 - ITERATION_SPREAD * rank, 0.5)
                entry.key = entry.expected * entry.spread
                self._by_case.setdefault(entry.unit.case, []).append(entry)
                if entry.expected > 0:
                    self._case_log_sum.setdefault(entry.unit.case, (math.log(entry.expected), 1))
            entries.sort(key=lambda e: -e.key)  # stable: equal times keep the seeded shuffle
            known = [e.expected for e in entries if e.expected > 0]
            if known:
                self._prioritized = True
                if not self._speed_prior_s:
                    self._speed_prior_s = SPEED_PRIOR_UNITS * known[len(known) // 2]
                self._max_expected = max(self._max_expected, entries[0].expected)
        self._pending += len(entries)
        if self._pending:
            self._all_final.clear()
        homes = [target] if target is not None else self._homes()
        for entry in entries:
            if self._refuse_waiting(entry, None):
                continue
            home = homes[self._deal_cursor % len(homes)] if homes else None
            self._deal_cursor += 1
            self._enqueue(home, entry)
            self._emit(EventKind.queued, lane=home.lane_id if home else None, unit=entry.unit)
        self._update_abort_timer()
        self._schedule()

    async def run(self, worker: Worker) -> list[WorkResult]:
        """Run every submitted unit (and any submitted meanwhile) to a final result; results come
        back in the order units finished."""
        if self._started_run:
            raise RuntimeError("Allocator.run() can only be called once")
        self._started_run = True
        self._worker = worker
        try:
            self._update_abort_timer()
            self._schedule()
            if self._pending:
                await self._all_final.wait()
            if self._crash is not None:
                raise RuntimeError("allocator bookkeeping failed") from self._crash
            return list(self._results)
        finally:
            self._worker = None
            self._cancel_background()
            for entry in [e for lane in self._lanes.values() for e in lane.running]:
                if entry.task is not None:
                    entry.task.cancel()

    def drain(self, lane_id: str, reason: str) -> None:
        """Retire a lane: move its queue elsewhere, cancel its builds (each a lane fault for its unit)."""
        lane = self._lane(lane_id)
        if lane.dead:
            return
        reason = redact(reason)
        if lane.accepting:
            self._accepting -= 1
        lane.dead = True
        lane.quarantined = False
        self._reopen(lane)
        self._live -= 1
        self._speeds_at = float("-inf")  # re-rank lanes at the next schedule
        _cancel_task(lane.probe_task)
        lane.probe_task = None
        log.info("lane %s drained: %s", lane_id, reason)
        self._emit(EventKind.drained, lane=lane_id, reason=reason)
        moved = list(lane.queue)
        lane.queue.clear()
        self._queued -= len(moved)
        self._queued_expected -= sum(e.expected for e in moved)
        for entry in moved:
            if not self._refuse_waiting(entry, None):
                self._place(entry, avoid=lane_id, front=False, reason=f"drained: {reason}")
        for entry in list(lane.running):
            if entry.task is not None and entry.cancel_reason is None:
                entry.cancel_reason = f"lane {lane_id} drained: {reason}"
                entry.task.cancel()
        self._update_abort_timer()
        self._schedule()

    def add_lane(self, lane_id: str) -> None:
        """A (replacement) lane joins the pool. A drained lane id may come back as a fresh lane."""
        existing = self._lanes.get(lane_id)
        if existing is not None and not existing.dead:
            raise ValueError(f"lane {lane_id} is already in the pool")
        if existing is not None:
            del self._lanes[lane_id]
        lane = self._new_lane(lane_id)
        self._speeds_at = float("-inf")
        self._emit(EventKind.lane_added, lane=lane_id)
        while self._orphans:
            self._queued -= 1
            self._queued_expected -= self._orphans[0].expected
            self._enqueue(lane, self._orphans.popleft())
        self._end_abort()
        self._update_abort_timer()
        self._schedule()

    def stop_new(self, reason: str) -> None:
        """Start nothing more; waiting units finish as ``skipped``; running ones complete normally."""
        if self._stop_reason is not None:
            return
        self._stop_reason = redact(reason)
        self._emit(EventKind.stopped, reason=self._stop_reason)
        self._finish_waiting(ResultStatus.skipped, self._stop_reason)
        self._update_abort_timer()

    def cancel(self, reason: str = "cancelled") -> None:
        """Hard stop: waiting and running units finish as ``cancelled`` (running ones once their
        worker has unwound)."""
        if self._cancel_reason is not None:
            return
        self._cancel_reason = redact(reason)
        if self._stop_reason is None:
            self._stop_reason = self._cancel_reason
        self._emit(EventKind.cancelled, reason=self._cancel_reason)
        self._finish_waiting(ResultStatus.cancelled, self._cancel_reason)
        for lane in self._lanes.values():
            for entry in list(lane.running):
                if entry.task is not None and entry.cancel_reason is None:
                    entry.cancel_reason = self._cancel_reason
                    entry.task.cancel()
        self._update_abort_timer()

    def stats(self) -> AllocatorStats:
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
                for lane in self._lanes.values()
            },
            active=self._running,
            max_active=self._max_running,
            queued=self._queued,
            steals=self._steals,
            pending=self._pending,
            finished=len(self._results),
        )

    @property
    def results(self) -> list[WorkResult]:
        return list(self._results)

    # ----------------------------------------------------------------- lanes and queues

    def _new_lane(self, lane_id: str) -> _Lane:
        if not lane_id:
            raise ValueError("lane id must be a non-empty string")
        if lane_id in self._lanes:
            raise ValueError(f"lane {lane_id} is listed twice")
        lane = _Lane(lane_id, index=len(self._lanes))
        self._lanes[lane_id] = lane
        self._reopen(lane)
        self._accepting += 1
        self._live += 1
        return lane

    def _reopen(self, lane: _Lane) -> None:
        """Keep :attr:`_open` in step with ``lane``'s running count, death and quarantine."""
        if len(lane.running) < self.per_lane_cap and not lane.dead and not lane.quarantined:
            self._open[lane.lane_id] = lane
        else:
            self._open.pop(lane.lane_id, None)

    def _lane(self, lane_id: str) -> _Lane:
        try:
            return self._lanes[lane_id]
        except KeyError:
            raise ValueError(f"unknown lane {lane_id!r} (known: {', '.join(self._lanes) or 'none'})") from None

    def _homes(self) -> list[_Lane]:
        """Where new units are dealt (round-robin): accepting lanes, else live ones, else none."""
        return [lane for lane in self._lanes.values() if lane.accepting] or [
            lane for lane in self._lanes.values() if not lane.dead
        ]

    def _enqueue(self, lane: _Lane | None, entry: _Entry, *, front: bool = False) -> None:
        queue = lane.queue if lane is not None else self._orphans
        if front:
            queue.appendleft(entry)
        elif not queue or queue[-1].key >= entry.key:
            queue.append(entry)  # the common case, also when dealing a sorted batch
        else:  # keep the queue longest first: after the last entry at least as long (stable)
            queue.insert(bisect.bisect_right(queue, -entry.key, key=_neg_key), entry)
        entry.queued_on = lane
        self._queued += 1
        self._queued_expected += entry.expected
        if lane is not None and queue[0] is entry:
            self._note_head(lane)

    def _note_head(self, lane: _Lane) -> None:
        """With history, ``lane``'s queue has a new head: remember it in the heap of heads (stale
        entries are dropped when they surface, see :meth:`_longer_elsewhere`)."""
        if self._prioritized and lane.queue:
            self._head_seq += 1
            heapq.heappush(self._heads, (-lane.queue[0].key, self._head_seq, lane))

    def _learn_case(self, done: _Entry, seconds: float) -> None:
        """A unit of a case took ``seconds`` (at speed 1.0): its waiting siblings now expect the
        geometric mean of the history and every time seen so far, and move in their queues."""
        case = done.unit.case
        siblings = self._by_case.get(case)
        if siblings is None or seconds <= 0 or case not in self._case_log_sum:
            return
        total, count = self._case_log_sum[case]
        total, count = total + math.log(seconds), count + 1
        self._case_log_sum[case] = (total, count)
        estimate = math.exp(total / count)
        for entry in siblings:
            lane = entry.queued_on
            if lane is None or entry.task is not None:
                continue
            if abs(math.log(estimate / entry.expected)) < 0.05:  # not worth moving
                continue
            if not _remove(lane.queue, entry):  # left its queue without _take_from (finished waiting)
                entry.queued_on = None
                continue
            self._queued -= 1
            self._queued_expected -= entry.expected
            entry.expected, entry.key = estimate, estimate * entry.spread
            self._enqueue(lane, entry)
            self._note_head(lane)

    def _refresh_speeds(self) -> None:
        """Estimate every lane's speed: expected / actual seconds over the units it finished, plus
        its overdue running units as if they finished now (a lower bound on their time: a slow
        lane shows before its first unit ends). Starts from ``SPEED_PRIOR_UNITS`` median units at
        speed 1.0. Recomputed at most every 1/20 of a median unit (a cheap, slightly stale view)."""
        now = _now()
        if now - self._speeds_at < self._speed_prior_s / (20 * SPEED_PRIOR_UNITS):
            return
        self._speeds_at = now
        prior = self._speed_prior_s
        median = prior / SPEED_PRIOR_UNITS
        for lane in self._lanes.values():
            expected, actual = lane.expected_done + prior, lane.actual_done + prior
            for entry in lane.running:
                elapsed = now - entry.started_at
                if entry.expected > 0 and elapsed > entry.expected:
                    expected += entry.expected
                    actual += elapsed
            lane.speed = expected / actual
            lane.rank_speed = lane.speed * math.exp(SPEED_SIGMA * math.sqrt(median / expected))
        ranked = sorted((lane for lane in self._lanes.values() if lane.accepting), key=lambda lane: -lane.speed)
        self._speed_summary = None
        self._faster = {}
        if ranked:
            self._speed_summary = (sum(lane.speed for lane in ranked) * self.per_lane_cap, ranked[0].speed, ranked[-1].speed)
            total = 0.0
            for lane in ranked:
                self._faster[lane.lane_id] = total
                total += lane.speed * self.per_lane_cap
            self._faster[""] = ranked[0].speed
            admitted = max(self.global_cap // self.per_lane_cap, 1)
            self._admit_speed = ranked[admitted - 1].speed if admitted < len(ranked) else 0.0

    def _place(self, entry: _Entry, *, avoid: str | None, front: bool, reason: str) -> None:
        """Queue a unit that comes back: on the least-loaded live lane, accepting and not ``avoid`` first."""
        live = [lane for lane in self._lanes.values() if not lane.dead]
        home = (
            min(
                live,
                key=lambda lane: (
                    not lane.accepting,
                    lane.lane_id == avoid,
                    len(lane.queue) + len(lane.running),
                    lane.index,
                ),
            )
            if live
            else None
        )
        self._enqueue(home, entry, front=front)
        self._emit(
            EventKind.requeued,
            lane=home.lane_id if home else None,
            unit=entry.unit,
            from_lane=avoid,
            attempt=entry.attempts,
            reason=reason,
        )

    def _may_run(self, lane: _Lane, entry: _Entry) -> bool:
        if entry.unit.case in lane.slugs:
            return False
        return not (entry.avoid_lane == lane.lane_id and self._accepting > 1)

    def _take_from(self, queue: deque[_Entry], lane: _Lane, *, from_tail: bool) -> _Entry | None:
        n = len(queue)
        for i in range(min(n, SCAN_DEPTH)):
            index = n - 1 - i if from_tail else i
            entry = queue[index]
            if self._may_run(lane, entry):
                del queue[index]
                owner, entry.queued_on = entry.queued_on, None
                if index == 0 and owner is not None:
                    self._note_head(owner)
                self._queued -= 1
                self._queued_expected = max(self._queued_expected - entry.expected, 0.0)
                return entry
        return None

    def _longer_elsewhere(self, lane: _Lane, own: _Entry | None) -> tuple[_Entry | None, _Lane | None]:
        """With history, longest first across the pool: ``own`` (taken from ``lane``'s queue) goes
        back when another queue's head is longer and ``lane`` may run it; returns what ``lane``
        runs and the queue it came from when not its own. (Without this, long units dealt to lanes
        that get no slot under the global cap waited until the others had emptied their queues.)"""
        heads = self._heads
        while heads:
            neg_key, _seq, best = heads[0]
            if best.queue and best.queue[0].key == -neg_key:
                break
            heapq.heappop(heads)  # stale: that queue's head has changed since
        else:
            return own, None
        if best is lane or (own is not None and -neg_key <= own.key):
            return own, None
        taken = self._take_from(best.queue, lane, from_tail=False)
        if taken is None:
            return own, None
        if own is not None and taken.key <= own.key:
            self._enqueue(best, taken)
            return own, None
        if own is not None:
            self._enqueue(lane, own)
        return taken, best

    def _steal_for(self, thief: _Lane) -> tuple[_Entry, _Lane] | None:
        victims = [lane for lane in self._lanes.values() if lane is not thief and lane.queue]
        key = _longest_head_first if self._prioritized else _most_loaded_first  # longest waiting unit first
        for victim in _in_order(victims, key, 1):
            entry = self._take_from(victim.queue, thief, from_tail=not self._prioritized)
            if entry is not None:
                return entry, victim
        return None

    # ----------------------------------------------------------------- scheduling

    def _starting_allowed(self) -> bool:
        return (
            self._worker is not None
            and self._stop_reason is None
            and self._abort_reason is None
            and self._crash is None
        )

    def _schedule(self) -> None:
        """Start units while slots are free: rounds over lanes with room, least loaded first."""
        if not self._starting_allowed():
            return
        cap = self.per_lane_cap
        while self._queued and self._running < self.global_cap:
            open_lanes = list(self._open.values())
            if not open_lanes:
                return
            faster: dict[str, float] = {}
            key: Callable[[_Lane], tuple[Any, ...]]
            if self._prioritized:  # fastest lanes first: under a global cap they should do the most
                self._refresh_speeds()
                self._probe_first = (
                    self.global_cap < self._accepting * cap
                    and self._queued_expected >= PROBE_FIRST_SLACK * self._max_expected * self.global_cap
                )
                key = _fastest_first
                faster = self._endgame()
            else:
                key = _least_loaded_first
            started = False
            for lane in _in_order(open_lanes, key, self.global_cap - self._running):
                if self._running >= self.global_cap or not self._queued:
                    return
                probe = self._prioritized and self._probes(lane)
                entry = self._take_from(lane.queue, lane, from_tail=probe)
                if probe and entry is not None:
                    lane.probes += 1
                victim = None
                if self._prioritized and self.steal and not probe:
                    entry, victim = self._longer_elsewhere(lane, entry)
                if entry is None and self.steal:
                    stolen = self._steal_for(lane)
                    if stolen is not None:
                        entry, victim = stolen
                if entry is not None and lane.lane_id in faster and self._leave_to_faster(lane, entry, faster):
                    self._enqueue(victim or lane, entry, front=not probe)  # back where it was
                    return  # the lanes after this one are slower still: leave the rest to faster ones
                if entry is not None:
                    self._start(lane, entry, stolen_from=victim)
                    started = True
                    if self._running >= self.global_cap or not self._queued:
                        return  # before the lazy order sorts lanes nobody will look at
            if not started:
                return

    def _probes(self, lane: _Lane) -> bool:
        """Whether ``lane`` should take the shortest unit of its queue (a speed probe) rather than
        the longest. Its second unit is one, so its speed shows within a short unit while the first
        (longest) one runs; with a choice of lanes and a long queue its first two are
        (``PROBE_UNITS``); and so are the units of a lane that looks too slow for a place under the
        global cap until it has finished ``EXPLORE_UNITS`` (a bad first measure is not final)."""
        if lane.probes < (PROBE_UNITS if self._probe_first else 1 if lane.running else 0):
            return True
        return lane.timed < EXPLORE_UNITS and lane.speed < self._admit_speed

    def _endgame(self) -> dict[str, float]:
        """Near the end of the queue: for each accepting lane, the capacity (expected seconds of
        work per second) of the lanes faster than it, as of the last speed estimate. Empty while
        the queue is long."""
        if self._speed_summary is None or self._accepting < 2:
            return {}
        rate, fastest, slowest = self._speed_summary  # as of the last _refresh_speeds
        # No unit could be worth leaving while the queue outlasts the longest unit's slow-lane penalty.
        if self._queued_expected / rate > self._max_expected * (1 / slowest - 1 / fastest):
            return {}
        return self._faster

    def _leave_to_faster(self, lane: _Lane, entry: _Entry, faster: dict[str, float]) -> bool:
        """Leave ``entry`` for a faster lane when the faster lanes would clear the whole queue
        before the time it would lose by running here instead of on the fastest lane."""
        rate = faster[lane.lane_id]
        if rate <= 0 or entry.expected <= 0 or self._running == 0:  # nothing running: no later chance
            return False
        penalty = entry.expected * (1 / lane.speed - 1 / faster[""])
        return (self._queued_expected + entry.expected) / rate < penalty

    def _start(self, lane: _Lane, entry: _Entry, *, stolen_from: _Lane | None) -> None:
        assert self._worker is not None
        entry.attempts += 1
        entry.lanes_tried.append(lane.lane_id)
        lane.running[entry] = None
        self._reopen(lane)
        lane.slugs.add(entry.unit.case)
        lane.started += 1
        lane.max_active = max(lane.max_active, len(lane.running))
        self._running += 1
        self._max_running = max(self._max_running, self._running)
        if stolen_from is not None:
            lane.stolen += 1
            self._steals += 1
            self._emit(EventKind.stolen, lane=lane.lane_id, unit=entry.unit, from_lane=stolen_from.lane_id)
        self._emit(EventKind.started, lane=lane.lane_id, unit=entry.unit, attempt=entry.attempts)
        task = asyncio.get_running_loop().create_task(
            self._execute(self._worker, lane, entry), name=f"allocator:{entry.unit.key}@{lane.lane_id}"
        )
        entry.task = task
        task.add_done_callback(self._on_task_done)

    async def _execute(self, worker: Worker, lane: _Lane, entry: _Entry) -> None:
        outcome: Outcome | None = None
        value: Any = None
        error: Exception | None = None
        started_at = entry.started_at = _now()
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
        self._release(lane, entry)
        if outcome is None and error is None:  # cancelled by drain() or cancel()
            self._settle_cancelled(lane, entry, cancel_reason or "cancelled")
        elif error is not None:
            log.warning("worker raised on %s for %s: %s", lane.lane_id, entry.unit.key, type(error).__name__)
            self._finish(entry, lane, ResultStatus.failed, error, f"worker raised {type(error).__name__}")
        else:
            assert outcome is not None
            if outcome is Outcome.done and entry.expected > 0:
                lane.expected_done += entry.expected
                lane.timed += 1
                lane.actual_done += max(_now() - started_at, 0.0)
                self._learn_case(entry, (_now() - started_at) * lane.speed)
            self._settle(lane, entry, outcome, value)
        self._schedule()

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("allocator bookkeeping failed", exc_info=exc)
            self._crash = exc
            self._all_final.set()

    def _release(self, lane: _Lane, entry: _Entry) -> None:
        if entry in lane.running:
            del lane.running[entry]
            self._reopen(lane)
            lane.slugs.discard(entry.unit.case)
            self._running -= 1
        entry.task = None

    # ----------------------------------------------------------------- outcomes

    def _settle(self, lane: _Lane, entry: _Entry, outcome: Outcome, value: Any) -> None:
        entry.last_value = value
        if outcome is Outcome.lane_fault:
            lane.consecutive_transport_failures += 1
            if lane.consecutive_transport_failures >= self.quarantine_after and lane.accepting:
                self._quarantine(lane)
            self._lane_fault(lane, entry, f"lane fault on {lane.lane_id}")
            return
        lane.consecutive_transport_failures = 0
        if outcome is Outcome.done:
            self._finish(entry, lane, ResultStatus.done, value, None)
        elif entry.retries_elsewhere >= self.max_retries_elsewhere:
            entry.retries_elsewhere += 1
            self._finish(entry, lane, ResultStatus.failed, value, f"no success after {entry.attempts} attempts")
        else:
            entry.retries_elsewhere += 1
            self._retry(lane, entry, f"retry elsewhere after attempt {entry.attempts} on {lane.lane_id}")

    def _settle_cancelled(self, lane: _Lane, entry: _Entry, reason: str) -> None:
        if self._cancel_reason is not None:
            self._finish(entry, lane, ResultStatus.cancelled, entry.last_value, reason)
        else:
            self._lane_fault(lane, entry, reason)

    def _lane_fault(self, lane: _Lane, entry: _Entry, reason: str) -> None:
        entry.lane_faults += 1
        if entry.lane_faults > self.max_lane_fault_retries:
            self._finish(entry, lane, ResultStatus.lane_failure, entry.last_value, reason)
        else:
            self._retry(lane, entry, reason)

    def _retry(self, lane: _Lane, entry: _Entry, reason: str) -> None:
        entry.avoid_lane = lane.lane_id
        if self._refuse_waiting(entry, lane):
            return
        self._place(entry, avoid=lane.lane_id, front=True, reason=reason)

    def _refuse_waiting(self, entry: _Entry, lane: _Lane | None) -> bool:
        """Finish a unit that would wait, when nothing more may start; True when it was finished."""
        if self._cancel_reason is not None:
            self._finish(entry, lane, ResultStatus.cancelled, entry.last_value, self._cancel_reason)
        elif self._stop_reason is not None:
            self._finish(entry, lane, ResultStatus.skipped, entry.last_value, self._stop_reason)
        elif self._abort_reason is not None:
            self._finish(entry, lane, ResultStatus.aborted, entry.last_value, self._abort_reason)
        else:
            return False
        return True

    def _finish_waiting(self, status: ResultStatus, reason: str) -> None:
        waiting: list[tuple[_Lane | None, _Entry]] = [(None, e) for e in self._orphans]
        self._orphans.clear()
        for lane in self._lanes.values():
            waiting.extend((lane, e) for e in lane.queue)
            lane.queue.clear()
        self._queued = 0
        self._queued_expected = 0.0
        for _lane, entry in waiting:
            self._finish(entry, None, status, entry.last_value, reason)

    def _finish(self, entry: _Entry, lane: _Lane | None, status: ResultStatus, value: Any, reason: str | None) -> None:
        entry.queued_on = None
        siblings = self._by_case.get(entry.unit.case)
        if siblings is not None and entry in siblings:
            siblings.remove(entry)
            if not siblings:
                del self._by_case[entry.unit.case]
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
        self._emit(
            EventKind.finished,
            lane=result.lane,
            unit=entry.unit,
            attempt=entry.attempts,
            status=status,
            reason=reason,
        )
        if self._on_result is not None:
            try:
                self._on_result(result)
            except Exception:
                log.exception("on_result hook failed for %s", entry.unit.key)
        if self._pending == 0:
            self._all_final.set()

    # ----------------------------------------------------------------- quarantine and abort

    def _quarantine(self, lane: _Lane) -> None:
        lane.quarantined = True
        self._reopen(lane)
        self._accepting -= 1
        self._speeds_at = float("-inf")  # re-rank lanes at the next schedule
        reason = f"{lane.consecutive_transport_failures} consecutive transport failures"
        log.warning("lane %s quarantined: %s", lane.lane_id, reason)
        self._emit(EventKind.quarantined, lane=lane.lane_id, reason=reason)
        if self._probe is not None:
            lane.probe_task = asyncio.get_running_loop().create_task(
                self._reprobe(lane), name=f"allocator:reprobe@{lane.lane_id}"
            )
            lane.probe_task.add_done_callback(self._on_task_done)
        self._update_abort_timer()

    def _unquarantine(self, lane: _Lane) -> None:
        lane.quarantined = False
        self._reopen(lane)
        lane.consecutive_transport_failures = 0
        self._accepting += 1
        self._speeds_at = float("-inf")  # re-rank lanes at the next schedule
        log.info("lane %s back from quarantine", lane.lane_id)
        self._emit(EventKind.unquarantined, lane=lane.lane_id, reason="probe passed")
        self._end_abort()
        self._update_abort_timer()
        self._schedule()

    async def _reprobe(self, lane: _Lane) -> None:
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
                self._emit(EventKind.probe_failed, lane=lane.lane_id)
        finally:
            if lane.probe_task is asyncio.current_task():
                lane.probe_task = None

    def _update_abort_timer(self) -> None:
        """Keep a timer running exactly while the run is live and no lane accepts work."""
        wanted = (
            self._worker is not None
            and self._accepting == 0
            and self._abort_reason is None
            and self._stop_reason is None
            and self._pending > 0
        )
        if wanted and self._abort_timer is None:
            self._abort_timer = asyncio.get_running_loop().create_task(
                self._abort_when_due(), name="allocator:abort-timer"
            )
            self._abort_timer.add_done_callback(self._on_task_done)
        elif not wanted and self._abort_timer is not None:
            _cancel_task(self._abort_timer)
            self._abort_timer = None

    async def _abort_when_due(self) -> None:
        await asyncio.sleep(self.abort_after_all_quarantined_s)
        self._abort_timer = None
        if self._accepting != 0:
            return
        self._abort_reason = (
            f"no lane accepted work for {self.abort_after_all_quarantined_s:g} s (all quarantined or drained)"
        )
        log.error("allocator: %s; aborting waiting units", self._abort_reason)
        self._emit(EventKind.aborted, reason=self._abort_reason)
        self._finish_waiting(ResultStatus.aborted, self._abort_reason)

    def _end_abort(self) -> None:
        if self._abort_reason is not None and self._accepting > 0:
            self._abort_reason = None

    def _cancel_background(self) -> None:
        _cancel_task(self._abort_timer)
        self._abort_timer = None
        for lane in self._lanes.values():
            _cancel_task(lane.probe_task)
            lane.probe_task = None

    # ----------------------------------------------------------------- events

    def _emit(
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
        if self._on_event is None:
            return
        event = AllocatorEvent(kind, _now(), lane, unit, from_lane, attempt, status, reason)
        try:
            self._on_event(event)
        except Exception:
            log.exception("on_event hook failed for %s", kind.value)


def _neg_key(entry: _Entry) -> float:
    return -entry.key


def _remove(queue: deque[_Entry], entry: _Entry) -> bool:
    """Remove ``entry`` from a queue kept (mostly) longest first: found by bisection among the
    entries of the same key, else by a scan (requeued entries sit at the front out of order)."""
    index = bisect.bisect_left(queue, -entry.key, key=_neg_key)
    while index < len(queue) and queue[index].key == entry.key:
        if queue[index] is entry:
            del queue[index]
            return True
        index += 1
    for index, candidate in enumerate(queue):
        if candidate is entry:
            del queue[index]
            return True
    return False


def _fastest_first(lane: _Lane) -> tuple[float, int, int]:
    return (-lane.rank_speed, len(lane.running), lane.index)


def _least_loaded_first(lane: _Lane) -> tuple[int, int]:
    return (len(lane.running), lane.index)


def _longest_head_first(lane: _Lane) -> tuple[bool, float, int, int]:
    return (lane.accepting, -lane.queue[0].key, -len(lane.queue), lane.index)


def _most_loaded_first(lane: _Lane) -> tuple[bool, int, int]:
    return (lane.accepting, -len(lane.queue), lane.index)


def _in_order(lanes: list[_Lane], key: Callable[[_Lane], Any], likely: int) -> Iterator[_Lane]:
    """``sorted(lanes, key=key)``, lazily: the first ``likely`` lanes by a partial sort (usually
    all a caller looks at: one free slot, one victim), the rest sorted only when asked for."""
    if likely >= len(lanes) or likely < 1:
        yield from sorted(lanes, key=key)
        return
    first = heapq.nsmallest(likely, lanes, key=key)
    yield from first
    taken = {id(lane) for lane in first}
    yield from sorted((lane for lane in lanes if id(lane) not in taken), key=key)


def _expected(source: Mapping[str, float] | Callable[[WorkUnit], float | None] | None, unit: WorkUnit) -> float:
    if source is None:
        return 0.0
    value = source.get(unit.case) if isinstance(source, Mapping) else source(unit)
    try:
        seconds = float(value) if value is not None else 0.0
    except (TypeError, ValueError):
        return 0.0
    return seconds if seconds > 0 and seconds != float("inf") else 0.0


def _now() -> float:
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


def _cancel_task(task: asyncio.Task[None] | None) -> None:
    if task is not None and not task.done():
        task.cancel()


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)
