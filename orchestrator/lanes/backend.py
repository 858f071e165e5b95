"""The lane backend interface and the registry the CLI picks backends from by name.

A backend only knows how to start, probe, stop and sweep its kind of n8n server. Everything that
is the same for every backend (parallel bring-up, readiness deadline, owner seeding, replacing a
lane that failed) lives in :mod:`orchestrator.lanes.bringup`.

Third parties can add a backend without touching the core: subclass :class:`LaneBackend`, decorate
it with :func:`register_backend`, or expose it under the ``orchestrator.lane_backends`` entry point.
"""

from __future__ import annotations

import abc
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.lanes.model import Lane, LaneSpec
from orchestrator.ledger import Ledger
from orchestrator.n8n.health import READINESS_PATH, answers_ready, readiness_status
from orchestrator.plugins import Registry

__all__ = ["READINESS_PATH", "BackendEvents", "LaneBackend", "LaneError", "answers_ready", "get_backend", "readiness_status",
           "register_backend"]

log = logging.getLogger(__name__)


class BackendOptions(BaseModel):
    """Base of a backend's typed options: frozen, unknown options refused, values checked.

    Each field is one keyword option of the backend; its ``description`` says what it does (the
    text a flag contributed from it shows as its help). A backend configured from the environment
    too (kubernetes: the Helm chart) names in :attr:`env_vars` the variable read for an option not
    given. :meth:`parse` turns a bad or unknown option into one :class:`ConfigError` line naming it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: option → the environment variable read when the option is not given
    env_vars: ClassVar[Mapping[str, str]] = {}
    #: the fields that are flags of the run commands (``--base-url`` for ``base_url``): the CLI makes
    #: them from the field (its type, default, description and env variable), ``orchestrator.plugin_flags``
    flags: ClassVar[tuple[str, ...]] = ()
    #: the options this backend takes in ``orchestrator cleanup`` (another model; its :attr:`flags`
    #: are that command's flags); None: cleanup needs nothing of it
    cleanup: ClassVar[type[BackendOptions] | None] = None
    #: the backend has a pass of its own over what it runs on (:meth:`LaneBackend.janitor`): run when
    #: its cleanup options ask for it (:meth:`asks_for_janitor`) or ``cleanup --backend`` names it
    has_janitor: ClassVar[bool] = False

    def asks_for_janitor(self) -> bool:
        """Whether these cleanup options ask for the backend's own pass (:attr:`has_janitor`)."""
        return False

    @classmethod
    def parse(cls, backend: str, options: Mapping[str, object], environ: Mapping[str, str] | None = None) -> Self:
        """``options`` (``None`` values dropped), else their :attr:`env_vars` in ``environ``, validated.

        Raises:
            ConfigError: one line naming the option (and its env variable) that is unknown or bad.
        """
        given: dict[str, object] = {k: v for k, v in options.items() if v is not None}
        for key, var in cls.env_vars.items():
            if key not in given and environ and environ.get(var):
                given[key] = environ[var]
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "?"
            if first["type"] == "extra_forbidden":
                known = ", ".join(sorted(cls.model_fields)) or "none"
                raise ConfigError(f"{backend} backend: unknown option {field!r} (its options: {known})") from None
            env_var = cls.env_vars.get(str(first["loc"][0])) if first["loc"] else None
            where = f"option {field!r}" + (f" (env {env_var})" if env_var else "")
            raise ConfigError(f"{backend} backend: {where}: {first['msg']}") from None


class SandboxOptions(BackendOptions):
    """The options of a backend that gives every lane an Instance AI sandbox (``supports_sandbox``):
    the run sets ``sandbox`` or ``sandbox_url`` when its builder needs one (``run/stack.py``)."""

    sandbox: bool = Field(False, description="start an Instance AI sandbox service for every lane")
    sandbox_url: str | None = Field(None, description="an external n8n sandbox service every lane uses instead")
    sandbox_api_key: str | None = Field(None, repr=False, description=(
        "the external sandbox service's API key (default: env N8N_SANDBOX_SERVICE_API_KEY)"))


class LaneError(OrchestratorError):
    """A lane could not be started, reached or stopped. The message names the lane."""


class BackendEvents:
    """What a backend tells the run about the lanes' shared objects while the run goes on. The run
    wires it to its metrics and to stopping itself; this default only logs."""

    def restored(self, kind: str, name: str) -> None:
        """An object the run's lanes need (a Service, a policy, the liveness Lease) was gone and was
        created again."""
        log.warning("%s %s was gone: re-created", kind, name)

    def fatal(self, error: LaneError) -> None:
        """The run cannot go on safely (e.g. another process took its lanes over): it must stop."""
        log.error("%s", error)


class LaneBackend(abc.ABC):
    """Lifecycle of one kind of lane: start → health → teardown, plus a sweep for leftovers."""

    name: ClassVar[str]
    #: ``static`` lanes belong to someone else: they are never started nor torn down.
    owns_lanes: ClassVar[bool] = True
    #: lanes run this machine's n8n install (the toolchain must be installed first)
    needs_local_n8n: ClassVar[bool] = False
    #: ``sandbox=True`` / ``sandbox_url=…`` options give every lane an Instance AI sandbox
    supports_sandbox: ClassVar[bool] = False
    #: the sandbox runs inside each lane (a container in the lane pod): the orchestrator starts none
    #: and needs no local toolchain for it
    hosts_sandbox: ClassVar[bool] = False
    #: ``build_runner=True`` runs a build runner next to each lane (builders with ``needs_build_runner``)
    runs_build_runner: ClassVar[bool] = False
    #: every lane runs on this one machine (they share its cores): the allocator spreads builds
    #: evenly instead of ranking lanes by measured speed (issue 25)
    co_located: ClassVar[bool] = False
    #: ``takeover=True`` (``--resume``): the run's objects a replaced orchestrator left (same run id,
    #: another process) are taken over — once that process is proven dead — instead of a collision
    takes_over_resumed_runs: ClassVar[bool] = False

    #: the backend's typed options (a frozen pydantic model); the base takes none
    options_model: ClassVar[type[BackendOptions]] = BackendOptions

    def __init__(self, run_id: str, ledger: Ledger, state_dir: Path, **options: object) -> None:
        self.run_id = run_id
        self.ledger = ledger
        self.state_dir = state_dir
        self.options = options
        self.config: BackendOptions = self.parse_options(options, self.options_environ())
        #: the run replaces this with its own (metrics, stopping the run)
        self.events = BackendEvents()

    @classmethod
    def janitor(cls, options: BackendOptions, run_id: str | None, *, say: Callable[[str], object]) -> int:
        """``orchestrator cleanup``'s pass over what this backend runs on (its cleanup options say
        :attr:`~BackendOptions.has_janitor`): remove what dead runs left there — never a live run's —
        telling each step through ``say``. Returns the number of failures."""
        raise NotImplementedError(f"the {cls.name} backend has no janitor")

    def options_environ(self) -> Mapping[str, str]:
        """Where the options' env fallbacks (:attr:`BackendOptions.env_vars`) are read: this process's
        environment (a backend that takes another, e.g. a test's, overrides it)."""
        return os.environ

    @property
    def min_ready_timeout_s(self) -> float:
        """The least time a lane of this backend may need to become ready (node scale-up, image pull)."""
        return 0.0

    @classmethod
    def preflight(cls, spec: LaneSpec) -> None:
        """Before anything starts: what this backend needs exists (one-line ``ConfigError`` if not)."""

    @property
    def owner_password(self) -> str | None:
        """The password of the lanes' owner when the run was given it (lanes someone else runs);
        None: the run makes its own owner."""
        return None

    @classmethod
    def check_options(cls, options: BackendOptions, lanes: int) -> None:
        """What the run must give this backend for ``lanes`` lanes, checked as the run is resolved
        (one-line ``ConfigError`` naming the flag; e.g. static: a URL per lane). Default: nothing."""

    @classmethod
    async def lanes_answer(cls, options: BackendOptions, lanes: int) -> None:
        """Before anything starts: lanes someone else runs answer (one-line ``ConfigError`` naming
        the flag when one does not). Default: the backend starts its own, nothing to ask."""

    @classmethod
    def parse_options(cls, options: Mapping[str, object], environ: Mapping[str, str] | None = None) -> BackendOptions:
        """``options`` validated into :attr:`options_model` (see :meth:`BackendOptions.parse`)."""
        return cls.options_model.parse(cls.name, options, environ)

    @abc.abstractmethod
    async def start_lane(self, index: int, spec: LaneSpec) -> Lane:
        """Create lane ``index`` (not yet ready) and record it in the ledger before returning."""

    @abc.abstractmethod
    async def health(self, lane: Lane) -> bool:
        """True when the lane answers ``/healthz/readiness`` and its process/container/pod lives."""

    @abc.abstractmethod
    async def logs(self, lane: Lane, lines: int = 40) -> str:
        """The last lines the lane printed, for error messages (already redacted by the caller)."""

    @abc.abstractmethod
    async def teardown(self, lane: Lane) -> None:
        """Stop and remove the lane; mark it deleted in the ledger. Raises :class:`LaneError` on failure."""

    @abc.abstractmethod
    async def sweep(self, run_id: str | None = None) -> list[str]:
        """Remove leftovers of ``run_id`` (every run when None) found by label or ledger; return what went."""

    async def is_gone(self, lane: Lane) -> bool:
        """True when the lane's process/container/pod has already exited (no point waiting on it)."""
        return False

    async def gone_reason(self, lane: Lane) -> str | None:
        """Why a lane that :meth:`is_gone` will never be ready (e.g. the image that cannot be pulled),
        when the backend knows; None otherwise."""
        return None

    async def take_over_leftovers(self) -> None:
        """A resumed run that starts no lane (nothing left to run). A backend that takes over a
        replaced orchestrator's run when it starts a lane (``takes_over_resumed_runs``) does it
        here instead: once that process is proven dead, what it left of the run is removed.
        Default: nothing."""

    async def close(self) -> None:
        """Release client connections; lanes themselves are left as they are."""


def _unknown_backend(name: str, names: list[str]) -> LaneError:
    return LaneError(f"unknown backend {name!r}: choose one of {', '.join(names)}")


#: the backend a run uses when it names none
DEFAULT_BACKEND = "process"
#: the built-in backends by module: imported the first time their name is asked for
BUILTIN_BACKENDS = {
    "process": "orchestrator.lanes.process.backend",
    "docker": "orchestrator.lanes.docker.backend",
    "kubernetes": "orchestrator.lanes.kubernetes.backend",
    "static": "orchestrator.lanes.static.backend",
}
#: the built-in backends' options models (light modules: the CLI makes their flags without the SDKs)
BUILTIN_BACKEND_OPTIONS = {name: f"{module.rsplit('.', 1)[0]}.options:{model}" for name, module, model in (
    ("process", BUILTIN_BACKENDS["process"], "ProcessOptions"), ("docker", BUILTIN_BACKENDS["docker"], "DockerOptions"),
    ("kubernetes", BUILTIN_BACKENDS["kubernetes"], "KubernetesOptions"),
    ("static", BUILTIN_BACKENDS["static"], "StaticOptions"))}
BACKENDS: Registry[LaneBackend] = Registry("lane backend", "orchestrator.lane_backends", BUILTIN_BACKENDS,
                                           unknown=_unknown_backend, options=BUILTIN_BACKEND_OPTIONS)


def register_backend(cls: type[LaneBackend]) -> type[LaneBackend]:
    """Class decorator: add a :class:`LaneBackend` to the registry under its ``name``."""
    return BACKENDS.register(cls)


def available_backends() -> list[str]:
    """The names ``--backend`` accepts: built-ins and those installed through entry points."""
    return BACKENDS.names()


def get_backend(name: str) -> type[LaneBackend]:
    """The backend class named ``name`` (imported on first use). Raises :class:`LaneError` naming the
    known backends when there is none."""
    return BACKENDS.get(name)
