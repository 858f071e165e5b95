"""``orchestrator cleanup``: sweep leftovers of crashed or interrupted runs.

Plain ``cleanup`` works from this machine's ledgers and never sweeps a Kubernetes namespace (another
run may be alive there). ``cleanup --kubernetes`` runs the janitor instead: in one namespace, it
deletes the lane objects of runs whose orchestrator Pod/Job is gone or ended (past
``--grace-seconds``) and never a live run's — what the chart's janitor CronJob runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from orchestrator.cleanup import JANITOR_BACKEND, cleanup, janitor_pass
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
        kubernetes: bool = typer.Option(False, "--kubernetes", help="Run the Kubernetes janitor: delete lane objects of runs whose orchestrator is gone or ended, never a live run's."),
        namespace: Optional[str] = typer.Option(None, help="--kubernetes: the namespace (default: POD_NAMESPACE, the kubeconfig's)."),
        context: Optional[str] = typer.Option(None, help="--kubernetes: the kubeconfig context."),
        grace_seconds: float = typer.Option(300.0, help="--kubernetes: how long an ended orchestrator's lanes are kept."),
        lease_grace_seconds: float = typer.Option(
            60.0, help="--kubernetes: how long the janitor itself must see a run's Lease expired and unrenewed, with "
                       "its own API calls answered, before the run is dead (at least the Lease's TTL)."),
        dry_run: bool = typer.Option(False, help="--kubernetes: only say which runs are dead."),
    ) -> None:
        """Tear down lanes and delete users/credentials/workflows recorded in ledgers; sweep by label."""
        for name in backend:
            if name not in available_backends():
                raise ConfigError(f"--backend: unknown backend {name!r}; choose one of {', '.join(available_backends())}")
        if grace_seconds < 0:
            raise ConfigError(f"--grace-seconds: must be ≥ 0, got {grace_seconds}")
        if lease_grace_seconds < 0:
            raise ConfigError(f"--lease-grace-seconds: must be ≥ 0, got {lease_grace_seconds}")
        if kubernetes or JANITOR_BACKEND in backend:
            failures = janitor_pass(namespace, context, run_id, grace_seconds, dry_run, say=console.print,
                                    lease_grace_s=lease_grace_seconds)
            rest = [b for b in backend if b != JANITOR_BACKEND]
            if not rest:
                if failures:
                    raise typer.Exit(1)
                return
            backend = rest
        if run_id and not (state_dir / "runs" / run_id).is_dir():
            raise ConfigError(f"--run-id: no run {run_id!r} under {state_dir / 'runs'} (a run in a cluster: add --kubernetes)")
        report = run_async(cleanup(state_dir, run_id, list(backend) or None, email=email, password=password))
        for item in report.skipped:
            console.print(f"[yellow]{item}[/yellow]")
        for item in report.removed:
            console.print(f"removed {item}")
        for failure in report.failures:
            console.print(f"[red]failed:[/red] {failure}")
        console.print(f"cleanup: {len(report.removed)} removed, {len(report.failures)} failed")
        if report.failures:
            raise typer.Exit(1)
