"""``orchestrator compare RESULTS BASELINE``: tier every shared unit, print a console summary and
write ``eval-pr-comment.md`` and ``comparison.json``. Reporting only: it always exits 0."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from orchestrator.compare.comparison import compare, comparison_dict
from orchestrator.compare.console import print_comparison
from orchestrator.compare.load import load_results
from orchestrator.compare.pr_comment import render_pr_comment, write_pr_comment
from orchestrator.errors import UserError
from orchestrator.redact import redact

COMPARISON_FILENAME = "comparison.json"


def compare_command(
    results: Path = typer.Argument(..., metavar="RESULTS", help="eval-results.json of the run under test."),
    baseline: Path = typer.Argument(..., metavar="BASELINE", help="eval-results.json of the baseline run."),
    output_dir: Path | None = typer.Option(
        None, "--output-dir", help="Where to write eval-pr-comment.md and comparison.json (default: RESULTS' folder)."
    ),
) -> None:
    """Compare a run against a baseline run (Fisher tiers + Benjamini–Hochberg view)."""
    current = load_results(results, role="RESULTS")
    base = load_results(baseline, role="BASELINE")
    out_dir = output_dir if output_dir is not None else results.parent
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--output-dir is not a directory: {out_dir}")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--output-dir cannot be created: {out_dir}: {exc.strerror}") from None

    comparison = compare(current, base)
    comment = write_pr_comment(out_dir, render_pr_comment(current, comparison, base))
    data_path = out_dir / COMPARISON_FILENAME
    data_path.write_text(redact(json.dumps(comparison_dict(comparison), indent=2)) + "\n", encoding="utf-8")

    console = Console(soft_wrap=True)
    print_comparison(console, comparison)
    console.print(f"wrote {comment} and {data_path}")


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_command)
