"""``orchestrator run``: plan → provision → execute → teardown → finalize, one small stage each.

::

    plan       cases selected, units planned (``--resume``: the unfinished ones), results writer open
    provision  lanes up, seeded, fingerprints agree; per lane an owner session, build users, builder prep
    execute    the allocator runs every unit (build → verify → record); observers see every event
    teardown   what builds left is deleted, lanes are torn down, what stays open is named
    finalize   summary, comparison, eval-results.json, PR comment, report

The order of the finally-blocks is the point of this module: whatever happens after the first lane
starts — a failed build, a SIGTERM, a full disk — results already finished are on disk and every
lane, build user, credential and workflow is deleted (or its failed delete is in the ledger and
in the report, for ``orchestrator cleanup``). Which builder and which lane backend run is decided
by name through their registries, and what the pair needs by :func:`~orchestrator.run.stack.resolve_stack`
from their capability flags; nothing here knows either.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from orchestrator.allocator import Allocator
from orchestrator.builders.builder import Builder, BuilderSettings, BuildEvents
from orchestrator.domain import CleanupFailure
from orchestrator.lanes.backend import BackendEvents, LaneBackend, LaneError
from orchestrator.lanes.labels import RUN_ENV
from orchestrator.lanes.model import Lane, LaneSpec
from orchestrator.metrics import RunMetrics
from orchestrator.redact import redact
from orchestrator.results.model import EvalResults
from orchestrator.results.writer import ResultsWriteError
from orchestrator.run.config import RunConfig
from orchestrator.run.execute import execute, make_allocator
from orchestrator.run.finalize import summarize_run, write_final
from orchestrator.run.model_gateway import RunGateway, scripted_provider_counts
from orchestrator.run.model_route import ModelRoute, open_route
from orchestrator.run.observers import (
    HooksObserver,
    LaneStateObserver,
    MetricsObserver,
    Observers,
    ProgressObserver,
    RunHooks,
    RunObserver,
    call_hooks,
)
from orchestrator.run.plan import Plan, expected_for_run, make_plan, plan_units, resumable_units
from orchestrator.run.provision import Pool, Provisioner, lane_spec
from orchestrator.run.resolve import ResolvedRun, prepare
from orchestrator.run.stages import Stages
from orchestrator.run.teardown import RUN_TEARDOWN, Teardown, teardown
from orchestrator.run.unit import UnitRunner, UnitSettings
from orchestrator.toolchain import Toolchain, ensure_toolchain
from orchestrator.verify.judge import Judge, JudgeConfig

__all__ = ["Run", "RunHooks", "RunOutcome", "plan_units", "resumable_units", "run"]

log = logging.getLogger(__name__)
console = Console(stderr=True)


@dataclass
class RunOutcome:
    run_id: str
    results_path: Path
    results: EvalResults
    cleanup_failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: what the builder said of its own clean-up (``Builder.closing_report``), to print
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


class _SpendCap(RunObserver):
    """``--max-cost-usd``: once reached, no new build starts (running ones finish). With the model
    gateway every model call counts, as it is answered (:meth:`spend`); without it, what builders
    report of their own (claude's cost)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        #: the gateway sees every call (``--model-gateway``): builders' own reports would count twice
        self.gateway_counts = run.cfg.model_gateway

    def on_cost(self, usd: float) -> None:
        if not self.gateway_counts:
            self.spend(usd)

    def spend(self, usd: float) -> None:
        run = self.run
        run.spent_usd += usd
        cap = run.cfg.max_cost_usd
        if cap is not None and run.spent_usd >= cap and run.units.engaged and run.stop_reason is None:
            run.stop_reason = f"spend cap reached: ${run.spent_usd:.2f} ≥ --max-cost-usd {cap}"
            console.print(f"[yellow]{run.stop_reason}: no new builds start[/yellow]")
            run.units.stop_new(run.stop_reason)


class _Units:
    """The run's hold on its units: how it stops them and what runs where. Until the allocator runs
    there are none: a stop cancels the run's task (and no new build has anything to stop); once it
    runs (:meth:`engage`), the allocator stops them, so running units end as results."""

    def __init__(self) -> None:
        self._main: asyncio.Task[object] | None = None
        self._allocator: Allocator | None = None

    def hold(self, main: asyncio.Task[object] | None) -> None:
        self._main = main

    def engage(self, allocator: Allocator) -> None:
        self._allocator = allocator

    @property
    def engaged(self) -> bool:
        """Whether the allocator runs the units (before it, no build has started to stop)."""
        return self._allocator is not None

    def per_lane(self) -> dict[str, int]:
        """Units running per lane id (none before the allocator runs)."""
        if self._allocator is None:
            return {}
        return {lane_id: s.active for lane_id, s in self._allocator.stats().lanes.items()}

    def cancel(self, reason: str) -> None:
        """No unit starts; running ones are cancelled (before the allocator: the run's task is)."""
        if self._allocator is not None:
            self._allocator.cancel(reason)
        elif self._main is not None:
            self._main.cancel()

    def stop_new(self, reason: str) -> None:
        """No new build starts; running ones finish."""
        if self._allocator is not None:
            self._allocator.stop_new(reason)


@dataclass(frozen=True)
class _Opened:
    """What the run opened before its first lane, each part already registered with the teardown."""

    plan: Plan
    backend: LaneBackend
    spec: LaneSpec
    judge: Judge
    builder: Builder
    provisioner: Provisioner
    gateway: RunGateway | None  # None: ``--no-model-gateway``


class _BackendEvents(BackendEvents):
    """The lane backend's news, for this run: a re-created object is counted; a fatal one stops the
    run loudly (an ``error:`` line, exit 1, ``n8n_eval_run_stopped_total{reason="lane_backend"}``)."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def restored(self, kind: str, name: str) -> None:
        self.run.metrics.object_restored(kind)
        console.print(f"[yellow]{kind} {name} was gone: re-created[/yellow]")

    def fatal(self, error: LaneError) -> None:
        message = redact(str(error))
        if message not in self.run.errors:
            self.run.errors.append(message)
        self.run.metrics.stopped("lane_backend")
        self.run.stop(f"lane backend: {message}")


class Run:
    def __init__(self, resolved: ResolvedRun, hooks: list[RunHooks] | None = None, stages: Stages | None = None) -> None:
        #: the run as :func:`~orchestrator.run.resolve.resolve` decided it (and ``cfg``, its frozen flags)
        self.resolved = resolved
        self.cfg = resolved.config
        self.hooks = list(hooks or [])
        #: what a harness changes in the stage set (``run/stages.py``); ``Stages()`` is ``run`` itself
        self.stages = stages or Stages()
        self.metrics = RunMetrics()
        self.stop_reason: str | None = None
        self.errors: list[str] = []
        self.cleanup_failures: list[CleanupFailure] = []
        #: what the builder said after its own clean-up (``Builder.closing_report``)
        self.notes: list[str] = []
        self.builder_failures: list[str] = []
        self.spent_usd = 0.0
        #: its hold on the units: a stop goes to the run's task, then to the allocator (:class:`_Units`)
        self.units = _Units()
        self.pool = Pool()
        #: what the run lets go of at its end, in a declared order (``run/teardown.py``)
        self._teardown = Teardown(RUN_TEARDOWN, self._teardown_failed)
        self._metrics_observer = MetricsObserver(self.metrics)
        self._hooks_observer = HooksObserver(self.hooks)
        self._spend_cap = _SpendCap(self)
        self.observers = Observers([LaneStateObserver(console), self._metrics_observer, self._hooks_observer,
                                    self._spend_cap])

    @property
    def lanes(self) -> dict[str, Lane]:
        return self.pool.lanes

    # ---------------------------------------------------------------- signals
    def _on_signal(self, signame: str) -> None:
        self.stop(f"interrupted by {signame}")

    def stop(self, reason: str) -> None:
        """Stop the run: no unit starts, running ones are cancelled; results are written, lanes torn down."""
        self.stop_reason = reason
        console.print(f"[yellow]{reason}: stopping — writing results and tearing down[/yellow]")
        self.units.cancel(reason)

    def _signals(self, install: bool) -> None:
        """Take SIGINT/SIGTERM for the run; give them back once it is over (an in-process caller
        keeps its Ctrl-C)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                if install:
                    loop.add_signal_handler(sig, self._on_signal, sig.name)
                else:
                    loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - non-main thread
                pass

    # ---------------------------------------------------------------- main
    async def execute(self) -> RunOutcome:
        """Plan, provision, execute, tear down and finalize the run, holding SIGINT/SIGTERM while it
        runs (a signal stops it: results are written, lanes torn down). Returns what happened;
        failures after the plan are in :attr:`RunOutcome.errors`, not raised."""
        self.units.hold(asyncio.current_task())
        self._signals(install=True)
        try:
            return await self._execute()
        finally:
            self._signals(install=False)

    async def _execute(self) -> RunOutcome:
        plan = await make_plan(self.resolved, self.stages.load_cases)
        try:
            return await self._execute_plan(plan)
        finally:
            plan.lock.release()  # the run is over: `cleanup` may look at it now

    async def _execute_plan(self, plan: Plan) -> RunOutcome:
        cfg, resolved = self.cfg, self.resolved
        await call_hooks(self.hooks, "on_cases", plan.run_id, plan.cases)
        console.print(f"run [bold]{plan.run_id}[/bold]: {len(plan.cases)} case(s) × {cfg.iterations} = "
                      f"{plan.units_total} unit(s)" + (f", {len(plan.units)} left to run" if cfg.resume else ""))

        stack = resolved.stack
        tc = await asyncio.to_thread(ensure_toolchain, n8n=stack.toolchain_n8n, claude=stack.toolchain_claude,
                                     log=lambda m: console.print(f"[dim]{m}[/dim]"))
        down = self._teardown
        if cfg.pushgateway:
            gateway_url = cfg.pushgateway
            down.add("pushgateway", lambda: self.metrics.push(gateway_url, job="n8n-eval-orchestrator",
                                                              grouping_key={"run_id": plan.run_id}))
        try:
            await self._start_and_run(plan, tc)
        except (LaneError, ResultsWriteError) as exc:
            self.errors.append(redact(str(exc)))
        except asyncio.CancelledError:
            if self.stop_reason is None:
                raise
        finally:
            await down.run()
        return RunOutcome(plan.run_id, plan.writer.results_path, plan.results,
                          [str(f) for f in self.cleanup_failures] + self.builder_failures, self.errors, self.notes)

    async def _start_and_run(self, plan: Plan, tc: Toolchain) -> None:
        """Open what the run needs (each registered with the teardown as it opens), then run the units."""
        cfg, resolved, down = self.cfg, self.resolved, self._teardown
        stack = resolved.stack
        builder_cls, backend_cls = stack.builder, stack.backend
        server = stack.builder_options.mcp_server_name if stack.builder_options else None
        route = open_route(cfg.model_server, server)
        down.add("model route", lambda: self._close_route(route, plan))
        plan.results.config["model_server"] = route.kind
        plan.results.config["builder"] = builder_cls.name
        build_budget_ms = resolved.build_timeout_ms
        plan.results.config["build_timeout_ms"] = build_budget_ms  # resolved for the builder
        endpoint = self.metrics.serve(cfg.metrics_port, cfg.metrics_host) if cfg.metrics_port is not None else None
        if endpoint:
            console.print(f"metrics: {endpoint.url}")
            down.add("metrics endpoint", endpoint.close)
        backend_options = dict(stack.backend_options)
        if cfg.resume and backend_cls.takes_over_resumed_runs:  # the lanes a replaced orchestrator left
            backend_options["takeover"] = True
        backend = backend_cls(plan.run_id, plan.ledger, cfg.state_dir, **backend_options)
        backend.events = _BackendEvents(self)
        down.add("backend", backend.close)
        down.add("lanes", lambda: self._tear_lanes_down(backend, plan))
        spec = lane_spec(resolved, route)
        build_model = spec.env.get(builder_cls.model_env, "") if builder_cls.model_env else cfg.build_model
        plan.results.config["build_model"] = build_model
        # every model call through the gateway (issue 37): our callers get its URL and token
        gateway = await RunGateway.open(cfg, route, spec, plan.run_dir, self.metrics, console)
        model_url, model_key = (gateway.local_url, gateway.token) if gateway else (route.base_url, route.api_key)
        if gateway is not None:
            gateway.on_spend = self._spend_cap.spend
            down.add("model gateway", lambda: self._close_gateway(gateway, plan))
        judge_overrides: dict[str, object] = {"api_key": model_key, "base_url": model_url}
        if cfg.judge_attempt_timeout_s is not None:
            judge_overrides["attempt_timeout_s"] = cfg.judge_attempt_timeout_s
        judge = Judge(JudgeConfig.from_env(**judge_overrides))
        down.add("judge", judge.aclose)
        builder = self._wrap_builder(builder_cls(
            BuilderSettings(
                run_id=plan.run_id, run_dir=plan.run_dir.resolve(), model=build_model, api_key=model_key,
                base_url=model_url, claude_bin=Path(cfg.claude_bin) if cfg.claude_bin else tc.claude_bin,
                outage_waits_s=tuple(cfg.outage_waits_s), keep_workflows=cfg.keep_workflows,
                # builds run in their own session: the run marker lets `cleanup` find what a SIGKILL orphaned
                extra_env={RUN_ENV: plan.run_id}, lane_env=dict(spec.env),
                options=stack.builder_options,
            ),
            BuildEvents(on_cost=self.observers.on_cost, on_outage_retry=self.metrics.outage_retry),
        ))
        down.add("builder", lambda: self._close_builder(builder))
        provisioner = Provisioner(cfg, plan.run_id, plan.ledger, backend, spec, builder, self.pool, self.observers,
                                  console)
        if gateway is not None:  # each lane's model calls on its own route of the gateway
            provisioner.spec_for = lambda index: gateway.lane_spec(spec, index)
        down.add("provisioner", provisioner.close)
        down.add("results", lambda: self._finish(plan, provisioner))  # from here on, results are written
        if plan.units and self.stop_reason is None:
            await self._provision_and_execute(_Opened(plan, backend, spec, judge, builder, provisioner, gateway),
                                              build_budget_ms)
        elif cfg.resume:  # nothing to run: what a replaced orchestrator left of the run goes all the same
            await backend.take_over_leftovers()

    def _wrap_builder(self, builder: Builder) -> Builder:
        """The builder the run's units use (a subclass may put something between them: the A/B lockstep)."""
        return builder

    async def _close_builder(self, builder: Builder) -> None:
        await builder.aclose()
        report = builder.closing_report()
        self.notes += report.notes
        self.builder_failures += report.cleanup_failures

    async def _tear_lanes_down(self, backend: LaneBackend, plan: Plan) -> None:
        self.cleanup_failures += await teardown(backend, plan.ledger, self.pool.lanes, self.pool.contexts,
                                                keep_workflows=self.cfg.keep_workflows)
        for failure in self.cleanup_failures:
            self.observers.on_cleanup_failure(failure)

    async def _close_gateway(self, gateway: RunGateway, plan: Plan) -> None:
        await gateway.close()
        gateway.finalize(plan.results)

    def _close_route(self, route: ModelRoute, plan: Plan) -> None:
        if route.server is not None:  # offline: which models each route's build calls asked for
            plan.results.config["model_routes"] = route.models_by_route()
            plan.results.config["scripted_provider"] = scripted_provider_counts(route)
        route.close()

    def _teardown_failed(self, step: str, message: str) -> None:
        self.metrics.cleanup_failed(f"teardown:{step}")
        if message not in self.errors:
            self.errors.append(message)

    async def _provision_and_execute(self, opened: _Opened, build_budget_ms: int) -> None:
        cfg = self.cfg
        plan, backend, provisioner, gateway = opened.plan, opened.backend, opened.provisioner, opened.gateway
        (plan.run_dir / "builds").mkdir(parents=True, exist_ok=True, mode=0o700)
        await provisioner.start(min(cfg.lanes, len(plan.units)))  # returns once the first lane has joined
        transcripts = plan.run_dir / "transcripts"
        transcripts.mkdir(parents=True, exist_ok=True, mode=0o700)
        settings = UnitSettings(max_attempts=cfg.build_max_attempts, timeout_ms=cfg.timeout_ms,
                                build_timeout_ms=build_budget_ms,
                                keep_workflows=cfg.keep_workflows, transcripts_dir=transcripts,
                                judge_mcp_process=cfg.judge_mcp_process)
        runner = UnitRunner({c.slug: c for c in plan.cases}, self.pool.contexts, opened.builder, opened.judge, settings,
                            on_cleanup_failure=self.observers.on_cleanup_failure, verifier=self.stages.verify)
        progress = ProgressObserver(console, len(plan.units), lambda: self.spent_usd)
        progress.on_lanes(self.pool.lanes)
        self.observers.observers.append(progress)
        allocator = provisioner.allocator = make_allocator(
            cfg, backend, self.pool, runner, plan.writer, self.observers, self.errors,
            global_cap=gateway.gateway.concurrency.cap if gateway is not None and gateway.adaptive else None,
            settle=gateway.settle if gateway is not None else None)
        self.units.engage(allocator)
        if gateway is not None:
            gateway.attach(allocator)
        if self.stop_reason:
            allocator.cancel(self.stop_reason)
        expected = expected_for_run({c.slug: c.case.complexity for c in plan.cases}, durations_from=cfg.durations_from,
                                    state_dir=cfg.state_dir, baseline=cfg.baseline, run_id=plan.run_id)
        with progress.progress:
            await execute(cfg, backend, self.pool, allocator, runner, plan.units, self.observers,
                          expected_s=expected, on_lost=provisioner.replace,
                          worker=gateway.worker(runner, self.pool.lanes, runner.cases) if gateway is not None else None)

    async def _finish(self, plan: Plan, provisioner: Provisioner) -> None:
        plan.results.finished_at = time.time()
        await self._hooks_observer.drain()
        summarize_run(plan.results, iterations=self.cfg.iterations, units_total=plan.units_total,
                      lanes=list(self.pool.lanes.values()), stop_reason=self.stop_reason,
                      cleanup_failures=[str(f) for f in self.cleanup_failures],
                      lane_failures=list(provisioner.failures))
        if provisioner.first_ready_s is not None:
            plan.results.config["first_lane_ready_s"] = round(provisioner.first_ready_s, 3)
        hook_comparisons = [c for c in await call_hooks(self.hooks, "on_finish", plan.results) if isinstance(c, dict)]
        hook_baseline = next((b for b in (getattr(h, "baseline", None) for h in self.hooks)
                              if isinstance(b, EvalResults)), None)
        hook_status = next(((status, h.comparison_error) for h in self.hooks
                            if (status := h.comparison_status) is not None), None)
        for error in write_final(plan.results, plan.writer, plan.output_dir, baseline_path=self.cfg.baseline,
                                 hook_comparison=hook_comparisons[0] if hook_comparisons else None,
                                 hook_baseline=hook_baseline, hook_status=hook_status):
            if error not in self.errors:
                self.errors.append(error)
        if self.stages.finalize is not None:  # a harness's own files, after the run's
            self.errors.extend(e for e in await self.stages.finalize(plan.results) if e not in self.errors)


async def run(cfg: RunConfig, hooks: list[RunHooks] | None = None) -> RunOutcome:
    """Resolve, check and run ``cfg`` (``orchestrator run`` without the console)."""
    return await Run(await prepare(cfg), hooks).execute()
