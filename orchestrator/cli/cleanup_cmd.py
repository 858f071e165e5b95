"""``orchestrator cleanup``: sweep leftovers of crashed or interrupted runs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from orchestrator.cleanup import cleanup
from orchestrator.cli.common import run_async
from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import available_backends
from orchestrator.ledger import default_state_dir

console = Console(stderr=True)


def register(app: typer.Typer) -> None:
    @app.command("cleanup")
    def cleanup_command(
        run_id: Optional[str] = typer.Option(None, help="One run (default: every run in the state dir)."),
        backend: list[str] = typer.Option([], "--backend", help="Sweep only these backends (repeatable)."),
        state_dir: Path = typer.Option(default_state_dir(), help="Where ledgers live."),
        email: Optional[str] = typer.Option(None, envvar="N8N_EVAL_EMAIL", help="Owner email of static lanes."),
        password: Optional[str] = typer.Option(None, envvar="N8N_EVAL_PASSWORD", help="Owner password of static lanes.", show_default=False),
    ) -> None:
        """Tear down lanes and delete users/credentials/workflows recorded in ledgers; sweep by label."""
        for name in backend:
            if name not in available_backends():
                raise ConfigError(f"--backend: unknown backend {name!r}; choose one of {', '.join(available_backends())}")
        if run_id and not (state_dir / "runs" / run_id).is_dir():
            raise ConfigError(f"--run-id: no run {run_id!r} under {state_dir / 'runs'}")
        report = run_async(cleanup(state_dir, run_id, list(backend) or None, email=email, password=password))
        for item in report.removed:
            console.print(f"removed {item}")
        for failure in report.failures:
            console.print(f"[red]failed:[/red] {failure}")
        console.print(f"cleanup: {len(report.removed)} removed, {len(report.failures)} failed")
        if report.failures:
            raise typer.Exit(1)
