"""An asyncio event loop whose clock jumps straight to the next timer.

For simulations and tests of timing logic (allocator benches, quarantine windows): code under test
runs unchanged on a real :class:`asyncio.SelectorEventLoop`; only ``loop.time()`` is virtual and
the selector, instead of blocking for ``timeout`` seconds, advances the clock by ``timeout``. So a
5-minute quarantine window costs microseconds, and the schedule is a pure function of the program.

There is no real I/O on this loop: nothing ever becomes readable. A program that waits on
nothing but I/O would wait forever, so the selector raises :class:`VirtualClockDeadlock` instead.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from orchestrator.errors import OrchestratorError

T = TypeVar("T")


class VirtualClockDeadlock(OrchestratorError, RuntimeError):
    """Nothing is ready and no timer is scheduled: on a virtual clock the program would hang."""


class _ClockSelector(selectors.BaseSelector):
    """Keeps registrations (the loop's self-pipe) but never reports readiness."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        self._loop = loop
        self._keys: dict[int, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        if fd in self._keys:
            raise KeyError(f"{fileobj!r} is already registered")
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys.pop(fd)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise VirtualClockDeadlock(
                "virtual clock: no callback is ready and no timer is scheduled (the program waits forever)"
            )
        self._loop.advance(timeout)
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return dict(self._keys)

    def close(self) -> None:
        self._keys.clear()


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """``asyncio.SelectorEventLoop`` on a virtual clock starting at 0.0."""

    def __init__(self) -> None:
        self._virtual_now = 0.0
        super().__init__(selector=_ClockSelector(self))

    def time(self) -> float:
        """The virtual now: what ``loop.time()`` and asyncio's timers read."""
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        """Move the virtual clock forward by ``seconds`` (zero or less: no change)."""
        if seconds > 0:
            self._virtual_now += seconds


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a fresh :class:`VirtualClockLoop`."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(main)


class SharedWork:
    """Builds that slow each other down, on the running loop's clock (processor sharing).

    A build of ``work`` seconds (at speed 1.0, alone) on lane ``l`` progresses at
    ``speeds[l] / (1 + slowdown x (k - 1)) x host`` per second, where ``k`` is the builds its lane
    runs now and ``host`` is 1.0, or, with ``host_cores``, ``min(1, host_cores / demand)`` where
    demand is ``build_cpu`` per build running anywhere plus ``background(now)`` (e.g. lanes
    booting): every lane shares one machine. Rates change whenever a build starts or ends, or
    :meth:`touch` is called (call it when ``background`` changes).
    """

    def __init__(self, speeds: Mapping[str, float], *, slowdown: float = 0.0, host_cores: float | None = None,
                 build_cpu: float = 1.0, background: Any = None) -> None:
        self.speeds = dict(speeds)
        self.slowdown = slowdown
        self.host_cores = host_cores
        self.build_cpu = build_cpu
        self.background = background or (lambda now: 0.0)
        self._jobs: dict[int, list[Any]] = {}  # id -> [lane, remaining work, future]
        self._per_lane: dict[str, int] = {}
        self._seq = 0
        self._at = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def _rate(self, lane: str, now: float) -> float:
        k = self._per_lane.get(lane, 0)
        rate = self.speeds[lane] / (1.0 + self.slowdown * max(k - 1, 0))
        if self.host_cores is not None:
            demand = self.build_cpu * len(self._jobs) + float(self.background(now))
            rate *= min(1.0, self.host_cores / demand) if demand > 0 else 1.0
        return rate

    def _advance(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        dt = now - self._at
        if dt > 0:
            for job in self._jobs.values():
                job[1] -= dt * self._rate(job[0], self._at)
        self._at = now

    def _reschedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = loop.time()
        best: float | None = None
        for job in self._jobs.values():
            eta = max(job[1], 0.0) / self._rate(job[0], now)
            best = eta if best is None else min(best, eta)
        if best is not None:
            self._timer = loop.call_at(now + best, self._tick)

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = None
        self._advance(loop)
        for key, job in list(self._jobs.items()):
            if job[1] <= 1e-9:
                self._end(key)
                if not job[2].done():
                    job[2].set_result(None)
        self._reschedule(loop)

    def _end(self, key: int) -> None:
        lane = self._jobs.pop(key)[0]
        self._per_lane[lane] -= 1

    def touch(self) -> None:
        """Rates changed from outside (``background``): settle progress so far at the old rates."""
        loop = asyncio.get_running_loop()
        self._advance(loop)
        self._reschedule(loop)

    async def run(self, lane: str, work: float) -> None:
        """Do ``work`` on ``lane``; returns when it is done (cancellable)."""
        loop = asyncio.get_running_loop()
        self._advance(loop)
        self._seq += 1
        key = self._seq
        done: asyncio.Future[None] = loop.create_future()
        self._jobs[key] = [lane, work, done]
        self._per_lane[lane] = self._per_lane.get(lane, 0) + 1
        self._reschedule(loop)
        try:
            await done
        finally:
            if key in self._jobs:  # cancelled before it was done
                self._advance(loop)
                self._end(key)
                self._reschedule(loop)
