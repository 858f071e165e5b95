"""Placeholder: filled in by its issue."""

import typer

app = typer.Typer(no_args_is_help=True)
