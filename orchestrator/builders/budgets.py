"""The three clocks of a build conversation (the reference's ``harness/timeouts.ts`` and the
budget checks of ``harness/chat-loop.ts``), for builders that converse with n8n's agent.

- **turn**: each user turn (the opening and every follow-up) may run for the build budget
  (``--build-timeout-ms``; ``complex`` cases get 1.5×), measured from the moment its message goes
  out;
- **conversation**: the whole conversation may spend :data:`CONVERSATION_BUDGET_TURNS` turn budgets,
  measured from the opening message (seed restores and other harness work before it are not the
  agent's time);
- **inactivity**: a run in flight that emits no event for :data:`INACTIVITY_TIMEOUT_S` is stalled.

A budget that fires inside a run cancels it; one that runs out *between* turns (less than
:func:`Budgets.min_turn_s` of conversation left when the next follow-up is due) ends the
conversation without sending it. Either way the conversation is over, not the build: what the agent
saved by then is graded, and a timeout with nothing saved has no scored result.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

#: A user turn's budget when the run gives no ``--build-timeout-ms``: the reference's
#: ``DEFAULT_TIMEOUT_MS`` (``harness/build-workflow.ts``); ``InstanceAiBuilder.default_build_timeout_ms``
#: (kept here, light, so ``--help`` can name it without importing the builder)
DEFAULT_TURN_BUDGET_MS = 900_000
#: A conversation may spend this many turn budgets in total.
CONVERSATION_BUDGET_TURNS = 2
#: A run in flight that emits no event for this long is cancelled as stalled.
INACTIVITY_TIMEOUT_S = 240.0
#: A follow-up is sent only with at least this much conversation budget left (or a quarter of a
#: turn budget, when that is smaller).
MIN_TURN_BUDGET_S = 120.0


@dataclass(frozen=True)
class BudgetBreach:
    """Which budget ended the conversation, at which user turn (1 = the opening), after how long."""

    kind: str  # conversation | turn | inactivity
    turn: int
    elapsed_s: float

    def describe(self) -> str:
        """The reference's wording (``RunTimeoutError``)."""
        return f"Run timed out after {round(self.elapsed_s * 1000)}ms ({self.kind} budget, user turn {self.turn})"

    def as_dict(self) -> dict[str, object]:
        """The breach as the transcript and results record it: budget kind, turn and elapsed milliseconds."""
        return {"budget": self.kind, "turn": self.turn, "elapsed_ms": round(self.elapsed_s * 1000)}

    def build_timeout(self) -> dict[str, object]:
        """n8n's ``BuildTimeout`` (``{kind, turn, elapsedMs}``, ``harness/timeouts.ts``), as the
        result records it on a timed-out iteration."""
        return {"kind": self.kind, "turn": self.turn, "elapsedMs": round(self.elapsed_s * 1000)}


class Budgets:
    """One conversation's clocks. ``turn_s`` None or ≤ 0: no budget at all (every clock off)."""

    def __init__(self, turn_s: float | None, *, inactivity_s: float | None = INACTIVITY_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.turn_s = turn_s if turn_s and turn_s > 0 else None
        self.conversation_s = self.turn_s * CONVERSATION_BUDGET_TURNS if self.turn_s else None
        self.inactivity_s = inactivity_s if self.turn_s else None
        self.clock = clock
        self.started: float | None = None
        self.turn_started: float | None = None
        self.last_event: float | None = None
        self.turn = 0

    @property
    def min_turn_s(self) -> float:
        """The least time a turn is still started with (a quarter of the turn budget, capped); 0 without one."""
        return min(MIN_TURN_BUDGET_S, self.turn_s / 4) if self.turn_s else 0.0

    def start_turn(self) -> None:
        """A user message goes out now (the first one starts the conversation)."""
        now = self.clock()
        if self.started is None:
            self.started = now
        self.turn_started = self.last_event = now
        self.turn += 1

    def saw_event(self) -> None:
        """The stream said something: restart the silence clock."""
        self.last_event = self.clock()

    def breach(self, now: float | None = None) -> BudgetBreach | None:
        """The budget the turn in flight has overrun: the conversation first (the ceiling the other
        two live inside), then the turn, then inactivity."""
        if self.started is None:
            return None
        now = self.clock() if now is None else now
        turn = max(1, self.turn)
        if self.conversation_s is not None and now - self.started > self.conversation_s:
            return BudgetBreach("conversation", turn, now - self.started)
        if self.turn_s is not None and self.turn_started is not None and now - self.turn_started > self.turn_s:
            return BudgetBreach("turn", turn, now - self.turn_started)
        if self.inactivity_s is not None and self.last_event is not None and now - self.last_event > self.inactivity_s:
            return BudgetBreach("inactivity", turn, now - self.last_event)
        return None

    def left(self, now: float | None = None) -> float:
        """Seconds until the first clock fires (``inf`` without budgets; 0 once one has)."""
        if self.started is None or self.turn_s is None:
            return math.inf
        now = self.clock() if now is None else now
        ends = [self.started + self.conversation_s if self.conversation_s is not None else math.inf]
        if self.turn_started is not None:
            ends.append(self.turn_started + self.turn_s)
        if self.inactivity_s is not None and self.last_event is not None:
            ends.append(self.last_event + self.inactivity_s)
        return max(0.0, min(ends) - now)

    def conversation_left(self, now: float | None = None) -> float:
        """Seconds of conversation budget left (``inf`` without budgets)."""
        if self.started is None or self.conversation_s is None:
            return math.inf
        now = self.clock() if now is None else now
        return max(0.0, self.started + self.conversation_s - now)

    def elapsed(self, now: float | None = None) -> float:
        """Seconds since the opening message went out (0 before it)."""
        if self.started is None:
            return 0.0
        return (self.clock() if now is None else now) - self.started

    def next_turn_refused(self, now: float | None = None) -> BudgetBreach | None:
        """Before a follow-up goes out: a turn that cannot get a minimal budget is not started; the
        conversation ends here (kind ``conversation``, at the turn that was not sent)."""
        if self.started is None or self.conversation_s is None:
            return None
        now = self.clock() if now is None else now
        elapsed = now - self.started
        if self.conversation_s - elapsed >= self.min_turn_s:
            return None
        return BudgetBreach("conversation", self.turn + 1, elapsed)
