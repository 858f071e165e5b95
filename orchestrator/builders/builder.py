"""The builder interface: how one unit's workflow gets built on a lane, and the registry of builders.

A builder takes one build request (the case, which iteration, which attempt), the lane it runs on
(:class:`~orchestrator.builders.lane.BuildLane`: owner session, REST client, ledger) and a freshly
invited build user whose personal project holds the build, and returns a :class:`BuildResult`.
It never verifies, scores or deletes the build user: the unit runner does that, the same way for
every builder. Whatever a builder creates on the lane goes into the ledger *before* it is used.

Builders are plug-ins, chosen by name (``orchestrator run --builder NAME``): subclass
:class:`Builder`, decorate it with :func:`register_builder`, or expose it under the
``orchestrator.builders`` entry point. ``run/`` only ever sees this interface.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from orchestrator.builders.lane import BuildLane
from orchestrator.builders.users import BuildUser
from orchestrator.cases import EvalCase
from orchestrator.domain import BuildStatus
from orchestrator.errors import ConfigError
from orchestrator.handoff import CredentialSetupFacts
from orchestrator.plugins import Registry

#: the reference harness's ``--build-via-mcp`` names the claude/MCP path
ALIASES = {"build-via-mcp": "mcp"}
#: the builder the reference harness's ``--build-via-mcp`` flag selects
BUILD_VIA_MCP = ALIASES["build-via-mcp"]
ENTRY_POINT_GROUP = "orchestrator.builders"
#: the builder a run uses when it names none
DEFAULT_BUILDER = "mcp"


class BuilderOptions(BaseModel):
    """Base of a builder's typed options: frozen, unknown options refused, values checked.

    Each field is the run config's field of the same name (``run/stack.py`` reads them, a bad one
    is one ``ConfigError`` line naming its flag); its ``description`` says what it does (the help of
    the flag made from it). A builder that takes no options has this empty model.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    #: the fields that are flags of the run commands (``--build-cwd`` for ``build_cwd``): the CLI
    #: makes them from the field (its type, default and description), ``orchestrator.plugin_flags``
    flags: ClassVar[tuple[str, ...]] = ()

    @property
    def mcp_server_name(self) -> str | None:
        """The name the builder's agent knows the lane's MCP server by (its tools are
        ``mcp__<name>__…``), for the offline scripted model; None: it builds through no MCP server."""
        return None


@dataclass(frozen=True)
class BuilderSettings:
    """Everything a builder may need from the run, builder-neutral (``run/`` fills it once)."""

    run_id: str
    run_dir: Path
    model: str
    api_key: str | None = field(default=None, repr=False)  # the model route's key (secret)
    base_url: str | None = None  # the model route's base URL (a scripted server when offline)
    claude_bin: Path | None = None
    outage_waits_s: tuple[float, ...] = (30.0, 90.0)
    keep_workflows: bool = False
    lane_env: Mapping[str, str] = field(default_factory=dict)  # the env every lane of the pool starts with
    extra_env: Mapping[str, str] = field(default_factory=dict)
    #: the builder's own options (its :attr:`Builder.options_model`, taken from the run's config)
    options: BuilderOptions | None = None


@dataclass(frozen=True)
class BuilderReport:
    """What a builder says after the run (:meth:`Builder.closing_report`)."""

    notes: tuple[str, ...] = ()
    cleanup_failures: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildEvents:
    """What a builder reports while it works (spend cap, metrics). Every callback is optional."""

    on_cost: Callable[[float], None] | None = None
    on_outage_retry: Callable[[], None] | None = None

    def cost(self, usd: float) -> None:
        """Report ``usd`` spent by the build so far (for the run's spend cap and metrics)."""
        if self.on_cost:
            self.on_cost(usd)

    def outage_retry(self) -> None:
        """Report that an attempt is retried after a provider outage (metrics)."""
        if self.on_outage_retry:
            self.on_outage_retry()


@dataclass(frozen=True)
class BuildRequest:
    case: EvalCase
    iteration: int
    attempt: int  # 0 for the first try of this unit; retries on other lanes count up
    #: the build budget, the only one a builder reads (``--build-timeout-ms`` resolved for the
    #: builder, complex cases × 1.5 — ``orchestrator.run.unit.effective_timeout_ms``; 0: none): a chat
    #: builder's budget per user turn (:mod:`orchestrator.builders.budgets`), a claude builder's
    #: wall clock per attempt
    timeout_ms: int
    transcript_path: Path | None = None  # where the builder writes the unit's redacted transcript
    case_slug: str = ""  # the case's slug in this run ("" when the caller has none)


@dataclass
class BuildResult:
    """One builder call: its status, what it built, and what it cost (summed over its own retries)."""

    status: BuildStatus
    workflow_id: str | None = None
    error: str | None = None
    root_cause: str | None = None
    #: no workflow, but another lane may do better: the allocator retries the unit elsewhere
    retry_elsewhere: bool = False
    #: the failure is the harness's (a seed that would not restore), not the builder's
    framework_fault: bool = False
    #: workflows the agent read that its build neither created nor seeded (a harness leak: the unit's
    #: rows fail as ``framework_issue`` unless the build timed out)
    leaked_workflows: list[str] = field(default_factory=list)
    #: every expectation of the case is recorded ``incomplete`` with this reason (a premise the
    #: harness could not establish, e.g. ``requiresMemoryCompaction`` on an n8n without the check)
    not_judged_reason: str | None = None
    #: ground truth the judge sees with the expectations (e.g. observational-memory rows)
    judge_context: str | None = None
    #: Agents and config-evals the build produced (``orchestrator.handoff.ArtifactRef``),
    #: rendered into the expectation judge's context
    artifact_refs: list[Any] = field(default_factory=list)
    attempts: int = 0
    cost_usd: float = 0.0
    turns: int = 0
    duration_s: float = 0.0
    transcript_path: Path | None = None
    #: the Instance AI thread of the attempt that counted (None for builders without threads)
    thread_id: str | None = None
    #: what the builder told the user it did (redacted): the chat's last reply, claude's final result
    #: text. The ``communication`` workflow check grades it against the built workflow.
    narration: str | None = None
    #: the budget that ended the conversation early (``Run timed out after …``); what the agent
    #: had saved by then is still graded (a timeout with nothing saved is ``BuildStatus.timeout``)
    budget_timeout: str | None = None
    #: the same budget as n8n's ``BuildTimeout`` (``{kind, turn, elapsedMs}``): every row of the
    #: iteration is then recorded ``incomplete`` with attribution ``timeout``
    budget_breach: dict[str, object] | None = None
    #: the counting attempt's thread's run debug (``orchestrator.n8n.run_debug``: each run with its
    #: steps' prompt, messages, reply and usage), oldest first; None when the lane keeps none. What
    #: ``contextAssertions`` and ``memoryExpectations`` grade, and the judge's token figures
    run_debug: list[dict[str, Any]] | None = None
    #: renames the harness made behind the agent's back (``orchestrator.builders.instance_ai.external_edits``),
    #: each checked at the end of the build
    external_edits: list[dict[str, Any]] = field(default_factory=list)
    #: plans the simulated user rejected (n8n's ``proxyDecisionStats.rejection``)
    plan_rejections: int = 0
    #: the case's execution-scenario data tables the build created empty
    #: (:class:`orchestrator.handoff.ScenarioTables`; ``seedDataTables``): verification
    #: seeds each scenario's rows into them through their still-open thread
    scenario_tables: Any = None
    #: a ``credentialFixture`` case's facts (:mod:`orchestrator.builders.instance_ai.credential_setup`): the unit
    #: appends n8n's three credential-setup checks from them on every path
    credential_setup: CredentialSetupFacts | None = None
    #: what a harness's builder found besides the build (``orchestrator.harnesses``: a routing
    #: trial's route), for the harness's unit verifier; None for ``orchestrator run``'s builders
    harness: dict[str, Any] | None = None


class Builder(abc.ABC):
    """Builds one unit's workflow on a lane. One instance serves the whole run (every lane)."""

    name: ClassVar[str]
    #: the build user needs an MCP key of its own (the lane's MCP server is how it builds)
    needs_mcp_key: ClassVar[bool] = False
    #: builds run the claude CLI (the toolchain installs it)
    needs_claude: ClassVar[bool] = False
    #: the lanes' own agent needs an Instance AI sandbox (the run gives every lane one)
    needs_sandbox: ClassVar[bool] = False
    #: builds run on a build runner next to each lane (the backend starts one per lane)
    needs_build_runner: ClassVar[bool] = False
    #: its transcript is a chat whose process n8n grades (False: MCP builds, whose process
    #: expectations n8n never judges; ``--judge-mcp-process`` judges them as an unscored extra)
    process_gradable: ClassVar[bool] = True
    #: the lane env variable whose value is the model this builder builds with (None: ``settings.model``)
    model_env: ClassVar[str | None] = None
    #: builds score what already exists on one lane someone else runs (a backend that owns no lanes, one lane)
    needs_existing_lane: ClassVar[bool] = False
    #: the builder's typed options (a frozen pydantic model): each field is the run config's field of
    #: the same name; the base takes none
    options_model: ClassVar[type[BuilderOptions]] = BuilderOptions
    #: options of :attr:`options_model` that, once set, select this builder when the run names the default one
    selected_by: ClassVar[tuple[str, ...]] = ()
    #: its options name cases: :meth:`check_cases` sees the selection before anything starts
    checks_cases: ClassVar[bool] = False
    #: ``--build-timeout-ms`` when the run gives none: the reference's ``--build-timeout-ms`` default,
    #: a wall-clock cap per claude attempt (a chat builder overrides it with its per-turn budget).
    #: The only definition of a builder's default: ``run/`` resolves the run's budget from it once
    #: (``orchestrator.run.resolve.resolve``) and each build gets it in its ``BuildRequest``
    default_build_timeout_ms: ClassVar[int] = 1_800_000

    def __init__(self, settings: BuilderSettings, events: BuildEvents | None = None) -> None:
        self.settings = settings
        self.events = events or BuildEvents()

    @classmethod
    def check_config(cls, options: BuilderOptions | None) -> None:
        """Before anything starts: this builder's own options (one-line ``ConfigError`` naming the
        flag when wrong; what the model's fields cannot say alone). The default has none to check."""

    @classmethod
    def check_cases(cls, options: BuilderOptions | None, selected: list[str], known: list[str]) -> None:
        """With :attr:`checks_cases`: the selected case slugs and every known one, before anything
        starts (one-line ``ConfigError`` naming the flag). The default checks nothing."""

    async def prepare_lane(self, lane: BuildLane) -> None:
        """Once per lane after it is up and seeded (e.g. enable MCP access as the owner)."""

    @abc.abstractmethod
    async def build(self, request: BuildRequest, lane: BuildLane, user: BuildUser) -> BuildResult:
        """Build the case. Raises ``N8nTransportError`` when the lane itself failed."""

    async def aclose(self) -> None:
        """Release what the builder holds for the run."""

    def closing_report(self) -> BuilderReport:
        """After :meth:`aclose`: what the run says of the builder's own clean-up (lines to print, and
        what it could not clean up: reported, and the command exits 1). The default has nothing."""
        return BuilderReport()


def _unknown_builder(name: str, names: list[str]) -> ConfigError:
    return ConfigError(f"--builder: unknown builder {name!r}: choose one of {', '.join(names)}")


#: the built-in builders by module: imported the first time their name is asked for
BUILTIN_BUILDERS = {
    "mcp": "orchestrator.builders.claude.mcp",
    "instance-ai": "orchestrator.builders.instance_ai.builder",
    "prebuilt": "orchestrator.builders.prebuilt.builder",
    "remote": "orchestrator.builders.claude.remote",
}
#: the built-in builders' options models (light modules: the CLI makes their flags without the builders)
BUILTIN_BUILDER_OPTIONS = {
    "mcp": "orchestrator.builders.claude.options:ClaudeOptions",
    "remote": "orchestrator.builders.claude.options:ClaudeOptions",
    "prebuilt": "orchestrator.builders.prebuilt.options:PrebuiltOptions",
}
BUILDERS: Registry[Builder] = Registry("builder", ENTRY_POINT_GROUP, BUILTIN_BUILDERS, unknown=_unknown_builder,
                                      aliases=ALIASES, options=BUILTIN_BUILDER_OPTIONS)


def register_builder(cls: type[Builder]) -> type[Builder]:
    """Class decorator: add a :class:`Builder` to the registry under its ``name``."""
    return BUILDERS.register(cls)


def available_builders() -> list[str]:
    """The names ``--builder`` accepts: built-ins and those installed through entry points."""
    return BUILDERS.names()


def get_builder(name: str) -> type[Builder]:
    """The builder class named ``name`` (imported on first use); raises the registry's error naming the
    known builders when there is none."""
    return BUILDERS.get(name)
