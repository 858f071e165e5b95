"""``orchestrator cleanup``: sweep leftovers of crashed or interrupted runs.

Plain ``cleanup`` works from this machine's ledgers and never sweeps a Kubernetes namespace (another
run may be alive there). A backend with a janitor of its own runs it instead when its flags ask
(``cleanup --kubernetes``: in one namespace, delete the lane objects of runs whose orchestrator
Pod/Job is gone or ended, past ``--grace-seconds``, never a live run's — what the chart's janitor
CronJob runs) or ``--backend`` names it. The backends contribute their own flags (the static lanes'
owner, the janitor's): :func:`orchestrator.plugin_flags.cleanup_flags`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from orchestrator.cleanup import cleanup
from orchestrator.cli.common import run_async
from orchestrator.cli.plugin_params import with_flags
from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import available_backends, get_backend
from orchestrator.ledger import default_state_dir, run_dir
from orchestrator.plugin_flags import cleanup_flags, cleanup_options

console = Console(stderr=True)


def register(app: typer.Typer) -> None:
    @app.command("cleanup")
    @with_flags(cleanup_flags(), into="given")
    def cleanup_command(
        run_id: Optional[str] = typer.Option(None, help="One run (default: every run in the state dir)."),
        backend: list[str] = typer.Option([], "--backend", help="Sweep only these backends (repeatable)."),
        state_dir: Path = typer.Option(default_state_dir(), help="Where ledgers live."),
        given: Optional[dict[str, Any]] = None,
    ) -> None:
        """Tear down lanes and delete users/credentials/workflows recorded in ledgers; sweep by label."""
        for name in backend:
            if name not in available_backends():
                raise ConfigError(f"--backend: unknown backend {name!r}; choose one of {', '.join(available_backends())}")
        options = cleanup_options(given or {}, os.environ, named=backend)
        janitors = [name for name, opts in options.items()
                    if type(opts).has_janitor and (opts.asks_for_janitor() or name in backend)]
        if janitors:
            failures = sum(get_backend(name).janitor(options[name], run_id, say=console.print) for name in janitors)
            backend = [b for b in backend if b not in janitors]
            if not backend:
                if failures:
                    raise typer.Exit(1)
                return
        if run_id and not run_dir(state_dir, run_id).is_dir():
            raise ConfigError(f"--run-id: no run {run_id!r} under {state_dir / 'runs'} (a run in a cluster: its backend's janitor, in cleanup --help)")
        report = run_async(cleanup(state_dir, run_id, list(backend) or None, options=options))
        for item in report.skipped:
            console.print(f"[yellow]{item}[/yellow]")
        for item in report.removed:
            console.print(f"removed {item}")
        for failure in report.failures:
            console.print(f"[red]failed:[/red] {failure}")
        console.print(f"cleanup: {len(report.removed)} removed, {len(report.failures)} failed")
        if report.failures:
            raise typer.Exit(1)
