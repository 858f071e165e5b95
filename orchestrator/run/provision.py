"""Provision stage: the lane pool up and seeded, every lane checked against the pool's fingerprint,
an owner session and a build-user supply per lane, and the builder's per-lane preparation."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console

from orchestrator.build.builder import Builder
from orchestrator.build.lane import BuildLane
from orchestrator.lanes.backend import LaneBackend
from orchestrator.lanes.bringup import PoolEvents, bring_up, check_fingerprints, make_owner
from orchestrator.lanes.model import Lane
from orchestrator.lanes.pool import make_spec
from orchestrator.ledger import Ledger
from orchestrator.run.config import RunConfig
from orchestrator.run.model_route import ModelRoute
from orchestrator.run.observers import RunObserver


@dataclass
class Pool:
    """The lanes of a run and, once opened, what builds see of each."""

    lanes: dict[str, Lane] = field(default_factory=dict)
    contexts: dict[str, BuildLane] = field(default_factory=dict)


async def provision(cfg: RunConfig, run_id: str, ledger: Ledger, backend: LaneBackend, route: ModelRoute,
                    builder: Builder, units: int, pool: Pool, observer: RunObserver, console: Console) -> None:
    """Fill ``pool`` as lanes come up (so teardown sees every lane even when this raises)."""
    spec = make_spec(cfg.profile, cfg.env)
    spec.env.update(route.lane_env())
    for k, v in route.lane_secrets().items():
        spec.secret_env.setdefault(k, v)
    owner = make_owner(run_id, cfg.password if not backend.owns_lanes else None)
    events = PoolEvents(lane_ready=observer.on_lane_ready)
    up = await bring_up(backend, min(cfg.lanes, units), spec, owner, retries=cfg.lane_retries, events=events)
    for failure in up.failures:
        console.print(f"[yellow]lane failed to come up:[/yellow] {failure}")
    pool.lanes.update({lane.lane_id: lane for lane in up.lanes})
    if not backend.owns_lanes:  # someone else's server: recorded so `cleanup` knows where our users live
        for lane in up.lanes:
            ledger.created("lane", lane.lane_id, lane=lane.lane_id, backend=lane.backend, index=lane.index,
                           base_url=lane.base_url)
    observer.on_lanes(pool.lanes)
    check_fingerprints(up.lanes, spec, env_applies=backend.owns_lanes)
    for lane in up.lanes:
        pool.contexts[lane.lane_id] = ctx = await BuildLane.open(lane, ledger)
        await builder.prepare_lane(ctx)
