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


@app.command("push")
def push_cases(
    slugs: list[str] = typer.Argument(None, help="Exact case slugs to push."),
    suite: str = typer.Option(..., "--suite", help="Target LangTracer suite (slug or id)."),
    paths: list[Path] = typer.Option([Path("cases")], "--cases", help="Case directories (default: ./cases)."),
    changed: bool = typer.Option(False, "--changed", help="New, untracked, staged or modified case files (git)."),
    filter: str | None = typer.Option(None, "--filter", help=_FILTER_HELP),
    exclude: str | None = typer.Option(None, "--exclude", help=_EXCLUDE_HELP + " A modifier, not a selector."),
    tier: str | None = typer.Option(None, "--tier", help=_TIER_HELP),
    set_kind: str = typer.Option("regression", "--set-kind", help="regression or capability_gap (created cases)."),
    contains_user_data: bool = typer.Option(False, "--contains-user-data", help="Mark created cases as holding user data."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan without writing."),
) -> None:
    """Upsert disk cases into a LangTracer suite: create missing, update changed, leave unchanged."""
    import asyncio

    from orchestrator.cases.push import push, select_for_push

    try:
        selection = select_for_push(paths, slugs or (), changed=changed, filter=filter, exclude=exclude, tier=tier)
        for issue in selection.warnings:
            typer.echo(f"warning: skipped invalid file {issue}", err=True)
        if selection.missing:
            typer.echo(f"warning: no case file for: {', '.join(selection.missing)}", err=True)
        if selection.errors:
            _print_issues(selection.errors)
            typer.echo(f"{len(selection.errors)} error(s) in the named case(s): nothing pushed", err=True)
            raise typer.Exit(1)
        if not selection.cases:
            typer.echo("no cases selected: nothing to push")
            return
        result = asyncio.run(push(selection.cases, suite, dry_run=dry_run, set_kind=set_kind,
                                  synthetic=not contains_user_data))
    except UserError as exc:
        typer.echo(f"error: {redact(str(exc))}", err=True)
        raise typer.Exit(2) from None
    plan = result.plan
    typer.echo(f"suite {result.suite} (#{result.suite_id}): {'dry run' if dry_run else 'push'}")
    for label, names in (("create", [c.slug for c in plan.create]), ("update", [c.slug for _, c in plan.update]),
                         ("unchanged", [c.slug for c in plan.unchanged])):
        typer.echo(f"  {label:<9} {len(names)}" + (f"  ({', '.join(names)})" if names else ""))
    for slug, reason in plan.skipped:
        typer.echo(f"  refused   {slug}: {reason}")
    if not dry_run:
        typer.echo(f"done: {len(result.created)} created, {len(result.updated)} updated, "
                   f"{len(plan.unchanged)} unchanged, {len(plan.skipped)} skipped")
