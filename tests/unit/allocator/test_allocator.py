"""The work-stealing allocator, driven on a virtual clock (plus one run on a real event loop).

Workers here are simulated builds (``asyncio.sleep``); the allocator is the real one. The worker
side keeps its own concurrency counts so caps are checked independently of the allocator's stats.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from orchestrator.allocator import (
    Allocator,
    AllocatorEvent,
    EventKind,
    Outcome,
    ResultStatus,
    WorkResult,
    WorkUnit,
)
from orchestrator.allocator.scheduler import Scheduler
from orchestrator.allocator.virtual_clock import VirtualClockDeadlock, run_virtual
from orchestrator.errors import ConfigError
from orchestrator.redact import register_secret


def units(cases: int, iterations: int) -> list[WorkUnit]:
    return [WorkUnit(f"case-{c:02d}", i) for c in range(cases) for i in range(iterations)]


def now() -> float:
    return asyncio.get_running_loop().time()


@dataclass
class Start:
    time: float
    lane: str
    key: str
    attempt: int


@dataclass
class SimWorker:
    """A simulated build. ``script(lane, unit, attempt)`` returns (duration, outcome, value)."""

    script: Callable[[str, WorkUnit, int], tuple[float, Outcome, Any]] = lambda lane, unit, attempt: (
        10.0,
        Outcome.done,
        None,
    )
    starts: list[Start] = field(default_factory=list)
    active: Counter[str] = field(default_factory=Counter)
    max_active: Counter[str] = field(default_factory=Counter)
    total: int = 0
    max_total: int = 0
    slugs_running: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    same_slug_overlaps: int = 0
    cancelled: list[tuple[str, str]] = field(default_factory=list)

    async def __call__(self, lane: str, unit: WorkUnit, attempt: int) -> tuple[Outcome, Any]:
        self.starts.append(Start(now(), lane, unit.key, attempt))
        self.active[lane] += 1
        self.total += 1
        self.max_active[lane] = max(self.max_active[lane], self.active[lane])
        self.max_total = max(self.max_total, self.total)
        self.slugs_running[lane][unit.case] += 1
        if self.slugs_running[lane][unit.case] > 1:
            self.same_slug_overlaps += 1
        try:
            duration, outcome, value = self.script(lane, unit, attempt)
            await asyncio.sleep(duration)
            return outcome, value
        except asyncio.CancelledError:
            self.cancelled.append((lane, unit.key))
            raise
        finally:
            self.active[lane] -= 1
            self.total -= 1
            self.slugs_running[lane][unit.case] -= 1


def by_key(results: list[WorkResult]) -> dict[str, WorkResult]:
    return {r.unit.key: r for r in results}


def statuses(results: list[WorkResult]) -> Counter[ResultStatus]:
    return Counter(r.status for r in results)


async def run_with(allocator: Allocator, worker: SimWorker, *actions: tuple[float, Callable[[], None]]) -> list[WorkResult]:
    """Run the allocator; each action fires at its virtual time."""

    async def fire(at: float, action: Callable[[], None]) -> None:
        await asyncio.sleep(at)
        action()

    helpers = [asyncio.create_task(fire(at, action)) for at, action in actions]
    try:
        return await allocator.run(worker)
    finally:
        for task in helpers:
            task.cancel()


# --------------------------------------------------------------------------- caps


def test_per_lane_cap_is_never_exceeded() -> None:
    worker = SimWorker(script=lambda lane, unit, attempt: (3.0 + unit.iteration % 5, Outcome.done, None))

    async def main() -> tuple[list[WorkResult], Allocator]:
        allocator = Allocator(["a", "b", "c"], per_lane_cap=2, global_cap=100)
        allocator.submit(units(20, 3))
        return await allocator.run(worker), allocator

    results, allocator = run_virtual(main())
    assert statuses(results) == {ResultStatus.done: 60}
    assert dict(worker.max_active) == {"a": 2, "b": 2, "c": 2}
    assert {lane: s.max_active for lane, s in allocator.stats().lanes.items()} == {"a": 2, "b": 2, "c": 2}


def test_global_cap_is_never_exceeded_and_defaults_to_twice_the_lanes() -> None:
    def run(global_cap: int | None) -> tuple[SimWorker, Allocator]:
        worker = SimWorker()

        async def main() -> Allocator:
            allocator = Allocator(["a", "b", "c", "d"], per_lane_cap=4, global_cap=global_cap)
            allocator.submit(units(30, 2))
            await allocator.run(worker)
            return allocator

        return worker, run_virtual(main())

    worker, allocator = run(5)
    assert worker.max_total == 5
    assert allocator.stats().max_active == 5
    assert max(worker.max_active.values()) <= 4

    worker, allocator = run(None)
    assert allocator.global_cap == 8
    assert worker.max_total == 8
    # under the global cap, slots go to the least-loaded lanes: two each
    assert dict(worker.max_active) == {"a": 2, "b": 2, "c": 2, "d": 2}
    allocator.drain("a", "gone")
    assert allocator.global_cap == 6  # the default follows the lanes still in the pool
    allocator.add_lane("e")
    assert allocator.global_cap == 8


# --------------------------------------------------------------------------- stealing


def test_stealing_balances_a_queue_submitted_to_one_lane() -> None:
    def run(steal: bool) -> tuple[float, Allocator]:
        async def main() -> tuple[float, Allocator]:
            allocator = Allocator(["l0", "l1", "l2", "l3"], per_lane_cap=2, global_cap=100, steal=steal)
            allocator.submit(units(40, 1), lane="l0")
            results = await allocator.run(SimWorker())
            assert statuses(results) == {ResultStatus.done: 40}
            return now(), allocator

        return run_virtual(main())

    makespan, allocator = run(steal=True)
    assert makespan == pytest.approx(50.0)  # 40 units x 10 s over 8 slots
    stats = allocator.stats()
    assert {lane: s.started for lane, s in stats.lanes.items()} == {"l0": 10, "l1": 10, "l2": 10, "l3": 10}
    assert stats.steals == 30
    assert stats.lanes["l0"].stolen == 0

    makespan, allocator = run(steal=False)
    assert makespan == pytest.approx(200.0)  # l0 alone, 2 at a time
    assert allocator.stats().steals == 0


def test_stealing_takes_from_the_tail_of_the_most_loaded_queue() -> None:
    events: list[AllocatorEvent] = []

    async def main() -> None:
        allocator = Allocator(["a", "b", "c"], per_lane_cap=1, global_cap=100, on_event=events.append)
        allocator.submit([WorkUnit("x", i) for i in range(2)], lane="a")
        allocator.submit([WorkUnit("y", i) for i in range(5)], lane="b")
        await allocator.run(SimWorker())

    run_virtual(main())
    first_steal = next(e for e in events if e.kind is EventKind.stolen)
    assert (first_steal.lane, first_steal.from_lane) == ("c", "b")
    queued_on_b = [e.unit for e in events if e.kind is EventKind.queued and e.lane == "b"]
    assert first_steal.unit == queued_on_b[-1]


def test_a_slow_lane_ends_up_with_fewer_units() -> None:
    worker = SimWorker(script=lambda lane, unit, attempt: (50.0 if lane == "slow" else 5.0, Outcome.done, None))

    async def main() -> Allocator:
        allocator = Allocator(["slow", "f1", "f2"], per_lane_cap=1, global_cap=100)
        allocator.submit(units(30, 1))
        await allocator.run(worker)
        return allocator

    started = {lane: s.started for lane, s in run_virtual(main()).stats().lanes.items()}
    assert sum(started.values()) == 30
    assert started["slow"] <= 3
    assert started["f1"] >= 12 and started["f2"] >= 12


# --------------------------------------------------------------------------- same slug


def test_a_lane_never_builds_the_same_slug_twice_at_once() -> None:
    worker = SimWorker()

    async def main() -> float:
        allocator = Allocator(["only"], per_lane_cap=4, global_cap=100)
        allocator.submit([WorkUnit("a", i) for i in range(4)] + [WorkUnit("b", i) for i in range(4)])
        results = await allocator.run(worker)
        assert statuses(results) == {ResultStatus.done: 8}
        return now()

    assert run_virtual(main()) == pytest.approx(40.0)  # a's four run one after another, b's alongside
    assert worker.same_slug_overlaps == 0
    assert worker.max_active["only"] == 2


def test_two_lanes_may_build_the_same_slug_at_once() -> None:
    worker = SimWorker()

    async def main() -> float:
        allocator = Allocator(["a", "b"], per_lane_cap=4, global_cap=100)
        allocator.submit([WorkUnit("same", i) for i in range(4)])
        await allocator.run(worker)
        return now()

    assert run_virtual(main()) == pytest.approx(20.0)
    assert worker.same_slug_overlaps == 0
    assert worker.max_total == 2


# --------------------------------------------------------------------------- drain


def test_a_drained_lanes_queued_and_in_flight_work_completes_elsewhere() -> None:
    worker = SimWorker()
    events: list[AllocatorEvent] = []
    allocator = Allocator(["a", "b", "c"], per_lane_cap=2, global_cap=100, on_event=events.append)

    async def main() -> list[WorkResult]:
        allocator.submit(units(30, 1))
        return await run_with(allocator, worker, (5.0, lambda: allocator.drain("a", "readiness probe failed")))

    results = run_virtual(main())
    assert statuses(results) == {ResultStatus.done: 30}
    cancelled_on_a = {key for lane, key in worker.cancelled}
    assert len(cancelled_on_a) == 2 and {lane for lane, _ in worker.cancelled} == {"a"}
    results_by_key = by_key(results)
    for key in cancelled_on_a:
        result = results_by_key[key]
        assert result.attempts == 2
        assert result.lanes_tried[0] == "a" and result.lane in {"b", "c"}
    assert all(r.lane != "a" for r in results)
    assert not [s for s in worker.starts if s.lane == "a" and s.time >= 5.0]
    assert [e.reason for e in events if e.kind is EventKind.drained] == ["readiness probe failed"]
    stats = allocator.stats()
    assert stats.lanes["a"].dead and stats.lanes["a"].queued == 0


def test_an_in_flight_unit_is_retried_at_most_once_for_lane_faults() -> None:
    # the unit on lane a is cancelled by a drain, retried on b, then b is drained too
    worker = SimWorker(script=lambda lane, unit, attempt: (100.0, Outcome.done, None))
    allocator = Allocator(["a", "b", "c"], per_lane_cap=1, global_cap=100)

    async def main() -> list[WorkResult]:
        allocator.submit([WorkUnit("long", 0)], lane="a")
        return await run_with(
            allocator,
            worker,
            (5.0, lambda: allocator.drain("a", "died")),
            (10.0, lambda: allocator.drain("b", "died too")),
        )

    (result,) = run_virtual(main())
    assert result.status is ResultStatus.lane_failure
    assert result.attempts == 2
    assert result.lanes_tried == ("a", "b")
    assert not [s for s in worker.starts if s.lane == "c"]


def test_lane_fault_outcomes_retry_once_then_finish_as_lane_failure() -> None:
    worker = SimWorker(
        script=lambda lane, unit, attempt: (1.0, Outcome.lane_fault if unit.case == "bad" else Outcome.done, "conn refused")
    )

    async def main() -> list[WorkResult]:
        allocator = Allocator(["a", "b", "c"], per_lane_cap=1, global_cap=100)
        allocator.submit([WorkUnit("bad", 0), WorkUnit("ok", 0)])
        return await allocator.run(worker)

    results = by_key(run_virtual(main()))
    assert results["bad#0"].status is ResultStatus.lane_failure
    assert results["bad#0"].attempts == 2
    assert results["bad#0"].value == "conn refused"
    assert len(set(results["bad#0"].lanes_tried)) == 2
    assert results["ok#0"].status is ResultStatus.done


# --------------------------------------------------------------------------- quarantine


def scripted_lane(outcomes: dict[str, list[Outcome]], duration: float = 1.0) -> SimWorker:
    """Each lane answers with its scripted outcomes in order, then ``done``."""
    calls: Counter[str] = Counter()

    def script(lane: str, unit: WorkUnit, attempt: int) -> tuple[float, Outcome, Any]:
        seq = outcomes.get(lane, [])
        outcome = seq[calls[lane]] if calls[lane] < len(seq) else Outcome.done
        calls[lane] += 1
        return duration, outcome, lane

    return SimWorker(script=script)


def test_three_consecutive_transport_failures_quarantine_a_lane() -> None:
    events: list[AllocatorEvent] = []
    worker = scripted_lane({"bad": [Outcome.lane_fault] * 10})

    async def main() -> tuple[list[WorkResult], Allocator]:
        allocator = Allocator(["bad", "good"], per_lane_cap=1, global_cap=100, on_event=events.append)
        allocator.submit(units(12, 1))
        return await allocator.run(worker), allocator

    results, allocator = run_virtual(main())
    assert statuses(results) == {ResultStatus.done: 12}
    assert [(e.kind, e.lane) for e in events if e.kind is EventKind.quarantined] == [(EventKind.quarantined, "bad")]
    assert allocator.stats().lanes["bad"].started == 3
    assert allocator.stats().lanes["bad"].quarantined
    assert all(r.lane == "good" for r in results)


def test_agent_failures_are_not_lane_failures_and_reset_the_count() -> None:
    events: list[AllocatorEvent] = []
    fault, retry, done = Outcome.lane_fault, Outcome.retry_elsewhere, Outcome.done
    worker = scripted_lane({"flaky": [fault, fault, retry, fault, fault, done, fault, fault, done] + [retry] * 10})

    async def main() -> Allocator:
        allocator = Allocator(["flaky", "good"], per_lane_cap=1, global_cap=100, on_event=events.append)
        allocator.submit(units(30, 1))
        await allocator.run(worker)
        return allocator

    allocator = run_virtual(main())
    assert not [e for e in events if e.kind is EventKind.quarantined]
    assert allocator.stats().lanes["flaky"].started >= 12
    assert not allocator.stats().lanes["flaky"].quarantined


def test_a_passing_reprobe_brings_a_quarantined_lane_back() -> None:
    events: list[AllocatorEvent] = []
    probes: list[tuple[float, str]] = []
    worker = scripted_lane({"bad": [Outcome.lane_fault] * 3}, duration=10.0)

    async def probe(lane: str) -> bool:
        probes.append((now(), lane))
        return len(probes) >= 2

    async def main() -> Allocator:
        allocator = Allocator(["bad", "good"], per_lane_cap=1, global_cap=100, probe=probe, on_event=events.append)
        allocator.submit(units(40, 1))
        await allocator.run(worker)
        return allocator

    allocator = run_virtual(main())
    quarantined_at = next(e.time for e in events if e.kind is EventKind.quarantined)
    back_at = next(e.time for e in events if e.kind is EventKind.unquarantined)
    assert quarantined_at == pytest.approx(30.0)
    assert [t for t, _ in probes] == pytest.approx([60.0, 90.0])  # default 30 s interval
    assert back_at == pytest.approx(90.0)
    assert [e.time for e in events if e.kind is EventKind.probe_failed] == pytest.approx([60.0])
    bad_starts = [s.time for s in worker.starts if s.lane == "bad"]
    assert not [t for t in bad_starts if quarantined_at <= t < back_at]
    assert [t for t in bad_starts if t >= back_at]
    assert not allocator.stats().lanes["bad"].quarantined


def test_waiting_units_abort_after_all_lanes_are_quarantined_for_the_window() -> None:
    events: list[AllocatorEvent] = []
    worker = scripted_lane({"a": [Outcome.lane_fault] * 99, "b": [Outcome.lane_fault] * 99}, duration=1.0)

    async def never(lane: str) -> bool:
        return False

    async def main() -> list[WorkResult]:
        allocator = Allocator(
            ["a", "b"],
            per_lane_cap=1,
            global_cap=100,
            probe=never,
            reprobe_interval_s=7.0,
            abort_after_all_quarantined_s=50.0,
            on_event=events.append,
        )
        allocator.submit(units(10, 1))
        return await allocator.run(worker)

    results = run_virtual(main())
    all_quarantined_at = max(e.time for e in events if e.kind is EventKind.quarantined)
    (aborted,) = [e for e in events if e.kind is EventKind.aborted]
    assert aborted.time == pytest.approx(all_quarantined_at + 50.0)
    counts = statuses(results)
    assert counts[ResultStatus.aborted] >= 4
    assert counts[ResultStatus.done] == 0
    assert sum(counts.values()) == 10
    assert all(r.reason and "50 s" in r.reason for r in results if r.status is ResultStatus.aborted)


def test_no_abort_when_a_lane_comes_back_within_the_window() -> None:
    events: list[AllocatorEvent] = []
    worker = scripted_lane({"a": [Outcome.lane_fault] * 3, "b": [Outcome.lane_fault] * 3}, duration=1.0)

    async def probe(lane: str) -> bool:
        return now() >= 40.0

    async def main() -> list[WorkResult]:
        allocator = Allocator(
            ["a", "b"],
            per_lane_cap=1,
            global_cap=100,
            probe=probe,
            reprobe_interval_s=10.0,
            abort_after_all_quarantined_s=50.0,
            on_event=events.append,
        )
        allocator.submit(units(10, 1))
        return await allocator.run(worker)

    results = run_virtual(main())
    assert not [e for e in events if e.kind is EventKind.aborted]
    counts = statuses(results)
    assert ResultStatus.aborted not in counts
    assert counts[ResultStatus.done] >= 7  # the rest faulted on both lanes: lane_failure
    assert min(e.time for e in events if e.kind is EventKind.unquarantined) == pytest.approx(43.0)  # probes at 13, 23, 33, 43


# --------------------------------------------------------------------------- retries


def test_a_retry_prefers_a_different_lane() -> None:
    worker = SimWorker(
        script=lambda lane, unit, attempt: (2.0, Outcome.retry_elsewhere if attempt == 1 else Outcome.done, attempt)
    )

    async def main() -> list[WorkResult]:
        allocator = Allocator(["a", "b", "c"], per_lane_cap=2, global_cap=100)
        allocator.submit(units(30, 1))
        return await allocator.run(worker)

    results = run_virtual(main())
    assert statuses(results) == {ResultStatus.done: 30}
    for result in results:
        assert result.attempts == 2 and result.value == 2
        assert result.lanes_tried[0] != result.lanes_tried[1]


def test_retries_elsewhere_are_bounded() -> None:
    worker = SimWorker(script=lambda lane, unit, attempt: (2.0, Outcome.retry_elsewhere, f"no id {attempt}"))

    async def main() -> list[WorkResult]:
        allocator = Allocator(["a", "b"], per_lane_cap=1, global_cap=100, max_retries_elsewhere=2)
        allocator.submit(units(3, 1))
        return await allocator.run(worker)

    for result in run_virtual(main()):
        assert result.status is ResultStatus.failed
        assert result.attempts == 3 and result.value == "no id 3"
        assert all(x != y for x, y in zip(result.lanes_tried, result.lanes_tried[1:]))


def test_without_a_bound_the_worker_decides_when_a_unit_stops_retrying() -> None:
    """The run counts ``--build-max-attempts`` once, in its unit (``run/unit.py``): the allocator,
    given no bound of its own, retries for as long as the worker asks and finishes the unit when the
    worker says ``done``."""
    worker = SimWorker(script=lambda lane, unit, attempt: (
        (1.0, Outcome.retry_elsewhere, None) if attempt < 5 else (1.0, Outcome.done, f"final after {attempt}")))

    async def main() -> list[WorkResult]:
        allocator = Allocator(["a", "b"], per_lane_cap=1, global_cap=100, max_retries_elsewhere=None)
        allocator.submit(units(2, 1))
        return await allocator.run(worker)

    for result in run_virtual(main()):
        assert result.status is ResultStatus.done and result.attempts == 5 and result.value == "final after 5"


def test_a_single_lane_still_takes_its_own_retry() -> None:
    worker = SimWorker(script=lambda lane, unit, attempt: (1.0, Outcome.retry_elsewhere if attempt == 1 else Outcome.done, None))

    async def main() -> list[WorkResult]:
        allocator = Allocator(["only"], per_lane_cap=1)
        allocator.submit([WorkUnit("x", 0)])
        return await allocator.run(worker)

    (result,) = run_virtual(main())
    assert result.status is ResultStatus.done and result.lanes_tried == ("only", "only")


def test_a_raising_worker_fails_the_unit_without_hanging() -> None:
    async def worker(lane: str, unit: WorkUnit, attempt: int) -> tuple[Outcome, Any]:
        await asyncio.sleep(1)
        if unit.iteration == 0:
            raise KeyError("boom")
        return Outcome.done, None

    async def main() -> list[WorkResult]:
        allocator = Allocator(["a"], per_lane_cap=2)
        allocator.submit(units(1, 2))
        return await allocator.run(worker)

    results = by_key(run_virtual(main()))
    assert results["case-00#0"].status is ResultStatus.failed
    assert isinstance(results["case-00#0"].value, KeyError)
    assert results["case-00#1"].status is ResultStatus.done


# --------------------------------------------------------------------------- stopping


def test_stop_new_skips_waiting_units_and_lets_running_ones_finish() -> None:
    worker = SimWorker()
    allocator = Allocator(["a", "b"], per_lane_cap=1, global_cap=100)

    async def main() -> list[WorkResult]:
        allocator.submit(units(10, 1))
        return await run_with(allocator, worker, (15.0, lambda: allocator.stop_new("spend cap reached")))

    results = run_virtual(main())
    counts = statuses(results)
    assert counts == {ResultStatus.done: 4, ResultStatus.skipped: 6}
    for result in results:
        if result.status is ResultStatus.skipped:
            assert result.reason == "spend cap reached" and result.attempts == 0 and result.lane is None
    assert not worker.cancelled
    allocator.submit([WorkUnit("late", 0)])
    assert allocator.results[-1].status is ResultStatus.skipped


def test_cancel_is_a_hard_stop() -> None:
    worker = SimWorker()
    allocator = Allocator(["a", "b"], per_lane_cap=1, global_cap=100)

    async def main() -> tuple[list[WorkResult], float]:
        allocator.submit(units(10, 1))
        results = await run_with(allocator, worker, (15.0, lambda: allocator.cancel("SIGTERM")))
        return results, now()

    results, ended = run_virtual(main())
    assert ended == pytest.approx(15.0)
    assert statuses(results) == {ResultStatus.done: 2, ResultStatus.cancelled: 8}
    assert len(worker.cancelled) == 2
    assert {r.attempts for r in results if r.status is ResultStatus.cancelled} == {0, 1}


# --------------------------------------------------------------------------- pool changes


def test_a_replacement_lane_picks_up_work_left_when_every_lane_was_drained() -> None:
    worker = SimWorker()
    allocator = Allocator(["a"], per_lane_cap=2, abort_after_all_quarantined_s=1000.0)

    async def main() -> list[WorkResult]:
        allocator.submit(units(6, 1))
        return await run_with(
            allocator,
            worker,
            (5.0, lambda: allocator.drain("a", "oom")),
            (20.0, lambda: allocator.add_lane("a2")),
        )

    results = run_virtual(main())
    assert statuses(results) == {ResultStatus.done: 6}
    assert {r.lane for r in results} == {"a2"}
    assert min(s.time for s in worker.starts if s.lane == "a2") == pytest.approx(20.0)


def test_units_abort_when_the_only_lane_is_drained_and_not_replaced() -> None:
    allocator = Allocator(["a"], per_lane_cap=1, abort_after_all_quarantined_s=60.0)

    async def main() -> tuple[list[WorkResult], float]:
        allocator.submit(units(5, 1))
        results = await run_with(allocator, SimWorker(), (5.0, lambda: allocator.drain("a", "oom")))
        return results, now()

    results, ended = run_virtual(main())
    assert ended == pytest.approx(65.0)
    # the unit cancelled on a waits (it has a lane-fault retry left) and is aborted with the rest
    assert statuses(results) == {ResultStatus.aborted: 5}
    assert {r.attempts for r in results} == {0, 1}


def test_results_are_delivered_as_units_finish() -> None:
    delivered: list[tuple[float, WorkResult]] = []
    worker = SimWorker(script=lambda lane, unit, attempt: (1.0 + unit.iteration, Outcome.done, unit.iteration))

    async def main() -> list[WorkResult]:
        allocator = Allocator(["a"], per_lane_cap=1, on_result=lambda r: delivered.append((now(), r)))
        allocator.submit(units(1, 3))
        return await allocator.run(worker)

    results = run_virtual(main())
    assert [r for _, r in delivered] == results
    times = [t for t, _ in delivered]
    assert times == sorted(times) and len(set(times)) == 3
    assert [r.finished_at for r in results] == times


def test_events_carry_redacted_reasons() -> None:
    secret = "mcp-token-7Hq2vX9kLp"
    register_secret(secret)
    events: list[AllocatorEvent] = []
    allocator = Allocator(["a", "b"], on_event=events.append)
    allocator.drain("a", f"healthz failed with Authorization {secret}")
    (drained,) = [e for e in events if e.kind is EventKind.drained]
    assert drained.reason is not None and secret not in drained.reason and "***" in drained.reason


# --------------------------------------------------------------------------- determinism


def schedule_for(seed: int) -> list[tuple[float, str, str, int]]:
    def script(lane: str, unit: WorkUnit, attempt: int) -> tuple[float, Outcome, Any]:
        duration = 3.0 + (unit.iteration * 7 + int(unit.case[-2:]) * 3) % 11
        outcome = Outcome.retry_elsewhere if (unit.iteration * 3 + int(unit.case[-2:]) + attempt) % 5 == 0 else Outcome.done
        return duration, outcome, None

    worker = SimWorker(script=script)

    async def main() -> None:
        allocator = Allocator(["a", "b", "c", "d"], per_lane_cap=3, global_cap=7, seed=seed)
        allocator.submit(units(15, 4))
        await allocator.run(worker)

    run_virtual(main())
    return [(s.time, s.lane, s.key, s.attempt) for s in worker.starts]


def test_same_seed_same_schedule() -> None:
    first = schedule_for(7)
    assert len(first) > 60
    assert schedule_for(7) == first
    assert schedule_for(8) != first


# --------------------------------------------------------------------------- edges


def test_bad_configuration_names_the_parameter() -> None:
    with pytest.raises(ConfigError, match="per_lane_cap"):
        Allocator(["a"], per_lane_cap=0)
    with pytest.raises(ConfigError, match="global_cap"):
        Allocator(["a"], global_cap=0)
    with pytest.raises(ValueError, match="listed twice"):
        Allocator(["a", "a"])
    allocator = Allocator(["a"])
    allocator.submit([WorkUnit("x", 0)])
    with pytest.raises(ValueError, match="x#0 was submitted twice"):
        allocator.submit([WorkUnit("x", 0)])
    with pytest.raises(ValueError, match="unknown lane 'nope'"):
        allocator.drain("nope", "because")
    with pytest.raises(ValueError, match="already in the pool"):
        allocator.add_lane("a")


def test_run_with_nothing_submitted_returns_at_once() -> None:
    async def main() -> list[WorkResult]:
        return await Allocator(["a"]).run(SimWorker())

    assert run_virtual(main()) == []


def test_the_virtual_clock_reports_a_program_that_waits_forever() -> None:
    async def main() -> None:
        await asyncio.Event().wait()

    with pytest.raises(VirtualClockDeadlock):
        run_virtual(main())


async def test_runs_on_a_real_event_loop() -> None:
    worker = SimWorker(script=lambda lane, unit, attempt: (0.002, Outcome.done, lane))
    allocator = Allocator(["a", "b"], per_lane_cap=2, global_cap=3)
    allocator.submit(units(6, 3))
    results = await asyncio.wait_for(allocator.run(worker), timeout=10)
    assert statuses(results) == {ResultStatus.done: 18}
    assert worker.max_total <= 3 and max(worker.max_active.values()) <= 2
    assert worker.same_slug_overlaps == 0


# --------------------------------------------------------------------------- longest expected first


def _history_run(seed: int, expected: dict[str, float] | None) -> tuple[SimWorker, float]:
    """Two lanes, one build each: two 100 s iterations of ``long`` and twenty 10 s units."""
    durations = {"long": 100.0, **{f"short-{i:02d}": 10.0 for i in range(10)}}
    worker = SimWorker(script=lambda lane, unit, attempt: (durations[unit.case], Outcome.done, None))

    async def main() -> float:
        allocator = Allocator(["a", "b"], per_lane_cap=1, global_cap=2, seed=seed)
        allocator.submit([WorkUnit(case, i) for case in durations for i in range(2)], expected_s=expected)
        await allocator.run(worker)
        return now()

    return worker, run_virtual(main())


def test_history_starts_the_longest_case_first_on_every_lane() -> None:
    history = {"long": 95.0, **{f"short-{i:02d}": 11.0 for i in range(10)}}
    for seed in range(5):
        worker, makespan = _history_run(seed, history)
        first = sorted((s.lane, s.key) for s in worker.starts if s.time == 0.0)
        assert first == [("a", "long#0"), ("b", "long#1")] or first == [("a", "long#1"), ("b", "long#0")]
        assert makespan == 200.0  # the lower bound: (2 x 100 + 20 x 10) / 2 lanes
    # Without history some seed starts a long unit late and pays for it in the tail.
    assert max(_history_run(seed, None)[1] for seed in range(5)) > 200.0


def test_the_schedule_with_history_is_a_function_of_the_seed() -> None:
    history = {"long": 95.0, **{f"short-{i:02d}": 11.0 for i in range(10)}}

    def schedule(seed: int) -> list[tuple[float, str, str]]:
        return [(s.time, s.lane, s.key) for s in _history_run(seed, history)[0].starts]

    assert schedule(3) == schedule(3)
    assert schedule(3) != schedule(4)  # ties (the short units) follow the seeded shuffle


def test_a_priority_function_and_unknown_cases_last() -> None:
    worker = SimWorker()

    async def main() -> None:
        allocator = Allocator(["a"], per_lane_cap=1, global_cap=1)
        known = {"big": 50.0, "mid": 20.0}
        allocator.submit(units(4, 1) + [WorkUnit("big", 0), WorkUnit("mid", 0)], expected_s=lambda u: known.get(u.case))
        allocator.submit([WorkUnit("huge", 0)], expected_s={"huge": 80.0})  # a later batch is merged in order
        await allocator.run(worker)

    run_virtual(main())
    order = [s.key for s in worker.starts]
    assert order[:3] in (["big#0", "huge#0", "mid#0"], ["huge#0", "big#0", "mid#0"])
    assert sorted(order[3:]) == [f"case-{c:02d}#0" for c in range(4)]


def test_with_history_a_thief_steals_the_longest_waiting_unit() -> None:
    events: list[AllocatorEvent] = []

    async def main() -> None:
        allocator = Allocator(["a", "b"], per_lane_cap=1, global_cap=100, on_event=events.append)
        sizes = {f"c{i}": float(10 * (i + 1)) for i in range(5)}
        allocator.submit([WorkUnit(c, 0) for c in sizes], lane="a", expected_s=sizes)
        await allocator.run(SimWorker())

    run_virtual(main())
    steal = next(e for e in events if e.kind is EventKind.stolen)
    assert (steal.lane, steal.from_lane) == ("b", "a")
    assert steal.unit == WorkUnit("c3", 0)  # a runs c4 (the longest); b takes the next longest


def test_with_history_a_faster_lane_gets_more_of_a_tight_global_cap() -> None:
    """Global cap 3 over two lanes of 2 slots: the fast lane gets the slots beyond one per lane,
    while the slow lane keeps one (it keeps being measured: issue 25)."""

    def run(history: bool) -> tuple[dict[str, int], float]:
        speed = {"fast": 2.0, "slow": 1.0}
        worker = SimWorker(script=lambda lane, unit, attempt: (20.0 / speed[lane], Outcome.done, None))

        async def main() -> tuple[dict[str, int], float]:
            allocator = Allocator(["slow", "fast"], per_lane_cap=2, global_cap=3)
            allocator.submit(units(60, 1), expected_s=(lambda u: 20.0) if history else None)
            await allocator.run(worker)
            return {lane: s.started for lane, s in allocator.stats().lanes.items()}, now()

        return run_virtual(main())

    started, makespan = run(history=True)  # the best: 240 s (fast 2 slots at 10 s, slow 1 at 20 s)
    plain_started, plain_makespan = run(history=False)
    assert started["fast"] >= 3 * started["slow"] and started["slow"] >= 10
    assert started["fast"] > plain_started["fast"]
    assert makespan < 0.9 * plain_makespan


def test_with_history_lanes_dying_near_the_end_leave_no_unit_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Speeds differ, the fastest lane is drained and another quarantined near the end, when slower
    lanes may be leaving units to faster ones: every unit still finishes (no wait on a lane that
    is gone; a hang would raise VirtualClockDeadlock)."""
    speed = {"fast": 3.0, "mid": 1.0, "slow": 0.4}
    sizes = {f"c{i:02d}": 10.0 + 3 * i for i in range(40)}
    left: list[bool] = []

    def script(lane: str, unit: WorkUnit, attempt: int) -> tuple[float, Outcome, Any]:
        if lane == "mid" and now() > LATE:
            return 0.1, Outcome.lane_fault, None
        return sizes[unit.case] / speed[lane], Outcome.done, None

    leave = Scheduler._leave_to_faster

    def spy(self: Scheduler, lane: Any, entry: Any) -> bool:
        left.append(answer := leave(self, lane, entry))
        return answer

    monkeypatch.setattr(Scheduler, "_leave_to_faster", spy)

    async def main() -> list[WorkResult]:
        allocator = Allocator(list(speed), per_lane_cap=2, global_cap=100, max_lane_fault_retries=5)
        allocator.submit([WorkUnit(c, i) for c in sizes for i in range(5)], expected_s=sizes)
        return await run_with(allocator, SimWorker(script=script), (LATE + 5, lambda: allocator.drain("fast", "died")))

    LATE = 1552.5  # without faults: units are left to faster lanes from ~1550 s, the run ends at 1565 s
    results = run_virtual(main())
    assert statuses(results) == {ResultStatus.done: 200}
    assert any(left), "the scenario must exercise leaving units to faster lanes"


def test_a_finished_iteration_corrects_the_estimate_of_its_waiting_siblings() -> None:
    """History says 60 s for ``sneaky``, it takes 600 s: once its first iteration is done, the
    other two (ordered just behind five 59 s units by history) jump ahead of them."""
    actual = {"sneaky": 600.0, **{f"x{i}": 59.0 for i in range(5)}}
    history = {"sneaky": 60.0, **{f"x{i}": 59.0 for i in range(5)}}
    worker = SimWorker(script=lambda lane, unit, attempt: (actual[unit.case], Outcome.done, None))

    async def main() -> None:
        allocator = Allocator(["a"], per_lane_cap=1, global_cap=1)
        allocator.submit([WorkUnit("sneaky", i) for i in range(3)] + [WorkUnit(f"x{i}", 0) for i in range(5)],
                         expected_s=history)
        await allocator.run(worker)

    run_virtual(main())
    assert [s.key for s in worker.starts][:3] == ["sneaky#0", "sneaky#1", "sneaky#2"]


def test_with_history_the_longest_unit_starts_first_even_in_the_queue_of_a_lane_left_out() -> None:
    """Longest first holds across the pool: the global cap gives the one slot to lane a, and the
    long unit dealt to lane b's queue still starts before a's own short ones."""
    worker = SimWorker()

    async def main() -> None:
        allocator = Allocator(["a", "b"], per_lane_cap=1, global_cap=1)
        allocator.submit([WorkUnit(f"s{i}", 0) for i in range(3)], lane="a", expected_s={f"s{i}": 10.0 for i in range(3)})
        allocator.submit([WorkUnit("long", 0)], lane="b", expected_s={"long": 100.0})
        await allocator.run(worker)

    run_virtual(main())
    assert [s.key for s in worker.starts][0] == "long#0"
    assert worker.starts[0].lane == "a"


def test_with_history_and_a_choice_of_lanes_each_lane_starts_with_its_shortest_units() -> None:
    """Under a global cap below lanes x per-lane cap, with a long queue, the first units on every
    lane are speed probes (its shortest), so the long ones go to lanes whose speed is known."""
    sizes = {f"c{i:02d}": 10.0 + 5 * i for i in range(40)}
    worker = SimWorker(script=lambda lane, unit, attempt: (sizes[unit.case], Outcome.done, None))

    async def main() -> None:
        allocator = Allocator(["a", "b", "c", "d"], per_lane_cap=2, global_cap=4)
        allocator.submit([WorkUnit(c, i) for c in sizes for i in range(3)], expected_s=sizes)
        await allocator.run(worker)

    run_virtual(main())
    first = [s for s in worker.starts if s.time == 0.0]
    assert len(first) == 4 and {s.lane for s in first} == {"a", "b", "c", "d"}
    assert all(sizes[s.key.split("#")[0]] <= 30.0 for s in first), first
    longest = next(s for s in worker.starts if s.key.startswith("c39#"))
    assert longest.time < 100.0  # then longest first

