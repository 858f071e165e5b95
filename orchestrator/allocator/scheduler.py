"""The scheduler: which waiting unit starts on which lane, and when. Synchronous and pure.

No event loop, no task, no clock of its own: every method that depends on time takes ``now``.
:class:`~orchestrator.allocator.work_stealing.Allocator` (the async executor) asks it what to
start with :meth:`Scheduler.pick`, tells it what ended with :meth:`Scheduler.release` and
:meth:`Scheduler.learn`, and :mod:`orchestrator.allocator.health` flips lanes open and shut.

Queue policy. Every lane has its own FIFO queue. :meth:`Scheduler.prepare` shuffles units with a
seeded RNG; :meth:`Scheduler.deal` deals them round-robin over the lanes, so a seed fixes the
schedule. A lane with a free slot takes the first unit of its own queue it may run; with nothing
of its own it steals from the tail of the most loaded queue (quarantined lanes' queues first:
nobody else drains them). A lane may run a unit when it is not quarantined or dead, runs fewer
than ``per_lane_cap`` builds, is not already building the same case slug, and the global cap has
room. Under the global cap, free slots go to the least-loaded lanes first.

Longest expected first (``expected_s``, see :mod:`orchestrator.allocator.durations`): the
shuffled units are sorted longest first before dealing (ties keep the seeded shuffle, so
iterations of one case still land on different lanes) and every queue stays in that order. A lane
with a free slot runs the longest waiting unit of the pool (its own head, or a longer head
elsewhere); a thief steals from the head. The lanes' speeds (:mod:`orchestrator.allocator.speeds`)
decide who gets free slots under the global cap, which units are probes, and near the end of the
queue whether a slower lane leaves a unit to faster ones. The first iteration of each case runs
early (``SCOUT_SPREAD``), the others a little apart (``ITERATION_SPREAD``), and each finished one
corrects the estimate of its waiting siblings (history is per case, so is its error).
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .model import WorkUnit
from .speeds import SPEED_PRIOR_UNITS, LaneView, SpeedModel, SpeedSample

#: How deep a lane looks into a queue for a unit whose slug it is not already building.
SCAN_DEPTH = 64

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

#: An idle lane whose optimistic speed is at least this share of the fastest lane's speed gets the next
#: free slot before any lane gets another build (see :meth:`Scheduler._slot_order`) ...
SHARE_RATIO = 0.9

#: ... and so does a lane idle for this many median units, whatever its speed, while it has finished
#: fewer than EXPLORE_UNITS units: its first measure is taken again.
REMEASURE_UNITS = 2.0

ExpectedSource = Mapping[str, float] | Callable[[WorkUnit], float | None] | None


@dataclass(eq=False)
class Entry:
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
    queued_on: Lane | None = None  # the lane whose queue holds it
    started_at: float = 0.0  # clock time of the current attempt's start
    concurrency: int = 1  # most builds its lane ran at once during the current attempt
    task: Any = None  # the executor's handle on the running attempt


@dataclass(eq=False)
class Lane:
    lane_id: str
    index: int
    queue: deque[Entry] = field(default_factory=deque)
    running: dict[Entry, None] = field(default_factory=dict)  # insertion-ordered: deterministic
    slugs: set[str] = field(default_factory=set)
    quarantined: bool = False
    dead: bool = False
    consecutive_transport_failures: int = 0
    max_active: int = 0
    started: int = 0
    stolen: int = 0
    probe_task: Any = None  # health's re-probe while quarantined
    joined_at: float = 0.0
    idle_since: float | None = 0.0  # when its last build ended (None: running something)
    probes: int = 0  # speed probes it ran (the shortest units of its queue)

    @property
    def accepting(self) -> bool:
        """Whether the lane takes new units: neither dead nor quarantined (it may still be at its cap)."""
        return not self.dead and not self.quarantined


@dataclass(frozen=True)
class Start:
    """What :meth:`Scheduler.pick` started: ``entry`` on ``lane``, taken from ``victim``'s queue
    when that is another lane's."""

    lane: Lane
    entry: Entry
    victim: Lane | None


class Scheduler:
    def __init__(self, lanes: Sequence[str], *, per_lane_cap: int, global_cap: int | None, seed: int,
                 steal: bool, co_located: bool = False, now: float = 0.0) -> None:
        self.per_lane_cap = per_lane_cap
        self.steal = steal
        self.co_located = co_located
        self._fixed_global_cap = global_cap
        self._rng = random.Random(seed)
        self.lanes: dict[str, Lane] = {}
        #: Lanes that may start a build now (not dead, not quarantined, under the per-lane cap), kept
        #: up to date by :meth:`reopen` at every change of those three.
        self._open: dict[str, Lane] = {}
        self.accepting = 0
        self.live = 0  # lanes not drained
        self.orphans: deque[Entry] = deque()  # waiting while no lane is live
        self._deal_cursor = 0
        self.queued = 0
        self.queued_expected = 0.0  # expected seconds waiting in queues
        self.running = 0
        self.max_running = 0
        self.steals = 0
        self.prioritized = False  # some unit came with an expected duration
        self._max_expected = 0.0
        self._by_case: dict[str, list[Entry]] = {}  # units with history, by case, until final
        self._case_log_sum: dict[str, tuple[float, int]] = {}  # sum of log seconds seen, count (history first)
        self._heads: list[tuple[float, int, Lane]] = []  # (-head key, seq, lane): queue heads, with history
        self._head_seq = 0
        self._probe_first = False
        self.speeds = SpeedModel(per_lane_cap)
        for lane_id in lanes:
            self._new_lane(lane_id, now)

    @property
    def global_cap(self) -> int:
        """The most builds running at once over all lanes: the fixed cap, else 2 x the live lanes."""
        return self._fixed_global_cap if self._fixed_global_cap is not None else 2 * self.live

    def set_global_cap(self, cap: int | None) -> None:
        """A new global cap (None: 2 x the live lanes again; 0: start nothing — running builds go on)."""
        self._fixed_global_cap = cap

    # ----------------------------------------------------------------- lanes

    def _new_lane(self, lane_id: str, now: float) -> Lane:
        if not lane_id:
            raise ValueError("lane id must be a non-empty string")
        if lane_id in self.lanes:
            raise ValueError(f"lane {lane_id} is listed twice")
        lane = Lane(lane_id, index=len(self.lanes), joined_at=now, idle_since=now)
        self.lanes[lane_id] = lane
        self.reopen(lane)
        self.accepting += 1
        self.live += 1
        self.speeds.join(lane_id, now)
        return lane

    def add_lane(self, lane_id: str, now: float) -> Lane:
        """A (replacement) lane joins; a drained lane id may come back as a fresh lane. Orphans
        (units that waited while no lane was live) move to its queue."""
        existing = self.lanes.get(lane_id)
        if existing is not None and not existing.dead:
            raise ValueError(f"lane {lane_id} is already in the pool")
        if existing is not None:
            del self.lanes[lane_id]
        lane = self._new_lane(lane_id, now)
        self.speeds.changed()
        while self.orphans:
            self.queued -= 1
            self.queued_expected -= self.orphans[0].expected
            self.enqueue(lane, self.orphans.popleft())
        return lane

    def lane(self, lane_id: str) -> Lane:
        """The lane named ``lane_id``, dead or alive. Raises ``ValueError`` naming the known lanes if none."""
        try:
            return self.lanes[lane_id]
        except KeyError:
            raise ValueError(f"unknown lane {lane_id!r} (known: {', '.join(self.lanes) or 'none'})") from None

    def reopen(self, lane: Lane) -> None:
        """Keep the open set in step with ``lane``'s running count, death and quarantine."""
        if len(lane.running) < self.per_lane_cap and not lane.dead and not lane.quarantined:
            self._open[lane.lane_id] = lane
        else:
            self._open.pop(lane.lane_id, None)

    def set_quarantined(self, lane: Lane, quarantined: bool) -> None:
        """Quarantine ``lane`` (or let it back), keeping the accepting count and the open set in step; a
        dead lane or no change is a no-op."""
        if lane.quarantined == quarantined or lane.dead:
            return
        lane.quarantined = quarantined
        self.accepting += -1 if quarantined else 1
        self.reopen(lane)
        self.speeds.changed()  # re-rank lanes at the next pick

    def retire(self, lane: Lane) -> list[Entry]:
        """Mark ``lane`` dead; returns its queue (emptied), for the caller to place elsewhere."""
        if lane.accepting:
            self.accepting -= 1
        lane.dead = True
        lane.quarantined = False
        self.reopen(lane)
        self.live -= 1
        self.speeds.changed()
        moved = list(lane.queue)
        lane.queue.clear()
        self.queued -= len(moved)
        self.queued_expected -= sum(e.expected for e in moved)
        return moved

    def homes(self) -> list[Lane]:
        """Where new units are dealt (round-robin): accepting lanes, else live ones, else none."""
        return [lane for lane in self.lanes.values() if lane.accepting] or [
            lane for lane in self.lanes.values() if not lane.dead
        ]

    # ----------------------------------------------------------------- queues

    def prepare(self, units: Iterable[WorkUnit], expected_s: ExpectedSource) -> list[Entry]:
        """Entries for new units in dealing order: seeded shuffle, then longest expected first
        when ``expected_s`` is given. Raises ``ValueError`` on a duplicate within the batch."""
        entries: list[Entry] = []
        batch: set[str] = set()
        for unit in units:
            if unit.key in batch:
                raise ValueError(f"unit {unit.key} was submitted twice")
            batch.add(unit.key)
            entries.append(Entry(unit, expected=_expected(expected_s, unit)))
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
                self.prioritized = True
                self.speeds.set_prior(known[len(known) // 2])
                self._max_expected = max(self._max_expected, entries[0].expected)
        return entries

    def deal(self, entry: Entry, target: Lane | None, homes: list[Lane] | None = None) -> Lane | None:
        """Queue a new unit on ``target``, else on the next home round-robin (``homes``: the
        caller's :meth:`homes`, taken once for a batch); returns the lane."""
        homes = [target] if target is not None else homes if homes is not None else self.homes()
        home = homes[self._deal_cursor % len(homes)] if homes else None
        self._deal_cursor += 1
        self.enqueue(home, entry)
        return home

    def enqueue(self, lane: Lane | None, entry: Entry, *, front: bool = False) -> None:
        """Queue ``entry`` on ``lane`` (None: the orphans, while no lane is live), keeping the queue longest
        expected first; ``front`` puts it at the head whatever its length."""
        queue = lane.queue if lane is not None else self.orphans
        if front:
            queue.appendleft(entry)
        elif not queue or queue[-1].key >= entry.key:
            queue.append(entry)  # the common case, also when dealing a sorted batch
        else:  # keep the queue longest first: after the last entry at least as long (stable)
            queue.insert(bisect.bisect_right(queue, -entry.key, key=_neg_key), entry)
        entry.queued_on = lane
        self.queued += 1
        self.queued_expected += entry.expected
        if lane is not None and queue[0] is entry:
            self._note_head(lane)

    def place(self, entry: Entry, *, avoid: str | None, front: bool) -> Lane | None:
        """Queue a unit that comes back: on the least-loaded live lane, accepting and not ``avoid`` first."""
        live = [lane for lane in self.lanes.values() if not lane.dead]
        home = (
            min(live, key=lambda lane: (not lane.accepting, lane.lane_id == avoid,
                                        len(lane.queue) + len(lane.running), lane.index))
            if live
            else None
        )
        self.enqueue(home, entry, front=front)
        return home

    def take_waiting(self) -> list[Entry]:
        """Every waiting unit, out of every queue (they are about to finish without running)."""
        waiting = list(self.orphans)
        self.orphans.clear()
        for lane in self.lanes.values():
            waiting.extend(lane.queue)
            lane.queue.clear()
        self.queued = 0
        self.queued_expected = 0.0
        return waiting

    def forget(self, entry: Entry) -> None:
        """``entry`` is final: no more learning for it."""
        entry.queued_on = None
        siblings = self._by_case.get(entry.unit.case)
        if siblings is not None and entry in siblings:
            siblings.remove(entry)
            if not siblings:
                del self._by_case[entry.unit.case]

    def _note_head(self, lane: Lane) -> None:
        """With history, ``lane``'s queue has a new head: remember it in the heap of heads (stale
        entries are dropped when they surface, see :meth:`_longer_elsewhere`)."""
        if self.prioritized and lane.queue:
            self._head_seq += 1
            heapq.heappush(self._heads, (-lane.queue[0].key, self._head_seq, lane))

    # ----------------------------------------------------------------- running and learning

    def start(self, lane: Lane, entry: Entry, now: float, *, stolen_from: Lane | None) -> None:
        """Book ``entry`` as running on ``lane`` from ``now``: counts its attempt and the lane it tried, the
        concurrency it runs at, and a steal when ``stolen_from`` is given."""
        entry.attempts += 1
        entry.lanes_tried.append(lane.lane_id)
        entry.started_at = now
        lane.running[entry] = None
        lane.idle_since = None
        self.reopen(lane)
        lane.slugs.add(entry.unit.case)
        lane.started += 1
        lane.max_active = max(lane.max_active, len(lane.running))
        for other in lane.running:
            other.concurrency = max(other.concurrency, len(lane.running))
        entry.concurrency = len(lane.running)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        if stolen_from is not None:
            lane.stolen += 1
            self.steals += 1

    def release(self, lane: Lane, entry: Entry, now: float) -> None:
        """``entry`` stopped running on ``lane`` (whatever its outcome): free its slot, and mark the lane
        idle since ``now`` if nothing else runs there. A no-op if it was not running there."""
        if entry in lane.running:
            del lane.running[entry]
            self.reopen(lane)
            lane.slugs.discard(entry.unit.case)
            self.running -= 1
            if not lane.running:
                lane.idle_since = now

    def learn(self, lane: Lane, entry: Entry, now: float) -> None:
        """``entry`` finished as done on ``lane`` at ``now``: the lane's speed and the case's
        estimate learn from it."""
        if entry.expected <= 0:
            return
        seconds = max(now - entry.started_at, 0.0)
        normalized = self.speeds.finished(
            lane.lane_id, SpeedSample(entry.expected, seconds, entry.concurrency, self.running, now))
        self._learn_case(entry, normalized)

    def _learn_case(self, done: Entry, seconds: float) -> None:
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
            self.queued -= 1
            self.queued_expected -= entry.expected
            entry.expected, entry.key = estimate, estimate * entry.spread
            self.enqueue(lane, entry)
            self._note_head(lane)

    # ----------------------------------------------------------------- taking units

    def _may_run(self, lane: Lane, entry: Entry) -> bool:
        if entry.unit.case in lane.slugs:
            return False
        return not (entry.avoid_lane == lane.lane_id and self.accepting > 1)

    def may_run_any(self, lane: Lane) -> bool:
        """Whether some waiting unit is one ``lane`` may run (its own queue or, stealing, any)."""
        queues = [lane.queue] if not self.steal else [other.queue for other in self.lanes.values()]
        return any(self._may_run(lane, entry) for queue in queues for entry in list(queue)[:SCAN_DEPTH])

    def _take_from(self, queue: deque[Entry], lane: Lane, *, from_tail: bool) -> Entry | None:
        n = len(queue)
        for i in range(min(n, SCAN_DEPTH)):
            index = n - 1 - i if from_tail else i
            entry = queue[index]
            if self._may_run(lane, entry):
                del queue[index]
                owner, entry.queued_on = entry.queued_on, None
                if index == 0 and owner is not None:
                    self._note_head(owner)
                self.queued -= 1
                self.queued_expected = max(self.queued_expected - entry.expected, 0.0)
                return entry
        return None

    def _longer_elsewhere(self, lane: Lane, own: Entry | None) -> tuple[Entry | None, Lane | None]:
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
            self.enqueue(best, taken)
            return own, None
        if own is not None:
            self.enqueue(lane, own)
        return taken, best

    def _steal_for(self, thief: Lane) -> tuple[Entry, Lane] | None:
        victims = [lane for lane in self.lanes.values() if lane is not thief and lane.queue]
        key = _longest_head_first if self.prioritized else _most_loaded_first  # longest waiting unit first
        for victim in _in_order(victims, key, 1):
            entry = self._take_from(victim.queue, thief, from_tail=not self.prioritized)
            if entry is not None:
                return entry, victim
        return None

    # ----------------------------------------------------------------- picking

    def pick(self, now: float) -> list[Start]:
        """Start units while slots are free (rounds over lanes with room); returns what started,
        already counted as running."""
        starts: list[Start] = []
        cap = self.per_lane_cap
        while self.queued and self.running < self.global_cap:
            open_lanes = list(self._open.values())
            if not open_lanes:
                return starts
            key: Callable[[Lane], tuple[Any, ...]]
            endgame = False
            if self.prioritized:  # fastest lanes first: under a global cap they should do the most
                self.speeds.refresh(self._lane_views, now, self.global_cap)
                self._probe_first = (
                    self.global_cap < self.accepting * cap
                    and self.queued_expected >= PROBE_FIRST_SLACK * self._max_expected * self.global_cap
                )
                key = self._slot_order(now)
                endgame = self.speeds.endgame(self.queued_expected, self._max_expected, self.accepting)
            else:
                key = _least_loaded_first
            started = False
            for lane in _in_order(open_lanes, key, self.global_cap - self.running):
                if self.running >= self.global_cap or not self.queued:
                    return starts
                probe = self.prioritized and self._probes(lane)
                entry = self._take_from(lane.queue, lane, from_tail=probe)
                if probe and entry is not None:
                    lane.probes += 1
                victim = None
                if self.prioritized and self.steal and not probe:
                    entry, victim = self._longer_elsewhere(lane, entry)
                if entry is None and self.steal:
                    stolen = self._steal_for(lane)
                    if stolen is not None:
                        entry, victim = stolen
                if entry is not None and endgame and not self.co_located and self._leave_to_faster(lane, entry):
                    self.enqueue(victim or lane, entry, front=not probe)  # back where it was
                    continue  # a faster lane may come later in the order
                if entry is not None:
                    self.start(lane, entry, now, stolen_from=victim)
                    starts.append(Start(lane, entry, victim))
                    started = True
                    if self.running >= self.global_cap or not self.queued:
                        return starts  # before the lazy order sorts lanes nobody will look at
            if not started:
                return starts
        return starts

    def _lane_views(self) -> list[LaneView]:
        """Per lane: (id, (expected, started_at) of its running units, accepting)."""
        return [
            (lane.lane_id, [(e.expected, e.started_at) for e in lane.running], lane.accepting)
            for lane in self.lanes.values()
        ]

    def _slot_order(self, now: float) -> Callable[[Lane], tuple[Any, ...]]:
        """The order free slots are offered in.

        Co-located lanes (one machine) differ only by when they were measured, and every extra
        build on a lane slows its others: least loaded first, the faster of equally loaded lanes
        first -- every idle lane gets the next slot.

        Otherwise, first the idle lanes that should be measured: one whose optimistic speed is at
        least ``SHARE_RATIO`` of the fastest lane's pessimistic one (a lane not confidently slower
        never waits for a slot while another runs several), or one measured on fewer than
        ``EXPLORE_UNITS`` units and idle for ``REMEASURE_UNITS`` median units (a slow first measure
        is retried, never final; on separate machines, a speed measured on more units is the
        lane's own). Then the rest by what one more build adds: optimistic speed times marginal
        throughput at its load."""
        speeds = self.speeds
        if self.co_located:
            return lambda lane: (len(lane.running), -speeds.rank(lane.lane_id), lane.index)
        floor = SHARE_RATIO * speeds.floor_low
        stale_s = REMEASURE_UNITS * speeds.prior_s / SPEED_PRIOR_UNITS
        marginals = speeds.marginals()

        def key(lane: Lane) -> tuple[bool, float, int, int]:
            builds = len(lane.running)
            rank = speeds.rank(lane.lane_id)
            due = not builds and (
                rank >= floor
                or (lane.idle_since is not None and now - lane.idle_since >= stale_s
                    and speeds.timed(lane.lane_id) < EXPLORE_UNITS)
            )
            return (not due, -rank * marginals[builds], builds, lane.index)

        return key

    def _probes(self, lane: Lane) -> bool:
        """Whether ``lane`` should take the shortest unit of its queue (a speed probe) rather than
        the longest. Its second unit is one, so its speed shows within a short unit while the first
        (longest) one runs; with a choice of lanes and a long queue its first two are
        (``PROBE_UNITS``); and so are the units of a lane that looks too slow for a place under the
        global cap until it has finished ``EXPLORE_UNITS`` (a bad first measure is not final)."""
        if lane.probes < (PROBE_UNITS if self._probe_first else 1 if lane.running else 0):
            return True
        return self.speeds.exploring(lane.lane_id, EXPLORE_UNITS)

    def _leave_to_faster(self, lane: Lane, entry: Entry) -> bool:
        """Leave ``entry`` for a faster lane when the faster lanes would clear the whole queue
        before the time it would lose by running here instead of on the fastest lane."""
        if entry.expected <= 0 or self.running == 0:  # nothing running: no later chance
            return False
        return self.speeds.leave_to_faster(lane.lane_id, entry.expected, self.queued_expected)


def _neg_key(entry: Entry) -> float:
    return -entry.key


def _remove(queue: deque[Entry], entry: Entry) -> bool:
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


def _least_loaded_first(lane: Lane) -> tuple[int, int]:
    return (len(lane.running), lane.index)


def _longest_head_first(lane: Lane) -> tuple[bool, float, int, int]:
    return (lane.accepting, -lane.queue[0].key, -len(lane.queue), lane.index)


def _most_loaded_first(lane: Lane) -> tuple[bool, int, int]:
    return (lane.accepting, -len(lane.queue), lane.index)


def _in_order(lanes: list[Lane], key: Callable[[Lane], Any], likely: int) -> Iterator[Lane]:
    """``sorted(lanes, key=key)``, lazily: the first ``likely`` lanes by a partial sort (usually
    all a caller looks at: one free slot, one victim), the rest sorted only when asked for."""
    if likely >= len(lanes) or likely < 1:
        yield from sorted(lanes, key=key)
        return
    first = heapq.nsmallest(likely, lanes, key=key)
    yield from first
    taken = {id(lane) for lane in first}
    yield from sorted((lane for lane in lanes if id(lane) not in taken), key=key)


def _expected(source: ExpectedSource, unit: WorkUnit) -> float:
    if source is None:
        return 0.0
    value = source.get(unit.case) if isinstance(source, Mapping) else source(unit)
    try:
        seconds = float(value) if value is not None else 0.0
    except (TypeError, ValueError):
        return 0.0
    return seconds if seconds > 0 and seconds != float("inf") else 0.0
