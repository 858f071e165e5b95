"""Provision stage: lanes join the pool one by one, as each becomes ready — no barrier.

Every lane is started in parallel (``lanes.bringup.bring_up_one``: start → readiness → owner seed
→ fingerprint, replaced up to ``--lane-retries`` times). The first lane that is ready sets the
pool's fingerprint; every later one must match it, or it is torn down and the reason printed. A
lane that joins gets its owner session and build-user supply (``BuildLane``), the builder's
preparation, and then work (``Allocator.add_lane``) while the others still start.

A lane lost mid-run (its process died, its pod went) is replaced, up to the pool size over the
whole run, while units are still waiting. Every lane ever started is in ``pool.lanes`` (or in the
bring-up's ``started`` list until it is ready), so teardown finds it whatever happens.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console

from orchestrator.allocator import Allocator
from orchestrator.builders.builder import Builder
from orchestrator.builders.lane import BuildLane
from orchestrator.errors import UserError
from orchestrator.lanes.backend import LaneBackend, LaneError
from orchestrator.lanes.bringup import (
    PoolEvents,
    bring_up_one,
    fingerprint_mismatch,
    make_owner,
    safe_teardown,
    with_expected_env,
)
from orchestrator.lanes.model import Lane, LaneSpec, LaneState
from orchestrator.ledger import Ledger
from orchestrator.redact import redact, register_secret
from orchestrator.run.config import RunConfig
from orchestrator.run.model_route import ModelRoute
from orchestrator.run.observers import RunObserver
from orchestrator.run.resolve import ResolvedRun

log = logging.getLogger(__name__)


@dataclass
class Pool:
    """The lanes of a run and, once opened, what builds see of each."""

    lanes: dict[str, Lane] = field(default_factory=dict)
    contexts: dict[str, BuildLane] = field(default_factory=dict)  # opened (teardown closes them), maybe not yet joined
    #: lanes ready for units (opened and prepared), in the order they joined: the allocator starts
    #: with these and every later one joins it with ``add_lane``
    joined: list[str] = field(default_factory=list)


MODEL_KEY_ENV = "N8N_INSTANCE_AI_MODEL_API_KEY"
MODEL_URL_ENV = "N8N_INSTANCE_AI_MODEL_URL"


def lane_spec(run: ResolvedRun, route: ModelRoute) -> LaneSpec:
    """The spec every lane of the run starts from: the profile, the model route's defaults, ``--env``
    (an A/B arm's model, URL and env are ``--env`` too: they win over the route's defaults)."""
    cfg, spec = run.config, run.lane_spec()
    explicit = run.explicit_env
    spec.env.update({k: v for k, v in route.lane_env(cfg.model_route_tag).items() if k not in explicit})
    key_var = cfg.lane_model_key_env
    if route.kind != "scripted" and key_var and os.environ.get(key_var) and MODEL_KEY_ENV not in explicit:
        register_secret(os.environ[key_var])
        spec.secret_env[MODEL_KEY_ENV] = os.environ[key_var]
    for k, v in route.lane_secrets().items():
        spec.secret_env.setdefault(k, v)
    return spec


class Provisioner:
    def __init__(self, cfg: RunConfig, run_id: str, ledger: Ledger, backend: LaneBackend, spec: LaneSpec,
                 builder: Builder, pool: Pool, observer: RunObserver, console: Console) -> None:
        self.cfg, self.run_id, self.ledger, self.backend = cfg, run_id, ledger, backend
        self.builder, self.pool, self.observer, self.console = builder, pool, observer, console
        self.spec = spec
        #: lane ``index``'s own spec (the model gateway gives each lane its own model route); None: ``spec``
        self.spec_for: Callable[[int], LaneSpec] | None = None
        self.owner = make_owner(run_id, backend.owner_password)
        self.events = PoolEvents(lane_ready=observer.on_lane_ready)
        self.allocator: Allocator | None = None
        self.reference: tuple[Lane, dict[str, str]] | None = None
        self.started: list[Lane] = []  # started, not yet ready (bring_up_one keeps it)
        self.failures: list[str] = []
        self.replacements_left = cfg.lanes
        self.started_at = time.monotonic()  # again at start(): the first lane's wait counts from there
        self.first_ready_s: float | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._first = asyncio.Event()
        self._next_index = 0
        #: A user error from a bring-up (e.g. a Kubernetes run-id collision): the run stops with it.
        self.fatal: UserError | None = None

    # ------------------------------------------------------------------ bring-up
    async def start(self, count: int) -> None:
        """Start ``count`` lanes; return once the first has joined (``LaneError`` if none can)."""
        self.started_at = time.monotonic()
        for _ in range(count):
            self._spawn()
        waiter = asyncio.create_task(self._first.wait())
        try:
            while not self._first.is_set():
                pending = [t for t in self._tasks if not t.done()]
                if not pending:
                    break
                await asyncio.wait([waiter, *pending], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if self.fatal is not None:
            raise self.fatal
        if not self._first.is_set():
            raise LaneError(f"no lane came up (need 1 of {count}):\n" + "\n".join(self.failures))

    def _spec(self, index: int) -> LaneSpec:
        return self.spec_for(index) if self.spec_for is not None else self.spec

    def _spawn(self) -> None:
        index = self._next_index
        self._next_index += 1
        task = asyncio.create_task(self._one(index), name=f"lane-{index}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _one(self, index: int) -> None:
        try:
            lane = await bring_up_one(self.backend, index, self._spec(index), self.owner, self.cfg.lane_retries,
                                      self.started, self.events)
        except LaneError as exc:
            self._refused(f"lane failed to come up: {exc}")
            return
        except UserError as exc:  # the same for every lane: stop the run with one line
            self.fatal = self.fatal or exc
            self._first.set()
            return
        self.started.remove(lane)
        self.pool.lanes[lane.lane_id] = lane  # teardown sees it from here on
        try:
            await self._join(lane)
        except Exception as exc:  # fingerprint mismatch, an n8n error opening the owner session, …
            lane.state = LaneState.dead
            await safe_teardown(self.backend, lane)
            detail = str(exc) if isinstance(exc, LaneError) else f"{type(exc).__name__}: {exc}"
            self._refused(f"{lane.describe()} removed: {detail}")

    def _refused(self, message: str) -> None:
        message = redact(message)
        self.failures.append(message)
        self.console.print(f"[yellow]{message}[/yellow]")

    async def _join(self, lane: Lane) -> None:
        if not self.backend.owns_lanes:  # someone else's server: recorded so `cleanup` knows where our users live
            self.ledger.created("lane", lane.lane_id, lane=lane.lane_id, backend=lane.backend, index=lane.index,
                                base_url=lane.base_url)
        fp = with_expected_env(lane, self.spec, env_applies=self.backend.owns_lanes)
        if self.reference is None:
            self.reference = (lane, fp)
        elif detail := fingerprint_mismatch(self.reference[1], fp):
            raise LaneError(f"configured differently from {self.reference[0].describe()}: {detail}")
        ctx = await BuildLane.open(lane, self.ledger, model_url=self._spec(lane.index).env.get(MODEL_URL_ENV))
        self.pool.contexts[lane.lane_id] = ctx
        await self.builder.prepare_lane(ctx)
        self.observer.on_lanes(self.pool.lanes)
        if self.first_ready_s is None:
            self.first_ready_s = time.monotonic() - self.started_at
        # joined only now, after the awaits above: an allocator made meanwhile (from ``pool.joined``)
        # must not count it twice, nor start units on a lane whose builder is still preparing it
        self.pool.joined.append(lane.lane_id)
        if self.allocator is not None:
            self.allocator.add_lane(lane.lane_id)
        self._first.set()

    # ------------------------------------------------------------------ during the run
    def replace(self, lane_id: str, reason: str) -> bool:
        """A lane was lost mid-run: start another one if the budget allows. True when one starts."""
        if self.replacements_left <= 0 or not self.backend.owns_lanes:  # someone else's lanes are not ours to add
            return False
        self.replacements_left -= 1
        self.console.print(f"[yellow]lane {lane_id} lost ({reason}): starting a replacement[/yellow]")
        self._spawn()
        return True

    async def close(self) -> None:
        """Stop bring-ups still under way; tear down what they had started (not yet in the pool)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        leftovers, self.started[:] = list(self.started), []
        await asyncio.gather(*(safe_teardown(self.backend, lane) for lane in leftovers))
