"""The gateway's three rules, pure and clock-driven: how many builds, when a call may go, whether the
provider is up.

**How many builds** (:class:`Concurrency`, the allocator's global cap). The provider is the shared
bottleneck: it is busy exactly when calls wait in the gateway for its budget, so the rule keeps a
*small standing queue* — delay-based control as in TCP Vegas, with TCP Reno's multiplicative decrease
on loss:

- the provider pushes back (a 529 it sent, even one the gateway's retry absorbed; a 429 when it
  advertises no limits the pacer could keep to): the cap is multiplied by ``backoff`` (0.5) at once,
  at most once an epoch — the provider said we are over. A 429 under advertised limits is an
  estimate the pacer got wrong: it slows the pacer (``retry-after``, the provider's count), not the
  builds;
- otherwise, at the end of each epoch (``epoch_s``, 10 s), from the calls answered in it: queued
  longer than ``queue_high`` (2.0) times the provider's own time on average → a step fewer builds
  (each build waits on the queue more than it gains); queued less than ``queue_low`` (1.0) times it
  while builds were waiting for a slot → a step more (the provider has room and work is waiting); in
  between it holds. A step is ``step`` (10 %) of the cap, at least one build, so a pool of 500 lanes
  converges in as many epochs as a pool of 5. A cap the allocator never reached is never raised.

Between those bounds the queue is never empty for long (the provider's budget is used: a run takes
about its tokens ÷ the provider's rate) and never long (a build's calls wait, on average, at most
twice what the provider takes to answer them: a build takes at most about three times its unhurried
time, far inside its budget). Why one to two: a build's calls differ a lot in size (a turn's first
call is small, a late one carries the whole thread), so the tokens in flight swing with which builds
are between calls; a queue of less than one service time runs dry at every such swing —
``bench/provider_limit.py`` measured the band of one half to one at R 1.14–1.18, the provider idle in
one window of six, against 1.07–1.09 for this one (three runs). The cap stays in [``minimum``, ``maximum``]
(``--concurrency-min``, ``--concurrency-max``).

**When a call may go** (:class:`RateMirror`): a mirror of the provider's token buckets, from the
``anthropic-ratelimit-{tokens,requests}-{limit,remaining,reset}`` headers of its last answer: the
level it reported at the time that call was sent, refilled at ``limit`` a minute up to the capacity
its ``reset`` implies, less what was sent since (input estimates) and what calls in flight will
still charge (their expected output). A call waits in the gateway's queue, first come first
served, until its input fits. A ``retry-after`` pauses every call until it has passed.

**Whether the provider is up** (:class:`ProviderHealth`): ``failures_to_declare`` (3) provider
failures in a row — 5xx, 529 or no answer, never a 429 (that is pushback, not an outage) — with no
success between them, from every route that called in the last ``window_s`` (at least two routes
when two or more were active), declare it down; the first success declares it up again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

Clock = Callable[[], float]


# ---------------------------------------------------------------------------------- concurrency


@dataclass(frozen=True)
class ConcurrencyRule:
    minimum: int = 1
    maximum: int = 8
    start: int = 4
    epoch_s: float = 10.0
    queue_high: float = 2.0  # × the provider's own time, queued on average: a step fewer builds above it
    queue_low: float = 1.0  # …and a step more below it while builds wait for a slot
    step: float = 0.1
    backoff: float = 0.5

    def clamp(self, value: int) -> int:
        """``value`` kept between :attr:`minimum` and :attr:`maximum`."""
        return max(self.minimum, min(self.maximum, value))


class Concurrency:
    """The allocator's global cap under :class:`ConcurrencyRule` (see the module docstring)."""

    def __init__(self, rule: ConcurrencyRule, clock: Clock) -> None:
        self.rule = rule
        self.clock = clock
        self.cap = rule.clamp(rule.start)
        self._epoch_at = clock()
        self._waited = 0.0
        self._served = 0.0
        self._calls = 0
        self._demand = False
        self._backed_off_at: float | None = None
        self.changes: list[tuple[float, int, str]] = []  # (when, new cap, why)

    def observe(self, *, queued_s: float, service_s: float, pushback: bool = False) -> int | None:
        """One call the provider answered; returns the new cap when pushback lowered it."""
        self._calls += 1
        self._waited += max(0.0, queued_s)
        self._served += max(0.0, service_s)
        if not pushback:
            return None
        now = self.clock()
        if self._backed_off_at is not None and now - self._backed_off_at < self.rule.epoch_s:
            return None
        self._backed_off_at = now
        return self._set(math.floor(self.cap * self.rule.backoff), "provider pushback")

    def demand(self, running: int, waiting: int) -> None:
        """What the allocator runs and what waits for a slot: work waited at the cap this epoch."""
        if waiting > 0 and running >= self.cap:
            self._demand = True

    def tick(self) -> int | None:
        """Call regularly: at the end of an epoch, returns the new cap when the rule changed it."""
        now = self.clock()
        if now - self._epoch_at < self.rule.epoch_s:
            return None
        calls, waited, served, demand = self._calls, self._waited, self._served, self._demand
        backed_off = self._backed_off_at is not None and self._backed_off_at >= self._epoch_at
        self._epoch_at, self._calls, self._waited, self._served, self._demand = now, 0, 0.0, 0.0, False
        if backed_off or calls == 0:
            return None
        ratio = waited / served if served > 0 else (math.inf if waited > 0 else 0.0)
        step = max(1, round(self.cap * self.rule.step))
        if ratio > self.rule.queue_high:
            return self._set(self.cap - step, f"calls queued {ratio:.2f}× their service time")
        if ratio < self.rule.queue_low and demand:
            return self._set(self.cap + step, "provider has room and builds are waiting")
        return None

    def _set(self, value: int, why: str) -> int | None:
        value = self.rule.clamp(value)
        if value == self.cap:
            return None
        self.cap = value
        self.changes.append((self.clock(), value, why))
        return value


# ---------------------------------------------------------------------------------- rate pacer


def _reset_in(value: str | None, wall_now: float) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() - wall_now)
    except ValueError:
        return None


@dataclass
class _Meter:
    """One limit metered as a GCRA (virtual scheduling): ``tat`` is when the provider's bucket would be
    full again given everything sent; a call of ``cost`` may go once ``tat + cost/rate - now`` is at
    most the bucket's depth ``tolerance_s`` (its capacity in seconds of the rate)."""

    rate: float  # per second
    tolerance_s: float
    tat: float

    def wait(self, cost: float, now: float) -> float:
        cost = min(cost, self.rate * self.tolerance_s)  # a call bigger than the bucket waits for a full one
        return max(0.0, max(self.tat, now) + cost / self.rate - self.tolerance_s - now)

    def charge(self, cost: float, now: float) -> None:
        self.tat = max(self.tat, now) + cost / self.rate

    def correct(self, cost: float) -> None:
        self.tat += cost / self.rate


@dataclass
class _Sent:
    at: float
    estimate: int
    metered: bool  # charged to the token meter when it went (none existed before the first answer)


@dataclass
class RatePacer:
    """The gateway's own metering of what it sends against the provider's limits (see the module
    docstring); ``clock`` is monotonic, ``wall`` the epoch time the ``reset`` headers are read in."""

    clock: Clock
    wall: Clock
    tokens: _Meter | None = None
    requests: _Meter | None = None
    paused_until: float = 0.0
    _inflight: dict[int, _Sent] = field(default_factory=dict)
    _next: int = 0

    def update(self, headers: Mapping[str, str], ticket: int) -> None:
        """Read the rate-limit headers of the answer to call ``ticket``: the limit's rate, the bucket's
        depth (a lower bound: ``remaining`` plus what refills until ``reset``, which is given to the
        second) and — only ever to go slower — when the provider's bucket is full again (``reset``,
        rounded up to its resolution)."""
        if self.sent_at(ticket) is None:
            return
        now, wall_now = self.clock(), self.wall()
        for name in ("tokens", "requests"):
            limit = _number(headers.get(f"anthropic-ratelimit-{name}-limit"))
            remaining = _number(headers.get(f"anthropic-ratelimit-{name}-remaining"))
            if limit is None or remaining is None or limit <= 0:
                continue
            rate = limit / 60.0
            raw_reset = headers.get(f"anthropic-ratelimit-{name}-reset")
            reset = _reset_in(raw_reset, wall_now)
            depth = limit if reset is None else min(limit, remaining + reset * rate)
            full_at = now + (reset + (0.0 if "." in (raw_reset or "") else 1.0) if reset is not None
                             else (limit - remaining) / rate)
            meter: _Meter | None = getattr(self, name)
            if meter is None:
                setattr(self, name, _Meter(rate, max(depth, 1.0) / rate, full_at))
            else:
                meter.rate = rate
                meter.tolerance_s = max(meter.tolerance_s, max(depth, 1.0) / rate)
                meter.tat = max(meter.tat, full_at)

    def pause(self, seconds: float) -> None:
        """``retry-after``: nothing goes before ``seconds`` from now."""
        self.paused_until = max(self.paused_until, self.clock() + seconds)

    def wait_for(self, tokens: int) -> float:
        """Seconds until a call of ``tokens`` input tokens may go (0: now)."""
        now = self.clock()
        wait = max(0.0, self.paused_until - now)
        if self.tokens is not None:
            wait = max(wait, self.tokens.wait(tokens, now))
        if self.requests is not None:
            wait = max(wait, self.requests.wait(1, now))
        return wait

    def sent(self, tokens: int) -> int:
        """A call of ``tokens`` (estimated) input tokens went; returns its ticket."""
        now = self.clock()
        if self.tokens is not None:
            self.tokens.charge(tokens, now)
        if self.requests is not None:
            self.requests.charge(1, now)
        self._next += 1
        self._inflight[self._next] = _Sent(now, tokens, self.tokens is not None)
        return self._next

    def done(self, ticket: int, *, input_tokens: int | None = None, output_tokens: int = 0) -> None:
        """Call ``ticket`` ended: its output is charged (as the provider charges it, at the end) and
        its input estimate replaced by what the provider counted (``None``: no answer, nothing charged)."""
        sent = self._inflight.pop(ticket, None)
        if sent is None or self.tokens is None or not sent.metered:
            return  # a call sent before anything was known: the provider's reports account for it
        self.tokens.correct((input_tokens if input_tokens is not None else 0) - sent.estimate + output_tokens)

    def sent_at(self, ticket: int) -> float | None:
        """When the call holding ``ticket`` was sent (on :attr:`clock`), or None if it is not in flight."""
        sent = self._inflight.get(ticket)
        return sent.at if sent is not None else None


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """A ``retry-after`` header in seconds (never negative), or None when absent or not a number."""
    value = _number(headers.get("retry-after"))
    return max(0.0, value) if value is not None else None


# ---------------------------------------------------------------------------------- health


@dataclass
class ProviderHealth:
    """Up or down (see the module docstring); ``down_since`` is the clock's time it went down."""

    clock: Clock
    failures_to_declare: int = 3
    window_s: float = 30.0
    down_since: float | None = None
    outages: int = 0
    periods: list[tuple[float, float | None]] = field(default_factory=list)  # (down, up) on the clock
    _streak: list[str] = field(default_factory=list)  # routes of the failures since the last success
    _seen: dict[str, float] = field(default_factory=dict)  # route → last call

    @property
    def up(self) -> bool:
        """Whether the provider is up (no outage open)."""
        return self.down_since is None

    def success(self, route: str) -> bool:
        """A provider answer; True when it ends an outage."""
        self._seen[route] = self.clock()
        self._streak.clear()
        if self.down_since is None:
            return False
        self.periods[-1] = (self.down_since, self.clock())
        self.down_since = None
        return True

    def failure(self, route: str) -> bool:
        """A provider failure (5xx, 529, no answer); True when it declares an outage."""
        now = self.clock()
        self._seen[route] = now
        self._streak.append(route)
        if self.down_since is not None or len(self._streak) < self.failures_to_declare:
            return False
        active = {r for r, t in self._seen.items() if now - t <= self.window_s}
        if len(set(self._streak)) < min(2, len(active)):
            return False
        self.down_since = now
        self.outages += 1
        self.periods.append((now, None))
        return True


__all__ = ["Concurrency", "ConcurrencyRule", "ProviderHealth", "RatePacer", "retry_after_s"]
