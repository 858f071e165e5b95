"""``orchestrator cases``: list and validate evaluation cases."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.cases import (
    CASE_SOURCES,
    CaseIssue,
    CaseLoadError,
    LoadedCase,
    load_disk,
    load_selected,
)
from orchestrator.errors import UserError
from orchestrator.redact import redact

app = typer.Typer(no_args_is_help=True, help="List and validate evaluation cases.")

_FILTER_HELP = "Keep cases whose slug contains any of these comma-separated substrings."
_EXCLUDE_HELP = "Drop cases whose slug contains any of these substrings (after --filter)."
_SOURCE_HELP = f"Where cases come from: {', '.join(CASE_SOURCES)}."
_SUITE_HELP = "LangTracer suite slug or id (with --source langtracer)."
_NUMERIC_COLUMNS = ("scenarios", "expectations")
_TIER_HELP = "Keep cases whose datasets include this value (e.g. pr, smoke)."


def _print_issues(issues: list[CaseIssue]) -> None:
    for issue in issues:
        typer.echo(str(issue))


def _seed_label(loaded: LoadedCase) -> str:
    seed = loaded.case.seed
    return "-" if seed is None else seed.mode


@app.command("list")
def list_cases(
    paths: list[Path] = typer.Argument(None, help="Case files or directories (default: ./cases)."),
    filter: str | None = typer.Option(None, "--filter", help=_FILTER_HELP),
    exclude: str | None = typer.Option(None, "--exclude", help=_EXCLUDE_HELP),
    tier: str | None = typer.Option(None, "--tier", help=_TIER_HELP),
    source: str = typer.Option("disk", "--source", help=_SOURCE_HELP),
    suite: str | None = typer.Option(None, "--suite", help=_SUITE_HELP),
) -> None:
    """Show the selected cases as a table."""
    import asyncio  # only here: `cases validate` starts without it

    try:
        cases = asyncio.run(
            load_selected(source, paths or None, suite, filter=filter, exclude=exclude, tier=tier)
        )
    except UserError as exc:  # same one-line form as the root CLI, also when mounted elsewhere
        typer.echo(f"error: {redact(str(exc))}", err=True)
        raise typer.Exit(2) from None
    except CaseLoadError as exc:
        _print_issues(exc.issues)
        typer.echo(f"{len(exc.issues)} error(s): fix them before listing", err=True)
        raise typer.Exit(1) from None
    table = Table(title=f"{len(cases)} case(s)")
    for column in ("slug", "complexity", "tags", "datasets", "seed", "scenarios", "expectations"):
        table.add_column(column, justify="right" if column in _NUMERIC_COLUMNS else "left")
    for loaded in cases:
        case = loaded.case
        table.add_row(
            escape(loaded.slug),
            case.complexity,
            escape(", ".join(case.tags)),
            escape(", ".join(case.datasets)),
            _seed_label(loaded),
            str(len(case.execution_scenarios)),
            str(case.expectation_count),
        )
    Console(width=160).print(table)


@app.command("validate")
def validate(
    paths: list[Path] = typer.Argument(..., help="Case files or directories to check."),
) -> None:
    """Check every case file; print one line per problem as ``file: field.path: message``."""
    cases, issues = load_disk(paths)
    _print_issues(issues)
    invalid = len({issue.source for issue in issues})
    typer.echo(
        f"{len(cases) + invalid} file(s) checked: {len(cases)} valid, {invalid} invalid "
        f"({len(issues)} error(s))"
    )
    if issues:
        raise typer.Exit(1)
