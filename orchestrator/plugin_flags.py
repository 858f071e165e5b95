"""The flags the plug-ins contribute to the run commands (and to ``orchestrator cleanup``), made from
their options models.

A builder's or a lane backend's options model (``BuilderOptions``, ``BackendOptions``) names in its
``flags`` the fields that are flags of ``orchestrator run`` (and every command that shares its
options): ``base_url`` is ``--base-url``, with the field's type, default, ``description`` as its
help and, for a backend, its ``env_vars`` entry as the flag's environment variable. Neither the CLI
nor the run names one of them: the CLI adds them to the shared options
(:func:`orchestrator.cli.run_options.run_options`), :class:`~orchestrator.run.config.RunConfig`
keeps their values in ``plugin_options`` and each plug-in takes its own from there
(:mod:`orchestrator.run.stack`).

A backend's options model may name another in ``cleanup``: the options ``orchestrator cleanup``
takes of it (the static lanes' owner, the Kubernetes janitor's), whose ``flags`` are that command's
(:func:`cleanup_flags`). The models come from the registries' ``options`` tables (light modules):
making the CLI imports no plug-in, no SDK.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from orchestrator.builders.builder import BUILDERS
from orchestrator.lanes.backend import BACKENDS, BackendOptions


@dataclass(frozen=True)
class PluginFlag:
    """One flag a plug-in contributes."""

    name: str  # the field: ``base_url``
    annotation: Any  # what typer parses: ``str | None``, ``Path | None``, ``bool``, ``int``
    default: Any
    help: str
    envvar: str | None
    secret: bool  # never recorded (a password)
    owners: tuple[str, ...]  # who takes it: ``static backend``, ``mcp builder``…

    @property
    def flag(self) -> str:
        """The command-line flag: ``--`` and the option's name with dashes."""
        return "--" + self.name.replace("_", "-")


def _is_secret(annotation: Any) -> bool:
    """Whether a field of this type holds a secret (``SecretStr``, optional or not)."""
    return SecretStr in (typing.get_args(annotation) or (annotation,))


def _cli_type(annotation: Any) -> tuple[Any, bool]:
    """The type typer parses for a field's ``annotation`` (a secret is a string on the command line)."""
    args = typing.get_args(annotation)
    optional = type(None) in args
    inner = [a for a in args if a is not type(None)] if args else [annotation]
    base = inner[0] if len(inner) == 1 else str
    secret = _is_secret(annotation)
    if secret:
        base = str
    if base not in (str, int, float, bool, Path):
        raise TypeError(f"a plug-in flag of type {annotation!r} cannot be a command-line flag")
    return (typing.Optional[base] if optional else base), secret


def _models(kinds: tuple[str, ...] = ("backend", "builder")) -> list[tuple[str, type[BaseModel]]]:
    """(owner, model) of every built-in plug-in of ``kinds`` with an options model."""
    out: list[tuple[str, type[BaseModel]]] = []
    for registry, kind in ((BACKENDS, "backend"), (BUILDERS, "builder")):
        if kind not in kinds:
            continue
        for name, model in registry.options_models().items():
            assert isinstance(model, type) and issubclass(model, BaseModel)
            out.append((f"{name} {kind}", model))
    return out


def _cleanup_models() -> list[tuple[str, type[BackendOptions]]]:
    """(backend name, model) of every built-in backend that takes options in ``orchestrator cleanup``."""
    return [(name, model.cleanup) for name, model in BACKENDS.options_models().items()
            if issubclass(model, BackendOptions) and model.cleanup is not None]


@functools.cache
def plugin_flags() -> Mapping[str, PluginFlag]:
    """Every contributed flag of the run commands by field name (two plug-ins may share one, of the same type)."""
    return _flags(_models())


@functools.cache
def backend_flags() -> Mapping[str, PluginFlag]:
    """The run commands' flags a lane backend contributes (``orchestrator lanes up`` takes them too)."""
    return _flags(_models(("backend",)))


@functools.cache
def cleanup_flags() -> Mapping[str, PluginFlag]:
    """Every flag the lane backends contribute to ``orchestrator cleanup`` (their ``cleanup`` models)."""
    return _flags([(f"{name} backend", model) for name, model in _cleanup_models()])


def cleanup_options(given: Mapping[str, object], environ: Mapping[str, str],
                    named: Collection[str] = ()) -> dict[str, BackendOptions]:
    """The ``orchestrator cleanup`` options of each backend that takes part, by backend name: from
    the flags ``given`` (their values by field name), else the model's env variables in ``environ``.
    A backend with a janitor takes part only when ``named`` (``--backend``) or one of its flags was
    given a value of its own: a plain cleanup never reads, nor refuses, the janitor's environment.

    Raises:
        ConfigError: one line naming the backend and the option that is bad.
    """
    flags = cleanup_flags()
    out: dict[str, BackendOptions] = {}
    for name, model in _cleanup_models():
        mine = {k: v for k, v in given.items() if k in model.model_fields}
        asked = any(v is not None and (k not in flags or v != flags[k].default) for k, v in mine.items())
        if model.has_janitor and name not in named and not asked:
            continue
        out[name] = model.parse(name, mine, environ)
    return out


def _flags(models: list[tuple[str, type[BaseModel]]]) -> Mapping[str, PluginFlag]:
    flags: dict[str, PluginFlag] = {}
    for owner, model in models:
        env_vars: Mapping[str, str] = getattr(model, "env_vars", {})
        for name in getattr(model, "flags", ()):
            info = model.model_fields[name]
            annotation, secret = _cli_type(info.annotation)
            seen = flags.get(name)
            if seen is not None:
                if seen.annotation != annotation:
                    raise TypeError(f"plug-in flag {name!r}: {owner} and {', '.join(seen.owners)} disagree on its type")
                flags[name] = PluginFlag(name, annotation, seen.default, seen.help, seen.envvar, seen.secret,
                                         (*seen.owners, owner))
                continue
            default = None if info.is_required() else info.default
            flags[name] = PluginFlag(name, annotation, default, _help(info.description or name, owner),
                                     env_vars.get(name), secret, (owner,))
    return types.MappingProxyType(flags)


def _help(description: str, owner: str) -> str:
    text = description[:1].upper() + description[1:]
    return f"{text.rstrip('.')} ({owner})."


@functools.cache
def plugin_option_names() -> frozenset[str]:
    """Every field of every built-in plug-in's options model (flags or not): what ``RunConfig``
    files under ``plugin_options`` when it is given one (``RunConfig(base_url=…)``)."""
    return frozenset(name for _, model in _models() for name in model.model_fields)


@functools.cache
def secret_option_names() -> frozenset[str]:
    """Plug-in options that are secrets (typed ``SecretStr``): never recorded with the run."""
    return frozenset(name for _, model in _models() for name, info in model.model_fields.items()
                     if _is_secret(info.annotation))


__all__ = ["PluginFlag", "backend_flags", "cleanup_flags", "cleanup_options", "plugin_flags", "plugin_option_names",
           "secret_option_names"]
