"""The ``orchestrator`` command: one typer app with a sub-command per stage."""

from __future__ import annotations

import logging
import sys

import typer

from orchestrator.errors import OrchestratorError
from orchestrator.redact import install_log_redaction, redact

app = typer.Typer(
    name="orchestrator",
    help="Multi-lane orchestrator for evaluating n8n's Instance AI workflow builder.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2", "docker", "urllib3", "kubernetes", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    install_log_redaction()


def _register() -> None:
    from orchestrator.cli import ab_cmd, cases_cmd, cleanup_cmd, compare_cmd, lanes_cmd, run_cmd

    app.add_typer(cases_cmd.app, name="cases")
    app.add_typer(lanes_cmd.app, name="lanes")
    run_cmd.register(app)
    cleanup_cmd.register(app)
    compare_cmd.register(app)
    ab_cmd.register(app)


_register()


def main() -> None:  # pragma: no cover - console entry used by ``python -m orchestrator``
    """Any error of the orchestrator's own tree is one ``error: …`` line (one per problem for an
    invalid case set) and exit 2; only a bug is a traceback."""
    try:
        app()
    except OrchestratorError as exc:
        for line in redact(str(exc)).splitlines() or [type(exc).__name__]:
            print(f"error: {line}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":  # pragma: no cover
    main()
