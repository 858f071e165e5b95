"""``orchestrator ab``: one pipeline run per arm (model and/or lane env), then ``ab-report.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from orchestrator.cli.common import run_async
from orchestrator.errors import ConfigError
from orchestrator.experiments.ab import Arm, check_mode, default_experiment, new_ab_id, parse_arms, run_arms
from orchestrator.experiments.ab_report import ArmData, write_ab_report
from orchestrator.ledger import default_state_dir
from orchestrator.run.config import RunConfig

console = Console(stderr=True)


def _hooks_for(cfg: RunConfig) -> list:
    from orchestrator.experiments.langsmith_sync import default_hooks

    return default_hooks(cfg)


def register(app: typer.Typer) -> None:
    @app.command("ab")
    def ab_command(
        cases: list[Path] = typer.Argument(None, help="Case files or directories (default: cases/)."),
        arm: list[str] = typer.Option([], "--arm", help="NAME=MODEL, e.g. control=anthropic/claude-sonnet-4-6 (≥ 2)."),
        arm_env: list[str] = typer.Option([], "--arm-env", help="ARM=KEY=VALUE lane env for one arm (repeatable)."),
        mode: str = typer.Option("separate", help="separate (a lane pool per arm, arms in turn) or interleaved."),
        source: str = typer.Option("disk", help="disk or langtracer."),
        suite: Optional[str] = typer.Option(None, help="LangTracer suite (with --source langtracer)."),
        filter: Optional[str] = typer.Option(None, "--filter", help="Comma-separated slug substrings (OR)."),
        exclude: Optional[str] = typer.Option(None, help="Comma-separated slug substrings to skip."),
        tier: Optional[str] = typer.Option(None, help="Only cases whose datasets contain this value."),
        iterations: int = typer.Option(1, help="Fresh builds per case and arm (the pairs per scoring unit)."),
        backend: str = typer.Option("process", help="process, docker, kubernetes or static."),
        lanes: int = typer.Option(2, help="Lanes per arm."),
        base_url: Optional[str] = typer.Option(None, help="Comma-separated lane URLs (static backend)."),
        profile: str = typer.Option("eval", help="Env profile from lanes/profiles/."),
        env: list[str] = typer.Option([], "--env", help="KEY=VALUE for every lane of every arm (repeatable)."),
        concurrency: Optional[int] = typer.Option(None, help="Global cap on concurrent builds per arm (default lanes × 2)."),
        per_lane_builds: int = typer.Option(4, help="Cap on concurrent builds per lane."),
        timeout_ms: int = typer.Option(900_000, help="Verification budget per unit (complex cases × 1.5)."),
        build_timeout_ms: int = typer.Option(1_800_000, help="Wall-clock cap per claude attempt; 0 disables."),
        build_max_attempts: int = typer.Option(3, help="Attempts per unit when claude prints no workflow id."),
        build_mcp_timeout_ms: int = typer.Option(120_000, help="MCP_TIMEOUT for claude: one MCP tool call."),
        mcp_server: str = typer.Option("n8n-local", help="MCP server name in the staged claude config."),
        build_cwd: Optional[Path] = typer.Option(None, help="Working directory for claude."),
        output_dir: Optional[Path] = typer.Option(None, help="Where results go: <dir>/<arm>/ and <dir>/ab-report.md (default results/<ab-id>)."),
        keep_workflows: bool = typer.Option(False, help="Keep built workflows and build users."),
        experiment_name: Optional[str] = typer.Option(None, help="Experiment name; each arm records <name>-<arm>."),
        dataset: Optional[str] = typer.Option(None, help="LangSmith dataset."),
        baseline: Optional[Path] = typer.Option(None, help="A baseline eval-results.json every arm is compared against."),
        baseline_prefix: str = typer.Option("instance-ai-baseline-", help="LangSmith baseline experiment prefix."),
        max_cost_usd: Optional[float] = typer.Option(None, help="Spend cap per arm."),
        metrics_port: Optional[int] = typer.Option(None, help="Serve Prometheus /metrics on 127.0.0.1:PORT (per arm, in turn)."),
        pushgateway: Optional[str] = typer.Option(None, help="Push each arm's metrics to this Pushgateway."),
        run_id: Optional[str] = typer.Option(None, help="A/B id (default: a new one); arm runs are <id>-<arm>."),
        state_dir: Path = typer.Option(default_state_dir(), help="Where ledgers and unit logs live."),
        seed: int = typer.Option(0, help="Allocator seed (the same schedule for every arm)."),
        email: Optional[str] = typer.Option(None, envvar="N8N_EVAL_EMAIL", help="Owner email of static lanes."),
        password: Optional[str] = typer.Option(None, envvar="N8N_EVAL_PASSWORD", help="Owner password of static lanes.", show_default=False),
        model_server: str = typer.Option("auto", help="auto (real if ANTHROPIC_API_KEY is set), real, or scripted."),
        outage_waits: str = typer.Option("30,90", help="Seconds to wait before each provider-outage retry."),
    ) -> None:
        """Run the selection once per arm (own lanes, experiment and output folder), then write
        ab-report.md / ab-report.json: verdict pairs, exact McNemar per case and overall, pass rates, cost."""
        arms: list[Arm] = parse_arms(list(arm), list(arm_env))
        check_mode(mode)
        try:
            waits = tuple(float(w) for w in outage_waits.split(",") if w.strip())
        except ValueError:
            raise ConfigError(f"--outage-waits: expected comma-separated seconds, got {outage_waits!r}") from None
        base = RunConfig(
            cases_paths=list(cases) if cases else [Path("cases")], source=source, suite=suite, filter=filter,
            exclude=exclude, tier=tier, iterations=iterations, backend=backend, lanes=lanes, base_url=base_url,
            profile=profile, env=list(env), concurrency=concurrency, per_lane_builds=per_lane_builds,
            timeout_ms=timeout_ms, build_timeout_ms=build_timeout_ms, build_max_attempts=build_max_attempts,
            build_mcp_timeout_ms=build_mcp_timeout_ms, mcp_server=mcp_server, build_cwd=build_cwd,
            keep_workflows=keep_workflows, experiment_name=experiment_name, dataset=dataset, baseline=baseline,
            baseline_prefix=baseline_prefix, max_cost_usd=max_cost_usd, metrics_port=metrics_port,
            pushgateway=pushgateway, state_dir=state_dir, seed=seed, email=email, password=password,
            model_server=model_server, outage_waits_s=waits,
        ).validate()
        ab_id = run_id or new_ab_id()
        root = output_dir or Path("results") / ab_id
        experiment = default_experiment(base)

        def announce(a: Arm, cfg: RunConfig) -> None:
            extra = f", env {', '.join(a.env)}" if a.env else ""
            console.print(f"[bold]arm {a.name}[/bold]: model {a.model}{extra}, build model {cfg.build_model} → {cfg.output_dir}")

        done = run_async(run_arms(base, arms, ab_id=ab_id, experiment_name=experiment, output_root=root,
                                  hooks_for=_hooks_for, on_arm=announce))
        data = [ArmData(r.arm.name, r.arm.model, r.arm.env, r.cfg.experiment_name, r.results, r.outcome.results_path)
                for r in done]
        failed = False
        for r in done:
            summary = r.results.summary
            if summary is not None:
                rate = f"{summary.pass_rate.rate:.0%}" if summary.pass_rate else "n/a"
                console.print(f"arm [bold]{r.arm.name}[/bold] ({r.outcome.run_id}): {summary.units_finished}/"
                              f"{summary.units_total} units, pass rate {rate} ({summary.passed_trials}/{summary.trials}"
                              f" trials), cost ${summary.build_cost_usd:.4f} → {r.outcome.results_path}")
            for failure in r.outcome.cleanup_failures:
                console.print(f"[red]arm {r.arm.name}: cleanup failed:[/red] {failure}")
            for error in r.outcome.errors:
                console.print(f"[red]arm {r.arm.name}: error:[/red] {error}")
            failed = failed or bool(r.outcome.errors or r.outcome.cleanup_failures)
        if len(data) < len(arms):
            console.print(f"[yellow]only {len(data)} of {len(arms)} arm(s) ran[/yellow]")
        if len(data) >= 2:
            md, js = write_ab_report(root, ab_id, mode, data)
            console.print(f"A/B report: {md} ({js.name})")
        if failed or len(data) < len(arms):
            raise typer.Exit(1)
