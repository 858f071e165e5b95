"""The three clocks of a chat build (orchestrator.builders.budgets), on a fake clock: each rule is
n8n's (``harness/timeouts.ts`` and ``harness/chat-loop.ts``)."""

from __future__ import annotations

import math

from orchestrator.builders.budgets import (
    CONVERSATION_BUDGET_TURNS,
    INACTIVITY_TIMEOUT_S,
    MIN_TURN_BUDGET_S,
    BudgetBreach,
    Budgets,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def started(turn_s: float = 900.0) -> tuple[Budgets, Clock]:
    clock = Clock()
    budgets = Budgets(turn_s, clock=clock)
    budgets.start_turn()
    return budgets, clock


def test_the_constants_are_n8ns() -> None:
    """n8n ``harness/timeouts.ts``: ``CONVERSATION_BUDGET_TURNS = 2``, ``INACTIVITY_TIMEOUT_MS =
    240_000``, ``MIN_TURN_BUDGET_MS = 120_000``."""
    assert (CONVERSATION_BUDGET_TURNS, INACTIVITY_TIMEOUT_S, MIN_TURN_BUDGET_S) == (2, 240.0, 120.0)


def test_quiet_while_every_budget_has_room_and_inactivity_reads_the_last_event() -> None:
    """n8n ``harness/chat-loop.ts`` ``timeoutBreach``: no breach while each clock has room; a run
    that keeps emitting events is not inactive; 240 s of silence is."""
    budgets, clock = started()
    clock.now += 60
    assert budgets.breach() is None
    for _ in range(5):  # 5 × 200 s of a streaming run: never inactive, but the turn budget fires
        clock.now += 200
        budgets.saw_event()
    assert budgets.breach() == BudgetBreach("turn", 1, 900 + 160)
    budgets, clock = started()
    clock.now += 240.001
    breach = budgets.breach()
    assert breach is not None and breach.kind == "inactivity" and breach.turn == 1


def test_the_conversation_budget_is_named_first_and_turns_are_counted() -> None:
    """n8n ``harness/chat-loop.ts`` ``timeoutBreach``: the conversation (2 turn budgets from the
    opening) is checked before the turn; the breach names the user turn it happened in."""
    budgets, clock = started(900)
    clock.now += 850
    budgets.start_turn()  # a follow-up at 850 s: turn 2
    for _ in range(10):
        clock.now += 100
        budgets.saw_event()
    breach = budgets.breach()
    assert breach is not None and (breach.kind, breach.turn) == ("conversation", 2)
    assert breach.describe().startswith("Run timed out after 1850000ms (conversation budget, user turn 2)")


def test_a_follow_up_needs_a_minimal_turn_budget() -> None:
    """n8n ``harness/chat-loop.ts`` ``runMultiTurnConversation``: a follow-up is sent only with at
    least min(120 s, a quarter turn) of conversation budget left; otherwise the conversation ends as
    a ``conversation`` timeout at the turn not sent, and what was saved is graded."""
    budgets, clock = started(900)
    clock.now += 1800 - 120 + 1
    refused = budgets.next_turn_refused()
    assert refused is not None and (refused.kind, refused.turn) == ("conversation", 2)
    budgets, clock = started(900)
    clock.now += 600
    assert budgets.next_turn_refused() is None
    budgets, clock = started(40)  # a short local budget: a quarter turn (10 s) is the floor
    clock.now += 69
    assert budgets.next_turn_refused() is None
    clock.now += 2
    assert budgets.next_turn_refused() is not None


def test_no_budget_means_no_clock() -> None:
    """``--build-timeout-ms 0``: nothing ever fires (n8n: without a turn budget only the old rule)."""
    budgets, clock = started(0)
    clock.now += 10_000
    assert budgets.breach() is None and budgets.left() == math.inf and budgets.next_turn_refused() is None
