"""LangSmith experiments for ``orchestrator run`` (active only when ``LANGSMITH_API_KEY`` is set).

* ``on_cases``: the selected cases are upserted into the dataset — one example per case keyed by
  slug (metadata ``slug``), splits ``[slug, *datasets]``; an example is only rewritten when its
  content digest changed. Then the experiment (a LangSmith project referencing the dataset) is
  created as ``<experiment-name>-<8 hex>``, the way LangSmith's own ``evaluate`` suffixes names.
* ``on_unit``: one root run per (case, iteration) on the experiment, outputs = the redacted unit
  record (verdicts, expectation results, workflow id, build), plus feedback: each scenario and
  expectation (1/0), ``unit_pass``, ``build_cost_usd``, ``build_turns``, ``attribution``.
* ``on_finish``: closes the experiment, finds the newest experiment named ``--baseline-prefix…``
  (skipped when none exists or when it is this run's own), rebuilds its units from the runs'
  outputs and returns ``comparison_dict(compare(results, baseline))`` for the pipeline to embed.

Best-effort by contract: every LangSmith failure is logged (redacted) and never fails the run.
The SDK is used synchronously (``auto_batch_tracing=False``): no background tracing thread, every
write is one plain REST call whose failure surfaces here, in order, where it is logged.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
import os
import re
import subprocess
import uuid
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import langsmith
from langsmith.utils import LangSmithRetry
from pydantic import ValidationError

from orchestrator.cases import LoadedCase
from orchestrator.compare import compare, comparison_dict
from orchestrator.domain import BuildStatus, Verdict
from orchestrator.redact import redact, redact_obj, register_secret
from orchestrator.results.model import EvalResults, ExpectationResult, ScenarioResult, UnitResult
from orchestrator.results.scoring import UnitOutcome, unit_outcome
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import RunHooks
from orchestrator.verify.workflow_checks import feedback

log = logging.getLogger(__name__)
T = TypeVar("T")

API_KEY_ENV = "LANGSMITH_API_KEY"
ENDPOINT_ENV = "LANGSMITH_ENDPOINT"
DEFAULT_DATASET = "instance-ai-workflow-evals"
LANGTRACER_DATASET_PREFIX = "instance-ai-langtracer-"
#: Bump when the shape of an example's inputs changes, so every example is rewritten once.
EXAMPLE_SCHEMA = 1
OUTPUT_SCHEMA = 1
STATE_FILENAME = "langsmith.json"
MAX_COMMENT = 2000
_SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|AUTH", re.IGNORECASE)


# --------------------------------------------------------------------------- names


def dataset_name(cfg: RunConfig) -> str:
    """``--dataset``; in langtracer mode a suite-scoped default so runs never touch the shared one."""
    if cfg.dataset:
        return cfg.dataset
    if cfg.source == "langtracer" and cfg.suite:
        return f"{LANGTRACER_DATASET_PREFIX}{cfg.suite}"
    return DEFAULT_DATASET


def _git(args: list[str], cwd: Path | None) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _name_part(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", value).strip("-") or "unknown"


@dataclass(frozen=True)
class GitInfo:
    branch: str | None
    sha: str | None
    dirty: bool


def git_info(env: Mapping[str, str], cwd: Path | None = None) -> GitInfo:
    """Branch and commit: CI variables first (``LANGSMITH_BRANCH``/``LANGSMITH_REVISION_ID``, then
    GitHub's), else ``git rev-parse``; ``None`` where there is no git."""
    branch = env.get("LANGSMITH_BRANCH") or env.get("GITHUB_HEAD_REF") or env.get("GITHUB_REF_NAME")
    sha = env.get("LANGSMITH_REVISION_ID") or env.get("GITHUB_SHA")
    if not branch:
        branch = _git(["rev-parse", "--abbrev-ref", "HEAD"], cwd)
    if not sha:
        sha = _git(["rev-parse", "HEAD"], cwd)
    status = _git(["status", "--porcelain", "--untracked-files=no"], cwd)
    return GitInfo(branch=branch or None, sha=sha or None, dirty=bool(status))


def default_experiment_name(env: Mapping[str, str], cwd: Path | None = None) -> str:
    """``{branch}-{sha}`` in CI, ``local-{branch}-{sha}[-dirty]`` elsewhere (``unknown`` without git)."""
    info = git_info(env, cwd)
    name = f"{_name_part(info.branch or 'unknown')}-{(info.sha or 'unknown')[:8]}"
    if env.get("CI", "").lower() in ("1", "true", "yes"):
        return name
    return f"local-{name}" + ("-dirty" if info.dirty else "")


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class ExampleSpec:
    slug: str
    inputs: dict[str, Any]
    splits: list[str]
    digest: str

    @property
    def metadata(self) -> dict[str, Any]:
        return {"slug": self.slug, "digest": self.digest, "schema": EXAMPLE_SCHEMA}


def example_for(case: LoadedCase) -> ExampleSpec:
    """One dataset example per case: the case as authored (redacted), splits = slug + datasets."""
    inputs = redact_obj({"slug": case.slug, "case": case.case.model_dump(mode="json", by_alias=True, exclude_none=True)})
    splits = list(dict.fromkeys([case.slug, *case.case.datasets]))
    canonical = json.dumps({"schema": EXAMPLE_SCHEMA, "inputs": inputs, "splits": splits}, sort_keys=True)
    return ExampleSpec(case.slug, inputs, splits, hashlib.sha256(canonical.encode()).hexdigest()[:16])


def unit_outputs(unit: UnitResult) -> dict[str, Any]:
    """What a run records: the whole unit (for baseline rebuilds) and a readable summary."""
    return redact_obj({
        "schema": OUTPUT_SCHEMA,
        "outcome": unit_outcome(unit).value,
        "workflow_id": unit.build.workflow_id,
        "build_status": unit.build.status.value,
        "verdicts": {s.name: s.verdict.value for s in unit.scenarios},
        "expectation_results": [e.model_dump(mode="json") for e in unit.expectations],
        "unit": unit.model_dump(mode="json"),
    })


def unit_from_outputs(outputs: Mapping[str, Any] | None) -> UnitResult | None:
    """The unit a run of ours recorded; ``None`` for runs of another shape."""
    if not outputs or not isinstance(outputs.get("unit"), dict):
        return None
    try:
        return UnitResult.model_validate(outputs["unit"])
    except ValidationError:
        return None


@dataclass(frozen=True)
class FeedbackSpec:
    key: str
    score: float | None = None
    value: str | None = None
    comment: str | None = None


def _key_part(text: str, limit: int = 60) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:limit].rstrip("-") or "unnamed"


def _comment(text: str | None) -> str | None:
    return redact(text)[:MAX_COMMENT] if text else None


def unit_feedback(unit: UnitResult) -> list[FeedbackSpec]:
    """Feedback rows for one unit; ``incomplete`` verdicts are left out (they judge nothing)."""
    out: list[FeedbackSpec] = []
    for s in unit.scenarios:
        if s.verdict is not Verdict.incomplete:
            out.append(FeedbackSpec(f"scenario.{_key_part(s.name)}", 1.0 if s.verdict is Verdict.passed else 0.0,
                                    value=s.attribution.value if s.attribution else None, comment=_comment(s.reason)))
    for e in unit.expectations:
        if e.verdict is not Verdict.incomplete:
            out.append(FeedbackSpec(f"expectation.{e.kind}.{_key_part(e.text)}",
                                    1.0 if e.verdict is Verdict.passed else 0.0,
                                    value=e.attribution.value if e.attribution else None,
                                    comment=_comment(e.text + (f" — {e.reason}" if e.reason else ""))))
    outcome = unit_outcome(unit)
    if outcome in (UnitOutcome.passed, UnitOutcome.failed):
        out.append(FeedbackSpec("unit_pass", 1.0 if outcome is UnitOutcome.passed else 0.0, value=outcome.value))
    out.append(FeedbackSpec("build_cost_usd", float(unit.build.cost_usd)))
    out.append(FeedbackSpec("build_turns", float(unit.build.turns)))
    # workflow checks: evals.workflows.<dimension>.<check>, 1 pass / 0 fail, N/A omitted
    by_key = {f"evals.workflows.{c.dimension}.{c.name}": c for c in unit.structural if c.dimension}
    for key, score in feedback(unit.structural).items():
        out.append(FeedbackSpec(key, float(score), comment=_comment(by_key[key].detail) if key in by_key else None))
    rows: list[ScenarioResult | ExpectationResult] = [*unit.scenarios, *unit.expectations]
    attribution = unit.attribution or next(
        (r.attribution for r in rows if r.verdict is Verdict.failed and r.attribution), None)
    if attribution is not None:
        out.append(FeedbackSpec("attribution", value=attribution.value, comment=_comment(unit.failure_category)))
    return out


def _ts(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def _experiment_metadata(cfg: RunConfig, run_id: str, git: GitInfo) -> dict[str, Any]:
    env = {}
    for pair in cfg.env:
        name, _, value = pair.partition("=")
        if name and not _SECRET_NAME.search(name):
            env[name] = value
    return redact_obj({
        "run_id": run_id, "branch": git.branch, "revision_id": git.sha, "dirty": git.dirty,
        "build_model": cfg.build_model, "iterations": cfg.iterations, "tier": cfg.tier, "filter": cfg.filter,
        "exclude": cfg.exclude, "source": cfg.source, "suite": cfg.suite, "backend": cfg.backend,
        "profile": cfg.profile, "lane_env": env, "orchestrator": "n8n-eval-orchestrator",
    })


# --------------------------------------------------------------------------- client


def make_client(api_key: str, api_url: str | None = None, *, retries: int = 3, timeout_ms: int = 30_000) -> langsmith.Client:
    """A synchronous client: no tracing thread, no batching, ``retries`` urllib3 retries on 429/5xx."""
    register_secret(api_key)
    retry = LangSmithRetry(total=retries, status_forcelist=[429, 500, 502, 503, 504, 408, 425], backoff_factor=0.5,
                           raise_on_redirect=False, raise_on_status=False, respect_retry_after_header=True,
                           allowed_methods=None)
    return langsmith.Client(api_url=api_url, api_key=api_key, auto_batch_tracing=False, retry_config=retry,
                            timeout_ms=(min(timeout_ms, 10_000), timeout_ms), omit_traced_runtime_info=True)


@dataclass
class _Experiment:
    id: uuid.UUID
    name: str
    dataset_id: uuid.UUID
    examples: dict[str, uuid.UUID] = field(default_factory=dict)


class LangSmithHooks(RunHooks):
    """Records one run as a LangSmith experiment and compares it against the newest baseline."""

    def __init__(self, client: langsmith.Client, cfg: RunConfig, *, env: Mapping[str, str] | None = None,
                 feedback_attempts: int = 3) -> None:
        self.client = client
        self.cfg = cfg
        self.env = dict(os.environ if env is None else env)
        self.feedback_attempts = feedback_attempts
        self.experiment: _Experiment | None = None
        #: The baseline found in ``on_finish`` (for a PR comment that wants the full comparison).
        self.baseline: EvalResults | None = None
        self.failures: list[str] = []
        self._git: GitInfo | None = None

    @classmethod
    def from_env(cls, cfg: RunConfig, env: Mapping[str, str] | None = None, **kwargs: Any) -> LangSmithHooks | None:
        env = os.environ if env is None else env
        key = env.get(API_KEY_ENV)
        if not key:
            return None
        client = make_client(key, env.get(ENDPOINT_ENV) or None, retries=kwargs.pop("retries", 3))
        return cls(client, cfg, env=env, **kwargs)

    # ------------------------------------------------------------ plumbing
    async def _best_effort(self, what: str, fn: Callable[[], T]) -> T | None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # SDK deprecation notices are not the user's business
                return await asyncio.to_thread(fn)
        except Exception as exc:  # best effort by contract
            message = redact(f"LangSmith {what} failed: {type(exc).__name__}: {exc}")[:1000]
            self.failures.append(message)
            log.warning("%s", message)
            return None

    # read from the config when used: ``--resume`` restores the stored selection into it first
    @property
    def dataset(self) -> str:
        return dataset_name(self.cfg)

    @property
    def baseline_prefix(self) -> str:
        return self.cfg.baseline_prefix

    @property
    def experiment_prefix(self) -> str:
        if self.cfg.experiment_name:
            return self.cfg.experiment_name
        return default_experiment_name(self.env)

    def _state_path(self, run_id: str) -> Path:
        return self.cfg.state_dir / "runs" / run_id / STATE_FILENAME

    # ------------------------------------------------------------ hooks
    async def on_cases(self, run_id: str, cases: list[LoadedCase]) -> None:
        await self._best_effort("dataset sync / experiment creation", lambda: self._start(run_id, cases))

    async def on_unit(self, unit: UnitResult) -> None:
        if self.experiment is None:
            return
        await self._best_effort(f"recording unit {unit.unit_id}", lambda: self._record(unit))

    async def on_finish(self, results: EvalResults) -> dict[str, object] | None:
        if self.experiment is not None:
            await self._best_effort("closing the experiment", lambda: self._close(results))
            results.config["langsmith"] = {"dataset": self.dataset, "experiment": self.experiment.name,
                                           "experiment_id": str(self.experiment.id)}
            if results.experiment_name is None:
                results.experiment_name = self.experiment_prefix
        baseline = await self._best_effort("baseline lookup", lambda: self._find_baseline(results))
        if baseline is None:
            return None
        self.baseline = baseline
        results.config.setdefault("langsmith", {})["baseline"] = baseline.run_id  # type: ignore[index]
        return comparison_dict(compare(results, baseline))

    # ------------------------------------------------------------ dataset + experiment
    def _dataset(self) -> Any:
        if self.client.has_dataset(dataset_name=self.dataset):
            return self.client.read_dataset(dataset_name=self.dataset)
        return self.client.create_dataset(self.dataset, description="n8n Instance AI workflow evals (one example per case).")

    def sync_cases(self, cases: list[LoadedCase]) -> tuple[uuid.UUID, dict[str, uuid.UUID]]:
        """Upsert one example per case (create missing, update changed); returns dataset id and slug → example id."""
        ds = self._dataset()
        existing: dict[str, Any] = {}
        for ex in self.client.list_examples(dataset_id=ds.id):
            slug = (ex.metadata or {}).get("slug") or (ex.inputs or {}).get("slug")
            if isinstance(slug, str):
                existing.setdefault(slug, ex)
        specs = [example_for(c) for c in cases]
        creates = [s for s in specs if s.slug not in existing]
        updates = [s for s in specs if s.slug in existing and (existing[s.slug].metadata or {}).get("digest") != s.digest]
        ids = {s.slug: existing[s.slug].id for s in specs if s.slug in existing}
        if updates:
            self.client.update_examples(dataset_id=ds.id, updates=[
                {"id": existing[s.slug].id, "inputs": s.inputs, "metadata": s.metadata, "split": s.splits} for s in updates
            ])
        if creates:
            new_ids = {s.slug: uuid.uuid4() for s in creates}
            self.client.create_examples(dataset_id=ds.id, examples=[
                {"id": new_ids[s.slug], "inputs": s.inputs, "metadata": s.metadata, "split": s.splits} for s in creates
            ])
            ids.update(new_ids)
        log.info("LangSmith dataset %s: %d case(s), %d created, %d updated", self.dataset, len(specs), len(creates), len(updates))
        return ds.id, ids

    def _start(self, run_id: str, cases: list[LoadedCase]) -> None:
        dataset_id, examples = self.sync_cases(cases)
        state = self._state_path(run_id)
        if self.cfg.resume and state.is_file():  # a resumed run keeps recording into its experiment
            saved = json.loads(state.read_text())
            project = self.client.read_project(project_id=saved["experiment_id"])
            self.experiment = _Experiment(project.id, project.name or saved["experiment"], dataset_id, examples)
            return
        self._git = git_info(self.env)
        name = f"{self.experiment_prefix}-{uuid.uuid4().hex[:8]}"
        project = self.client.create_project(
            name, reference_dataset_id=dataset_id, metadata=_experiment_metadata(self.cfg, run_id, self._git),
            description=f"orchestrator run {run_id}",
        )
        self.experiment = _Experiment(project.id, name, dataset_id, examples)
        try:
            state.parent.mkdir(parents=True, exist_ok=True)
            state.write_text(json.dumps({"experiment": name, "experiment_id": str(project.id), "dataset": self.dataset}))
        except OSError as exc:
            log.debug("cannot save LangSmith state: %s", exc)
        log.info("LangSmith experiment %s (dataset %s)", name, self.dataset)

    # ------------------------------------------------------------ units
    def _record(self, unit: UnitResult) -> None:
        exp = self.experiment
        assert exp is not None
        run_id = uuid.uuid5(exp.id, unit.unit_id)
        error = unit.build.error if unit.build.status is not BuildStatus.ok else None
        self.client.create_run(
            name=unit.unit_id, run_type="chain", inputs={"case": unit.case, "iteration": unit.iteration},
            project_name=exp.name, id=run_id, reference_example_id=exp.examples.get(unit.case),
            start_time=_ts(unit.started_at), end_time=_ts(unit.finished_at), outputs=unit_outputs(unit),
            error=redact(error) if error else None,
            extra={"metadata": redact_obj({"lane": unit.lane, "attempts": unit.build.attempts,
                                           "failure_category": unit.failure_category})},
        )
        for fb in unit_feedback(unit):
            self.client.create_feedback(run_id, fb.key, score=fb.score, value=fb.value, comment=fb.comment,
                                        session_id=exp.id, stop_after_attempt=self.feedback_attempts)

    def _close(self, results: EvalResults) -> None:
        exp = self.experiment
        assert exp is not None
        summary = results.summary
        extra = {"units_finished": summary.units_finished, "pass_rate": summary.pass_rate.rate if summary.pass_rate else None,
                 "build_cost_usd": summary.build_cost_usd} if summary else {}
        self.client.update_project(exp.id, end_time=_ts(results.finished_at or results.started_at),
                                   metadata={**_experiment_metadata(self.cfg, results.run_id, self._git or git_info(self.env)),
                                             **extra})

    # ------------------------------------------------------------ baseline
    def _find_baseline(self, results: EvalResults) -> EvalResults | None:
        prefix = self.baseline_prefix
        candidates = [p for p in self.client.list_projects(name_contains=prefix) if (p.name or "").startswith(prefix)]
        if not candidates:
            log.info("LangSmith: no baseline experiment named %s* yet; comparison skipped", prefix)
            return None
        newest = max(candidates, key=lambda p: p.start_time)
        if self.experiment is not None and newest.id == self.experiment.id:
            log.info("LangSmith: this run is the newest %s* experiment (a baseline run); comparison skipped", prefix)
            return None
        units = [u for run in self.client.list_runs(project_id=newest.id, is_root=True)
                 if (u := unit_from_outputs(run.outputs)) is not None]
        if not units:
            log.info("LangSmith: baseline %s has no runs recorded by this orchestrator; comparison skipped", newest.name)
            return None
        log.info("LangSmith: comparing against baseline %s (%d unit(s))", newest.name, len(units))
        return EvalResults(run_id=newest.name or str(newest.id), experiment_name=newest.name,
                           started_at=newest.start_time.timestamp(), units=units,
                           config={"langsmith_experiment_id": str(newest.id)})


def default_hooks(cfg: RunConfig, env: Mapping[str, str] | None = None) -> list[RunHooks]:
    """The hooks ``orchestrator run`` installs: LangSmith when ``LANGSMITH_API_KEY`` is set."""
    hooks: list[RunHooks] = []
    try:
        ls = LangSmithHooks.from_env(cfg, env)
    except Exception as exc:  # a broken LangSmith setup never stops the run
        log.warning("LangSmith disabled: %s", redact(str(exc)))
        ls = None
    if ls is not None:
        hooks.append(ls)
    return hooks
