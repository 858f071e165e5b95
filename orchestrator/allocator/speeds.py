"""How fast each lane is, learned from the units it finished. Synchronous and pure (``now`` is passed in).

Real lanes are not a constant speed each: a unit takes longer while its lane runs more builds
(n8n is one process), and lanes on one machine share its cores, so a lane measured while another
was booting looks slow. So:

* **Concurrency.** Each finished unit is a sample (expected, actual seconds, the most builds its
  lane ran meanwhile, k). The pool learns one slowdown per extra concurrent build, ``alpha``
  (least squares of actual / predicted against k - 1 over every sample), and a sample counts as
  ``actual / (1 + alpha (k - 1))`` seconds at one build: lanes are compared at equal load.
* **Speed.** A lane's speed is expected / normalized actual seconds over its samples, older ones
  weighing less (``SAMPLE_DECAY`` per newer sample), plus its overdue running units as if they
  finished now (a slow lane shows before its first unit ends); what was measured before or while
  another lane joined (it was booting: ``JOIN_DISCOUNT``) counts less. It starts from
  ``SPEED_PRIOR_UNITS`` median units at speed 1.0 (decaying the same way). A first measure taken
  under contention is outweighed by the next ones -- and the scheduler keeps measuring: a lane not
  confidently slower, or measured on few units, is never left idle for long (and lanes of one
  machine, ``co_located``, are not ranked by speed at all: see the scheduler).
* **Slots.** Free slots go by an optimistic rank (an unlucky first measure is not final) times
  what one more build adds there: ``(k + 1) / f(k + 1) - k / f(k)`` with ``f(k) = 1 + alpha (k -
  1)``; with no slowdown that is the plain fastest-lane-first order.
* **Noise.** How far one unit's time strays from what its lane's speed predicts is learned too:
  the pool's spread of log(predicted / normalized actual) over every sample, drawn towards
  ``SPEED_SIGMA`` while there are few (``SIGMA_PRIOR_SAMPLES``). On lanes of one machine that
  spread is large (a unit's time depends on everything else the host runs), so the bands are wide
  and no lane looks confidently slower than another; on lanes that really differ it is history's
  own error, and the bands narrow as samples come.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: A lane's speed starts as if it had finished this many median units at speed 1.0.
SPEED_PRIOR_UNITS = 2.0

#: Sigma of log(actual / expected) of one unit on a lane of known speed (history's own error):
#: free slots go to lanes by speed x exp(SPEED_SIGMA / sqrt(median units measured)), an optimistic
#: estimate, so a fast lane that was unlucky in its first units is tried again.
SPEED_SIGMA = 0.3

#: Samples :data:`SPEED_SIGMA` counts as when the pool's own spread is learned (``sigma``).
SIGMA_PRIOR_SAMPLES = 8.0

#: Weight of a lane's older samples (and of its prior) each time it finishes another unit.
SAMPLE_DECAY = 0.97

#: Samples with concurrency above one needed before the slowdown is estimated at all.
ALPHA_MIN_SAMPLES = 8

#: Weight of what the lanes measured before (or while) another lane joined: that lane was booting
#: meanwhile, and on a shared host a boot slows every build (issue 25: the first lane, measured
#: while the second booted, looked slow and was never given a unit again).
JOIN_DISCOUNT = 0.25


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
    expected_done: float = 0.0  # decayed sum of expected seconds of units finished here
    actual_done: float = 0.0  # their measured seconds at one build (decayed the same way)
    prior_weight: float = 1.0  # what is left of the prior
    timed: int = 0  # units with an expected time it finished
    speed: float = 1.0  # cached estimate, see SpeedModel.refresh
    rank: float = 1.0  # the estimate plus its uncertainty: the order free slots are filled in
    low: float = 1.0  # the estimate minus its uncertainty


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
        self.alpha = 0.0  # slowdown per extra concurrent build on a lane
        self._marginals: list[float] = []
        self._marginals_alpha = float("nan")
        self._last_join = float("-inf")  # when the last lane joined a pool that had lanes already
        self._fit = [0.0] * 5  # n, sum x, sum y, sum xx, sum xy of (k - 1, actual / predicted - 1)
        self._residuals = [0.0, 0.0, 0.0]  # n, sum, sum of squares of log(predicted / actual) per sample
        self.sigma = SPEED_SIGMA  # spread of one unit's log time around its lane's prediction
        self.floor_low = 0.0  # the fastest accepting lane's pessimistic speed, as of the last refresh

    def set_prior(self, median_expected: float) -> None:
        """Set the prior every lane's speed starts from, from the batch's median expected seconds; only the
        first call counts."""
        if not self.prior_s:
            self.prior_s = SPEED_PRIOR_UNITS * median_expected

    def join(self, lane_id: str, now: float) -> None:
        """A lane (or a fresh lane under a drained lane's id) joins: it starts at the prior. It
        booted until now, likely beside the others (co-located lanes share cores): what they
        measured so far, and what they are running now, counts ``JOIN_DISCOUNT`` as much."""
        if self._lanes:
            for lane in self._lanes.values():
                lane.expected_done *= JOIN_DISCOUNT
                lane.actual_done *= JOIN_DISCOUNT
            self._last_join = now
        self._lanes[lane_id] = _LaneSpeed(joined_at=now)
        self._at = float("-inf")

    def changed(self) -> None:
        """The pool changed (quarantine, drain, a new lane): re-rank at the next refresh."""
        self._at = float("-inf")

    def speed(self, lane_id: str) -> float:
        """The lane's estimated speed (expected / measured seconds; 1.0 is as expected), as of the last refresh."""
        return self._lanes[lane_id].speed

    def rank(self, lane_id: str) -> float:
        """The optimistic estimate (speed plus its uncertainty): the order free slots are filled in."""
        return self._lanes[lane_id].rank

    def low(self, lane_id: str) -> float:
        """A pessimistic estimate: the speed minus its uncertainty (as ``rank`` adds it)."""
        return self._lanes[lane_id].low

    def timed(self, lane_id: str) -> int:
        """How many units with an expected time the lane finished (its measured samples)."""
        return self._lanes[lane_id].timed

    def slowdown(self, builds: int) -> float:
        """How much longer a unit takes with ``builds`` on its lane than alone."""
        return 1.0 + self.alpha * max(builds - 1, 0)

    def marginal(self, builds: int) -> float:
        """Throughput one more build adds to a lane running ``builds`` (1.0 for the first)."""
        return (builds + 1) / self.slowdown(builds + 1) - builds / self.slowdown(builds)

    def marginals(self) -> list[float]:
        """:meth:`marginal` for 0 .. ``per_lane_cap`` builds (the scheduler's hot path)."""
        if self._marginals_alpha != self.alpha:
            self._marginals = [self.marginal(k) for k in range(self.per_lane_cap + 1)]
            self._marginals_alpha = self.alpha
        return self._marginals

    def finished(self, lane_id: str, sample: SpeedSample) -> float:
        """Record a finished unit; returns its time as it would have been at speed 1.0, alone."""
        lane = self._lanes[lane_id]
        alone = sample.seconds / self.slowdown(sample.concurrency)
        normalized = alone * lane.speed
        if sample.expected > 0 and sample.seconds > 0:
            x = float(sample.concurrency - 1)
            y = sample.seconds * lane.speed / sample.expected - 1.0
            for i, value in enumerate((1.0, x, y, x * x, x * y)):
                self._fit[i] += value
            self._fit_alpha()
        if sample.expected > 0 and alone > 0:
            residual = math.log(sample.expected / (alone * lane.speed))
            n, total, squares = self._residuals
            n, total, squares = n + 1, total + residual, squares + residual * residual
            self._residuals = [n, total, squares]
            var = max(squares / n - (total / n) ** 2, 0.0) * n / max(n - 1, 1.0)
            self.sigma = math.sqrt((SIGMA_PRIOR_SAMPLES * SPEED_SIGMA**2 + n * var) / (SIGMA_PRIOR_SAMPLES + n))
        weight = JOIN_DISCOUNT if sample.at - sample.seconds < self._last_join else 1.0
        lane.expected_done = lane.expected_done * SAMPLE_DECAY + weight * sample.expected
        lane.actual_done = lane.actual_done * SAMPLE_DECAY + weight * alone
        lane.prior_weight *= SAMPLE_DECAY
        lane.timed += 1
        return normalized

    def _fit_alpha(self) -> None:
        n, sx, sy, sxx, sxy = self._fit
        var = sxx - sx * sx / n
        if n < ALPHA_MIN_SAMPLES or var < 0.5 * ALPHA_MIN_SAMPLES / 4:
            return
        self.alpha = min(max((sxy - sx * sy / n) / var, 0.0), 1.0)

    def refresh(self, views: Callable[[], Sequence[LaneView]], now: float, global_cap: int) -> None:
        """Re-estimate every lane's speed; at most every 1/20 of a median unit (a cheap, slightly
        stale view) unless the pool changed. ``views`` is called only when it does."""
        if now - self._at < self.prior_s / (20 * SPEED_PRIOR_UNITS):
            return
        self._at = now
        lanes = views()
        prior = self.prior_s
        median = prior / SPEED_PRIOR_UNITS
        for lane_id, running, _accepting in lanes:
            lane = self._lanes[lane_id]
            weight = prior * lane.prior_weight
            expected, actual = lane.expected_done + weight, lane.actual_done + weight
            load = self.slowdown(len(running))
            for unit_expected, started_at in running:
                elapsed = (now - started_at) / load
                if unit_expected > 0 and elapsed > unit_expected:
                    expected += unit_expected
                    actual += elapsed
            lane.speed = expected / actual
            spread = math.exp(self.sigma * math.sqrt(median / expected))
            lane.rank, lane.low = lane.speed * spread, lane.speed / spread
        ranked = sorted((self._lanes[lane_id] for lane_id, _r, accepting in lanes if accepting),
                        key=lambda lane: -lane.speed)
        ids = {id(self._lanes[lane_id]): lane_id for lane_id, _r, _a in lanes}
        self._summary = None
        self._faster = {}
        self.floor_low = max((lane.low for lane in ranked), default=0.0)
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
