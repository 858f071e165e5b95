"""``orchestrator lanes``: install the toolchain, bring a pool up, show it, take it down."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any, Optional

import httpx
import typer
from rich.console import Console
from rich.table import Table

from orchestrator.cli.common import new_run_id, positive, run_async
from orchestrator.cli.plugin_params import with_flags
from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import DEFAULT_BACKEND, LaneError, available_backends, get_backend, readiness_status
from orchestrator.lanes.bringup import bring_up, make_owner, teardown_pool
from orchestrator.lanes.model import Lane, LaneState
from orchestrator.lanes.pool import lane_from_entry, make_spec
from orchestrator.ledger import Ledger, all_runs, default_state_dir, run_dir
from orchestrator.plugin_flags import backend_flags
from orchestrator.toolchain import InstallError, ensure_toolchain

app = typer.Typer(no_args_is_help=True, help="Provision, inspect and tear down n8n lane pools.")
console = Console(stderr=True)


@app.command("install")
def install(
    skip_claude: bool = typer.Option(False, help="Install only n8n and Node 24."),
) -> None:
    """Install the pinned n8n, Node 24 and claude CLI into the cache (idempotent)."""
    try:
        tc = ensure_toolchain(claude=not skip_claude, log=lambda m: console.print(f"[dim]{m}[/dim]"))
    except InstallError as exc:
        raise ConfigError(str(exc)) from None
    console.print(f"n8n {tc.n8n_version} ready: {tc.n8n_entry}")


@app.command("up")
@with_flags(backend_flags(), into="given")
def up(
    backend: str = typer.Option(DEFAULT_BACKEND, help=f"Lane backend: {', '.join(available_backends())}."),
    count: int = typer.Option(1, "--count", "-n", help="How many lanes."),
    profile: str = typer.Option("eval", help="Env profile from lanes/profiles/."),
    env: list[str] = typer.Option([], "--env", help="KEY=VALUE override for every lane (repeatable)."),
    run_id: Optional[str] = typer.Option(None, help="Run id (default: a new one)."),
    state_dir: Path = typer.Option(default_state_dir(), help="Where ledgers live."),
    retries: int = typer.Option(1, help="Replacements per lane that fails to come up."),
    given: Optional[dict[str, Any]] = None,
) -> None:
    """Bring up COUNT lanes, seed their owners, and leave them running (Ctrl-C tears them down)."""
    positive(count, "--count")
    positive(retries, "--retries", allow_zero=True)
    rid = run_id or new_run_id()
    try:
        run_async(_up(backend, count, profile, env, rid, state_dir, given or {}, retries))
    except asyncio.CancelledError:
        console.print(f"[yellow]interrupted: the lanes of run {rid} were torn down[/yellow]")
        raise typer.Exit(130) from None


async def _up(backend_name: str, count: int, profile: str, env: list[str], run_id: str, state_dir: Path,
              given: dict[str, Any], retries: int) -> None:
    # Handlers, not KeyboardInterrupt: a SIGINT disposition inherited as "ignored" (background
    # jobs, CI) would otherwise leave lanes up; SIGTERM (a pod being stopped) gets the same path.
    loop, main = asyncio.get_running_loop(), asyncio.current_task()
    assert main is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, main.cancel)
    spec = make_spec(profile, env)
    ledger = Ledger.for_run(run_id, state_dir)
    backend_cls = get_backend(backend_name)
    flags, fields = backend_flags(), backend_cls.options_model.model_fields  # the backend's own flags, as given
    options = {k: v for k, v in given.items() if k in fields and v is not None and v != flags[k].default}
    backend = backend_cls(run_id, ledger, state_dir, **options)
    if backend_cls.needs_local_n8n:
        await asyncio.to_thread(ensure_toolchain, claude=False, log=lambda m: console.print(f"[dim]{m}[/dim]"))
    try:
        result = await bring_up(backend, count, spec, make_owner(run_id, backend.owner_password), retries=retries)
    except LaneError as exc:
        raise ConfigError(f"lanes up (run {run_id}): {exc}") from None
    finally:
        await backend.close()
    for failure in result.failures:
        console.print(f"[yellow]lane failed:[/yellow] {failure}")
    _print_lanes(result.lanes)
    console.print(f"run id: [bold]{run_id}[/bold]  (orchestrator lanes down --run-id {run_id})")
    print(json.dumps({"run_id": run_id, "lanes": [l.base_url for l in result.lanes]}))


def _print_lanes(lanes: list[Lane]) -> None:
    table = Table("lane", "URL", "backend", "state", "uptime")
    for lane in lanes:
        table.add_row(lane.lane_id, lane.base_url, lane.backend, lane.state.value, f"{lane.uptime_s:.0f} s")
    Console().print(table)


async def _probe(lane: Lane) -> None:
    async with httpx.AsyncClient(timeout=3.0) as http:
        status = await readiness_status(http, lane.base_url)
    lane.state = LaneState.ready if status == 200 else LaneState.starting if isinstance(status, int) else LaneState.dead


def _open_lanes(run_id: str | None, state_dir: Path) -> list[Lane]:
    ledgers = [Ledger.for_run(run_id, state_dir)] if run_id else all_runs(state_dir)
    return [lane_from_entry(l.run_id, e) for l in ledgers for e in l.open_entries("lane")]


@app.command("status")
def status(
    run_id: Optional[str] = typer.Option(None, help="One run (default: every run with open lanes)."),
    state_dir: Path = typer.Option(default_state_dir(), help="Where ledgers live."),
) -> None:
    """Table of open lanes: lane, URL, state (probed now), uptime."""
    lanes = _open_lanes(run_id, state_dir)

    async def probe_all() -> None:
        await asyncio.gather(*(_probe(l) for l in lanes))

    run_async(probe_all())
    if not lanes:
        console.print("no open lanes")
        return
    _print_lanes(lanes)


@app.command("down")
def down(
    run_id: str = typer.Option(..., help="The run whose lanes to tear down."),
    state_dir: Path = typer.Option(default_state_dir(), help="Where ledgers live."),
) -> None:
    """Tear down every open lane of RUN_ID (by ledger), then sweep its leftovers by label."""
    if not run_dir(state_dir, run_id).is_dir():
        raise ConfigError(f"--run-id: no run {run_id!r} under {state_dir / 'runs'}")
    failures = run_async(_down(run_id, state_dir))
    if failures:
        for f in failures:
            console.print(f"[red]{f}[/red]")
        raise typer.Exit(1)
    console.print(f"run {run_id}: lanes down")


async def _down(run_id: str, state_dir: Path) -> list[str]:
    ledger = Ledger.for_run(run_id, state_dir)
    lanes = [lane_from_entry(run_id, e) for e in ledger.open_entries("lane")]
    failures: list[str] = []
    for name in sorted({l.backend for l in lanes}):
        backend = get_backend(name)(run_id, ledger, state_dir)
        try:
            failures += await teardown_pool(backend, [l for l in lanes if l.backend == name])
            await backend.sweep(run_id)
        finally:
            await backend.close()
    return failures
