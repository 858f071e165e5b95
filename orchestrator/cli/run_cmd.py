"""``orchestrator run``: the main job."""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.console import Console

from orchestrator.cli.common import run_async
from orchestrator.cli.run_options import run_options
from orchestrator.compare.gate import run_gate
from orchestrator.results.model import UnitResult
from orchestrator.run.config import RunConfig
from orchestrator.run.resolve import preflight, resolve

#: exit code of a run whose gated tier's gate is red (a failed check, like a failed run)
GATE_RED_EXIT = 1


def gate_exit_code(gate: dict[str, Any] | None) -> int:
    """A gated tier's PR verdict is its absolute gate: red → :data:`GATE_RED_EXIT`; else 0."""
    return GATE_RED_EXIT if gate is not None and not gate["green"] else 0

console = Console(stderr=True)


def register(app: typer.Typer) -> None:
    @app.command("run")
    @run_options
    def run_command(
        cfg: RunConfig,
        resume: Optional[str] = typer.Option(None, help="Re-run only the unfinished units of this run id."),
        resume_existing: bool = typer.Option(
            False, "--resume-existing",
            help="With --run-id: resume that run if the state dir holds it (a replaced orchestrator pod), else start it."),
        verbose: bool = typer.Option(False, "--verbose", "-v",
                                     help="Log build/execute/verify timing and events; two lines per unit."),
    ) -> None:
        """Build every selected case on the lanes with claude via MCP, verify it there, write results, tear down."""
        from orchestrator.cli.main import configure_logging

        if verbose:
            configure_logging(True)
        resolved = resolve(cfg.replace(resume=resume, resume_existing=resume_existing, verbose=verbose))
        run_async(preflight(resolved))  # after --resume: the selection it will run is the one checked
        cfg = resolved.config
        # only now (seconds of imports): a flag error above answers at once
        from orchestrator.experiments.langsmith_sync import default_hooks
        from orchestrator.results.console import summary_lines, unit_line
        from orchestrator.run.pipeline import Run, RunHooks

        class ConsoleLines(RunHooks):
            async def on_unit(self, unit: UnitResult) -> None:
                console.print(unit_line(unit, verbose=verbose), markup=False, highlight=False)

        hooks = [ConsoleLines(), *default_hooks(cfg)]
        outcome = run_async(Run(resolved, hooks).execute())
        summary = outcome.results.summary
        for line in summary_lines(outcome.results):
            console.print(line, markup=False, highlight=False)
        if summary is not None:
            rate = f"{summary.pass_rate.rate:.0%}" if summary.pass_rate else "n/a"
            gateway = outcome.results.config.get("model_gateway_status")
            spent = gateway.get("cost_usd") if isinstance(gateway, dict) else None
            every_call = f" (every model call ${spent:.4f})" if isinstance(spent, (int, float)) else ""
            console.print(
                f"[bold]{outcome.run_id}[/bold]: {summary.units_finished}/{summary.units_total} units, "
                f"pass rate {rate} ({summary.passed_trials}/{summary.trials} trials), "
                f"build cost ${summary.build_cost_usd:.4f}{every_call}, turns {summary.build_turns}"
                + (f", stopped: {summary.stopped_reason}" if summary.stopped_reason else "")
            )
        console.print(f"results: {outcome.results_path}")
        for note in outcome.notes:
            console.print(note, markup=False, highlight=False)
        failures = list(outcome.cleanup_failures)
        for failure in failures:
            console.print(f"[red]cleanup failed:[/red] {failure}")
        for error in outcome.errors:
            console.print(f"[red]error:[/red] {error}")
        gate = run_gate(outcome.results)
        if gate is not None:
            verdict = "green" if gate["green"] else f"red: {len(gate['failing'])} unit(s) never passed"
            console.print(f"gate ({outcome.results.config.get('tier')}): {verdict}")
        if outcome.errors or failures:
            raise typer.Exit(1)
        if code := gate_exit_code(gate):
            raise typer.Exit(code)

