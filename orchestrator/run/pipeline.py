"""``orchestrator run``: select cases → bring lanes up → build and verify every unit → results → teardown.

The order of the finally-blocks is the point of this module: whatever happens after the first lane
starts — a failed build, a SIGTERM, a full disk — results already finished are on disk and every
lane, build user, credential and workflow is deleted (or its failed delete is in the ledger and
in the report, for ``orchestrator cleanup``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator.allocator import Allocator, WorkUnit
from orchestrator.allocator.model import AllocatorEvent, EventKind, ResultStatus, WorkResult
from orchestrator.build.builder import Builder, BuilderSettings, BuildEvents, get_builder
from orchestrator.build.lane import BuildLane
from orchestrator.cases import LoadedCase, load_selected
from orchestrator.compare import compare, comparison_dict, load_results
from orchestrator.compare.pr_comment import render_pr_comment, write_pr_comment
from orchestrator.errors import ConfigError, UserError
from orchestrator.lanes.backend import LaneBackend, LaneError, get_backend
from orchestrator.lanes.bringup import PoolEvents, bring_up, check_fingerprints, make_owner, safe_teardown
from orchestrator.lanes.install import ensure_toolchain
from orchestrator.lanes.model import Lane, LaneState
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process import RUN_LABEL
from orchestrator.lanes.static import parse_base_urls
from orchestrator.ledger import Ledger
from orchestrator.metrics import RunMetrics
from orchestrator.redact import redact
from orchestrator.results.model import EvalResults, LaneRecord, UnitResult
from orchestrator.results.report_html import write_report
from orchestrator.results.scoring import summarize, unit_outcome
from orchestrator.results.writer import ResultsWriteError, ResultsWriter, read_units
from orchestrator.run.config import RunConfig
from orchestrator.run.model_route import ModelRoute, open_route
from orchestrator.run.unit import UnitRunner, UnitSettings
from orchestrator.verify.judge import Judge, JudgeConfig

log = logging.getLogger(__name__)
console = Console(stderr=True)


@dataclass
class RunOutcome:
    run_id: str
    results_path: Path
    results: EvalResults
    cleanup_failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _run_dir(cfg: RunConfig, run_id: str) -> Path:
    return cfg.state_dir / "runs" / run_id


def _save_run_config(cfg: RunConfig, run_id: str) -> None:
    path = _run_dir(cfg, run_id) / "run.json"
    path.write_text(json.dumps(cfg.public(), indent=2, default=str))


def _resume_config(cfg: RunConfig) -> RunConfig:
    """``--resume ID``: the stored selection of that run, this invocation's lane/runtime options."""
    path = cfg.state_dir / "runs" / str(cfg.resume) / "run.json"
    if not path.is_file():
        raise ConfigError(f"--resume: no run {cfg.resume!r} under {cfg.state_dir / 'runs'}")
    stored = json.loads(path.read_text())
    for key in ("source", "suite", "filter", "exclude", "tier", "iterations", "experiment_name", "output_dir"):
        if stored.get(key) is not None:
            setattr(cfg, key, stored[key] if key != "output_dir" else Path(stored[key]))
    cfg.cases_paths = [Path(p) for p in stored.get("cases_paths") or [str(p) for p in cfg.cases_paths]]
    cfg.run_id = cfg.resume
    return cfg


def resumable_units(records: list[UnitResult]) -> list[UnitResult]:
    """The last record of each unit that really finished; a ``skipped`` unit never ran, so
    ``--resume`` runs it again."""
    last: dict[tuple[str, int], UnitResult] = {}
    for record in records:
        last[(record.case, record.iteration)] = record
    return [r for r in last.values() if r.build.status.value != "skipped"]


def plan_units(cases: list[LoadedCase], iterations: int, finished: list[UnitResult]) -> list[WorkUnit]:
    done = {(u.case, u.iteration) for u in finished}
    return [WorkUnit(c.slug, i) for c in cases for i in range(iterations) if (c.slug, i) not in done]


class RunHooks:
    """Observers of a run (LangSmith experiments, A/B bookkeeping). Every call is best-effort:
    a hook that raises is logged and never fails the run."""

    async def on_cases(self, run_id: str, cases: list[LoadedCase]) -> None: ...

    async def on_unit(self, unit: UnitResult) -> None: ...

    async def on_finish(self, results: EvalResults) -> dict[str, object] | None:
        """May return a comparison dict (e.g. against a baseline found in LangSmith)."""
        return None


async def _call_hooks(hooks: list[RunHooks], method: str, *args: object) -> list[object]:
    out = []
    for hook in hooks:
        try:
            out.append(await getattr(hook, method)(*args))
        except Exception as exc:  # best effort by contract
            log.warning("%s.%s failed: %s", type(hook).__name__, method, redact(str(exc)))
    return out


class Run:
    def __init__(self, cfg: RunConfig, hooks: list[RunHooks] | None = None) -> None:
        self.cfg = cfg
        self.hooks = list(hooks or [])
        self._pending_hooks: set[asyncio.Task[object]] = set()
        self._main_task: asyncio.Task[object] | None = None
        self.metrics = RunMetrics()
        self.stop_reason: str | None = None
        self.errors: list[str] = []
        self.cleanup_failures: list[str] = []
        self.spent_usd = 0.0
        self.allocator: Allocator | None = None
        self.builder: Builder | None = None
        self.lanes: dict[str, Lane] = {}
        self.contexts: dict[str, BuildLane] = {}
        self._signals = 0

    # ---------------------------------------------------------------- signals
    def _on_signal(self, signame: str) -> None:
        self._signals += 1
        self.stop_reason = f"interrupted by {signame}"
        console.print(f"[yellow]{signame}: stopping — writing results and tearing down[/yellow]")
        if self.allocator is not None:
            self.allocator.cancel(self.stop_reason)
        if self._main_task is not None and self.allocator is None:
            self._main_task.cancel()

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig.name)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - non-main thread
                pass

    def _remove_signals(self) -> None:
        """Give the signals back once the run is over (an in-process caller keeps its Ctrl-C)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - non-main thread
                pass

    # ---------------------------------------------------------------- main
    async def execute(self) -> RunOutcome:
        self._main_task = asyncio.current_task()
        self._install_signals()
        try:
            return await self._execute()
        finally:
            self._remove_signals()

    async def _execute(self) -> RunOutcome:
        cfg = self.cfg
        await preflight_static(cfg)
        if cfg.resume:
            _resume_config(cfg)
        run_id = cfg.run_id or time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(3).hex()
        cfg.run_id = run_id
        ledger = Ledger.for_run(run_id, cfg.state_dir)
        output_dir = cfg.output_dir or Path("results") / run_id
        cfg.output_dir = output_dir
        _save_run_config(cfg, run_id)

        cases = await load_selected(cfg.source, cfg.cases_paths, cfg.suite, cfg.filter, cfg.exclude, cfg.tier)
        if not cases:
            raise UserError("no cases selected: check the case paths and --filter / --exclude / --tier")
        await _call_hooks(self.hooks, "on_cases", run_id, cases)
        results = EvalResults(run_id=run_id, experiment_name=cfg.experiment_name, started_at=time.time(), config=cfg.public())
        try:
            writer = ResultsWriter(results, output_dir, _run_dir(cfg, run_id))
        except ResultsWriteError as exc:  # nothing started yet: a plain one-line error
            raise UserError(str(exc)) from None
        finished = resumable_units(read_units(writer.units_path)) if cfg.resume else []
        writer.preload(finished)
        units = plan_units(cases, cfg.iterations, finished)
        units_total = len(cases) * cfg.iterations
        console.print(f"run [bold]{run_id}[/bold]: {len(cases)} case(s) × {cfg.iterations} = {units_total} unit(s)"
                      + (f", {len(units)} left to run" if cfg.resume else ""))

        tc = await asyncio.to_thread(ensure_toolchain, n8n=cfg.backend == "process", claude=cfg.claude_bin is None,
                                     log=lambda m: console.print(f"[dim]{m}[/dim]"))
        route = open_route(cfg.model_server, cfg.mcp_server)
        results.config["model_server"] = route.kind
        endpoint = self.metrics.serve(cfg.metrics_port) if cfg.metrics_port is not None else None
        if endpoint:
            console.print(f"metrics: {endpoint.url}")
        backend = get_backend(cfg.backend)(run_id, ledger, cfg.state_dir, base_url=cfg.base_url,
                                           email=cfg.email, password=cfg.password)
        judge_overrides: dict[str, object] = {"api_key": route.api_key, "base_url": route.base_url}
        if cfg.judge_attempt_timeout_s is not None:
            judge_overrides["attempt_timeout_s"] = cfg.judge_attempt_timeout_s
        judge = Judge(JudgeConfig.from_env(**judge_overrides))
        try:
            if units and self.stop_reason is None:
                await self._run_units(cfg, run_id, ledger, backend, route, judge, tc, cases, units, writer)
        except (LaneError, ResultsWriteError) as exc:
            self.errors.append(redact(str(exc)))
        except asyncio.CancelledError:
            if self.stop_reason is None:
                raise
        finally:
            self.cleanup_failures += await self._teardown(backend, ledger)
            await backend.close()
            if self.builder is not None:
                await self.builder.aclose()
            await judge.aclose()
            route.close()
            results.finished_at = time.time()
            if self._pending_hooks:
                await asyncio.gather(*self._pending_hooks, return_exceptions=True)
            results.lanes = [LaneRecord(lane=l.lane_id, backend=l.backend, base_url=l.base_url, fingerprint=l.fingerprint)
                             for l in self.lanes.values()]
            summary, case_summaries = summarize(results.units, cfg.iterations, units_total)
            results.summary, results.cases = summary, case_summaries
            hook_comparisons = [c for c in await _call_hooks(self.hooks, "on_finish", results) if c]
            hook_baseline = next((b for b in (getattr(h, "baseline", None) for h in self.hooks)
                                  if isinstance(b, EvalResults)), None)
            self._finalize(results, writer, units_total, output_dir,
                           hook_comparisons[0] if hook_comparisons else None, hook_baseline)
            if endpoint:
                endpoint.close()
            if cfg.pushgateway:
                self.metrics.push(cfg.pushgateway, job="n8n-eval-orchestrator", grouping_key={"run_id": run_id})
        return RunOutcome(run_id, writer.results_path, results, self.cleanup_failures, self.errors)

    async def _run_units(self, cfg, run_id, ledger, backend: LaneBackend, route: ModelRoute, judge: Judge, tc,
                         cases: list[LoadedCase], units: list[WorkUnit], writer: ResultsWriter) -> None:
        spec = make_spec(cfg.profile, cfg.env)
        spec.env.update(route.lane_env())
        for k, v in route.lane_secrets().items():
            spec.secret_env.setdefault(k, v)
        owner = make_owner(run_id, cfg.password if cfg.backend == "static" else None)
        events = PoolEvents(lane_ready=lambda lane, s: self.metrics.lane_up(s))
        lane_count = len(units) if cfg.lanes > len(units) else cfg.lanes
        pool = await bring_up(backend, lane_count, spec, owner, retries=cfg.lane_retries, events=events)
        for failure in pool.failures:
            console.print(f"[yellow]lane failed to come up:[/yellow] {failure}")
        self.lanes = {lane.lane_id: lane for lane in pool.lanes}
        if not backend.owns_lanes:  # someone else's server: recorded so `cleanup` knows where our users live
            for lane in pool.lanes:
                ledger.created("lane", lane.lane_id, lane=lane.lane_id, backend=lane.backend, index=lane.index,
                               base_url=lane.base_url)
        self._lane_states()
        check_fingerprints(pool.lanes, spec)
        run_dir = _run_dir(cfg, run_id)
        (run_dir / "builds").mkdir(parents=True, exist_ok=True, mode=0o700)
        builder = get_builder(cfg.builder)(
            BuilderSettings(
                run_id=run_id, run_dir=run_dir.resolve(), model=cfg.build_model, api_key=route.api_key,
                base_url=route.base_url, claude_bin=Path(cfg.claude_bin) if cfg.claude_bin else tc.claude_bin,
                build_timeout_ms=cfg.build_timeout_ms, mcp_timeout_ms=cfg.build_mcp_timeout_ms,
                max_retries=cfg.build_max_retries, mcp_server=cfg.mcp_server, build_cwd=cfg.build_cwd,
                outage_waits_s=tuple(cfg.outage_waits_s), keep_workflows=cfg.keep_workflows,
                # builds run in their own session: the run label lets `cleanup` find what a SIGKILL orphaned
                extra_env={RUN_LABEL: run_id},
            ),
            BuildEvents(on_cost=self._on_cost, on_outage_retry=self.metrics.outage_retry),
        )
        self.builder = builder
        for lane in pool.lanes:
            self.contexts[lane.lane_id] = ctx = await BuildLane.open(lane, ledger)
            await builder.prepare_lane(ctx)

        settings = UnitSettings(max_attempts=cfg.build_max_attempts, timeout_ms=cfg.timeout_ms,
                                keep_workflows=cfg.keep_workflows)
        runner = UnitRunner({c.slug: c for c in cases}, self.contexts, builder, judge, settings,
                            on_cleanup_failure=lambda kind, _msg: self.metrics.cleanup_failed(kind))

        async def probe(lane_id: str) -> bool:
            return await backend.health(self.lanes[lane_id])

        progress = Progress(TextColumn("[bold]units"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("{task.fields[status]}"), console=console, transient=False)
        task = progress.add_task("units", total=len(units), status="")

        def on_result(res: WorkResult) -> None:
            record = self._record_for(res, runner)
            self.metrics.unit_finished(unit_outcome(record), build_s=record.build.duration_s or None,
                                       verify_s=record.verify_duration_s or None, cost=0.0, turns=record.build.turns)
            try:
                writer.add(record)
            except ResultsWriteError as exc:  # the record is kept in memory by the writer
                if not any("cannot write" in e for e in self.errors):
                    self.errors.append(redact(str(exc)))
                allocator.stop_new(f"results cannot be written: {exc}")
            progress.update(task, advance=1, status=f"${self.spent_usd:.2f} · {self._lane_summary()}")
            if self.hooks:
                t = asyncio.create_task(_call_hooks(self.hooks, "on_unit", record))
                self._pending_hooks.add(t)
                t.add_done_callback(self._pending_hooks.discard)

        def on_event(ev: AllocatorEvent) -> None:
            if ev.kind == EventKind.started:
                self.metrics.unit_started()
            elif ev.kind == EventKind.stolen:
                self.metrics.stolen()
            elif ev.kind in (EventKind.quarantined, EventKind.drained, EventKind.unquarantined):
                lane = self.lanes.get(ev.lane or "")
                if lane is not None:
                    lane.state = {EventKind.quarantined: LaneState.quarantined, EventKind.drained: LaneState.dead,
                                  EventKind.unquarantined: LaneState.ready}[ev.kind]
                    console.print(f"[yellow]{lane.describe()} {ev.kind.value}[/yellow]: {ev.reason or ''}")
                self._lane_states()

        allocator = Allocator(
            list(self.lanes), per_lane_cap=cfg.per_lane_builds, global_cap=cfg.global_cap, seed=cfg.seed,
            reprobe_interval_s=cfg.reprobe_interval_s, abort_after_all_quarantined_s=cfg.abort_after_all_quarantined_s,
            max_retries_elsewhere=cfg.build_max_attempts - 1, probe=probe,
            on_event=on_event, on_result=on_result,
        )
        self.allocator = allocator
        allocator.submit(units)
        self.metrics.unit_queued(len(units))
        if self.stop_reason:
            allocator.cancel(self.stop_reason)
        monitor = asyncio.create_task(self._monitor(backend, allocator))
        try:
            with progress:
                await allocator.run(runner)
        finally:
            monitor.cancel()
            await asyncio.gather(monitor, return_exceptions=True)
            for failure in runner.cleanup_failures:  # retried at teardown; what stays open is reported there
                log.warning("during the run: %s", failure)

    def _record_for(self, res: WorkResult, runner: UnitRunner) -> UnitResult:
        if res.status == ResultStatus.done and isinstance(res.value, UnitResult):
            return res.value
        if res.status == ResultStatus.lane_failure:
            return runner.lane_failure_record(res.unit, res.lane, redact(str(res.value or res.reason or "lane failure")))
        if res.status == ResultStatus.failed:
            value = res.value
            reason = f"{type(value).__name__}: {value}" if isinstance(value, BaseException) else str(value or res.reason)
            if isinstance(value, BaseException):
                log.error("unit %s crashed: %s", res.unit.key, redact(reason))
            return runner.error_record(res.unit, res.lane, redact(reason))
        return runner.skipped_record(res.unit, redact(res.reason or res.status.value))

    def _on_cost(self, cost: float) -> None:
        self.spent_usd += cost
        self.metrics.build_cost_usd.inc(max(cost, 0.0))
        cap = self.cfg.max_cost_usd
        if cap is not None and self.spent_usd >= cap and self.allocator is not None and self.stop_reason is None:
            self.stop_reason = f"spend cap reached: ${self.spent_usd:.2f} ≥ --max-cost-usd {cap}"
            console.print(f"[yellow]{self.stop_reason}: no new builds start[/yellow]")
            self.allocator.stop_new(self.stop_reason)

    def _lane_summary(self) -> str:
        states: dict[str, int] = {}
        for lane in self.lanes.values():
            states[lane.state.value] = states.get(lane.state.value, 0) + 1
        return ", ".join(f"{n} {s}" for s, n in sorted(states.items()))

    def _lane_states(self) -> None:
        counts: dict[LaneState, int] = {}
        for lane in self.lanes.values():
            counts[lane.state] = counts.get(lane.state, 0) + 1
        self.metrics.lane_state(counts)

    async def _monitor(self, backend: LaneBackend, allocator: Allocator) -> None:
        """Drain a lane that stops answering (process died, container gone) within a few seconds."""
        misses: dict[str, int] = {}
        while True:
            await asyncio.sleep(self.cfg.health_interval_s)
            for lane in list(self.lanes.values()):
                if lane.state not in (LaneState.ready,):
                    continue
                healthy = await backend.health(lane)
                gone = not healthy and await backend.is_gone(lane)
                misses[lane.lane_id] = 0 if healthy else misses.get(lane.lane_id, 0) + 1
                if gone or misses[lane.lane_id] >= 2:
                    lane.state = LaneState.dead
                    allocator.drain(lane.lane_id, "lane process exited" if gone else "health check failed twice")
                    self._lane_states()

    async def _teardown(self, backend: LaneBackend, ledger: Ledger) -> list[str]:
        """Delete what builds left, tear the lanes down, and return what is still open, by name.

        A lane that died (or hangs) is not asked to delete anything: an owned lane takes its users
        with it when it is torn down, and on a static lane the entries stay open for ``cleanup``.
        """
        failures: list[str] = []
        live = [ctx for ctx in self.contexts.values() if ctx.lane.state != LaneState.dead]
        for ctx in live:  # invited members no build used
            try:
                for failure in await ctx.users.close():
                    log.warning("closing %s: %s", ctx.lane.lane_id, failure)
            except Exception as exc:  # best effort
                failures.append(redact(f"{ctx.lane.lane_id}: closing: {exc}"))
        await self._retry_open_deletes(ledger)  # while the owner sessions are still open
        for ctx in self.contexts.values():
            await ctx.owner.aclose()
            await ctx.client.aclose()
        lanes = list(self.lanes.values())
        results = await asyncio.gather(*(safe_teardown(backend, lane) for lane in lanes))
        open_entries = ledger.open_entries()
        for lane, failure in zip(lanes, results):
            if failure:
                failures.append(failure)
            elif backend.owns_lanes:
                for entry in open_entries:
                    if entry.lane == lane.lane_id and entry.kind != "lane":
                        ledger.deleted(entry.kind, entry.id, lane=entry.lane)  # went with the lane
            elif not any(e.lane == lane.lane_id and e.kind != "lane" for e in open_entries):
                ledger.deleted("lane", lane.lane_id, lane=lane.lane_id)  # nothing of ours is left on it
        for entry in ledger.open_entries():
            if entry.kind == "lane" or (self.cfg.keep_workflows and not entry.last_error):
                continue
            failures.append(redact(f"{entry.lane}: {entry.kind} {entry.id} was not deleted"
                                   + (f" ({entry.last_error})" if entry.last_error else " (still open in the ledger)")))
        for f in failures:
            self.metrics.cleanup_failed(f.split(":", 1)[0] if ":" in f else "other")
        return failures

    async def _retry_open_deletes(self, ledger: Ledger) -> None:
        """At the end of the run, try every failed delete once more through the owner (live lanes only)."""
        if self.cfg.keep_workflows:
            return
        for entry in ledger.open_entries():
            ctx = self.contexts.get(entry.lane)
            if ctx is None or entry.kind not in ("workflow", "credential", "user") or ctx.lane.state == LaneState.dead:
                continue
            try:
                if entry.kind == "workflow":
                    await ctx.owner.delete_workflow(entry.id)
                elif entry.kind == "credential":
                    await ctx.owner.delete_credential(entry.id)
                else:
                    await ctx.owner.delete_user(entry.id)
                ledger.deleted(entry.kind, entry.id, lane=entry.lane)
                log.info("%s: %s %s deleted at the end of the run", entry.lane, entry.kind, entry.id)
            except Exception as exc:
                msg = redact(f"{entry.lane}: delete {entry.kind} {entry.id} failed at end of run: {exc}")
                ledger.delete_failed(entry.kind, entry.id, msg, lane=entry.lane)
                log.warning("%s", msg)

    def _finalize(self, results: EvalResults, writer: ResultsWriter, units_total: int, output_dir: Path,
                  hook_comparison: dict[str, object] | None = None,
                  hook_baseline: EvalResults | None = None) -> None:
        """Summary, comparison (``--baseline`` first, else a baseline a hook found, e.g. in
        LangSmith) and the final files; the PR comment uses the same comparison as the results."""
        summary, case_summaries = summarize(results.units, self.cfg.iterations, units_total)
        summary.stopped_reason = self.stop_reason
        results.summary = summary
        results.cases = case_summaries
        results.cleanup_failures = list(self.cleanup_failures)
        comparison = baseline = None
        reason = "no baseline given (--baseline)"
        if self.cfg.baseline is not None:
            try:
                baseline = load_results(self.cfg.baseline, role="baseline")
            except UserError as exc:
                reason = str(exc)
                self.errors.append(reason)
        elif hook_baseline is not None:
            baseline = hook_baseline
        if baseline is not None:
            comparison = compare(results, baseline)
            results.comparison = comparison_dict(comparison)
        elif hook_comparison is not None:
            results.comparison = hook_comparison
        try:
            writer.flush()
            write_pr_comment(output_dir, render_pr_comment(results, comparison, baseline, no_baseline_reason=reason))
            write_report(output_dir, results)
        except OSError as exc:
            message = redact(str(exc) if isinstance(exc, ResultsWriteError) else f"cannot write results to {output_dir}: {exc}")
            if message not in self.errors:
                self.errors.append(message)


async def preflight_static(cfg: RunConfig) -> None:
    """Static lanes must answer before a run starts anything: a closed port is a one-line error."""
    if cfg.backend != "static":
        return
    async with httpx.AsyncClient(timeout=5.0) as http:
        for index, url in enumerate(parse_base_urls(cfg.base_url)[: cfg.lanes]):
            try:
                await http.get(f"{url}/healthz/readiness")
            except httpx.TransportError as exc:
                reason = str(exc) or type(exc).__name__
                raise ConfigError(f"--base-url: lane s{index} at {url} is unreachable: {reason}") from None


async def run(cfg: RunConfig, hooks: list[RunHooks] | None = None) -> RunOutcome:
    return await Run(cfg.validate(), hooks).execute()
