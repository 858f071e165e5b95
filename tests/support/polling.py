"""Waiting for a condition with a deadline, never for a fixed time.

A test that sleeps and then asserts is either slow (the sleep is long enough for a loaded machine) or
flaky (it is not). These poll instead: the condition is checked at once and then every ``interval``
seconds, and the call returns as soon as it holds; ``timeout`` is only the point at which waiting
longer would not help, named in the failure. Nothing here measures how long anything took.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


def eventually(predicate: Callable[[], T], *, timeout: float = 10.0, interval: float = 0.05, what: str = "") -> T:
    """Call ``predicate`` until it returns something truthy, and return that.

    Raises:
        AssertionError: naming ``what`` (or the predicate), when it is still falsy after ``timeout`` s.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {what or getattr(predicate, '__name__', predicate)}")
        time.sleep(interval)


@overload
async def eventually_async(predicate: Callable[[], Awaitable[T]], *, timeout: float = ..., interval: float = ...,
                           what: str = ...) -> T: ...
@overload
async def eventually_async(predicate: Callable[[], T], *, timeout: float = ..., interval: float = ...,
                           what: str = ...) -> T: ...
async def eventually_async(predicate: Callable[[], Any], *, timeout: float = 10.0,
                           interval: float = 0.05, what: str = "") -> Any:
    """:func:`eventually` on the event loop: ``predicate`` may be a plain function or a coroutine
    function, and the loop runs other tasks between two checks.

    Raises:
        AssertionError: naming ``what`` (or the predicate), when it is still falsy after ``timeout`` s.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {what or getattr(predicate, '__name__', predicate)}")
        await asyncio.sleep(interval)


async def settle(rounds: int = 20) -> None:
    """Let every task that can go on, go on, before a test asserts that one cannot: the loop runs its
    ready callbacks ``rounds`` times (enough for a chain of wake-ups through locks and events); no
    time passes, so a task still waiting after this is waiting for something, not for the clock."""
    for _ in range(rounds):
        await asyncio.sleep(0)
