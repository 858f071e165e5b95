"""How fast each lane is, learned from the units it finished. Synchronous and pure (``now`` is passed in).

A lane's speed is expected / actual seconds over the units it finished (expected from history,
see :mod:`orchestrator.allocator.durations`), plus its overdue running units as if they finished
now (a lower bound on their time: a slow lane shows before its first unit ends). It starts from
``SPEED_PRIOR_UNITS`` median units at speed 1.0. Free slots go by an optimistic rank
(``SPEED_SIGMA``), so an unlucky first measure is not final.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: A lane's speed starts as if it had finished this many median units at speed 1.0.
SPEED_PRIOR_UNITS = 2.0

#: Sigma of log(actual / expected) of one unit on a lane of known speed (history's own error):
#: free slots go to lanes by speed x exp(SPEED_SIGMA / sqrt(median units measured)), an optimistic
#: estimate, so a fast lane that was unlucky in its first units is tried again.
SPEED_SIGMA = 0.3


@dataclass(frozen=True)
class SpeedSample:
    """One finished unit: ``expected`` seconds (history), ``seconds`` it took, the most builds its
    lane ran at once meanwhile (``concurrency``), the builds running in the pool when it ended
    (``pool_running``), and when it ended (``at``)."""

    expected: float
    seconds: float
    concurrency: int
    pool_running: int
    at: float


@dataclass
class _LaneSpeed:
    joined_at: float
    expected_done: float = 0.0  # sum of expected seconds of units finished here
    actual_done: float = 0.0  # their measured seconds
    timed: int = 0  # units with an expected time it finished
    speed: float = 1.0  # cached estimate, see SpeedModel.refresh
    rank: float = 1.0  # the estimate plus its uncertainty: the order free slots are filled in


#: Per lane for :meth:`SpeedModel.refresh`: (lane id, (expected, started_at) of each running unit, accepting).
LaneView = tuple[str, Sequence[tuple[float, float]], bool]


class SpeedModel:
    def __init__(self, per_lane_cap: int) -> None:
        self.per_lane_cap = per_lane_cap
        self._lanes: dict[str, _LaneSpeed] = {}
        self.prior_s = 0.0  # pseudo-seconds at speed 1.0 that each lane's speed starts from
        self._at = float("-inf")  # clock time the lane speeds were last estimated
        self._summary: tuple[float, float, float] | None = None  # capacity rate, fastest, slowest
        self._faster: dict[str, float] = {}  # lane -> capacity of the lanes faster than it; "" -> fastest speed
        self._admit_speed = 0.0  # speed of the slowest lane the global cap has room for

    def set_prior(self, median_expected: float) -> None:
        if not self.prior_s:
            self.prior_s = SPEED_PRIOR_UNITS * median_expected

    def join(self, lane_id: str, now: float) -> None:
        """A lane (or a fresh lane under a drained lane's id) joins: it starts at the prior."""
        self._lanes[lane_id] = _LaneSpeed(joined_at=now)
        self._at = float("-inf")

    def changed(self) -> None:
        """The pool changed (quarantine, drain, a new lane): re-rank at the next refresh."""
        self._at = float("-inf")

    def speed(self, lane_id: str) -> float:
        return self._lanes[lane_id].speed

    def rank(self, lane_id: str) -> float:
        return self._lanes[lane_id].rank

    def timed(self, lane_id: str) -> int:
        return self._lanes[lane_id].timed

    def finished(self, lane_id: str, sample: SpeedSample) -> float:
        """Record a finished unit; returns its time as it would have been at speed 1.0."""
        lane = self._lanes[lane_id]
        normalized = sample.seconds * lane.speed
        lane.expected_done += sample.expected
        lane.timed += 1
        lane.actual_done += sample.seconds
        return normalized

    def refresh(self, lanes: Sequence[LaneView], now: float, global_cap: int) -> None:
        """Re-estimate every lane's speed; at most every 1/20 of a median unit (a cheap, slightly
        stale view) unless the pool changed."""
        if now - self._at < self.prior_s / (20 * SPEED_PRIOR_UNITS):
            return
        self._at = now
        prior = self.prior_s
        median = prior / SPEED_PRIOR_UNITS
        for lane_id, running, _accepting in lanes:
            lane = self._lanes[lane_id]
            expected, actual = lane.expected_done + prior, lane.actual_done + prior
            for unit_expected, started_at in running:
                elapsed = now - started_at
                if unit_expected > 0 and elapsed > unit_expected:
                    expected += unit_expected
                    actual += elapsed
            lane.speed = expected / actual
            lane.rank = lane.speed * math.exp(SPEED_SIGMA * math.sqrt(median / expected))
        ranked = sorted((self._lanes[lane_id] for lane_id, _r, accepting in lanes if accepting),
                        key=lambda lane: -lane.speed)
        ids = {id(self._lanes[lane_id]): lane_id for lane_id, _r, _a in lanes}
        self._summary = None
        self._faster = {}
        if ranked:
            cap = self.per_lane_cap
            self._summary = (sum(lane.speed for lane in ranked) * cap, ranked[0].speed, ranked[-1].speed)
            total = 0.0
            for lane in ranked:
                self._faster[ids[id(lane)]] = total
                total += lane.speed * cap
            self._faster[""] = ranked[0].speed
            admitted = max(global_cap // cap, 1)
            self._admit_speed = ranked[admitted - 1].speed if admitted < len(ranked) else 0.0

    def exploring(self, lane_id: str, explore_units: int) -> bool:
        """A lane that looks too slow for a place under the global cap, with fewer than
        ``explore_units`` measured: it should run short units until its speed is known."""
        lane = self._lanes[lane_id]
        return lane.timed < explore_units and lane.speed < self._admit_speed

    def endgame(self, queued_expected: float, max_expected: float, accepting: int) -> bool:
        """Near the end of the queue (as of the last refresh): whether a slower lane might do
        better to leave a unit to faster ones. False while the queue outlasts the longest unit's
        slow-lane penalty."""
        if self._summary is None or accepting < 2:
            return False
        rate, fastest, slowest = self._summary
        return queued_expected / rate <= max_expected * (1 / slowest - 1 / fastest)

    def leave_to_faster(self, lane_id: str, expected: float, queued_expected: float) -> bool:
        """Whether the lanes faster than ``lane_id`` would clear the whole queue (plus this unit)
        before the time the unit would lose by running there instead of on the fastest lane."""
        rate = self._faster.get(lane_id, 0.0)
        if rate <= 0:
            return False
        penalty = expected * (1 / self._lanes[lane_id].speed - 1 / self._faster[""])
        return (queued_expected + expected) / rate < penalty
