"""The merged result's files, and (``--upload-experiment``) its one LangSmith experiment: the merged
units recorded as ``run`` records a run's (:class:`~orchestrator.experiments.langsmith_sync.LangSmithHooks`),
then compared with the newest baseline — n8n's ``uploadUnifiedExperiment`` keeps one experiment per
run however many shards it had."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from orchestrator.experiments.langsmith_sync import API_KEY_ENV, LangSmithHooks
from orchestrator.harnesses.merge.merge import Merged
from orchestrator.results.writer import ResultsWriter
from orchestrator.run.config import RunConfig
from orchestrator.run.finalize import write_final

log = logging.getLogger(__name__)


async def finish(merged: Merged, output_dir: Path, *, upload: bool, dataset: str | None, baseline_prefix: str,
                 experiment_name: str | None, baseline: Path | None, state_dir: Path) -> list[str]:
    """Write ``eval-results.json``, ``eval-pr-comment.md`` and ``report.html``; return the errors met."""
    results = merged.results
    hook: LangSmithHooks | None = None
    comparison = None
    if upload and not os.environ.get(API_KEY_ENV):
        log.warning("--upload-experiment: %s is not set: no experiment recorded", API_KEY_ENV)
    elif upload:
        scripted = results.config.get("model_server") == "scripted"
        cfg = RunConfig(dataset=dataset, baseline_prefix=baseline_prefix, experiment_name=experiment_name,
                        model_server="scripted" if scripted else "real", state_dir=state_dir,
                        iterations=results.summary.k if results.summary else 1)
        hook = LangSmithHooks.from_env(cfg)
    if hook is not None:
        await hook.on_cases(results.run_id, [])
        for unit in results.units:
            await hook.on_unit(unit)
        found = await hook.on_finish(results)
        comparison = found if isinstance(found, dict) else None
        if hook.failures:
            results.config["langsmith_failures"] = list(hook.failures)
    writer = ResultsWriter(results, output_dir, output_dir)
    status = (hook.comparison_status, hook.comparison_error) if hook is not None and hook.comparison_status else None
    return write_final(results, writer, output_dir, baseline_path=baseline, hook_comparison=comparison,
                       hook_baseline=hook.baseline if hook is not None else None, hook_status=status)
