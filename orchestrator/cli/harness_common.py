"""What the harness commands share: their default case folder, the per-unit console line, and
how a finished harness run ends (exit 1 on a run error or anything left open, as ``run`` does)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from orchestrator.results.model import UnitResult
from orchestrator.run.config import RunConfig

if TYPE_CHECKING:
    from orchestrator.run.pipeline import RunHooks

console = Console(stderr=True)


def default_cases(cfg: RunConfig, folder: Path) -> RunConfig:
    """No CASES argument given (``run_options`` then names ``cases/``): the harness's own folder."""
    return cfg.replace(cases_paths=[folder]) if cfg.cases_paths == [Path("cases")] else cfg


def console_hooks(verbose: bool) -> list[RunHooks]:
    """One line per finished unit, as ``orchestrator run`` prints it."""
    from orchestrator.results.console import unit_line
    from orchestrator.run.pipeline import RunHooks

    class ConsoleLines(RunHooks):
        async def on_unit(self, unit: UnitResult) -> None:
            console.print(unit_line(unit, verbose=verbose), markup=False, highlight=False)

    return [ConsoleLines()]


def end_of_run(outcome: object, *, failed: bool = False) -> None:
    """Errors and clean-up failures are printed; they (or ``failed``: the harness's own exit rule)
    end the command with exit code 1."""
    errors = list(getattr(outcome, "errors", []) or [])
    leftovers = list(getattr(outcome, "cleanup_failures", []) or [])
    for failure in leftovers:
        console.print(f"[red]cleanup failed:[/red] {failure}")
    for error in errors:
        console.print(f"[red]error:[/red] {error}")
    if errors or leftovers or failed:
        raise typer.Exit(1)
