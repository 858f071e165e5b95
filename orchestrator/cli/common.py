"""Helpers shared by the CLI commands: option checks that name the flag, and running coroutines."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from orchestrator.errors import ConfigError
from orchestrator.ids import new_run_id

__all__ = ["new_run_id", "positive", "run_async"]

T = TypeVar("T")


def positive(value: int | None, flag: str, *, allow_zero: bool = False) -> int | None:
    """``value`` when it is at least 1 (0 too with ``allow_zero``) or None. Raises ``ConfigError``
    naming ``flag`` otherwise."""
    if value is None:
        return None
    if value < 0 or (value == 0 and not allow_zero):
        bound = "≥ 0" if allow_zero else "≥ 1"
        raise ConfigError(f"{flag}: must be {bound}, got {value}")
    return value


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)
