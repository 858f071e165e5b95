"""Which builder runs on which lane backend, and with what: one pure decision from capability flags.

:func:`resolve_stack` reads only the two plug-ins' class flags and the run's config, and returns a
:class:`Stack`: where the Instance AI sandbox lives, whether a build runner runs next to each lane,
what the toolchain must install, the options the backend is started with and the builder's typed
options. A pair that cannot work is one :class:`~orchestrator.errors.ConfigError` line naming the
flag. It does no I/O (the builder's own ``check_config``, which may read a file, is the caller's)
and names no builder or backend; :func:`select_builder` applies a builder's
``selected_by`` options (``--prebuilt-workflows`` selects the prebuilt builder).

==========================  ==========================================================================
builder flag                what the stack does
==========================  ==========================================================================
``needs_sandbox``           a sandbox per lane: the backend's own (``hosts_sandbox``), the one at
                            ``--sandbox-url``, or one embedded here (needs the local toolchain);
                            lanes someone else runs bring their own; other backends refuse
``needs_build_runner``      ``build_runner=True`` to a backend with ``runs_build_runner``; others refuse
``needs_claude``            the toolchain installs the claude CLI (unless ``--claude-bin``)
``needs_existing_lane``     a backend that owns no lanes, and one lane
``options_model``           the builder's options, each the config's field of the same name
==========================  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import ValidationError

from orchestrator.builders.builder import BUILDERS, DEFAULT_BUILDER, Builder, BuilderOptions
from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import BACKENDS, LaneBackend

#: where each lane's Instance AI sandbox lives: none needed; the backend's own (in the lane);
#: the external service at ``--sandbox-url``; one this machine runs; the lanes' owner's business
SandboxPlace = Literal["none", "in-lane", "external", "embedded", "theirs"]


class StackConfig(Protocol):
    """What :func:`resolve_stack` reads of the run's config (``RunConfig`` has it all)."""

    @property
    def lanes(self) -> int: ...
    @property
    def sandbox_url(self) -> str | None: ...
    @property
    def claude_bin(self) -> str | None: ...
    @property
    def plugin_options(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Stack:
    """One run's builder on one run's backend, and what that pair needs."""

    builder: type[Builder]
    backend: type[LaneBackend]
    sandbox: SandboxPlace
    build_runner: bool
    #: the toolchain installs n8n and Node (local lanes, or the embedded sandbox's Node and template)
    toolchain_n8n: bool
    #: the toolchain installs the claude CLI
    toolchain_claude: bool
    backend_options: Mapping[str, object] = field(default_factory=dict)
    builder_options: BuilderOptions | None = None


def _names(flag: str) -> list[str]:
    """The backends whose class sets ``flag`` (for a message; imports every built-in backend)."""
    return [cls.name for cls in BACKENDS.load_all() if getattr(cls, flag)]


def _option(config: object, name: str) -> Any:
    """A plug-in option of the run: its ``plugin_options`` entry, else the run's field of that name
    (a builder may read a run-wide flag such as ``keep_workflows``)."""
    given: Mapping[str, Any] = getattr(config, "plugin_options", {}) or {}
    return given[name] if name in given else getattr(config, name, None)


def builder_options(builder: type[Builder], config: object) -> BuilderOptions | None:
    """The builder's typed options from the run's options of the same names (one line when bad)."""
    model = builder.options_model
    if model is None:
        return None
    values = {name: _option(config, name) for name in model.model_fields if _option(config, name) is not None}
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "--" + "-".join(str(p) for p in first["loc"]).replace("_", "-") if first["loc"] else "?"
        raise ConfigError(f"{where}: {first['msg']}") from None


def select_builder(name: str, config: object) -> type[Builder]:
    """The builder the run asked for, or, when it asked for the default, the one whose
    ``selected_by`` options are set. A selecting option beside another named builder is an error."""
    asked = BUILDERS.get(name)  # one line naming --builder when unknown
    for cls in BUILDERS.load_all():
        for option in cls.selected_by:
            value = _option(config, option)
            if value is None or value is False or cls is asked:
                continue
            if asked.name != DEFAULT_BUILDER:
                raise ConfigError(f"--{option.replace('_', '-')}: mutually exclusive with --builder {asked.name}")
            return cls
    return asked


def resolve_stack(builder: type[Builder], backend: type[LaneBackend], config: StackConfig) -> Stack:
    """Decide sandbox, build runner, toolchain and options for ``builder`` on ``backend``."""
    # the backend's own options: those of the run's plug-in options that its options model has
    options: dict[str, object] = {name: value for name, value in config.plugin_options.items()
                                  if name in backend.options_model.model_fields and value is not None}
    if builder.needs_existing_lane:
        who = _who(builder, config)
        if backend.owns_lanes:
            raise ConfigError(f"{who}: scores workflows that exist on one lane someone else runs, not on --backend "
                              f"{backend.name}: use {_lanes_of_others()}")
        if config.lanes != 1:
            raise ConfigError(f"{who}: scores workflows on a single lane: use --lanes 1")
    sandbox: SandboxPlace = "none"
    if builder.needs_sandbox:
        if not backend.owns_lanes:
            sandbox = "theirs"
        elif not backend.supports_sandbox:
            raise ConfigError(f"--builder {builder.name}: needs an Instance AI sandbox on every lane, which "
                              f"--backend {backend.name} cannot give yet: use --backend "
                              f"{' or '.join(_names('supports_sandbox'))} (or lanes someone else runs that have one)")
        elif config.sandbox_url:
            sandbox = "external"
            options["sandbox_url"] = config.sandbox_url
        else:
            sandbox = "in-lane" if backend.hosts_sandbox else "embedded"
            options["sandbox"] = True
    if builder.needs_build_runner:
        if not backend.runs_build_runner:
            raise ConfigError(f"--builder {builder.name}: needs a build runner next to every lane, which "
                              f"--backend {backend.name} does not start; use --backend "
                              f"{' or '.join(_names('runs_build_runner'))}")
        options["build_runner"] = True
    parsed = builder_options(builder, config)
    return Stack(builder=builder, backend=backend, sandbox=sandbox, build_runner=builder.needs_build_runner,
                 toolchain_n8n=backend.needs_local_n8n or sandbox == "embedded",
                 toolchain_claude=builder.needs_claude and not config.claude_bin,
                 backend_options=options, builder_options=parsed)


def _who(builder: type[Builder], config: object) -> str:
    """The flag that chose ``builder``: its selecting option when one is set, else ``--builder``."""
    flags = [f"--{o.replace('_', '-')}" for o in builder.selected_by if _option(config, o) not in (None, False)]
    return f"{flags[0]} (--builder {builder.name})" if flags else f"--builder {builder.name}"


def _lanes_of_others() -> str:
    """How a run names lanes someone else runs: each such backend, with its first flag (the lanes' URLs)."""
    hints = []
    for cls in BACKENDS.load_all():
        if not cls.owns_lanes:
            flags = cls.options_model.flags
            hints.append(f"--backend {cls.name}" + (f" --{flags[0].replace('_', '-')} URL" if flags else ""))
    return " or ".join(hints)
