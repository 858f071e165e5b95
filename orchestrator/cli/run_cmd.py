"""``orchestrator run``: the main job."""

from __future__ import annotations

from typing import Optional

import typer
from rich.console import Console

from orchestrator.cli.common import run_async
from orchestrator.experiments.langsmith_sync import default_hooks
from orchestrator.cli.run_options import run_options
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import run

console = Console(stderr=True)


def register(app: typer.Typer) -> None:
    @app.command("run")
    @run_options
    def run_command(
        cfg: RunConfig,
        resume: Optional[str] = typer.Option(None, help="Re-run only the unfinished units of this run id."),
    ) -> None:
        """Build every selected case on the lanes with claude via MCP, verify it there, write results, tear down."""
        cfg.resume = resume
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
