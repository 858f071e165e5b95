"""The scripted model as a provider under pressure: rate limits, overload bursts, an outage, prompt caching.

Everything here is off by default (a :class:`Pressure` with no field set changes nothing). Turned on,
the scripted server behaves as the Messages API does for a real key, so the model gateway and the
run's outage handling are tested offline:

- **rate limits**: a tokens-per-minute and a requests-per-minute limit, each a token bucket refilled
  continuously up to ``burst_s`` seconds of the limit (Anthropic's "continuously replenished up to
  your maximum"). Counted tokens are uncached input, cache writes and output; cache reads are not
  (as for Anthropic's input-tokens limit on current models). A request whose input would overdraw
  the bucket is refused with ``429 rate_limit_error`` and ``retry-after`` (whole seconds until it
  would fit); every answer of a limited server carries ``anthropic-ratelimit-{requests,tokens}-
  {limit,remaining,reset}`` (``reset``: RFC 3339, when the bucket is full again). Input is charged
  when a request is admitted, output when its answer is sent — the bucket may go below zero then,
  and later requests wait for it.
- **latency**: ``latency_s`` before the first byte, and ``output_tps`` tokens a second while a
  streamed answer is sent, so lanes wait on the model as they do on a real one (a bench sized so
  the provider, not the CPU, is the bottleneck).
- **overload bursts**: ``529 overloaded_error`` for every model call inside each (start, duration)
  window, in seconds after the first model call.
- **an outage**: from the ``outage_after_calls``-th model call on, every model call for ``outage_s``
  seconds is answered ``outage_status`` (529 by default) — a full outage, every route alike. With
  ``outage_on_build`` it starts at the first build step (:func:`is_build_request`) after that call
  instead, so it takes a build in flight whatever the run's timing.
- **prompt caching**: a request that asks for caching (any ``cache_control``) writes its prefix
  (system prompt and tools) on first sight and reads it afterwards, in the usage fields
  ``cache_creation_input_tokens`` / ``cache_read_input_tokens`` (uncached input is the rest).

``N8N_EVAL_SCRIPTED_PROVIDER`` (a JSON object of :class:`Pressure`'s fields) turns it on for the
embedded server of a run (:func:`Pressure.from_env`). The server counts what it served
(:meth:`ProviderState.counts`): the usage of every answer, by model, and every refusal by kind.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from orchestrator.scripted.replies import HttpError, Usage, is_build_request

PRESSURE_ENV = "N8N_EVAL_SCRIPTED_PROVIDER"


@dataclass(frozen=True)
class Pressure:
    """How hard the scripted provider pushes back; every field off by default."""

    tpm: int | None = None
    rpm: int | None = None
    burst_s: float = 60.0
    latency_s: float = 0.0
    output_tps: float | None = None
    overload_bursts: tuple[tuple[float, float], ...] = ()
    outage_after_calls: int | None = None
    outage_s: float = 60.0
    outage_status: int = 529
    outage_on_build: bool = False
    prompt_cache: bool = False

    @property
    def active(self) -> bool:
        """Whether any pressure differs from the default (no limits, no outage)."""
        return self != Pressure()

    @classmethod
    def from_json(cls, text: str) -> Pressure:
        """The pressure a JSON object sets. Raises ``ValueError`` for a non-object or an unknown field."""
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError(f"{PRESSURE_ENV}: expected a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"{PRESSURE_ENV}: unknown field(s) {', '.join(unknown)}")
        if "overload_bursts" in raw:
            raw["overload_bursts"] = tuple((float(a), float(b)) for a, b in raw["overload_bursts"])
        return cls(**raw)

    @classmethod
    def from_env(cls) -> Pressure:
        """The pressure ``$N8N_EVAL_SCRIPTED_PROVIDER`` sets, else none."""
        text = os.environ.get(PRESSURE_ENV, "").strip()
        return cls.from_json(text) if text else cls()

    def to_json(self) -> str:
        """The fields that differ from the default, as JSON (what :meth:`from_json` reads back)."""
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default})


def _prompt_chars(request: dict[str, Any]) -> int:
    return len(json.dumps(request.get("messages", []))) + len(json.dumps(request.get("system", "")))


def input_estimate(request: dict[str, Any]) -> int:
    """The input tokens the scripted model reports for ``request`` (``Reply.resolved_usage``'s rule)."""
    return max(1, _prompt_chars(request) // 4)


def _wants_cache(request: dict[str, Any]) -> bool:
    return "cache_control" in json.dumps(request)


def _prefix(request: dict[str, Any]) -> tuple[str, int]:
    """The cacheable prefix of a request (system prompt and tools): its key and its tokens."""
    text = json.dumps(request.get("system", "")) + json.dumps(request.get("tools", []))
    return hashlib.sha256(text.encode()).hexdigest(), len(json.dumps(request.get("system", ""))) // 4


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Bucket:
    """A token bucket: ``capacity``, refilled at ``rate`` a second (it may go below zero)."""

    capacity: float
    rate: float
    level: float
    at: float

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now

    def wait_for(self, amount: float) -> float:
        return max(0.0, (amount - self.level) / self.rate)

    def full_in(self) -> float:
        return max(0.0, (self.capacity - self.level) / self.rate)


@dataclass
class Counts:
    """What the provider served and refused (thread-safe through :class:`ProviderState`'s lock)."""

    model_calls: int = 0
    answered: int = 0
    rate_limited: int = 0
    overloaded: int = 0
    outage_refused: int = 0
    #: model → summed usage of every answer (input = uncached input)
    usage: dict[str, Usage] = field(default_factory=dict)
    counted_tokens: int = 0  # what the rate limit counts: uncached input + cache writes + output
    first_answer_at: float | None = None
    last_answer_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "model_calls": self.model_calls, "answered": self.answered, "rate_limited": self.rate_limited,
            "overloaded": self.overloaded, "outage_refused": self.outage_refused,
            "counted_tokens": self.counted_tokens,
            "usage": {model: u.to_json() for model, u in sorted(self.usage.items())},
            "answer_span_s": round((self.last_answer_at or 0) - (self.first_answer_at or 0), 3)
            if self.first_answer_at is not None else 0.0,
        }


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(a.input_tokens + b.input_tokens, a.output_tokens + b.output_tokens,
                 a.cache_creation_input_tokens + b.cache_creation_input_tokens,
                 a.cache_read_input_tokens + b.cache_read_input_tokens)


class ProviderState:
    """The limits, windows and cache of one scripted provider; ``clock`` is injectable (monotonic
    seconds) and ``wall`` gives the epoch time the ``reset`` headers name."""

    def __init__(self, pressure: Pressure | None = None, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.pressure = pressure or Pressure()
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        now = clock()
        p = self.pressure
        self._tokens = _Bucket(p.tpm * p.burst_s / 60, p.tpm / 60, p.tpm * p.burst_s / 60, now) if p.tpm else None
        self._requests = _Bucket(p.rpm * p.burst_s / 60, p.rpm / 60, p.rpm * p.burst_s / 60, now) if p.rpm else None
        self._first_call_at: float | None = None
        self._outage_at: float | None = None
        self._cached: set[str] = set()
        self.counts = Counts()

    # -- admission --------------------------------------------------------------------------
    def admit(self, request: dict[str, Any]) -> tuple[HttpError | None, dict[str, str], int]:
        """Admit one model call (charging its input) or refuse it: the refusal (None: admitted), the
        headers to send either way, and the input tokens charged (for :meth:`served`)."""
        with self._lock:
            now = self._clock()
            self.counts.model_calls += 1
            if self._first_call_at is None:
                self._first_call_at = now
            refusal = self._window_refusal(now, request)
            if refusal is not None:
                return refusal, self._headers_locked(now), 0
            charge = self._counted_input(request)
            for bucket in (self._tokens, self._requests):
                if bucket is not None:
                    bucket.refill(now)
            waits = [b.wait_for(min(n, b.capacity)) for b, n in ((self._tokens, charge), (self._requests, 1))
                     if b is not None]
            if waits and max(waits) > 0:
                self.counts.rate_limited += 1
                headers = self._headers_locked(now) | {"retry-after": str(max(1, math.ceil(max(waits))))}
                return HttpError(429), headers, 0
            if self._tokens is not None:
                self._tokens.level -= charge
            if self._requests is not None:
                self._requests.level -= 1
            return None, self._headers_locked(now), charge

    def _window_refusal(self, now: float, request: dict[str, Any]) -> HttpError | None:
        p = self.pressure
        if (p.outage_after_calls is not None and self._outage_at is None and self.counts.model_calls > p.outage_after_calls
                and (not p.outage_on_build or is_build_request(request))):
            self._outage_at = now
        if self._outage_at is not None and now < self._outage_at + p.outage_s:
            self.counts.outage_refused += 1
            return HttpError(p.outage_status, message="scripted provider outage")
        since = now - (self._first_call_at or now)
        if any(start <= since < start + length for start, length in p.overload_bursts):
            self.counts.overloaded += 1
            return HttpError(529)
        return None

    def in_outage(self) -> bool:
        """Whether the simulated outage is on now."""
        with self._lock:
            return self._outage_at is not None and self._clock() < self._outage_at + self.pressure.outage_s

    def _counted_input(self, request: dict[str, Any]) -> int:
        usage = self._cache_split(request, Usage(input_estimate(request), 0), record=False)
        return usage.input_tokens + usage.cache_creation_input_tokens

    # -- usage --------------------------------------------------------------------------------
    def _cache_split(self, request: dict[str, Any], usage: Usage, *, record: bool) -> Usage:
        if not self.pressure.prompt_cache or not _wants_cache(request):
            return usage
        key, prefix = _prefix(request)
        prefix = min(prefix, usage.input_tokens)
        rest = usage.input_tokens - prefix
        if key in self._cached:
            return Usage(rest, usage.output_tokens, usage.cache_creation_input_tokens,
                         usage.cache_read_input_tokens + prefix)
        if record:
            self._cached.add(key)
        return Usage(rest, usage.output_tokens, usage.cache_creation_input_tokens + prefix,
                     usage.cache_read_input_tokens)

    def usage_for(self, request: dict[str, Any], usage: Usage) -> Usage:
        """The usage to report for an answer (the prompt cache applied); records the cache write."""
        with self._lock:
            return self._cache_split(request, usage, record=True)

    def served(self, request: dict[str, Any], usage: Usage, charged: int) -> None:
        """One answer sent: count its usage and charge its output (and any input beyond the ``charged``
        estimate :meth:`admit` took)."""
        with self._lock:
            now = self._clock()
            model = str(request.get("model") or "scripted")
            self.counts.answered += 1
            self.counts.usage[model] = _add(self.counts.usage.get(model, Usage(0, 0)), usage)
            counted = usage.input_tokens + usage.cache_creation_input_tokens + usage.output_tokens
            self.counts.counted_tokens += counted
            if self.counts.first_answer_at is None:
                self.counts.first_answer_at = now
            self.counts.last_answer_at = now
            if self._tokens is not None:
                self._tokens.refill(now)
                self._tokens.level -= counted - charged

    # -- headers ------------------------------------------------------------------------------
    def _headers_locked(self, now: float) -> dict[str, str]:
        headers: dict[str, str] = {}
        for name, bucket, limit in (("requests", self._requests, self.pressure.rpm),
                                    ("tokens", self._tokens, self.pressure.tpm)):
            if bucket is None or limit is None:
                continue
            bucket.refill(now)
            headers[f"anthropic-ratelimit-{name}-limit"] = str(limit)
            headers[f"anthropic-ratelimit-{name}-remaining"] = str(max(0, math.floor(bucket.level)))
            headers[f"anthropic-ratelimit-{name}-reset"] = _rfc3339(self._wall() + bucket.full_in())
        return headers

    def headers(self) -> dict[str, str]:
        """The rate-limit headers an answer carries now."""
        with self._lock:
            return self._headers_locked(self._clock())

    def counts_json(self) -> dict[str, Any]:
        """The counts so far, with the outage's window in wall-clock seconds when there was one."""
        with self._lock:
            out = self.counts.to_json()
            if self._outage_at is not None:  # when the outage was, in wall-clock seconds
                start = self._wall() - (self._clock() - self._outage_at)
                out["outage_window"] = [round(start, 3), round(start + self.pressure.outage_s, 3)]
            return out


__all__ = ["PRESSURE_ENV", "Counts", "Pressure", "ProviderState", "input_estimate"]
