"""Issue 38: a run lets go of what it holds as one declared sequence of named steps
(``run/teardown.py`` ``Teardown``/``RUN_TEARDOWN``): the order is declared, not the order things
were opened; a failing step is reported and the next one runs; a cancellation waits for the rest."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.run.teardown import RUN_TEARDOWN, Teardown


def test_the_runs_teardown_closes_lanes_before_their_backend_and_writes_results_after_the_gateways_counts() -> None:
    order = list(RUN_TEARDOWN)
    assert order.index("provisioner") < order.index("lanes") < order.index("backend")
    assert order.index("model gateway") < order.index("model route") < order.index("results")
    assert order.index("results") < order.index("metrics endpoint") < order.index("pushgateway")


async def test_steps_run_in_the_declared_order_and_a_failure_is_reported_not_fatal() -> None:
    ran: list[str] = []
    failures: list[tuple[str, str]] = []
    down = Teardown(("a", "b", "c", "d"), lambda step, message: failures.append((step, message)))

    async def closes(name: str) -> None:
        ran.append(name)

    def breaks() -> None:
        ran.append("b")
        raise RuntimeError("socket gone; token sk-ant-api03-abcdefghijklmnopqrstuvwxyz")

    down.add("d", lambda: closes("d"))  # registered first, runs last
    down.add("b", breaks)
    down.add("a", lambda: closes("a"))
    assert down.registered == ["a", "b", "d"]  # "c" was never opened: nothing to close
    await down.run()
    assert ran == ["a", "b", "d"]
    ((step, message),) = failures
    assert step == "b" and message.startswith("teardown step 'b' failed: RuntimeError: socket gone")
    assert "sk-ant-api03" not in message  # redacted
    await down.run()  # each step runs once
    assert ran == ["a", "b", "d"]


async def test_a_cancelled_step_lets_the_others_run_then_the_cancellation_goes_on() -> None:
    ran: list[str] = []
    down = Teardown(("a", "b"), lambda step, message: None)

    async def cancelled() -> None:
        raise asyncio.CancelledError

    down.add("a", cancelled)
    down.add("b", lambda: ran.append("b"))
    with pytest.raises(asyncio.CancelledError):
        await down.run()
    assert ran == ["b"]


def test_a_step_outside_the_declared_order_or_twice_is_a_programming_error() -> None:
    down = Teardown(("a",), lambda step, message: None)
    with pytest.raises(ValueError, match="not one of a"):
        down.add("z", lambda: None)
    down.add("a", lambda: None)
    with pytest.raises(ValueError, match="registered twice"):
        down.add("a", lambda: None)
