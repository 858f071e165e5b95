"""Resolve a run once, then freeze it: every decision a run's settings need, made in one place.

::

    RunConfig (the flags, frozen)  ──resolve──▶  ResolvedRun (frozen)  ──preflight──▶  Run(resolved)
                                  (pure: reads only          (I/O: files, images, the
                                   the stored run of          builder's own files, the
                                   ``--resume``)              lanes someone else runs)

:func:`resolve` decides, and nothing after it decides again: the builder (by name, or the one a
selecting flag such as ``--prebuilt-workflows`` names) and its own flags (``check_config``: they may
name an input file, e.g. the manifest), the backend, the stack (sandbox, build
runner, toolchain, each plug-in's typed options), the lanes' profile and ``--env``, the run's
build budget (the run's ``--build-timeout-ms``, else the builder's one default), the case selection
after ``--resume`` (the stored selection of that run), the run id and the output folder. It reads no
file but its inputs (the profile, a builder's manifest, the ``run.json`` a resumed run left), starts
nothing and is safe to call anywhere.

:func:`preflight` does the I/O checks that must pass before anything starts, each a one-line
:class:`~orchestrator.errors.ConfigError` naming its flag: files that must exist, the backend's own
needs (a Docker image), the selected cases a builder's options name (a prebuilt manifest's) — the *resolved* selection, so ``--resume`` checks what it will run — and lanes reached by URL
answering. :func:`prepare` is both, what a caller of :class:`~orchestrator.run.pipeline.Run` uses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from orchestrator.builders.builder import Builder
from orchestrator.errors import ConfigError
from orchestrator.ids import new_run_id
from orchestrator.lanes.backend import BackendOptions, LaneBackend, available_backends, get_backend
from orchestrator.lanes.model import LaneSpec
from orchestrator.lanes.profiles import parse_overrides, resolve_env
from orchestrator.ledger import run_dir
from orchestrator.results.writer import RUN_FILENAME, stored_run
from orchestrator.run.config import DEFAULT_BASELINE_PREFIX, RunConfig
from orchestrator.run.stack import Stack, builder_options, resolve_stack, select_builder
from orchestrator.toolchain import N8N_VERSION
from orchestrator.verify.judge import JudgeConfig

#: what ``--resume ID`` takes from the stored run (the selection); the rest is this invocation's
RESUMED_FIELDS = ("source", "suite", "filter", "exclude", "tier", "iterations", "experiment_name", "output_dir",
                  "cases_paths")


@dataclass(frozen=True)
class ResolvedRun:
    """One run, decided: its config (every derived field filled in) and what was derived from it."""

    #: the flags as the run uses them: builder by its registry name, ``--resume``'s stored selection,
    #: ``run_id`` and ``output_dir`` set, a LangTracer suite's dataset and baseline prefix
    config: RunConfig
    stack: Stack
    #: the backend's options, parsed (its model; the run adds ``takeover`` when it resumes)
    backend_config: BackendOptions
    #: the build budget before a case's factor: ``--build-timeout-ms``, else the builder's default
    build_timeout_ms: int
    #: the lanes' environment from ``--profile`` and ``--env`` (secrets apart, never logged)
    lane_env: Mapping[str, str]
    lane_secrets: Mapping[str, str]
    #: the variables ``--env`` names: they win over what the model route would set
    explicit_env: frozenset[str]

    @property
    def run_id(self) -> str:
        assert self.config.run_id is not None  # resolve() sets it
        return self.config.run_id

    @property
    def output_dir(self) -> Path:
        assert self.config.output_dir is not None  # resolve() sets it
        return self.config.output_dir

    @property
    def resumed(self) -> bool:
        return self.config.resume is not None

    @property
    def builder(self) -> type[Builder]:
        return self.stack.builder

    @property
    def backend(self) -> type[LaneBackend]:
        return self.stack.backend

    def lane_spec(self) -> LaneSpec:
        """A fresh spec every lane of the run starts from (the caller may add the model route's env)."""
        return LaneSpec(n8n_version=N8N_VERSION, profile=self.config.profile, env=dict(self.lane_env),
                        secret_env=dict(self.lane_secrets))


def _resumed(cfg: RunConfig) -> dict[str, object]:
    """``--resume ID`` (or ``--run-id ID --resume-existing`` when the state dir holds run ID): the
    stored selection of that run; this invocation keeps its lane and runtime options."""
    resume = cfg.resume
    if cfg.resume_existing and not resume:
        if not cfg.run_id:
            raise ConfigError("--resume-existing: needs --run-id (the run to resume when its state exists)")
        if (run_dir(cfg.state_dir, cfg.run_id) / RUN_FILENAME).is_file():  # a replaced orchestrator pod
            resume = cfg.run_id
    if not resume:
        return {}
    directory = run_dir(cfg.state_dir, resume)
    if not (directory / RUN_FILENAME).is_file():
        raise ConfigError(f"--resume: no run {resume!r} under {cfg.state_dir / 'runs'}")
    stored = stored_run(directory)
    if stored is None:
        raise ConfigError(f"--resume: run {resume!r}: {directory / RUN_FILENAME} cannot be read (cut short?)")
    changes: dict[str, object] = {"resume": resume, "run_id": resume}
    for key in RESUMED_FIELDS:
        value = stored.get(key)
        if value is None:
            continue
        if key == "output_dir":
            value = Path(str(value))
        elif key == "cases_paths":
            value = [Path(str(p)) for p in value]
        changes[key] = value
    return changes


def resolve(cfg: RunConfig, builder: type[Builder] | None = None) -> ResolvedRun:
    """Decide the run ``cfg`` asks for (``builder``: a harness's own builder class instead of the
    one ``--builder`` names). It reads only its inputs (the profile, a builder's manifest, a resumed
    run's ``run.json``, the environment a backend's options fall back on) and starts nothing.

    Raises:
        ConfigError: one line naming the flag at fault.
    """
    if cfg.backend not in available_backends():
        raise ConfigError(f"--backend: unknown backend {cfg.backend!r}; choose one of {', '.join(available_backends())}")
    backend_cls = get_backend(cfg.backend)
    builder_cls = builder or select_builder(cfg.builder, cfg)  # one line naming --builder when unknown
    changes: dict[str, object] = {"builder": builder_cls.name}
    if cfg.source == "langtracer":
        if not cfg.suite:
            raise ConfigError("--suite: required with --source langtracer")
        scoped = f"instance-ai-langtracer-{cfg.suite}"  # the reference: a suite-scoped name for both
        changes["dataset"] = cfg.dataset or scoped
        if cfg.baseline_prefix == DEFAULT_BASELINE_PREFIX:
            changes["baseline_prefix"] = scoped
    if cfg.concurrency_max is not None and cfg.concurrency_max < cfg.concurrency_min:
        raise ConfigError(f"--concurrency-max: {cfg.concurrency_max} is below --concurrency-min {cfg.concurrency_min}")
    for flag, url in (("--model-gateway-url", cfg.model_gateway_url), ("--sandbox-url", cfg.sandbox_url)):
        if url is not None and not url.startswith(("http://", "https://")):
            raise ConfigError(f"{flag}: not an http(s) URL: {url!r}")
    changes.update(_resumed(cfg))
    run_id = str(changes.get("run_id") or cfg.run_id or new_run_id())
    changes["run_id"] = run_id
    changes["output_dir"] = changes.get("output_dir") or cfg.output_dir or Path("results") / run_id
    config = cfg.replace(**changes)
    builder_cls.check_config(builder_options(builder_cls, config))  # its own flags (a manifest: an input file)
    stack = resolve_stack(builder_cls, backend_cls, config)  # the builder on the backend
    backend_config = backend_cls.parse_options(stack.backend_options, os.environ)
    backend_cls.check_options(backend_config, config.lanes)  # e.g. static: a --base-url per lane
    env, secrets = resolve_env(config.profile, config.env)  # --profile and --env, parsed once
    budget = config.build_timeout_ms if config.build_timeout_ms is not None else builder_cls.default_build_timeout_ms
    explicit = frozenset(parse_overrides(config.env))
    return ResolvedRun(config, stack, backend_config, budget, MappingProxyType(env), MappingProxyType(secrets), explicit)


async def preflight(run: ResolvedRun) -> None:
    """The I/O checks before anything starts (one-line :class:`ConfigError` naming the flag)."""
    cfg = run.config
    if cfg.baseline is not None and not cfg.baseline.is_file():
        raise ConfigError(f"--baseline: {cfg.baseline} is not a file")
    if cfg.durations_from is not None and not cfg.durations_from.is_file():
        raise ConfigError(f"--durations-from: {cfg.durations_from} is not a file")
    run.backend.preflight(run.lane_spec())  # e.g. docker: the lane image
    JudgeConfig.from_env()  # N8N_INSTANCE_AI_EVAL_JUDGE_EFFORT
    await _check_case_selection(run)
    await run.backend.lanes_answer(run.backend_config, cfg.lanes)  # e.g. static: every --base-url lane answers


async def _check_case_selection(run: ResolvedRun) -> None:
    """A builder whose options name cases (``checks_cases``) sees which cases exist and which the run
    will run (after ``--resume``: that run's stored selection), e.g. a prebuilt manifest: every slug
    a case, every selected case in it."""
    if not run.builder.checks_cases:
        return
    from orchestrator.cases import load_disk, load_selected

    cfg = run.config
    selected = await load_selected(cfg.source, cfg.cases_paths, cfg.suite, cfg.filter, cfg.exclude, cfg.tier)
    known = [c.slug for c in load_disk(cfg.cases_paths)[0]] if cfg.source == "disk" else [c.slug for c in selected]
    run.builder.check_cases(run.stack.builder_options, [c.slug for c in selected], known)


async def prepare(cfg: RunConfig, builder: type[Builder] | None = None) -> ResolvedRun:
    """:func:`resolve` then :func:`preflight`: the run, decided and checked."""
    run = resolve(cfg, builder)
    await preflight(run)
    return run


__all__ = ["RESUMED_FIELDS", "ResolvedRun", "preflight", "prepare", "resolve", "run_dir"]
