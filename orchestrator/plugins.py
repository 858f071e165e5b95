"""One registry of plug-ins by name, lazy: the registry never imports what it lists.

A kind of plug-in (builders, lane backends) is a :class:`Registry` of classes that carry a ``name``.
Three ways in, in this order of lookup:

- :meth:`Registry.register` (a class decorator): whatever module defines the class has run;
- the built-in table: name → *module name*, imported by :func:`importlib.import_module` the first
  time the name is asked for (importing the module registers its class);
- an entry point of the registry's group in any installed distribution, loaded on first use.

So the module that holds a registry sits below its plug-ins: no import circle, and a plug-in that
fails to import costs only the runs that ask for it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from importlib import metadata
from typing import ClassVar, Generic, Protocol, TypeVar


class Named(Protocol):
    """A plug-in: its class says its name."""

    name: ClassVar[str]


T = TypeVar("T", bound=Named)


class Registry(Generic[T]):
    """Classes of one kind by their ``name``; ``builtin`` names the module of each built-in one."""

    def __init__(self, kind: str, group: str, builtin: Mapping[str, str], *,
                 unknown: Callable[[str, list[str]], Exception], aliases: Mapping[str, str] | None = None,
                 options: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self.group = group
        self.builtin = dict(builtin)
        self.aliases = dict(aliases or {})
        #: name → ``module:Class`` of a built-in plug-in's options model, in a module light enough to
        #: import when the CLI is made (never the plug-in's own module)
        self.options = dict(options or {})
        self._unknown = unknown
        self._classes: dict[str, type[T]] = {}

    def register(self, cls: type[T]) -> type[T]:
        """Class decorator: ``cls.name`` now names ``cls``."""
        self._classes[cls.name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Forget the class registered as ``name`` (a built-in one is imported again when asked for)."""
        self._classes.pop(name, None)

    @contextmanager
    def registered(self, cls: type[T]) -> Iterator[type[T]]:
        """``cls`` registered for the ``with`` block only (a test's plug-in); whatever its name
        named before is named so again afterwards."""
        before = self._classes.get(cls.name)
        self.register(cls)
        try:
            yield cls
        finally:
            if before is None:
                self.unregister(cls.name)
            else:
                self._classes[cls.name] = before

    def names(self) -> list[str]:
        """Every name that may be asked for (built in, registered, or an installed entry point)."""
        names = set(self.builtin) | set(self._classes)
        names.update(ep.name for ep in metadata.entry_points(group=self.group))
        return sorted(names)

    def get(self, name: str) -> type[T]:
        """The class named ``name`` (or an alias of it); ``unknown(name, names)`` is raised otherwise."""
        name = self.aliases.get(name, name)
        if name not in self._classes:
            if name in self.builtin:
                importlib.import_module(self.builtin[name])  # its decorator registers it
            else:
                for ep in metadata.entry_points(group=self.group):
                    if ep.name == name:
                        self.register(ep.load())
        try:
            return self._classes[name]
        except KeyError:
            raise self._unknown(name, self.names()) from None

    def options_models(self) -> dict[str, type]:
        """The options model of every built-in plug-in that has one, by name, imported from its own
        light module (:attr:`options`): the plug-ins themselves are not imported."""
        models: dict[str, type] = {}
        for name, target in sorted(self.options.items()):
            module, _, attr = target.partition(":")
            models[name] = getattr(importlib.import_module(module), attr)
        return models

    def load_all(self) -> list[type[T]]:
        """Every built-in class (imported) and every one registered so far, by name."""
        for name in self.builtin:
            self.get(name)
        return [self._classes[n] for n in sorted(self._classes)]
