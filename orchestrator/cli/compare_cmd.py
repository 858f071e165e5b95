"""Placeholder: filled in by its issue."""

import typer


def register(app: typer.Typer) -> None:
    pass
