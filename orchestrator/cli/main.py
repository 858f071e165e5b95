"""The ``orchestrator`` command: one typer app with a sub-command per stage.

Sub-commands are imported when they run, not when the program starts: ``orchestrator --help``
and ``orchestrator cases validate`` must not pay for the anthropic SDK, scipy, the Kubernetes
and Docker clients or LangSmith (seconds of imports). :class:`LazyGroup` knows each command's
module and one-line help; only the command invoked (or asked for ``--help``) is imported.

Every user error — a :class:`~orchestrator.errors.UserError`, a case that fails to load, an
unknown flag or a bad flag value — is one line on stderr (``error: …``) and exit code 2.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

import typer
from typer import (
    _click as click,  # typer ≥ 0.25 vendors click: its exceptions and classes live here
)
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer.core import TyperGroup

from orchestrator.errors import OrchestratorError

#: name → (module, how the module provides it, one-line help). ``app``: the module's typer group;
#: ``register``: a ``register(app)`` that adds one command.
LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "ab": ("orchestrator.cli.ab_cmd", "register", "A/B-test two configurations on the same cases."),
    "build-check": ("orchestrator.cli.build_check_cmd", "register",
                    "Score live builds with the binary workflow checks only (the seed's eval:subagent)."),
    "cases": ("orchestrator.cli.cases_cmd", "app", "List and validate evaluation cases."),
    "cleanup": ("orchestrator.cli.cleanup_cmd", "register", "Delete what an interrupted run left behind."),
    "compare": ("orchestrator.cli.compare_cmd", "register", "Compare a run against a baseline run."),
    "cost-report": ("orchestrator.cli.cost_report_cmd", "register", "Cost per green iteration by cohort."),
    "discovery": ("orchestrator.cli.routing_cmd", "register", "The seed's eval:discovery name of routing."),
    "lanes": ("orchestrator.cli.lanes_cmd", "app", "Bring lanes up, list them, tear them down."),
    "merge": ("orchestrator.cli.merge_cmd", "register", "Merge sharded runs' eval-results.json into one (merge-results)."),
    "mcp-manifest": ("orchestrator.cli.manifest_cmd", "register",
                     "Build cases via claude -p over MCP into a manifest of prebuilt workflows (eval:build-mcp-manifest)."),
    "pairwise": ("orchestrator.cli.pairwise_cmd", "register",
                 "Build examples and score them with an LLM judge panel (the seed's eval:pairwise)."),
    "pairwise-compare": ("orchestrator.cli.pairwise_cmd", "register",
                         "Side-by-side HTML page of two pairwise folders (the seed's eval:pairwise:compare)."),
    "pairwise-upload": ("orchestrator.cli.pairwise_cmd", "register",
                        "Record a pairwise folder as a LangSmith experiment."),
    "rejudge": ("orchestrator.cli.rejudge_cmd", "register", "Replay a run's verdicts on another judge model."),
    "routing": ("orchestrator.cli.routing_cmd", "register",
                "Which route the lanes' agent takes, a judge stopping each trial (the seed's eval:discovery)."),
    "run": ("orchestrator.cli.run_cmd", "register", "Build and verify every selected case on the lanes."),
}


def _load(name: str) -> click.Command | None:
    spec = LAZY_COMMANDS.get(name)
    if spec is None:
        return None
    module = importlib.import_module(spec[0])
    if spec[1] == "app":
        command = typer.main.get_command(module.app)
    else:
        holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        module.register(holder)
        group = typer.main.get_group(holder)
        command = group.commands[name]
    command.name = name
    return command


class LazyGroup(TyperGroup):
    """A typer group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, the lazy ones included (none is imported to list them)."""
        return sorted(set(super().list_commands(ctx)) | set(LAZY_COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, importing its module on first use; None when there is no such command."""
        command = super().get_command(ctx, cmd_name)
        if command is None:
            command = _load(cmd_name)
            if command is not None:
                self.commands[cmd_name] = command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The help's command list from :data:`LAZY_COMMANDS` (no command module imported)."""
        rows = [(name, LAZY_COMMANDS[name][2]) for name in sorted(LAZY_COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="orchestrator",
    help="Multi-lane orchestrator for evaluating n8n's Instance AI workflow builder.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=LazyGroup,
    rich_markup_mode=None,
)


def configure_logging(verbose: bool) -> None:
    """Log to stderr at INFO (DEBUG and replacing any earlier setup with ``verbose``)."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=verbose,
    )
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2", "docker", "urllib3", "kubernetes", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from orchestrator.redact import install_log_redaction

    install_log_redaction()


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging.")) -> None:
    configure_logging(verbose)


def _one_line(text: str) -> str:
    from orchestrator.redact import redact

    return " ".join(redact(text).split())


def user_error_line(exc: BaseException) -> str | None:
    """The one line to print for any error of the orchestrator's own tree (and click's usage errors);
    None for anything else, which is a bug and keeps its traceback."""
    from orchestrator.cases.issues import CaseLoadError

    if isinstance(exc, CaseLoadError):
        first = _one_line(str(exc.issues[0])) if exc.issues else "cases failed to load"
        more = len(exc.issues) - 1
        return first + (f" (and {more} more problem(s): orchestrator cases validate lists them)" if more > 0 else "")
    if isinstance(exc, OrchestratorError):  # the whole tree: bad input, a lane, an install, n8n, results
        return _one_line(str(exc))
    if isinstance(exc, UsageError):
        where = f" (orchestrator {exc.ctx.command_path.split(' ', 1)[1]} --help)" if exc.ctx and " " in exc.ctx.command_path else ""
        return _one_line(exc.format_message()) + where
    if isinstance(exc, ClickException):
        return _one_line(exc.format_message())
    return None


def main(argv: list[str] | None = None) -> Any:  # pragma: no cover - console entry used by ``python -m orchestrator``
    """The ``orchestrator`` console entry. Exits with the command's code; a user error (see
    :func:`user_error_line`) prints one ``error:`` line and exits 2, an abort 130; any other
    exception propagates with its traceback."""
    try:
        rv = app(args=argv, standalone_mode=False)
        if isinstance(rv, int) and rv != 0:  # an Exit(code) click returned instead of raising
            raise SystemExit(rv)
        return None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        raise SystemExit(130) from None
    except NoArgsIsHelpError as exc:  # `orchestrator` / `orchestrator cases` alone: the help, as click does
        print(exc.format_message(), file=sys.stderr)
        raise SystemExit(2) from None
    except Exception as exc:
        line = user_error_line(exc)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":  # pragma: no cover
    main()
