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

T = TypeVar("T")


class VirtualClockDeadlock(RuntimeError):
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
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self._virtual_now += seconds


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a fresh :class:`VirtualClockLoop`."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(main)
