"""Idle while work waited: the stretches a lane ran nothing although a unit was still waiting.

Every unit is queued when the run starts, so until the last unit starts some unit waits; a lane
that runs nothing then (and has nothing running that would stop it from taking any unit) could
have run one. ``report.html`` marks these stretches on the lane timeline and
``bench/real_lanes.py`` adds them up (issue 25: a lane measured slow under contention was never
given a unit again while another lane took every slot).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Interval = tuple[float, float]


def idle_while_waiting(
    busy: Mapping[str, Sequence[Interval]],
    *,
    last_start: float,
    windows: Mapping[str, Interval],
    min_s: float = 0.0,
) -> dict[str, list[Interval]]:
    """Per lane, the stretches of its ``windows[lane]`` (from when it could run units to when it
    left the pool or the run ended) before ``last_start`` (the last unit's start: work waited until
    then) when none of its ``busy`` intervals (units running on it) covered the time. Stretches
    shorter than ``min_s`` are left out."""
    out: dict[str, list[Interval]] = {}
    for lane, (opened, closed) in windows.items():
        stop = min(closed, last_start)
        stretches: list[Interval] = []
        cursor = opened
        for start, end in sorted(busy.get(lane, ())):
            if start > cursor and cursor < stop:
                stretches.append((cursor, min(start, stop)))
            cursor = max(cursor, end)
        if cursor < stop:
            stretches.append((cursor, stop))
        out[lane] = [(a, b) for a, b in stretches if b - a >= min_s and b > a]
    return out


def total_seconds(stretches: Mapping[str, Sequence[Interval]]) -> float:
    """Seconds of idle time over all lanes' stretches."""
    return sum(b - a for lane in stretches.values() for a, b in lane)
