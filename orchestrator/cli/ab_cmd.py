"""``orchestrator ab``: one pipeline run per arm (model and/or lane env), then ``ab-report.md``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from orchestrator.builders.builder import get_builder
from orchestrator.cli.common import run_async
from orchestrator.cli.run_options import run_options
from orchestrator.experiments.ab import (
    AB_BUILDER,
    Arm,
    check_arms_for_builder,
    check_mode,
    default_experiment,
    new_ab_id,
    parse_arms,
    run_arms,
)
from orchestrator.experiments.ab_report import ArmData, write_ab_report
from orchestrator.run.config import RunConfig

console = Console(stderr=True)


def _hooks_for(cfg: RunConfig) -> list:
    from orchestrator.experiments.langsmith_sync import default_hooks

    return default_hooks(cfg)


def register(app: typer.Typer) -> None:
    @app.command("ab")
    @run_options(builder=AB_BUILDER)  # an arm's model drives n8n's own agent unless --builder says otherwise
    def ab_command(
        cfg: RunConfig,
        arm: list[str] = typer.Option([], "--arm", help="NAME=MODEL, e.g. control=anthropic/claude-sonnet-4-6 (≥ 2)."),
        arm_env: list[str] = typer.Option([], "--arm-env", help="ARM=KEY=VALUE lane env for one arm (repeatable)."),
        arm_model_url: list[str] = typer.Option(
            [], "--arm-model-url", help="ARM=URL: where that arm's lanes send model calls (N8N_INSTANCE_AI_MODEL_URL; "
                                        "required for custom/… models)."),
        arm_model_key_env: list[str] = typer.Option(
            [], "--arm-model-key-env", help="ARM=VAR: the env var holding that arm's model key (default: by the "
                                            "model's provider prefix, e.g. openai/ → OPENAI_API_KEY)."),
        mode: str = typer.Option("separate", help="separate (a lane pool per arm, arms in turn) or interleaved."),
    ) -> None:
        """Run the selection once per arm (own lanes, experiment and output folder), then write
        ab-report.md / ab-report.json: verdict pairs, exact McNemar per case and overall, pass rates, cost."""
        arms: list[Arm] = parse_arms(list(arm), list(arm_env), list(arm_model_url), list(arm_model_key_env))
        check_mode(mode)
        run_id, output_dir = cfg.run_id, cfg.output_dir
        cfg.run_id = cfg.output_dir = None
        base = cfg.validate()
        check_arms_for_builder(arms, base.builder)
        ab_id = run_id or new_ab_id()
        root = output_dir or Path("results") / ab_id
        experiment = default_experiment(base)

        def announce(a: Arm, cfg: RunConfig) -> None:
            extra = f", env {', '.join(a.env)}" if a.env else ""
            extra += f", model URL {a.model_url}" if a.model_url else ""
            built_by = a.model if get_builder(cfg.builder).model_env else cfg.build_model  # the lanes' model builds
            console.print(f"[bold]arm {a.name}[/bold]: model {a.model}{extra}, builder {cfg.builder} "
                          f"(build model {built_by}) → {cfg.output_dir}")

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
