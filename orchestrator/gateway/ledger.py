"""The ledger of model calls: one record per call the gateway answered, summed per unit and stage.

A record holds what accounting needs and nothing a caller sent: the unit(s) and stage, the model,
the provider's status and how the call ended, its usage and cost, how long it waited in the gateway
and how long the provider took. Never a header, a key or a word of a prompt; ``model-calls.jsonl`` in the
run folder is one JSON line per record.

A call several units shared (a lane call no marker told apart) is split between them: its tokens
exactly (the remainder to the first), its cost by each share's own tokens — so the units' costs
always add up to what was spent.
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.gateway.attribution import RUN_BUCKET
from orchestrator.gateway.prices import Usage, cost_usd, price_of

#: how a call ended, as the caller saw it
OUTCOMES = ("ok", "rate_limited", "overloaded", "server_error", "connection", "outage", "client_error")
#: outcomes that are the provider's failure (what an outage is made of); ``rate_limited`` is pushback
PROVIDER_FAILURES = frozenset({"overloaded", "server_error", "connection", "outage"})


def outcome_of(status: int | None) -> str:
    """A call's outcome by its HTTP status: ``ok``, ``rate_limited`` (429), ``overloaded`` (529),
    ``server_error``, ``client_error``, or ``connection`` when no answer came."""
    if status is None:
        return "connection"
    if status < 400:
        return "ok"
    if status == 429:
        return "rate_limited"
    if status == 529:
        return "overloaded"
    if status >= 500:
        return "server_error"
    return "client_error"


@dataclass(frozen=True)
class CallRecord:
    at: float
    route: str  # "lane/<index>" or "own"
    stage: str
    units: tuple[str, ...]  # empty: nobody's (the run's)
    model: str | None
    status: int | None  # what the caller got (None: no answer)
    outcome: str
    usage: Usage = field(default_factory=Usage)
    queued_s: float = 0.0
    service_s: float = 0.0
    retried: bool = False
    streamed: bool = False

    @property
    def cost_usd(self) -> float:
        """The call's cost at its model's price (the default price for an unknown model)."""
        return cost_usd(self.model, self.usage)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CallRecord:
        return cls(float(data["at"]), str(data["route"]), str(data["stage"]), tuple(data["units"]), data["model"],
                   data["status"], str(data["outcome"]), Usage.from_json(data), float(data["queued_s"]),
                   float(data["service_s"]), bool(data["retried"]), bool(data["streamed"]))

    def to_json(self) -> dict[str, Any]:
        return {"at": round(self.at, 3), "route": self.route, "stage": self.stage, "units": list(self.units),
                "model": self.model, "status": self.status, "outcome": self.outcome, **self.usage.to_json(),
                "cost_usd": round(self.cost_usd, 8), "queued_s": round(self.queued_s, 3),
                "service_s": round(self.service_s, 3), "retried": self.retried, "streamed": self.streamed}


@dataclass
class StageTally:
    """One unit's calls of one stage: counts, usage by model, cost."""

    calls: int = 0
    shared: int = 0  # calls split with other units
    failed: int = 0  # calls that reached their caller as a provider failure
    by_model: dict[str, Usage] = field(default_factory=dict)

    @property
    def usage(self) -> Usage:
        """Tokens over every model of the stage."""
        return sum(self.by_model.values(), Usage())

    @property
    def cost_usd(self) -> float:
        """US dollars over every model of the stage, each at its own price."""
        return sum(cost_usd(model, u) for model, u in self.by_model.items())

    @property
    def models(self) -> list[str]:
        return sorted(self.by_model)


class CallLedger:
    """Every call, summed per unit and stage as it is recorded; thread-safe."""

    def __init__(self, path: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._tally: dict[str, dict[str, StageTally]] = {}
        self._file = None
        self.calls = 0
        self.unknown_models: set[str] = set()
        self.failed_to_caller: dict[str, int] = {}  # outcome → calls a caller saw fail that way
        if path is not None and path.is_file():  # a resumed run: what its earlier attempts spent counts
            for line in path.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError, TypeError, KeyError):
                    self.record(CallRecord.from_json(json.loads(line)))
        self._file = path.open("a", encoding="utf-8") if path is not None else None

    def record(self, call: CallRecord) -> None:
        """Count one call: its usage split evenly between its units (the run's bucket when it has none),
        per stage and model; failures and unpriced models noted; a line appended to the calls log if one
        is open. Thread-safe."""
        units = call.units or (RUN_BUCKET,)
        shares = call.usage.split(len(units))
        model = call.model or "unknown"
        with self._lock:
            self.calls += 1
            if not price_of(call.model).known:
                self.unknown_models.add(model)
            if call.outcome != "ok":
                self.failed_to_caller[call.outcome] = self.failed_to_caller.get(call.outcome, 0) + 1
            for unit, share in zip(units, shares):
                tally = self._tally.setdefault(unit, {}).setdefault(call.stage, StageTally())
                tally.calls += 1
                tally.shared += len(units) > 1
                tally.failed += call.outcome in PROVIDER_FAILURES or call.outcome == "rate_limited"
                tally.by_model[model] = tally.by_model.get(model, Usage()) + share
            if self._file is not None:
                self._file.write(json.dumps(call.to_json()) + "\n")
                self._file.flush()

    def unit(self, unit: str) -> dict[str, StageTally]:
        """A unit's tallies by stage (copies)."""
        with self._lock:
            return {stage: StageTally(t.calls, t.shared, t.failed, dict(t.by_model))
                    for stage, t in self._tally.get(unit, {}).items()}

    def units(self) -> list[str]:
        """Every unit (and the run's bucket) that has calls, sorted."""
        with self._lock:
            return sorted(self._tally)

    def total(self) -> tuple[Usage, float]:
        """Tokens and US dollars over every call so far."""
        with self._lock:
            tallies = [t for stages in self._tally.values() for t in stages.values()]
        return sum((t.usage for t in tallies), Usage()), sum(t.cost_usd for t in tallies)

    def close(self) -> None:
        """Close the calls log (counting in memory goes on)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


__all__ = ["OUTCOMES", "PROVIDER_FAILURES", "CallLedger", "CallRecord", "StageTally", "outcome_of"]
