"""``orchestrator run``: the main job."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from orchestrator.cli.common import run_async
from orchestrator.experiments.langsmith_sync import default_hooks
from orchestrator.ledger import default_state_dir
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import run

console = Console(stderr=True)


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_command(
        cases: list[Path] = typer.Argument(None, help="Case files or directories (default: cases/)."),
        source: str = typer.Option("disk", help="disk or langtracer."),
        suite: Optional[str] = typer.Option(None, help="LangTracer suite (with --source langtracer)."),
        filter: Optional[str] = typer.Option(None, "--filter", help="Comma-separated slug substrings (OR)."),
        exclude: Optional[str] = typer.Option(None, help="Comma-separated slug substrings to skip."),
        tier: Optional[str] = typer.Option(None, help="Only cases whose datasets contain this value."),
        iterations: int = typer.Option(1, help="Fresh builds per case (pass@k / pass^k)."),
        backend: str = typer.Option("process", help="process, docker, kubernetes or static."),
        lanes: int = typer.Option(2, help="Lanes to bring up (static: how many --base-url lanes to use)."),
        base_url: Optional[str] = typer.Option(None, help="Comma-separated lane URLs (static backend)."),
        profile: str = typer.Option("eval", help="Env profile from lanes/profiles/."),
        env: list[str] = typer.Option([], "--env", help="KEY=VALUE for every lane (repeatable)."),
        concurrency: Optional[int] = typer.Option(None, help="Global cap on concurrent builds (default lanes × 2)."),
        per_lane_builds: int = typer.Option(4, help="Cap on concurrent builds per lane."),
        timeout_ms: int = typer.Option(900_000, help="Verification budget per unit (complex cases × 1.5)."),
        build_timeout_ms: int = typer.Option(1_800_000, help="Wall-clock cap per claude attempt; 0 disables."),
        build_max_attempts: int = typer.Option(3, help="Attempts per unit when claude prints no workflow id."),
        build_mcp_timeout_ms: int = typer.Option(120_000, help="MCP_TIMEOUT for claude: one MCP tool call."),
        mcp_server: str = typer.Option("n8n-local", help="MCP server name in the staged claude config."),
        build_cwd: Optional[Path] = typer.Option(None, help="Working directory for claude."),
        output_dir: Optional[Path] = typer.Option(None, help="Where results go (default results/<run-id>)."),
        keep_workflows: bool = typer.Option(False, help="Keep built workflows and build users."),
        experiment_name: Optional[str] = typer.Option(None, help="Experiment name (LangSmith)."),
        dataset: Optional[str] = typer.Option(None, help="LangSmith dataset."),
        baseline: Optional[Path] = typer.Option(None, help="A baseline eval-results.json to compare against."),
        baseline_prefix: str = typer.Option("instance-ai-baseline-", help="LangSmith baseline experiment prefix."),
        max_cost_usd: Optional[float] = typer.Option(None, help="Stop starting builds once this much was spent."),
        metrics_port: Optional[int] = typer.Option(None, help="Serve Prometheus /metrics on 127.0.0.1:PORT."),
        pushgateway: Optional[str] = typer.Option(None, help="Push metrics to this Pushgateway at the end."),
        resume: Optional[str] = typer.Option(None, help="Re-run only the unfinished units of this run id."),
        run_id: Optional[str] = typer.Option(None, help="Run id (default: a new one)."),
        state_dir: Path = typer.Option(default_state_dir(), help="Where ledgers and unit logs live."),
        seed: int = typer.Option(0, help="Allocator seed (deterministic schedule)."),
        email: Optional[str] = typer.Option(None, envvar="N8N_EVAL_EMAIL", help="Owner email of static lanes."),
        password: Optional[str] = typer.Option(None, envvar="N8N_EVAL_PASSWORD", help="Owner password of static lanes.", show_default=False),
        model_server: str = typer.Option("auto", help="auto (real if ANTHROPIC_API_KEY is set), real, or scripted (embedded offline model)."),
        outage_waits: str = typer.Option("30,90", help="Seconds to wait before each provider-outage retry."),
    ) -> None:
        """Build every selected case on the lanes with claude via MCP, verify it there, write results, tear down."""
        try:
            waits = tuple(float(w) for w in outage_waits.split(",") if w.strip())
        except ValueError:
            from orchestrator.errors import ConfigError

            raise ConfigError(f"--outage-waits: expected comma-separated seconds, got {outage_waits!r}") from None
        cfg = RunConfig(
            cases_paths=list(cases) if cases else [Path("cases")], source=source, suite=suite, filter=filter,
            exclude=exclude, tier=tier, iterations=iterations, backend=backend, lanes=lanes, base_url=base_url,
            profile=profile, env=list(env), concurrency=concurrency, per_lane_builds=per_lane_builds,
            timeout_ms=timeout_ms, build_timeout_ms=build_timeout_ms, build_max_attempts=build_max_attempts,
            build_mcp_timeout_ms=build_mcp_timeout_ms, mcp_server=mcp_server, build_cwd=build_cwd,
            output_dir=output_dir, keep_workflows=keep_workflows, experiment_name=experiment_name, dataset=dataset,
            baseline=baseline, baseline_prefix=baseline_prefix, max_cost_usd=max_cost_usd, metrics_port=metrics_port,
            pushgateway=pushgateway, resume=resume, run_id=run_id, state_dir=state_dir, seed=seed, email=email,
            password=password, model_server=model_server, outage_waits_s=waits,
        )
        outcome = run_async(run(cfg, default_hooks(cfg)))
        summary = outcome.results.summary
        if summary is not None:
            rate = f"{summary.pass_rate.rate:.0%}" if summary.pass_rate else "n/a"
            console.print(
                f"[bold]{outcome.run_id}[/bold]: {summary.units_finished}/{summary.units_total} units, "
                f"pass rate {rate} ({summary.passed_trials}/{summary.trials} trials), "
                f"cost ${summary.build_cost_usd:.4f}, turns {summary.build_turns}"
                + (f", stopped: {summary.stopped_reason}" if summary.stopped_reason else "")
            )
        console.print(f"results: {outcome.results_path}")
        for failure in outcome.cleanup_failures:
            console.print(f"[red]cleanup failed:[/red] {failure}")
        for error in outcome.errors:
            console.print(f"[red]error:[/red] {error}")
        if outcome.errors or outcome.cleanup_failures:
            raise typer.Exit(1)
