"""The allocator's global cap changed while a run goes (issue 37: the model gateway sets it from the
provider's pushback, and to 0 while the provider is down), on a virtual clock: a higher cap starts
waiting units at once, a lower one lets running builds finish and starts none beyond it, 0 starts
nothing, and None gives the default (2 x the lanes) back."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.allocator import Allocator, Outcome, WorkUnit
from orchestrator.allocator.virtual_clock import run_virtual
from orchestrator.errors import ConfigError


def test_the_cap_changes_under_a_running_allocator() -> None:
    running: list[int] = []
    seen: list[tuple[float, int]] = []  # (time, builds running) at every start

    async def main() -> Allocator:
        loop = asyncio.get_running_loop()
        allocator = Allocator(["a", "b"], per_lane_cap=4, global_cap=4)

        async def worker(lane: str, unit: WorkUnit, attempt: int) -> tuple[Outcome, None]:
            running.append(1)
            seen.append((loop.time(), len(running)))
            await asyncio.sleep(10)
            running.pop()
            return Outcome.done, None

        allocator.submit([WorkUnit(f"case-{i:02d}", 0) for i in range(12)])

        async def steer() -> None:
            await asyncio.sleep(5)
            allocator.set_global_cap(0)  # the provider is down: the 4 running go on, nothing starts
            await asyncio.sleep(20)
            assert allocator.stats().active == 0 and allocator.stats().queued == 8
            allocator.set_global_cap(6)  # back, and the rule allows more
            await asyncio.sleep(5)
            assert allocator.stats().active == 6
            allocator.set_global_cap(2)  # pushback: running builds finish, no new one until below 2
            await asyncio.sleep(20)
            allocator.set_global_cap(None)  # the default: 2 x the lanes

        task = asyncio.create_task(steer())
        await allocator.run(worker)
        await task
        return allocator

    allocator = run_virtual(main())
    assert [n for t, n in seen if t < 5] == [1, 2, 3, 4]
    assert not [t for t, _ in seen if 5 <= t < 25]  # nothing started while the cap was 0
    assert [n for t, n in seen if t == 25] == [1, 2, 3, 4, 5, 6]
    # lowered to 2 at 30: the six run to their end at 35, and then only two start (the last two units)
    assert [n for t, n in seen if 25 < t] == [1, 2] and [t for t, _ in seen if 25 < t] == [35, 35]
    assert len(seen) == 12 and allocator.global_cap == 4


def test_a_negative_cap_is_refused() -> None:
    allocator = Allocator(["a"], per_lane_cap=1)
    with pytest.raises(ConfigError, match="global_cap must be >= 0"):
        allocator.set_global_cap(-1)
