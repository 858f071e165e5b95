"""``orchestrator ab``: the same selection run once per *arm*, each arm a full pipeline run with its
own lane env, experiment and output folder; then the side-by-side report (``ab_report``).

An arm is ``name=model`` plus optional ``--arm-env name=KEY=VALUE`` pairs, ``--arm-model-url
name=URL`` and ``--arm-model-key-env name=VAR``. Its lanes get ``N8N_INSTANCE_AI_MODEL=<model>``,
``N8N_INSTANCE_AI_MODEL_URL=<url>`` when given, and then the arm's pairs (which win over the model,
and over the run-wide ``--env``); what the arm sets explicitly also wins over the model route's
defaults (:func:`orchestrator.run.provision.lane_spec`). The lanes' model key comes from the
orchestrator's environment by the model's provider prefix (``anthropic/`` → ``ANTHROPIC_API_KEY``,
``openai/`` → ``OPENAI_API_KEY``, …, :data:`PROVIDER_KEY_ENV`); a ``custom/`` model needs a model
URL and names its key variable with ``--arm-model-key-env`` (none: no key).

Which builder the arm's model drives: ``instance-ai`` (the default of ``orchestrator ab``) builds
with the lanes' own agent, i.e. with the arm's model. ``mcp`` builds with claude: an
``anthropic/*`` arm pins claude's model to the part after ``anthropic/``; any other arm is refused
(:func:`check_arms_for_builder`). Offline (``--model-server scripted``) every arm's lanes without
a model URL of their own call the scripted server under their own route tag (``<base>/route/<arm>``),
and each run records which models every route was asked for (``config.model_routes``).

Mode ``separate``: each arm gets its own lane pool, and the arms run **one after another**. On a
2-core machine two pools at once would have the arms compete for CPU (n8n boot, mock execution,
concurrent claude processes): timeouts and durations of one arm would depend on the other's load,
which biases exactly what an A/B compares, and doubles peak memory. Running sequentially costs
wall time only. ``interleaved`` (one pool, arms as lane profiles) needs the allocator to route a
unit to a lane of its arm's profile and is not supported yet.

``--sequential`` (:func:`run_arms_sequential`, two arms): both arms run *at the same time*, each on
its own ``--lanes`` lanes (an arm's model and env are its lanes' env, so a lane cannot serve both),
with the same seeded schedule, so the (case, iteration) pairs start and finish together and both
arms meet the same machine load — the bias of running two pools at once hits both arms alike. Each
build pair that completes goes into the mixture SPRT (:mod:`orchestrator.experiments.sequential`);
once it decides — a difference either way, or futile — neither arm starts another build.
``--iterations`` is the most rounds it runs (the fixed design it is measured against).

``--run-id ID --resume-existing`` (what the chart's A/B Job passes: the Job's name, the same for a
pod that replaces a disrupted one): each arm's run ``ID-<arm>`` resumes when the state dir holds it
(its finished units are kept, not built again; an arm that had finished builds nothing), else
starts. A resumed ``--sequential`` A/B first replays the build pairs that finished, in the order
they finished, so the test goes on from the evidence it had (and stops at once if it had decided),
and the lockstep gate starts from each arm's finished builds so the arms run matched again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from orchestrator.builders.builder import Builder
from orchestrator.domain import BuildStatus
from orchestrator.errors import ConfigError
from orchestrator.experiments.plan import build_scores
from orchestrator.experiments.sequential import Decision, SequentialDesign, SequentialState
from orchestrator.ids import new_run_id
from orchestrator.lanes.profiles import parse_overrides
from orchestrator.redact import register_secret
from orchestrator.results.model import EvalResults, UnitResult
from orchestrator.results.writer import stored_output_dir
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import Run, RunHooks, RunOutcome, run
from orchestrator.run.plan import kept_units
from orchestrator.run.resolve import ResolvedRun, prepare, run_dir

log = logging.getLogger(__name__)

MODES = ("separate", "interleaved")
ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
MODEL_ENV = "N8N_INSTANCE_AI_MODEL"
MODEL_URL_ENV = "N8N_INSTANCE_AI_MODEL_URL"
ANTHROPIC_PREFIX = "anthropic/"
#: Same rule as lane profiles: such a key's value is a secret (registered, masked in reports).
SECRET_KEY = re.compile(r"(_KEY|_TOKEN|_PASSWORD|SECRET)$|(_KEY|_TOKEN|_PASSWORD|SECRET)_", re.I)


#: The orchestrator env var holding the key of a model provider (n8n's own table, instance-ai-settings).
PROVIDER_KEY_ENV = {
    "anthropic": "ANTHROPIC_API_KEY", "cohere": "COHERE_API_KEY", "deepseek": "DEEPSEEK_API_KEY",
    "google": "GOOGLE_GENERATIVE_AI_API_KEY", "groq": "GROQ_API_KEY", "mistral": "MISTRAL_API_KEY",
    "openai": "OPENAI_API_KEY", "openrouter": "OPENROUTER_API_KEY", "xai": "XAI_API_KEY",
}
CUSTOM_PREFIX = "custom/"


@dataclass
class Arm:
    name: str
    model: str
    env: list[str] = field(default_factory=list)  # KEY=VALUE, this arm only
    model_url: str | None = None  # --arm-model-url: where this arm's lanes send their model calls
    key_env: str | None = None  # --arm-model-key-env: the orchestrator env var with this arm's model key

    @property
    def build_model(self) -> str | None:
        """The claude build model this arm pins, or None to keep the run's default."""
        if self.model.startswith(ANTHROPIC_PREFIX) and len(self.model) > len(ANTHROPIC_PREFIX):
            return self.model[len(ANTHROPIC_PREFIX):]
        return None

    @property
    def provider(self) -> str:
        """The provider part of ``model`` (``anthropic`` of ``anthropic/…``), ``custom`` without one."""
        return self.model.split("/", 1)[0] if "/" in self.model else "custom"

    @property
    def model_key_env(self) -> str | None:
        """The orchestrator env var whose value is this arm's lane model key (None: no key of its own)."""
        return self.key_env or PROVIDER_KEY_ENV.get(self.provider)

    def lane_env(self) -> list[str]:
        """The ``--env`` pairs that give this arm's lanes its model (and model URL), then its own env."""
        url = [f"{MODEL_URL_ENV}={self.model_url}"] if self.model_url else []
        return [f"{MODEL_ENV}={self.model}", *url, *self.env]


#: the builder an arm's model drives unless ``--builder`` says otherwise: n8n's own agent
AB_BUILDER = "instance-ai"


def _per_arm(specs: list[str], flag: str, example: str, arms: dict[str, Arm]) -> dict[str, str]:
    """``ARM=VALUE`` pairs of a per-arm flag: each names a declared arm, at most once."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not value:
            raise ConfigError(f"{flag}: expected ARM={example}, got {spec!r}")
        if name not in arms:
            raise ConfigError(f"{flag}: {name!r} names no declared arm (declared: {', '.join(arms)})")
        if name in out:
            raise ConfigError(f"{flag}: arm {name!r} is given twice")
        out[name] = value
    return out


def parse_arms(arm_specs: list[str], arm_env_specs: list[str] | None = None, model_url_specs: list[str] | None = None,
               key_env_specs: list[str] | None = None) -> list[Arm]:
    """``--arm name=model`` (≥ 2, unique names), ``--arm-env name=KEY=VALUE``, ``--arm-model-url
    name=URL`` and ``--arm-model-key-env name=VAR`` (each naming a declared arm)."""
    arms: dict[str, Arm] = {}
    for spec in arm_specs:
        name, sep, model = spec.partition("=")
        name, model = name.strip(), model.strip()
        if not sep or not name or not model:
            raise ConfigError(f"--arm: expected NAME=MODEL (e.g. control=anthropic/claude-sonnet-4-6), got {spec!r}")
        if not ARM_NAME.match(name):
            raise ConfigError(f"--arm: arm name {name!r} must be 1–40 letters, digits, '.', '_' or '-' "
                              "(it names an output folder and an experiment)")
        if any(ch.isspace() for ch in model):
            raise ConfigError(f"--arm: model of arm {name!r} must not contain whitespace, got {model!r}")
        if name in arms:
            raise ConfigError(f"--arm: arm name {name!r} is declared twice; arm names must be unique")
        arms[name] = Arm(name, model)
    if len(arms) < 2:
        raise ConfigError(f"--arm: an A/B run needs at least 2 arms, got {len(arms)}")
    for spec in arm_env_specs or []:
        name, sep, pair = spec.partition("=")
        if not sep or not pair:
            raise ConfigError(f"--arm-env: expected ARM=KEY=VALUE, got {spec!r}")
        if name not in arms:
            raise ConfigError(f"--arm-env: {name!r} names no declared arm (declared: {', '.join(arms)})")
        ((key, value),) = parse_overrides([pair], flag="--arm-env").items()  # KEY=VALUE, naming the flag
        if SECRET_KEY.search(key):
            register_secret(value)
        arms[name].env.append(pair)
    for name, url in _per_arm(model_url_specs or [], "--arm-model-url", "URL", arms).items():
        parsed = urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ConfigError(f"--arm-model-url: model URL of arm {name!r} is not an http(s) URL: {url!r}")
        arms[name].model_url = url.rstrip("/")
    for name, var in _per_arm(key_env_specs or [], "--arm-model-key-env", "VAR", arms).items():
        if not os.environ.get(var):
            raise ConfigError(f"--arm-model-key-env: {var} (the model key of arm {name!r}) is not set in the "
                              "orchestrator's environment")
        arms[name].key_env = var
    for arm in arms.values():
        if arm.model.startswith(CUSTOM_PREFIX) and not arm.model_url:
            raise ConfigError(f"--arm {arm.name}={arm.model}: a custom model needs its URL: "
                              f"--arm-model-url {arm.name}=<OpenAI-compatible base URL>")
    return list(arms.values())


def check_arms_for_builder(arms: list[Arm], builder: str) -> None:
    """An arm's model must drive the builder that runs: the ``mcp`` builder is claude, so a
    non-Anthropic arm would only change the lanes' mock layer — refused, naming the arm."""
    if builder not in ("mcp", "remote"):  # remote: the same claude, run next to the lane
        return
    for arm in arms:
        if arm.model_url:
            raise ConfigError(f"--arm-model-url {arm.name}=…: the mcp builder builds with claude over the run's "
                              "model route; a per-arm model URL needs --builder instance-ai")
        if arm.build_model is None:
            raise ConfigError(f"--arm {arm.name}={arm.model}: the mcp builder builds with claude (Anthropic models "
                              "only); compare other providers with --builder instance-ai")


def check_mode(mode: str) -> str:
    """``mode`` when the A/B can run it (``separate`` today). Raises ``ConfigError`` naming ``--mode``
    for an unknown mode or ``interleaved``."""
    if mode not in MODES:
        raise ConfigError(f"--mode: must be separate or interleaved, got {mode!r}")
    if mode == "interleaved":
        raise ConfigError("--mode interleaved: not supported yet (the allocator runs one lane profile per pool); "
                          "use --mode separate")
    return mode


def new_ab_id() -> str:
    """A fresh id for an A/B (``ab-…``), which names its folder and its arms' runs."""
    return new_run_id("ab-")


def arm_config(base: RunConfig, arm: Arm, *, ab_id: str, experiment_name: str, output_root: Path) -> RunConfig:
    """The run of one arm: the base selection and lane options, the arm's lane env and build model,
    its own run id, experiment and output folder."""
    return base.replace(
        env=[*base.env, *arm.lane_env()],
        run_id=f"{ab_id}-{arm.name}",
        experiment_name=f"{experiment_name}-{arm.name}",
        output_dir=output_root / arm.name,
        resume=None,
        resume_existing=base.resume_existing,  # each arm's own run: resumed when the state dir holds it
        model_route_tag=arm.name,  # offline: this arm's lanes call the scripted server under /route/<arm>
        lane_model_key_env=arm.model_key_env,
        build_model=arm.build_model or base.build_model,
    )


def own_gateway_port(cfg: RunConfig, index: int) -> RunConfig:
    """Arms that run at once each start their own model gateway: a fixed port becomes port + the
    arm's index (the chart's gateway Service exposes both with ``ab.sequential``)."""
    if not (index and cfg.model_gateway and cfg.model_gateway_port):
        return cfg
    old = cfg.model_gateway_port
    url = cfg.model_gateway_url
    if url and url.rstrip("/").endswith(f":{old}"):
        url = f"{url.rstrip('/')[: -len(str(old))]}{old + index}"
    return cfg.replace(model_gateway_port=old + index, model_gateway_url=url)


@dataclass
class ArmRun:
    arm: Arm
    cfg: RunConfig
    outcome: RunOutcome

    @property
    def results(self) -> EvalResults:
        return self.outcome.results


HooksFactory = Callable[[RunConfig], list[RunHooks]]
Runner = Callable[[RunConfig, list[RunHooks]], Awaitable[RunOutcome]]


def _interrupted(outcome: RunOutcome) -> bool:
    summary = outcome.results.summary
    return bool(summary and summary.stopped_reason and summary.stopped_reason.startswith("interrupted"))


async def run_arms(base: RunConfig, arms: list[Arm], *, ab_id: str, experiment_name: str, output_root: Path,
                   hooks_for: HooksFactory | None = None, runner: Runner | None = None,
                   on_arm: Callable[[Arm, RunConfig], None] | None = None) -> list[ArmRun]:
    """Run every arm in turn (mode ``separate``); an interrupted arm stops the A/B after it."""
    runner = runner or (lambda cfg, hooks: run(cfg, hooks))
    done: list[ArmRun] = []
    for arm in arms:
        cfg = arm_config(base, arm, ab_id=ab_id, experiment_name=experiment_name, output_root=output_root)
        if on_arm is not None:
            on_arm(arm, cfg)
        outcome = await runner(cfg, hooks_for(cfg) if hooks_for else [])
        done.append(ArmRun(arm, cfg, outcome))
        if _interrupted(outcome):
            log.warning("arm %s was interrupted: the remaining arms are not run", arm.name)
            break
    return done


def default_experiment(base: RunConfig) -> str:
    """The experiment name both arms share: the base config's, else LangSmith's default name."""
    if base.experiment_name:
        return base.experiment_name
    from orchestrator.experiments.langsmith_sync import default_experiment_name

    return default_experiment_name(os.environ)


# --------------------------------------------------------------------------- sequential mode


@dataclass
class SequentialOutcome:
    """What the sequential controller saw: the test's state and what was run against the fixed design."""

    state: SequentialState
    fixed_builds: int  # both arms, every case × every iteration
    builds_run: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    stop_reason: str | None = None

    @property
    def builds_saved(self) -> int:
        """Builds the fixed design would have run beyond those the sequential test needed."""
        return max(self.fixed_builds - self.builds_run, 0)

    @property
    def saved_share(self) -> float:
        """:attr:`builds_saved` as a share of the fixed design's builds (0 when it had none)."""
        return self.builds_saved / self.fixed_builds if self.fixed_builds else 0.0

    @property
    def cost_saved_usd(self) -> float:
        """The saved builds at the mean cost of the builds that ran."""
        return self.builds_saved * (self.cost_usd / self.builds_run) if self.builds_run else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The sequential section of the A/B report: the test, its state and what stopping early saved."""
        return {"test": self.state.design.describe(), **self.state.to_dict(), "max_pairs": self.fixed_builds // 2,
                "fixed_builds": self.fixed_builds,
                "builds_run": self.builds_run, "builds_saved": self.builds_saved, "saved_share": self.saved_share,
                "cost_usd": self.cost_usd, "cost_saved_usd": self.cost_saved_usd, "wall_s": self.wall_s,
                "stop_reason": self.stop_reason}


class Lockstep:
    """Keeps the two arms in matched rounds: an arm starts its n-th build only once the other arm has
    finished n − ``slack`` builds (the arm behind never waits). Without it the arm whose builds fail
    fast would run ahead — and the builds it ran beyond the decision would be wasted. A build waiting
    here has cost nothing yet. Once an arm's run is over, or the test has decided, the gate is open
    (a build waiting then still runs: at most ``slack`` per arm)."""

    def __init__(self, arms: tuple[str, str], slack: int = 1) -> None:
        self.arms = arms
        self.slack = max(1, slack)
        self.started = dict.fromkeys(arms, 0)
        self.finished = dict.fromkeys(arms, 0)
        self.waited_s = dict.fromkeys(arms, 0.0)
        self.is_open = False
        self._cond = asyncio.Condition()

    def _other(self, arm: str) -> str:
        return self.arms[1] if arm == self.arms[0] else self.arms[0]

    async def enter(self, arm: str) -> None:
        """Wait until ``arm`` may start its next build (see the class docstring); the wait adds to
        ``waited_s``."""
        other = self._other(arm)
        t0 = time.monotonic()
        async with self._cond:
            await self._cond.wait_for(
                lambda: self.is_open or self.finished[other] >= self.started[arm] + 1 - self.slack)
            self.started[arm] += 1
        self.waited_s[arm] += time.monotonic() - t0

    async def leave(self, arm: str) -> None:
        """``arm`` finished a build: wake the other arm's waiting builds."""
        async with self._cond:
            self.finished[arm] += 1
            self._cond.notify_all()

    async def open(self) -> None:
        """Open the gate for good: every waiting build starts."""
        async with self._cond:
            self.is_open = True
            self._cond.notify_all()


class _LockstepBuilder:
    """The arm's builder, each build behind the :class:`Lockstep` gate (everything else passes through)."""

    def __init__(self, inner: Builder, gate: Lockstep, arm: str) -> None:
        self._inner, self._gate, self._arm = inner, gate, arm

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def build(self, request: Any, lane: Any, user: Any) -> Any:
        await self._gate.enter(self._arm)
        try:
            return await self._inner.build(request, lane, user)
        finally:
            await self._gate.leave(self._arm)


@dataclass
class _Siblings:
    """The runs of one sequential A/B, which share the process's SIGINT/SIGTERM."""

    runs: list[Run] = field(default_factory=list)
    active: int = 0


class _LockstepRun(Run):
    """A pipeline run whose builder goes through the lockstep gate. The two arms' runs share the
    signal handlers: the first to start installs them, the last to end gives them back, and a
    signal stops every arm (each run on its own would take the handlers from the other)."""

    def __init__(self, resolved: ResolvedRun, hooks: list[RunHooks], gate: Lockstep, arm: str,
                 siblings: _Siblings | None = None) -> None:
        self._gate, self._arm = gate, arm
        self._siblings = siblings or _Siblings()
        self._siblings.runs.append(self)
        super().__init__(resolved, hooks)

    def _signals(self, install: bool) -> None:
        group = self._siblings
        group.active += 1 if install else -1
        if (install and group.active == 1) or (not install and group.active == 0):
            super()._signals(install)

    def _on_signal(self, signame: str) -> None:
        for run_ in self._siblings.runs:
            Run._on_signal(run_, signame)

    def _wrap_builder(self, builder: Builder) -> Builder:
        return cast(Builder, _LockstepBuilder(builder, self._gate, self._arm))


def resumed_root(base: RunConfig, arms: list[Arm], ab_id: str) -> Path | None:
    """Where an earlier attempt of A/B ``ab_id`` wrote its arms (the first pod's folder on the
    results volume): a resumed A/B keeps its arms and its report there. None: nothing to resume."""
    for arm in arms:
        output_dir = stored_output_dir(run_dir(base.state_dir, f"{ab_id}-{arm.name}"))
        if output_dir is not None:
            return output_dir.parent
    return None


def finished_units(cfg: RunConfig) -> list[UnitResult]:
    """What an earlier attempt of this arm's run finished (none when it never started): the units
    its ``--resume`` keeps."""
    if not cfg.run_id:
        return []
    return kept_units(run_dir(cfg.state_dir, cfg.run_id))


class SequentialController:
    """Pairs the two arms' builds as they finish, feeds each pair to the test, and stops both runs
    (no new build starts; running ones finish) once the test decides."""

    def __init__(self, design: SequentialDesign, control: str, variant: str) -> None:
        self.state = SequentialState(design)
        self.arms = (control, variant)
        self.units: dict[str, dict[tuple[str, int], UnitResult]] = {control: {}, variant: {}}
        self.runs: dict[str, Run] = {}
        self.stop_reason: str | None = None
        self.gate: Lockstep | None = None

    def hook(self, arm: str) -> RunHooks:
        """The run hook that feeds ``arm``'s finished units to :meth:`add`."""
        controller = self

        class _ArmHook(RunHooks):
            async def on_unit(self, unit: UnitResult) -> None:
                controller.add(arm, unit)

        return _ArmHook()

    def add(self, arm: str, unit: UnitResult) -> None:
        """Record ``arm``'s finished unit; once the other arm has the same (case, iteration) and both were
        scored, feed the pair to the test, and :meth:`stop` both runs when it decides."""
        key = (unit.case, unit.iteration)
        self.units[arm][key] = unit
        control, variant = (self.units[a].get(key) for a in self.arms)
        if control is None or variant is None or self.state.decision is not None:
            return
        a, b = build_scores([control]).get(key), build_scores([variant]).get(key)
        if a is None or b is None:  # lost to the infrastructure, skipped or timed out in one arm: no pair
            return
        decision = self.state.observe((b > a) - (b < a))
        if decision is not None and decision is not Decision.undecided:
            self.stop(f"sequential A/B: {decision.value} after {self.state.pairs} build pairs "
                      f"(Λ = {math.exp(self.state.log_lr):.3g})")

    def replay(self, finished: dict[str, list[UnitResult]]) -> None:
        """A resumed A/B: the units each arm's earlier attempt finished, fed to the test in the order
        they finished (the order the test saw them), and counted by the lockstep gate as builds
        started and finished, so the arm ahead waits for the other as it did before."""
        for arm, unit in sorted(((a, u) for a, us in finished.items() for u in us), key=lambda p: p[1].finished_at):
            self.add(arm, unit)
        if self.gate is not None:
            for arm, units in finished.items():
                self.gate.started[arm] = self.gate.finished[arm] = len(units)
        if any(finished.values()):
            log.info("sequential A/B resumed: %s; %d build pair(s) replayed",
                     ", ".join(f"{a} {len(us)} unit(s) finished" for a, us in finished.items()), self.state.pairs)

    def stop(self, reason: str) -> None:
        """Stop both runs for ``reason``: no new build starts (running ones finish) and the lockstep opens."""
        self.stop_reason = reason
        log.warning("%s: no new builds start", reason)
        if self.gate is not None:
            asyncio.get_running_loop().create_task(self.gate.open())
        for run_ in self.runs.values():
            if run_.stop_reason is None:
                run_.stop_reason = reason
            run_.units.stop_new(reason)


async def run_arms_sequential(base: RunConfig, arms: list[Arm], design: SequentialDesign, *, ab_id: str,
                              experiment_name: str, output_root: Path, hooks_for: HooksFactory | None = None,
                              on_arm: Callable[[Arm, RunConfig], None] | None = None,
                              ) -> tuple[list[ArmRun], SequentialOutcome]:
    """Both arms at once, each on its own lanes, in the same seeded schedule (matched order: a
    (case, iteration) starts at about the same time in both arms, so both see the same machine load);
    the test looks after every build pair and stops both arms once it decides."""
    if len(arms) != 2:
        raise ConfigError(f"--sequential: compares exactly 2 arms (a control and a variant), got {len(arms)}")
    control, variant = arms
    controller = SequentialController(design, control.name, variant.name)
    gate = controller.gate = Lockstep((control.name, variant.name))
    siblings = _Siblings()
    cfgs = []
    for index, arm in enumerate(arms):
        resolved = await prepare(own_gateway_port(
            arm_config(base, arm, ab_id=ab_id, experiment_name=experiment_name, output_root=output_root), index))
        cfg = resolved.config
        if on_arm is not None:
            on_arm(arm, cfg)
        hooks = [*(hooks_for(cfg) if hooks_for else []), controller.hook(arm.name)]
        controller.runs[arm.name] = _LockstepRun(resolved, hooks, gate, arm.name, siblings)
        cfgs.append(cfg)
    if base.resume_existing:
        controller.replay({arm.name: finished_units(cfg) for arm, cfg in zip(arms, cfgs)})

    async def execute(name: str) -> RunOutcome:
        try:
            return await controller.runs[name].execute()
        finally:
            await gate.open()  # this arm starts no more builds: the other must not wait for it

    t0 = time.monotonic()
    outcomes = await asyncio.gather(*(execute(a.name) for a in arms))
    done = [ArmRun(arm, cfg, outcome) for arm, cfg, outcome in zip(arms, cfgs, outcomes)]
    if controller.state.decision is None:  # every pair seen, no boundary crossed
        controller.state.decision = Decision.undecided
        controller.state.decided_at = controller.state.pairs
    ran = [u for r in done for u in r.results.units if u.build.status is not BuildStatus.skipped]
    units_total = sum((r.results.summary.units_total if r.results.summary else len(r.results.units)) for r in done)
    outcome = SequentialOutcome(controller.state, fixed_builds=units_total, builds_run=len(ran),
                                cost_usd=sum(u.build.cost_usd for u in ran), wall_s=time.monotonic() - t0,
                                stop_reason=controller.stop_reason)
    return done, outcome
