"""``orchestrator cost-report RESULTS...``: cost per green iteration by cohort (one per file), and what
each stage cost, as markdown on stdout (and in ``--out``)."""

from __future__ import annotations

from pathlib import Path

import typer

from orchestrator.errors import UserError
from orchestrator.results.cost_report import load_cohort, render_markdown


def cost_report_command(
    results: list[Path] = typer.Argument(..., metavar="RESULTS...", help="eval-results.json files, one per cohort."),
    label: list[str] = typer.Option([], "--label", help="A cohort's label, in the order of RESULTS (default: its "
                                    "experiment name)."),
    out: Path | None = typer.Option(None, "--out", help="Also write the markdown here."),
) -> None:
    """Cost per green iteration by cohort (n8n's build-cost-report), with the cost of each stage."""
    if len(label) > len(results):
        raise UserError(f"--label: {len(label)} labels for {len(results)} results file(s)")
    cohorts = [load_cohort(path, label[i] if i < len(label) else None) for i, path in enumerate(results)]
    markdown = render_markdown(cohorts)
    if out is not None:
        try:
            out.write_text(markdown, encoding="utf-8")
        except OSError as exc:
            raise UserError(f"--out: cannot write {out}: {exc.strerror or exc}") from None
    typer.echo(markdown, nl=False)


def register(app: typer.Typer) -> None:
    app.command("cost-report")(cost_report_command)
