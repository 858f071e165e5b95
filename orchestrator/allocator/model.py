"""What the allocator hands out, what a worker answers, and what the allocator reports back.

Plain dataclasses: nothing here holds a secret, so events and stats can go straight to metrics
labels and progress output. ``reason`` strings come from callers (``drain``, ``stop_new``); they
are passed through :func:`orchestrator.redact.redact` before they are stored.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, order=True)
class WorkUnit:
    """One (case slug, iteration): one build plus its verification. Iterations are independent."""

    case: str
    iteration: int

    @property
    def key(self) -> str:
        """``"<case>#<iteration>"``: the unit's id in logs, task names and duplicate checks."""
        return f"{self.case}#{self.iteration}"


class Outcome(str, enum.Enum):
    """What a worker says about one attempt.

    ``done``: the lane answered; the attempt is final whatever the agent built (a wrong build is
    ``done``, with the verdict in the value). ``retry_elsewhere``: the lane answered but the attempt
    should be retried on another lane (e.g. claude printed no workflow id). ``lane_fault``: the lane
    itself failed (connection refused, 5xx from n8n, MCP unreachable) -- counts towards quarantine.
    """

    done = "done"
    retry_elsewhere = "retry_elsewhere"
    lane_fault = "lane_fault"


class ResultStatus(str, enum.Enum):
    """Final state of one unit."""

    done = "done"  # the worker returned Outcome.done
    failed = "failed"  # retries elsewhere exhausted, or the worker raised
    lane_failure = "lane_failure"  # lane faults beyond max_lane_fault_retries
    skipped = "skipped"  # waiting when stop_new() was called
    aborted = "aborted"  # waiting while every lane was quarantined/dead for the abort window
    cancelled = "cancelled"  # hard stop by cancel()


@dataclass(frozen=True)
class WorkResult:
    """Final word on one unit. ``value`` is what the worker returned with its last outcome (the
    exception, when the worker raised). ``attempts`` counts worker calls (0: never started)."""

    unit: WorkUnit
    lane: str | None
    status: ResultStatus
    value: Any = None
    attempts: int = 0
    reason: str | None = None
    lanes_tried: tuple[str, ...] = ()
    finished_at: float = 0.0


class EventKind(str, enum.Enum):
    queued = "queued"
    started = "started"
    finished = "finished"
    stolen = "stolen"
    requeued = "requeued"
    quarantined = "quarantined"
    unquarantined = "unquarantined"
    probe_failed = "probe_failed"
    drained = "drained"
    lane_added = "lane_added"
    aborted = "aborted"
    stopped = "stopped"
    cancelled = "cancelled"


@dataclass(frozen=True)
class AllocatorEvent:
    """One thing that happened, for metrics and progress. ``time`` is the event loop's clock
    (``loop.time()``) when a loop is running, else ``time.monotonic()``.

    ``lane`` is where it happened (``started``/``finished``: the lane that ran it; ``stolen``: the
    thief; ``requeued``: the new queue), ``from_lane`` where the unit came from."""

    kind: EventKind
    time: float
    lane: str | None = None
    unit: WorkUnit | None = None
    from_lane: str | None = None
    attempt: int = 0
    status: ResultStatus | None = None
    reason: str | None = None


@dataclass(frozen=True)
class LaneStats:
    lane: str
    active: int
    queued: int
    max_active: int
    started: int
    stolen: int  # units this lane took from another lane's queue
    quarantined: bool
    dead: bool
    consecutive_transport_failures: int


@dataclass(frozen=True)
class AllocatorStats:
    lanes: dict[str, LaneStats] = field(default_factory=dict)
    active: int = 0
    max_active: int = 0
    queued: int = 0
    steals: int = 0
    pending: int = 0  # submitted units without a final result
    finished: int = 0
