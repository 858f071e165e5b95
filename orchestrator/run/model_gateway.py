"""The run's model gateway (issue 37): started before the lanes, every model call of the run through
it, closed after teardown.

What the run wires through it:

- **routes**: lane ``i`` starts with ``N8N_INSTANCE_AI_MODEL_URL`` (and ``ANTHROPIC_BASE_URL``, for
  an eval model other than the builder's) on ``<gateway>/lane/<i>`` and a key that is the gateway's
  token, never the provider's; the judge, the user proxy and claude builds get the gateway as their
  base URL. Upstream stays what the run would have called: the scripted model offline, the provider
  (or ``--env N8N_INSTANCE_AI_MODEL_URL``) with its key otherwise.
- **units**: each unit attempt runs inside a :class:`~orchestrator.gateway.attribution.UnitScope`
  holding a lease on its lane (:meth:`RunGateway.worker`); a finished record gets its cost by stage
  and, when its calls met a provider failure, the framework's attribution (:meth:`RunGateway.settle`).
- **the allocator's global cap**: the gateway's rule sets it (unless ``--concurrency`` fixes it) and
  a provider that is down sets it to 0 — new builds wait, up to ``--provider-wait-s``, then the run
  stops starting them; a log line and ``n8n_eval_provider_up`` say so.
- **results**: at the end every unit's cost comes from the ledger again (calls that came late
  included), and ``config.model_gateway_status`` holds the gateway's totals.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.allocator import Allocator, Worker, WorkUnit
from orchestrator.allocator.model import Outcome
from orchestrator.cases import EvalCase, LoadedCase
from orchestrator.gateway import (
    CallLedger,
    CallRecord,
    ConcurrencyRule,
    GatewayConfig,
    GatewayEvents,
    ModelGateway,
    StageTally,
    UnitScope,
    Upstream,
    cost_usd,
    unit_scope,
)
from orchestrator.gateway.attribution import RUN_BUCKET, STAGES, text_markers
from orchestrator.gateway.prices import usage_of
from orchestrator.lanes.model import Lane, LaneSpec
from orchestrator.metrics import RunMetrics
from orchestrator.redact import register_secret
from orchestrator.results.model import EvalResults, ModelCost, StageCost, UnitResult
from orchestrator.results.model_cost import charge_provider_outage, failed_stages
from orchestrator.run.config import RunConfig
from orchestrator.run.model_route import ModelRoute
from orchestrator.run.provision import MODEL_KEY_ENV, MODEL_URL_ENV

log = logging.getLogger(__name__)

ANTHROPIC_URL = "https://api.anthropic.com"
#: lane env the gateway's URL also goes into: n8n's eval agents on a model other than the builder's
#: call the Anthropic SDK's default base URL (the lane's ``ANTHROPIC_API_KEY`` stays as it is: a
#: build runner in the lane pod takes it from the same Secret for claude, which goes to the provider)
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
TICK_S = 1.0


def stage_costs(tallies: dict[str, StageTally]) -> ModelCost:
    """A unit's tallies as its record's :class:`ModelCost`, stages in their usual order."""
    order = [s for s in STAGES if s in tallies] + sorted(s for s in tallies if s not in STAGES)
    stages = []
    for name in order:
        t = tallies[name]
        u = t.usage
        stages.append(StageCost(stage=name, calls=t.calls, shared_calls=t.shared, failed_calls=t.failed,
                                models=t.models, input_tokens=u.input, cache_write_tokens=u.cache_write + u.cache_write_1h,
                                cache_read_tokens=u.cache_read, output_tokens=u.output, cost_usd=round(t.cost_usd, 8)))
    return ModelCost(stages=stages)


def case_markers(case: EvalCase) -> list[str]:
    """Text that marks a model call as made for ``case``: its opening prompt and its scenarios' data
    setup (how the gateway attributes a lane's mock-generation calls to the unit)."""
    opening = case.conversation[0].text if case.conversation and case.conversation[0].role == "user" else None
    return text_markers(opening, *(s.data_setup for s in case.execution_scenarios))


def scripted_provider_counts(route: ModelRoute) -> dict[str, Any] | None:
    """What the embedded scripted provider served and refused, its usage priced with the gateway's table."""
    server = route.server
    if server is None or not hasattr(server, "provider_counts"):
        return None
    counts: dict[str, Any] = server.provider_counts()
    counts["cost_usd"] = round(sum(cost_usd(model, usage_of(u)) for model, u in counts["usage"].items()), 8)
    return counts


class RunGateway(GatewayEvents):
    def __init__(self, cfg: RunConfig, route: ModelRoute, spec: LaneSpec, run_dir: Path, metrics: RunMetrics,
                 console: Console) -> None:
        self.cfg, self.metrics, self.console = cfg, metrics, console
        low, high = cfg.concurrency_bounds
        self.adaptive = cfg.adaptive_concurrency
        rule = ConcurrencyRule(minimum=low, maximum=high, start=cfg.global_cap)  # n8n's lanes × 2 to start
        own = Upstream(route.base_url or ANTHROPIC_URL, route.api_key)
        lane_key = spec.secret_env.get(MODEL_KEY_ENV) or spec.secret_env.get("ANTHROPIC_API_KEY") or route.api_key
        lanes = Upstream(spec.env.get(MODEL_URL_ENV) or route.base_url or ANTHROPIC_URL, lane_key)
        ledger = CallLedger(run_dir / "model-calls.jsonl")
        self.gateway = ModelGateway(
            GatewayConfig(own=own, lanes=lanes, host=cfg.model_gateway_host, port=cfg.model_gateway_port, rule=rule,
                          hold_s=cfg.gateway_hold_s), ledger, events=self)
        #: what callers send as their key: the gateway's, never the provider's (the gateway sends that)
        self.token = f"gateway-{secrets.token_hex(12)}"
        register_secret(self.token)  # it opens no door, but it is in every lane's Secret: kept out of logs too
        self.allocator: Allocator | None = None
        #: every call's cost as it is answered (the run's spend cap and progress)
        self.on_spend: Callable[[float], None] | None = None
        self._pool: dict[str, Lane] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._stopped = False

    # ---------------------------------------------------------------- life cycle
    @classmethod
    async def open(cls, cfg: RunConfig, route: ModelRoute, spec: LaneSpec, run_dir: Path, metrics: RunMetrics,
                   console: Console) -> RunGateway | None:
        """Start the run's gateway in front of ``route`` (None with ``--no-model-gateway``) and say
        where it listens and how it sets the build concurrency."""
        if not cfg.model_gateway:
            return None
        run = cls(cfg, route, spec, run_dir, metrics, console)
        await run.gateway.start()
        low, high = cfg.concurrency_bounds
        how = (f"build concurrency from the provider: starts at {run.gateway.concurrency.cap}, {low}…{high}"
               if run.adaptive else f"build concurrency fixed at {cfg.global_cap}")
        console.print(f"model gateway: {run.url} ({how})")
        metrics.concurrency_cap(run.gateway.concurrency.cap if run.adaptive else cfg.global_cap)
        metrics.provider_state(True)
        return run

    async def close(self) -> None:
        """Stop following the allocator and close the gateway (calls still held are answered)."""
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        await self.gateway.close()

    @property
    def url(self) -> str:
        """The URL lanes reach the gateway at."""
        return (self.cfg.model_gateway_url or self.local_url).rstrip("/")

    @property
    def local_url(self) -> str:
        """The URL this process's own callers (judge, user proxy, claude) reach it at."""
        host = self.cfg.model_gateway_host
        return f"http://127.0.0.1:{self.gateway.port}" if host in ("0.0.0.0", "::", "") else self.gateway.base_url

    # ---------------------------------------------------------------- routes
    def lane_spec(self, spec: LaneSpec, index: int) -> LaneSpec:
        """Lane ``index``'s spec: its model calls (the agent's, the mock layer's) on its own route."""
        lane_url = self.gateway.lane_url(self.url, index)
        env = {**spec.env, MODEL_URL_ENV: lane_url, BASE_URL_ENV: f"{lane_url}/v1"}
        return replace(spec, env=env, secret_env={**spec.secret_env, MODEL_KEY_ENV: self.token})

    # ---------------------------------------------------------------- units
    def worker(self, runner: Worker, lanes: dict[str, Lane], cases: dict[str, LoadedCase]) -> Worker:
        """``runner`` inside a unit scope holding a lease on the lane it runs on, marked with what of
        its case the lane's calls quote."""
        self._pool = lanes
        markers = {slug: case_markers(loaded.case) for slug, loaded in cases.items()}

        async def run_unit(lane_id: str, unit: WorkUnit, attempt: int) -> tuple[Outcome, Any]:
            lane = self._pool.get(lane_id)
            lease = (self.gateway.leases.open(unit.key, str(lane.index), markers.get(unit.case, ()))
                     if lane is not None else None)
            try:
                with unit_scope(UnitScope(unit.key, lease)):
                    return await runner(lane_id, unit, attempt)
            finally:
                if lease is not None:
                    self.gateway.leases.close(lease)

        return run_unit

    def cost_of(self, unit: str) -> ModelCost:
        """What the calls attributed to ``unit`` cost, by stage (cache-aware, the provider's usage)."""
        return stage_costs(self.gateway.ledger.unit(unit))

    def settle(self, record: UnitResult) -> None:
        """The unit's model cost by stage; its rows a provider failure took charged to the framework."""
        record.model_cost = self.cost_of(record.unit_id)
        stages = failed_stages(record)
        if not stages:
            return
        failed = sum(s.failed_calls for s in record.model_cost.stages)
        evidence = (f"the model gateway saw {failed} {', '.join(sorted(stages))} call(s) of this unit fail on the "
                    f"provider" + ("" if self.gateway.health.up else " (the provider is down)"))
        if charge_provider_outage(record, evidence):
            log.warning("%s: charged to the framework: %s", record.unit_id, evidence)

    # ---------------------------------------------------------------- the allocator
    def attach(self, allocator: Allocator) -> None:
        """Drive ``allocator``'s global cap from the gateway's concurrency rule and provider health."""
        self.allocator = allocator
        if self.adaptive:
            allocator.set_global_cap(self.gateway.concurrency.cap)
        self._ticker = asyncio.get_running_loop().create_task(self._tick(), name="model-gateway-control")

    def _cap(self) -> int:
        return self.gateway.concurrency.cap if self.adaptive else self.cfg.global_cap

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            allocator = self.allocator
            if allocator is None:
                continue
            stats = allocator.stats()
            self.gateway.concurrency.demand(stats.active, stats.queued)
            changed = self.gateway.concurrency.tick()
            if changed is not None:
                self.cap(changed, self.gateway.concurrency.changes[-1][2])
            down = self.gateway.health.down_since
            if down is not None and not self._stopped and time.monotonic() - down > self.cfg.provider_wait_s:
                self._stopped = True
                reason = f"the model provider has been down for {self.cfg.provider_wait_s:.0f} s (--provider-wait-s)"
                self.console.print(f"[red]{reason}: no new builds start[/red]")
                self.metrics.stopped("provider_down")
                allocator.stop_new(reason)

    # ---------------------------------------------------------------- gateway events
    def call(self, record: CallRecord) -> None:
        """One model call answered: its metrics, and its cost to the spend cap."""
        self.metrics.model_call(record.stage, record.outcome, record.cost_usd, record.usage.to_json(), record.queued_s)
        if self.on_spend is not None and record.cost_usd > 0:
            self.on_spend(record.cost_usd)

    def cap(self, cap: int, why: str) -> None:
        """The concurrency rule moved the cap: the allocator follows it while the provider is up."""
        if not self.adaptive:
            return
        log.info("build concurrency %d: %s", cap, why)
        self.metrics.concurrency_cap(cap)
        if self.allocator is not None and self.gateway.health.up:
            self.allocator.set_global_cap(cap)

    def provider(self, up: bool, detail: str) -> None:
        """The provider went down (new builds wait: cap 0) or came back (the rule's cap again)."""
        self.metrics.provider_state(up)
        if not up:
            log.warning("model provider down: %s; new builds wait (up to %.0f s) and calls are held %.0f s each",
                        detail, self.cfg.provider_wait_s, self.cfg.gateway_hold_s)
            self.console.print(f"[red]model provider down ({detail}): new builds wait[/red]")
            if self.allocator is not None:
                self.allocator.set_global_cap(0)
            return
        log.warning("model provider back: %s; builds resume", detail)
        self.console.print("[green]model provider back: builds resume[/green]")
        if self.allocator is not None and not self._stopped:
            self.allocator.set_global_cap(self._cap())

    # ---------------------------------------------------------------- results
    def finalize(self, results: EvalResults) -> None:
        """Every unit's cost from the ledger again (a call that came after its record was written
        counts too); the gateway's totals into ``config.model_gateway_status``."""
        known = set(self.gateway.ledger.units())
        for unit in results.units:
            if unit.unit_id in known:
                unit.model_cost = self.cost_of(unit.unit_id)
        status = self.gateway.status()
        run_bucket = self.gateway.ledger.unit(RUN_BUCKET)
        status["unattributed_usd"] = round(sum(t.cost_usd for t in run_bucket.values()), 8)
        status["adaptive"] = self.adaptive
        status["url"] = self.url
        results.config["model_gateway_status"] = status


__all__ = ["RunGateway", "scripted_provider_counts", "stage_costs"]
