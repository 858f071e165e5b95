"""Helpers of the fault tests (fixtures are in conftest.py).

- :class:`ModelDesk`: one scripted model server whose script a test swaps; :class:`BuildGate`
  holds builds at their first model request so a fault lands while they are in flight.
- :func:`lane_inventory`: a lane's users, workflows and credentials as its owner sees them.
- :func:`host_leftovers` / :func:`assert_nothing_left`: the host inventory of a run — no process
  labelled with its run id (lanes and claude builds), no lane folder, no staged claude dir, no
  open ledger entry.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.lanes.model import Lane
from orchestrator.lanes.process.backend import labelled_processes
from orchestrator.ledger import Ledger
from orchestrator.n8n.owner import OwnerCredentials
from orchestrator.n8n.rest import N8nClient
from orchestrator.run.config import RunConfig
from orchestrator.scripted.replies import Action, Script
from orchestrator.scripted.scripts import demo_script, mcp_builder
from orchestrator.scripted.server import ScriptedModelServer

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "cases"
ORCH = [sys.executable, "-m", "orchestrator"]  # the CLI of whatever venv runs the tests
SMOKE = "smoke-manual-set-static-fields"
SMOKE_CASES = ["smoke-manual-set-static-fields", "smoke-manual-code-greetings", "smoke-manual-filter-adults",
               "smoke-manual-code-order-total"]
FAKE_API_KEY = "sk-ant-faults-fake-key-0123456789abcdef"
LANE_MODEL_KEY = "faults-lane-model-key-0001"


# ---------------------------------------------------------------------------------------------
# the model


class ModelDesk:
    """One scripted model server for the whole session; tests swap the script it answers with."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._script: Script = demo_script()
        self.server = ScriptedModelServer(self._dispatch)

    def _dispatch(self, request: dict[str, Any]) -> Action:
        with self._lock:
            script = self._script
        return script(request)

    def use(self, script: Script) -> None:
        with self._lock:
            self._script = script

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def builder_requests(self) -> int:
        return sum(1 for r in self.server.message_requests if isinstance(r.body, dict) and r.body.get("tools"))


def is_build_start(request: dict[str, Any]) -> bool:
    """The first request of one claude build: tools offered, no assistant turn yet (claude 2.1.328
    sends the prompt plus a ``system`` reminder message)."""
    messages = request.get("messages") or []
    return bool(request.get("tools")) and not any(m.get("role") == "assistant" for m in messages)


class BuildGate:
    """A builder that lets the first ``pass_first`` builds through and holds every later one at
    its first model request until :meth:`open` (so a test can act while builds are in flight)."""

    def __init__(self, pass_first: int = 0, builder: Script | None = None, hold_s: float = 300.0) -> None:
        self.builder = builder or mcp_builder()
        self.pass_first = pass_first
        self.hold_s = hold_s
        self.started = 0
        self.waiting = 0
        self._opened = threading.Event()
        self._lock = threading.Lock()

    def open(self) -> None:
        self._opened.set()

    def __call__(self, request: dict[str, Any]) -> Action:
        if is_build_start(request):
            with self._lock:
                self.started += 1
                held = self.started > self.pass_first and not self._opened.is_set()
                self.waiting += held
            if held:
                self._opened.wait(self.hold_s)
                with self._lock:
                    self.waiting -= 1
        return self.builder(request)


def model_env(desk: ModelDesk) -> dict[str, str]:
    """The same wiring for an ``orchestrator`` subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "N8N_INSTANCE_AI_"))}
    return env | {"ANTHROPIC_API_KEY": FAKE_API_KEY, "ANTHROPIC_BASE_URL": desk.base_url,
                  "N8N_INSTANCE_AI_MODEL_URL": desk.base_url, "N8N_INSTANCE_AI_MODEL_API_KEY": LANE_MODEL_KEY}


# ---------------------------------------------------------------------------------------------
# the shared lane


@dataclass
class SharedLane:
    lane: Lane
    owner: OwnerCredentials

    @property
    def base_url(self) -> str:
        return self.lane.base_url


# ---------------------------------------------------------------------------------------------
# inventories


@dataclass(frozen=True)
class LaneInventory:
    users: frozenset[str]
    workflows: frozenset[str]
    credentials: frozenset[str]


async def lane_inventory(base_url: str, owner: OwnerCredentials) -> LaneInventory:
    """What the lane holds, as its owner sees it (archived workflows included)."""
    async with N8nClient(base_url) as client:
        session = await client.login(owner.email, owner.password)
        try:
            return LaneInventory(
                users=frozenset(u["email"] for u in await session.list_users()),
                workflows=frozenset(str(w["id"]) for w in await session.list_workflows()),
                credentials=frozenset(str(c["id"]) for c in await session.list_credentials()),
            )
        finally:
            await session.aclose()


def host_leftovers(run_id: str, state_dir: Path) -> list[str]:
    """Everything a run could leave on the host: labelled processes (lanes and claude builds),
    lane folders, staged claude dirs, and ledger entries still open."""
    found = [f"process {pid}" for pid in labelled_processes(run_id)]
    run_dir = state_dir / "runs" / run_id
    for sub in ("lanes", "builds"):
        folder = run_dir / sub
        if folder.is_dir():
            found += [f"{sub}/{p.name}" for p in folder.iterdir()]
    if (run_dir / "ledger.jsonl").exists():
        found += [f"open {e.kind} {e.id} on {e.lane or '-'}" for e in Ledger(run_dir).open_entries()]
    return found


def assert_nothing_left(run_id: str, state_dir: Path) -> None:
    left = host_leftovers(run_id, state_dir)
    assert left == [], f"run {run_id} left: {left}"


def ledger_records(run_id: str, state_dir: Path) -> list[dict[str, Any]]:
    return list(Ledger(state_dir / "runs" / run_id).records())


# ---------------------------------------------------------------------------------------------
# runs


def run_config(tmp_path: Path, run_id: str, **overrides: Any) -> RunConfig:
    """A small run on the scripted model with fast fault handling (no 30/90 s outage waits, no CLI
    retry storms)."""
    values: dict[str, Any] = dict(
        cases_paths=[CASES], filter=SMOKE, iterations=1, lanes=1, model_server="real",
        state_dir=tmp_path / "state", output_dir=tmp_path / "out", run_id=run_id,
        outage_waits_s=(0.2, 0.2), build_max_retries=0, build_timeout_ms=180_000, build_mcp_timeout_ms=60_000,
    )
    values.update(overrides)
    return RunConfig(**values)


def static_config(tmp_path: Path, run_id: str, lane: SharedLane, base_url: str | None = None, **overrides: Any) -> RunConfig:
    return run_config(tmp_path, run_id, backend="static", base_url=base_url or lane.base_url,
                      email=lane.owner.email, password=lane.owner.password, **overrides)


def unique(prefix: str) -> str:
    return f"{prefix}-{os.urandom(3).hex()}"


async def wait_until(check: Callable[[], bool | Awaitable[bool]], timeout_s: float, what: str,
                     interval_s: float = 0.1) -> float:
    """Poll ``check`` until true; return the seconds it took (fail the test after ``timeout_s``)."""
    t0 = time.monotonic()
    while True:
        value = check()
        if not isinstance(value, bool):
            value = await value
        if value:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(interval_s)


def units_of(output_dir: Path | None) -> list[dict[str, Any]]:
    """The unit records of the run's ``eval-results.json`` (the run was given its output folder)."""
    assert output_dir is not None
    units: list[dict[str, Any]] = json.loads((output_dir / "eval-results.json").read_text())["orchestrator"]["units"]
    return units


def jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class LedgerTimeline:
    """create/delete order of lane entries per lane index."""

    events: list[tuple[int, str, str]] = field(default_factory=list)  # (index, op, lane id)

    @classmethod
    def of(cls, run_id: str, state_dir: Path) -> LedgerTimeline:
        index_of: dict[str, int] = {}
        events = []
        for rec in ledger_records(run_id, state_dir):
            if rec.get("kind") != "lane":
                continue
            if rec["op"] == "create":
                index_of[rec["id"]] = int(rec["meta"]["index"])
            if rec["op"] in ("create", "delete"):
                events.append((index_of[rec["id"]], rec["op"], rec["id"]))
        return cls(events)

    def max_open_per_index(self) -> int:
        open_now: dict[int, set[str]] = {}
        worst = 0
        for index, op, lane_id in self.events:
            lanes = open_now.setdefault(index, set())
            (lanes.add if op == "create" else lanes.discard)(lane_id)
            worst = max(worst, len(lanes))
        return worst
