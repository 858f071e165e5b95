"""Which unit and which stage a model call belongs to.

Stages: ``build`` (the builder's model: the Instance AI agent and its title call, the claude CLI),
``mock`` (a lane's eval mock layer: the test-data planner, the per-request mocks), ``verify`` (other
lane calls while a unit is verified), ``judge`` (our judge), ``proxy`` (our user proxy).

Two kinds of caller, two ways to say whose call it is:

- **our own process** (the judge, the user proxy, the claude CLI a build starts): the unit is the
  one whose task makes the call. The run opens a :class:`UnitScope` around each unit (a context
  variable, inherited by every task the unit starts); :func:`attribution_hook` and
  :func:`claude_headers_env` put the unit and the stage into request headers
  (:data:`UNIT_HEADER`, :data:`STAGE_HEADER`), which the gateway reads and strips.
- **a lane** (its Instance AI agent, its mock layer): every lane gets its own route
  (``/lane/<index>``). While a unit runs on a lane it holds a :class:`Lease` there; a lane call goes
  to the one lease whose *marker* its body carries (the build user's email: n8n names the user's
  personal project in every agent turn's ``<project-context>``; the case's opening turn, which the
  title call quotes; a scenario's data setup, which the mock planner quotes), else to the one lease
  in the phase that makes such calls, else it is shared evenly between the lane's leases (counted
  as shared).
  The scheduler never runs one case twice on a lane at once, so shared calls are rare.

:func:`member` and :func:`phase` are what a unit runner says about its unit (no-ops outside a scope).
"""

from __future__ import annotations

import contextvars
import json
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

UNIT_HEADER = "x-n8n-eval-unit"
STAGE_HEADER = "x-n8n-eval-stage"
STAGES = ("build", "mock", "verify", "judge", "proxy")
#: where a call no unit held goes (a lane call with no lease, a caller with no scope)
RUN_BUCKET = "(run)"


@dataclass
class Lease:
    """A unit on a lane: its phase (``build`` or ``verify``) and the markers its lane calls carry."""

    unit: str
    lane: str
    phase: str = "build"
    markers: set[str] = field(default_factory=set)


class Leases:
    """The units on each lane route, thread-safe (the gateway may run on its own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_lane: dict[str, list[Lease]] = {}

    def open(self, unit: str, lane: str, markers: Iterable[str] = ()) -> Lease:
        """``unit`` starts holding ``lane`` (in the build phase), claiming lane calls that carry ``markers``;
        returns the lease to :meth:`close` when the unit leaves the lane."""
        lease = Lease(unit, lane, markers=set(markers))
        with self._lock:
            self._by_lane.setdefault(lane, []).append(lease)
        return lease

    def close(self, lease: Lease) -> None:
        """``lease``'s unit left its lane (a lease already closed: no-op)."""
        with self._lock:
            held = self._by_lane.get(lease.lane, [])
            if lease in held:
                held.remove(lease)

    def on(self, lane: str) -> list[Lease]:
        """The leases held on ``lane`` now (a copy): the units its calls may belong to."""
        with self._lock:
            return list(self._by_lane.get(lane, []))

    def attribute(self, lane: str, body: bytes, stage: str) -> tuple[list[str], str]:
        """The unit(s) a lane call on ``lane`` belongs to (one, or several sharing it; none: the run's)
        and its stage (``verify`` for a non-mock call while its unit is verified)."""
        held = self.on(lane)
        if not held:
            return [], stage
        marked = [lease for lease in held if any(_as_json(m) in body for m in lease.markers)]
        chosen = marked if len(marked) == 1 else None
        if chosen is None:
            wanted = "verify" if stage == "mock" else "build"
            pool = marked or held
            in_phase = [lease for lease in pool if lease.phase == wanted]
            chosen = in_phase if len(in_phase) == 1 else (in_phase or pool)
        if stage != "mock" and all(lease.phase == "verify" for lease in chosen) and not marked:
            stage = "verify"
        return [lease.unit for lease in chosen], stage


def _as_json(marker: str) -> bytes:
    """A marker as it appears inside a JSON string of a request body."""
    return json.dumps(marker, ensure_ascii=False)[1:-1].encode()


#: a text marker must be this long to tell one case from another, and is cut to the second figure
MARKER_CHARS = (20, 80)


def text_markers(*texts: str | None) -> list[str]:
    """Markers from a case's texts a lane quotes in its calls (the opening turn in the agent's and
    the title call, a scenario's data setup in the mock planner's): each one's first line, cut short."""
    out = []
    for text in texts:
        line = (text or "").strip().split("\n", 1)[0].strip()[: MARKER_CHARS[1]]
        if len(line) >= MARKER_CHARS[0]:
            out.append(line)
    return out


# -------------------------------------------------------------------------------------- our callers


@dataclass
class UnitScope:
    """One unit's attempt, as the run sees it: its key, and its lease on a lane (if any)."""

    unit: str
    lease: Lease | None = None


_scope: contextvars.ContextVar[UnitScope | None] = contextvars.ContextVar("orchestrator_model_unit", default=None)


@contextmanager
def unit_scope(scope: UnitScope) -> Iterator[UnitScope]:
    """Make ``scope``'s unit the owner of every call made inside (and by tasks started inside)."""
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


def current_unit() -> str | None:
    """The unit of the scope this task runs in, or None outside one."""
    scope = _scope.get()
    return scope.unit if scope is not None else None


def member(marker: str) -> None:
    """The unit's build user (its email names the personal project n8n quotes in every agent turn)."""
    scope = _scope.get()
    if scope is not None and scope.lease is not None and marker:
        scope.lease.markers.add(marker)


def phase(name: str) -> None:
    """The unit moves to ``name`` (``build`` or ``verify``): what its lane's unmarked calls are."""
    scope = _scope.get()
    if scope is not None and scope.lease is not None:
        scope.lease.phase = name


def attribution_headers(stage: str) -> dict[str, str]:
    """The headers that attribute a call of ours to ``stage`` and the current unit (if any)."""
    unit = current_unit()
    return {STAGE_HEADER: stage, **({UNIT_HEADER: unit} if unit else {})}


def attribution_hook(stage: str) -> Callable[[Any], Awaitable[None]]:
    """A request hook for an SDK's httpx client (``event_hooks={"request": [hook]}``; the anthropic
    SDK: ``DefaultAsyncHttpxClient``) that names ``stage`` and the unit whose task sends the request.
    Harmless without the gateway: a provider ignores headers it does not know."""
    async def name_the_unit(request: Any) -> None:
        request.headers.update(attribution_headers(stage))

    return name_the_unit


def claude_headers_env(stage: str = "build") -> dict[str, str]:
    """``ANTHROPIC_CUSTOM_HEADERS`` for a claude CLI started inside a unit (the CLI adds them to
    every request: ``Name: Value`` lines)."""
    headers = attribution_headers(stage)
    return {"ANTHROPIC_CUSTOM_HEADERS": "\n".join(f"{k}: {v}" for k, v in headers.items())}


# -------------------------------------------------------------------------------------- lane calls


def _system_text(body: Mapping[str, Any]) -> str:
    system = body.get("system")
    if isinstance(system, list):
        return " ".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    if isinstance(system, str):
        return system
    messages = body.get("messages")  # OpenAI-compatible: the system prompt is the first message
    if isinstance(messages, list) and messages and isinstance(messages[0], dict) and messages[0].get("role") == "system":
        return str(messages[0].get("content") or "")
    return ""


def lane_stage(body: Any) -> str:
    """What a lane's call is: the agent streams and its thread-title call asks for a title (``build``);
    everything else a lane sends — the mock layer's planners and per-request mocks, which n8n runs
    as non-streamed eval agents — is ``mock``."""
    if not isinstance(body, dict):
        return "mock"
    if body.get("stream"):
        return "build"
    system = _system_text(body).lower()
    if not body.get("tools") and "title" in system and "conversation" in system:
        return "build"
    return "mock"


def parse_body(raw: bytes) -> Any:
    """A request body as JSON, or None when it is empty or not JSON."""
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


__all__ = [
    "RUN_BUCKET",
    "STAGES",
    "STAGE_HEADER",
    "UNIT_HEADER",
    "Lease",
    "Leases",
    "UnitScope",
    "attribution_headers",
    "attribution_hook",
    "claude_headers_env",
    "current_unit",
    "lane_stage",
    "member",
    "parse_body",
    "phase",
    "text_markers",
    "unit_scope",
]
