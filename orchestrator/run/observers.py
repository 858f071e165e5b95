"""Observers of a run: progress display, metrics, lane state and hooks (LangSmith, A/B bookkeeping).

The stages report what happens as events; observers react. None of them can change what a stage
does, and a failing observer never fails the run (:class:`Observers` logs and goes on).

``LaneStateObserver`` is the one writer of ``Lane.state`` while units run: the allocator owns lane
state (ready / quarantined / drained) and announces every change as an event; this observer mirrors
it onto the lanes the rest of the run holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from orchestrator.allocator.model import AllocatorEvent, EventKind
from orchestrator.cases import LoadedCase
from orchestrator.domain import CleanupFailure
from orchestrator.lanes.model import Lane, LaneState
from orchestrator.metrics import RunMetrics
from orchestrator.redact import redact
from orchestrator.results.model import ComparisonStatus, EvalResults, UnitResult
from orchestrator.results.scoring import unit_outcome

log = logging.getLogger(__name__)

_LANE_STATE_BY_EVENT = {
    EventKind.quarantined: LaneState.quarantined,
    EventKind.drained: LaneState.dead,
    EventKind.unquarantined: LaneState.ready,
}


class RunObserver:
    """Every method is optional; the defaults do nothing."""

    def on_lanes(self, lanes: dict[str, Lane]) -> None: ...

    def on_lane_ready(self, lane: Lane, seconds: float) -> None: ...

    def on_queued(self, units: int) -> None: ...

    def on_event(self, event: AllocatorEvent) -> None: ...

    def on_unit(self, record: UnitResult) -> None: ...

    def on_cost(self, usd: float) -> None: ...

    def on_cleanup_failure(self, failure: CleanupFailure) -> None: ...


class Observers(RunObserver):
    """Fan one event out to every observer; an observer that raises is logged and skipped."""

    def __init__(self, observers: list[RunObserver]) -> None:
        self.observers = observers

    def _each(self, method: str, *args: object) -> None:
        for observer in self.observers:
            try:
                getattr(observer, method)(*args)
            except Exception as exc:  # an observer never fails the run
                log.warning("%s.%s failed: %s", type(observer).__name__, method, redact(str(exc)))

    def on_lanes(self, lanes: dict[str, Lane]) -> None:
        self._each("on_lanes", lanes)

    def on_lane_ready(self, lane: Lane, seconds: float) -> None:
        self._each("on_lane_ready", lane, seconds)

    def on_queued(self, units: int) -> None:
        self._each("on_queued", units)

    def on_event(self, event: AllocatorEvent) -> None:
        self._each("on_event", event)

    def on_unit(self, record: UnitResult) -> None:
        self._each("on_unit", record)

    def on_cost(self, usd: float) -> None:
        self._each("on_cost", usd)

    def on_cleanup_failure(self, failure: CleanupFailure) -> None:
        self._each("on_cleanup_failure", failure)


class LaneStateObserver(RunObserver):
    """Mirrors the allocator's lane state onto ``Lane.state`` (the only writer while units run)."""

    def __init__(self, console: Console, on_change: Callable[[], None] | None = None) -> None:
        self.console = console
        self.lanes: dict[str, Lane] = {}
        self.on_change = on_change

    def on_lanes(self, lanes: dict[str, Lane]) -> None:
        self.lanes = lanes

    def on_event(self, event: AllocatorEvent) -> None:
        state = _LANE_STATE_BY_EVENT.get(event.kind)
        lane = self.lanes.get(event.lane or "")
        if state is None or lane is None:
            return
        lane.state = state
        self.console.print(f"[yellow]{lane.describe()} {event.kind.value}[/yellow]: {event.reason or ''}")
        if self.on_change:
            self.on_change()


class MetricsObserver(RunObserver):
    def __init__(self, metrics: RunMetrics) -> None:
        self.metrics = metrics
        self.lanes: dict[str, Lane] = {}

    def lane_states(self) -> None:
        counts: dict[LaneState | str, int] = {}
        for lane in self.lanes.values():
            counts[lane.state] = counts.get(lane.state, 0) + 1
        self.metrics.lane_state(counts)

    def on_lanes(self, lanes: dict[str, Lane]) -> None:
        self.lanes = lanes
        self.lane_states()

    def on_lane_ready(self, lane: Lane, seconds: float) -> None:
        self.metrics.lane_up(seconds)

    def on_queued(self, units: int) -> None:
        self.metrics.unit_queued(units)

    def on_event(self, event: AllocatorEvent) -> None:
        if event.kind == EventKind.started:
            self.metrics.unit_started()
        elif event.kind == EventKind.stolen:
            self.metrics.stolen()
        elif event.kind in _LANE_STATE_BY_EVENT:
            self.lane_states()

    def on_unit(self, record: UnitResult) -> None:
        self.metrics.unit_finished(unit_outcome(record), build_s=record.build.duration_s or None,
                                   verify_s=record.verify_duration_s or None, cost=0.0, turns=record.build.turns)

    def on_cost(self, usd: float) -> None:
        self.metrics.build_cost_usd.inc(max(usd, 0.0))

    def on_cleanup_failure(self, failure: CleanupFailure) -> None:
        self.metrics.cleanup_failed(failure.kind)


class ProgressObserver(RunObserver):
    """The rich progress bar: units done, money spent, lanes by state."""

    def __init__(self, console: Console, total: int, spent: Callable[[], float]) -> None:
        self.lanes: dict[str, Lane] = {}
        self.spent = spent
        self.progress = Progress(TextColumn("[bold]units"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("{task.fields[status]}"), console=console, transient=False)
        self.task: TaskID = self.progress.add_task("units", total=total, status="")

    def on_lanes(self, lanes: dict[str, Lane]) -> None:
        self.lanes = lanes

    def lane_summary(self) -> str:
        states: dict[str, int] = {}
        for lane in self.lanes.values():
            states[lane.state.value] = states.get(lane.state.value, 0) + 1
        return ", ".join(f"{n} {s}" for s, n in sorted(states.items()))

    def on_unit(self, record: UnitResult) -> None:
        self.progress.update(self.task, advance=1, status=f"${self.spent():.2f} · {self.lane_summary()}")


class RunHooks:
    """Observers of a run's results (LangSmith experiments, A/B bookkeeping). Every call is
    best-effort: a hook that raises is logged and never fails the run.

    A hook that looks for a baseline says how that went in :attr:`comparison_status` (and
    :attr:`comparison_error`) by the end of :meth:`on_finish`: n8n's ``comparisonStatus``."""

    comparison_status: ComparisonStatus | None = None
    comparison_error: str | None = None

    async def on_cases(self, run_id: str, cases: list[LoadedCase]) -> None: ...

    async def on_unit(self, unit: UnitResult) -> None: ...

    async def on_finish(self, results: EvalResults) -> dict[str, object] | None:
        """May return a comparison dict (e.g. against a baseline found in LangSmith)."""
        return None


async def call_hooks(hooks: list[RunHooks], method: str, *args: object) -> list[object]:
    """Call ``method`` on every hook in turn; one that raises is logged (redacted) and skipped.
    Returns what the others returned, in order."""
    out = []
    for hook in hooks:
        try:
            out.append(await getattr(hook, method)(*args))
        except Exception as exc:  # best effort by contract
            log.warning("%s.%s failed: %s", type(hook).__name__, method, redact(str(exc)))
    return out


class HooksObserver(RunObserver):
    """Hands each finished unit to the hooks without making the allocator wait for them."""

    def __init__(self, hooks: list[RunHooks]) -> None:
        self.hooks = hooks
        self.pending: set[asyncio.Task[list[object]]] = set()

    def on_unit(self, record: UnitResult) -> None:
        if not self.hooks:
            return
        task = asyncio.create_task(call_hooks(self.hooks, "on_unit", record))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def drain(self) -> None:
        """Wait for the hooks' pending ``on_unit`` calls (before ``on_finish``)."""
        if self.pending:
            await asyncio.gather(*self.pending, return_exceptions=True)
