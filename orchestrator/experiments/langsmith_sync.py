"""LangSmith experiments for ``orchestrator run`` (active only when ``LANGSMITH_API_KEY`` is set),
interoperable with n8n's own ``instance-ai-baseline-*`` experiments both ways.

* ``on_cases``: the dataset is only *read* by default (its examples, if it exists, are referenced
  by the runs); ``--sync-dataset`` opts in to upserting the selected cases into it — one example
  per case keyed by slug, splits ``[slug, *datasets]``, rewritten only when its digest changed.
  Then the experiment (a LangSmith project) is created as ``<experiment-name>-<8 hex>``, the way
  LangSmith's ``evaluate`` suffixes names. A run on the scripted model is named
  ``scripted-<experiment-name>-<8 hex>`` (so it can never match a baseline prefix), carries
  ``model_server: scripted`` in its metadata and the tag ``model-server:scripted`` on its runs.
* ``on_unit``: n8n's record shape (``run/langsmith-driver.ts``, read back by
  ``comparison/fetch-baseline.ts``): one root run per (case, scenario, iteration) with inputs
  ``{testCaseFile, scenarioName, _iteration}`` and outputs ``{passed, score, reasoning,
  failureCategory, incomplete, buildSuccess, workflowId, threadId, expectationResults, …}``; a case
  without scenarios gets one ``__build_only__`` row judged by its expectations. Our whole unit
  record rides along under ``orchestrator`` on the unit's first row, so our own baselines rebuild
  losslessly. Feedback: n8n's ``scenario_pass`` / ``failure_category`` per row, ours
  (each scenario and expectation, ``unit_pass``, ``build_cost_usd``, …) on the first row.
* ``on_finish``: closes the experiment with n8n's completion marker (``pass_rate_per_iter`` in its
  metadata), then picks the baseline as n8n's ``findLatestBaseline`` does — the newest experiment
  named ``--baseline-prefix…`` that carries the marker among the 25 newest, else the newest — never
  a scripted run nor this run's own; rebuilds its units from either record shape (n8n's rows, or
  ours) and returns ``comparison_dict(compare(results, baseline))`` for the pipeline to embed.

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

from orchestrator.cases import LoadedCase
from orchestrator.compare import compare, comparison_dict
from orchestrator.domain import BuildStatus
from orchestrator.experiments.langsmith_rows import (
    per_run_pass_metrics,
    row_feedback,
    trace_spans,
    unit_feedback,
    unit_from_outputs,
    unit_rows,
    units_from_n8n_rows,
)
from orchestrator.ledger import run_dir
from orchestrator.redact import redact, redact_obj, register_secret
from orchestrator.results.model import (
    EvalResults,
    UnitResult,
)
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import RunHooks

log = logging.getLogger(__name__)
T = TypeVar("T")

API_KEY_ENV = "LANGSMITH_API_KEY"
ENDPOINT_ENV = "LANGSMITH_ENDPOINT"
DEFAULT_DATASET = "instance-ai-workflow-evals"
LANGTRACER_DATASET_PREFIX = "instance-ai-langtracer-"
#: Bump when the shape of an example's inputs changes, so every example is rewritten once.
EXAMPLE_SCHEMA = 1
#: Experiments a scripted-model run creates start with this, so no baseline prefix matches them.
SCRIPTED_PREFIX = "scripted-"
SCRIPTED_TAG = "model-server:scripted"
#: n8n's completion marker (``fetch-baseline.ts`` ``hasCompletionMarker``) and its probe window.
COMPLETION_MARKER = "pass_rate_per_iter"
MAX_COMPLETION_PROBES = 25
STATE_FILENAME = "langsmith.json"
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
        """The metadata the dataset example carries: slug, content digest and schema version."""
        return {"slug": self.slug, "digest": self.digest, "schema": EXAMPLE_SCHEMA}


def example_for(case: LoadedCase) -> ExampleSpec:
    """One dataset example per case: the case as authored (redacted), splits = slug + datasets."""
    inputs = redact_obj({"slug": case.slug, "case": case.case.model_dump(mode="json", by_alias=True, exclude_none=True)})
    splits = list(dict.fromkeys([case.slug, *case.case.datasets]))
    canonical = json.dumps({"schema": EXAMPLE_SCHEMA, "inputs": inputs, "splits": splits}, sort_keys=True)
    return ExampleSpec(case.slug, inputs, splits, hashlib.sha256(canonical.encode()).hexdigest()[:16])


def _dotted(seconds: float, run_id: uuid.UUID) -> str:
    """A run's part of LangSmith's ``dotted_order``: its start time, then its id."""
    return f"{_ts(seconds):%Y%m%dT%H%M%S%fZ}{run_id}"


def _ts(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def _experiment_metadata(cfg: RunConfig, run_id: str, git: GitInfo) -> dict[str, Any]:
    env = {}
    for pair in cfg.env:
        name, _, value = pair.partition("=")
        if name and not _SECRET_NAME.search(name):
            env[name] = value
    redacted: dict[str, Any] = redact_obj({
        "run_id": run_id, "branch": git.branch, "revision_id": git.sha, "dirty": git.dirty,
        "build_model": cfg.build_model, "iterations": cfg.iterations, "tier": cfg.tier, "filter": cfg.filter,
        "exclude": cfg.exclude, "source": cfg.source, "suite": cfg.suite, "backend": cfg.backend,
        "profile": cfg.profile, "lane_env": env, "orchestrator": "n8n-eval-orchestrator",
    })
    return redacted


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
    dataset_id: uuid.UUID | None
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
        #: scenario names and expectation texts per case slug (n8n records one row per scenario, run or not)
        self._scenarios: dict[str, list[str]] = {}
        self._expectations: dict[str, list[str]] = {}
        #: the run's model is the embedded scripted one: tagged, and never a baseline
        self.scripted = cfg.model_server == "scripted" or (
            cfg.model_server == "auto" and not self.env.get("ANTHROPIC_API_KEY"))

    @classmethod
    def from_env(cls, cfg: RunConfig, env: Mapping[str, str] | None = None, **kwargs: Any) -> LangSmithHooks | None:
        """The hooks when the LangSmith API key is set in ``env`` (this process's by default); None without."""
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
        """The LangSmith dataset the run's cases sync to."""
        return dataset_name(self.cfg)

    @property
    def baseline_prefix(self) -> str:
        """The prefix of experiments that count as a baseline."""
        return self.cfg.baseline_prefix

    @property
    def experiment_prefix(self) -> str:
        """The run's experiment name (a scripted-model run's marked with the scripted prefix)."""
        name = self.cfg.experiment_name or default_experiment_name(self.env)
        return f"{SCRIPTED_PREFIX}{name}" if self.scripted and not name.startswith(SCRIPTED_PREFIX) else name

    def _metadata(self, run_id: str, git: GitInfo) -> dict[str, Any]:
        return {**_experiment_metadata(self.cfg, run_id, git), "model_server": "scripted" if self.scripted else "real"}

    def _state_path(self, run_id: str) -> Path:
        return run_dir(self.cfg.state_dir, run_id) / STATE_FILENAME

    # ------------------------------------------------------------ hooks
    async def on_cases(self, run_id: str, cases: list[LoadedCase]) -> None:
        """Sync the cases to the dataset and create the run's experiment (best effort: a failure is noted,
        the run goes on)."""
        await self._best_effort("dataset sync / experiment creation", lambda: self._start(run_id, cases))

    async def on_unit(self, unit: UnitResult) -> None:
        """Record a finished unit in the experiment (best effort; nothing without an experiment)."""
        if self.experiment is None:
            return
        await self._best_effort(f"recording unit {unit.unit_id}", lambda: self._record(unit))

    async def on_finish(self, results: EvalResults) -> dict[str, object] | None:
        """Close the experiment and note it in the results' config, then look up the baseline to compare
        with. Best effort: a failed lookup sets ``comparison_status`` to ``fetch_failed``."""
        if self.experiment is not None:
            await self._best_effort("closing the experiment", lambda: self._close(results))
            results.config["langsmith"] = {"dataset": self.dataset, "experiment": self.experiment.name,
                                           "experiment_id": str(self.experiment.id)}
            if results.experiment_name is None:
                results.experiment_name = self.experiment_prefix
        failures = len(self.failures)
        baseline = await self._best_effort("baseline lookup", lambda: self._find_baseline(results))
        if baseline is None:
            if len(self.failures) > failures:  # the lookup raised: n8n's fetch_failed, with its message
                self.comparison_status, self.comparison_error = "fetch_failed", self.failures[-1]
            return None
        self.baseline = baseline
        results.config.setdefault("langsmith", {})["baseline"] = baseline.run_id  # type: ignore[index]
        return comparison_dict(compare(results, baseline))

    # ------------------------------------------------------------ dataset + experiment
    def _read_examples(self) -> tuple[uuid.UUID | None, dict[str, uuid.UUID]]:
        """Read-only: the dataset's id and its examples by slug, and by ``slug/scenario`` for n8n's
        per-scenario examples (nothing when the dataset does not exist)."""
        if not self.client.has_dataset(dataset_name=self.dataset):
            return None, {}
        ds = self.client.read_dataset(dataset_name=self.dataset)
        ids: dict[str, uuid.UUID] = {}
        for ex in self.client.list_examples(dataset_id=ds.id):
            inputs, meta = ex.inputs or {}, ex.metadata or {}
            slug = inputs.get("testCaseFile") or meta.get("slug") or inputs.get("slug")
            if not isinstance(slug, str):
                continue
            scenario = inputs.get("scenarioName")
            ids.setdefault(f"{slug}/{scenario}" if isinstance(scenario, str) else slug, ex.id)
        return ds.id, ids

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
        self._scenarios = {c.slug: [s.name for s in c.case.execution_scenarios] for c in cases}
        self._expectations = {c.slug: [*c.case.outcome_expectations, *c.case.process_expectations] for c in cases}
        dataset_id: uuid.UUID | None
        if self.cfg.sync_dataset:
            dataset_id, examples = self.sync_cases(cases)
        else:  # runs only read the shared dataset unless told to write it (--sync-dataset)
            dataset_id, examples = self._read_examples()
        state = self._state_path(run_id)
        if self.cfg.resume and state.is_file():  # a resumed run keeps recording into its experiment
            saved = json.loads(state.read_text())
            project = self.client.read_project(project_id=saved["experiment_id"])
            self.experiment = _Experiment(project.id, project.name or saved["experiment"], dataset_id, examples)
            return
        self._git = git_info(self.env)
        name = f"{self.experiment_prefix}-{uuid.uuid4().hex[:8]}"
        project = self.client.create_project(
            name, reference_dataset_id=dataset_id, metadata=self._metadata(run_id, self._git),
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
        error = unit.build.error if unit.build.status is not BuildStatus.ok else None
        tags = [SCRIPTED_TAG] if self.scripted else None
        rows = unit_rows(unit, self._scenarios.get(unit.case), self._expectations.get(unit.case))
        for index, row in enumerate(rows):
            run_id = uuid.uuid5(exp.id, f"{unit.unit_id}/{row.scenario}")
            example = exp.examples.get(f"{unit.case}/{row.scenario}") or exp.examples.get(unit.case)
            dotted = _dotted(unit.started_at, run_id)
            self.client.create_run(
                name=f"{unit.case}/{row.scenario}#{unit.iteration}", run_type="chain", inputs=row.inputs,
                project_name=exp.name, id=run_id, reference_example_id=example, trace_id=run_id, dotted_order=dotted,
                start_time=_ts(unit.started_at), end_time=_ts(unit.finished_at), outputs=row.outputs,
                error=redact(error) if error else None, tags=tags,
                extra={"metadata": redact_obj({"lane": unit.lane, "attempts": unit.build.attempts,
                                               "failure_category": unit.failure_category})},
            )
            for span in trace_spans(unit, row, first=index == 0):
                span_id = uuid.uuid5(run_id, span.name)
                self.client.create_run(
                    name=span.name, run_type="chain", inputs=span.inputs, outputs=span.outputs, id=span_id,
                    project_name=exp.name, parent_run_id=run_id, trace_id=run_id,
                    dotted_order=f"{dotted}.{_dotted(span.start, span_id)}",
                    start_time=_ts(span.start), end_time=_ts(span.end), tags=tags,
                    extra={"metadata": redact_obj({"lane": unit.lane})})
            feedback = row_feedback(row, unit) + (unit_feedback(unit) if index == 0 else [])
            for fb in feedback:
                self.client.create_feedback(run_id, fb.key, score=fb.score, value=fb.value, comment=fb.comment,
                                            session_id=exp.id, stop_after_attempt=self.feedback_attempts)

    def _per_run_pass_metrics(self) -> None:
        """n8n's ``writePerRunPassMetrics`` over every root run the experiment holds (a resumed run's
        earlier ones included)."""
        exp = self.experiment
        assert exp is not None
        runs = [(str(r.id), r.inputs or {}, r.outputs or {}) for r in self.client.list_runs(project_id=exp.id, is_root=True)]
        for run_id, fb in per_run_pass_metrics(runs):
            self.client.create_feedback(run_id, fb.key, score=fb.score, session_id=exp.id,
                                        stop_after_attempt=self.feedback_attempts)

    def _close(self, results: EvalResults) -> None:
        exp = self.experiment
        assert exp is not None
        self._per_run_pass_metrics()
        summary = results.summary
        from orchestrator.results.contract import to_document

        extra: dict[str, Any] = {"units_finished": summary.units_finished,
                                 "pass_rate": summary.pass_rate.rate if summary.pass_rate else None,
                                 "build_cost_usd": summary.build_cost_usd} if summary else {}
        # n8n's completion marker: written only when the run finished (fetch-baseline.ts reads it)
        extra[COMPLETION_MARKER] = to_document(results)["summary"]["passRatePerIter"]
        metadata = {**self._metadata(results.run_id, self._git or git_info(self.env)), **extra}
        if results.config.get("model_server") == "scripted":
            metadata["model_server"] = "scripted"
        self.client.update_project(exp.id, end_time=_ts(results.finished_at or results.started_at),
                                   metadata=metadata)

    # ------------------------------------------------------------ baseline
    def _find_baseline(self, results: EvalResults) -> EvalResults | None:
        """n8n's ``findLatestBaseline`` then ``fetchBaselineBucket`` (``comparison/fetch-baseline.ts``),
        saying how it went in :attr:`comparison_status` as n8n's ``tryRunComparison``
        (``run/langsmith-driver.ts``): no experiment → ``no_baseline``; the newest is this run's own
        → ``self_baseline`` (nothing to compare against); one with no readable runs → ``fetch_failed``."""
        prefix = self.baseline_prefix
        candidates = [p for p in self.client.list_projects(name_contains=prefix)
                      if (p.name or "").startswith(prefix) and not _is_scripted(p)]
        if not candidates:
            log.info("LangSmith: no baseline experiment named %s* (not scripted); comparison skipped", prefix)
            self.comparison_status = "no_baseline"
            return None
        candidates.sort(key=lambda p: p.start_time.timestamp() if p.start_time else 0.0, reverse=True)
        chosen = next((p for p in candidates[:MAX_COMPLETION_PROBES] if _has_completion_marker(p)), candidates[0])
        if self.experiment is not None and chosen.id == self.experiment.id:
            log.info("LangSmith: this run (%s) is the newest baseline; nothing to compare against", chosen.name)
            self.comparison_status = "self_baseline"
            self.comparison_error = f"This run is the baseline ({chosen.name}): nothing to compare against"
            return None
        runs = list(self.client.list_runs(project_id=chosen.id, is_root=True))
        ours = {u.unit_id: u for run in runs if (u := unit_from_outputs(run.outputs)) is not None}
        units = list(ours.values()) or units_from_n8n_rows([(run.inputs or {}, run.outputs or {}) for run in runs])
        if not units:
            log.info("LangSmith: baseline %s has no readable runs; comparison skipped", chosen.name)
            self.comparison_status = "fetch_failed"
            self.comparison_error = f"baseline {chosen.name} has no readable runs"
            return None
        log.info("LangSmith: comparing against baseline %s (%d unit(s))", chosen.name, len(units))
        self.comparison_status = "ok"
        return EvalResults(run_id=chosen.name or str(chosen.id), experiment_name=chosen.name,
                           started_at=chosen.start_time.timestamp() if chosen.start_time else 0.0, units=units,
                           config={"langsmith_experiment_id": str(chosen.id)})


def _project_metadata(project: Any) -> dict[str, Any]:
    extra = getattr(project, "extra", None)
    meta = extra.get("metadata") if isinstance(extra, dict) else None
    return meta if isinstance(meta, dict) else {}


def _has_completion_marker(project: Any) -> bool:
    return COMPLETION_MARKER in _project_metadata(project)


def _is_scripted(project: Any) -> bool:
    """A run on the scripted model: never a baseline, whatever it is named."""
    return (project.name or "").startswith(SCRIPTED_PREFIX) or _project_metadata(project).get("model_server") == "scripted"


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
