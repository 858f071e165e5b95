"""The plug-ins' flags (:mod:`orchestrator.plugin_flags`) as a command's typer options.

Typer builds a command's options from its function signature, so :func:`with_flags` writes the
contributed ones into the wrapper's ``__signature__``; the command receives their values as one
mapping, never naming one of them.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

import typer

from orchestrator.plugin_flags import PluginFlag

P = inspect.Parameter


def parameter(flag: PluginFlag) -> P:
    """``flag`` as a keyword-only typer option (its env variable too; a secret's default is not shown)."""
    return P(flag.name, P.KEYWORD_ONLY, annotation=flag.annotation,
             default=typer.Option(flag.default, flag.flag, help=flag.help, envvar=flag.envvar,
                                  show_default=not flag.secret))


def with_flags(flags: Mapping[str, PluginFlag], *, into: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorator: the command's parameter ``into`` is replaced by ``flags`` as options, after its own;
    the command gets the values given for them (those left at their default included) as ``into``."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        hints = typing.get_type_hints(command)  # in the command's own module (its annotations are text)
        own = [p.replace(kind=P.KEYWORD_ONLY, annotation=hints.get(name, p.annotation))
               for name, p in inspect.signature(command).parameters.items() if name != into]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> None:
            given = {k: kwargs.pop(k) for k in list(kwargs) if k in flags}
            command(**kwargs, **{into: given})

        params = [*own, *(parameter(f) for f in flags.values())]
        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        del wrapper.__wrapped__  # typer must read the signature above, not the command's
        return wrapper

    return decorate
