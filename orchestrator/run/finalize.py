"""Finalize stage: summary, comparison and the final files.

The comparison uses ``--baseline`` first, else a baseline a hook found (e.g. in LangSmith), else
a comparison a hook computed; the PR comment uses the same comparison as the results. A file that
cannot be written is an error of the run, never a lost result (``units.jsonl`` has every unit).
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.compare import compare, comparison_dict, load_results
from orchestrator.compare.pr_comment import render_pr_comment, write_pr_comment
from orchestrator.errors import UserError
from orchestrator.lanes.model import Lane
from orchestrator.redact import redact
from orchestrator.results.gate import is_gated_tier
from orchestrator.results.model import ComparisonStatus, EvalResults, LaneRecord
from orchestrator.results.report_html import write_report
from orchestrator.results.scoring import summarize
from orchestrator.results.writer import ResultsWriteError, ResultsWriter


def summarize_run(results: EvalResults, *, iterations: int, units_total: int, lanes: list[Lane],
                  stop_reason: str | None, cleanup_failures: list[str], lane_failures: list[str]) -> None:
    """Summary, per-case figures, lanes and cleanup failures into ``results`` (once, before the hooks see it)."""
    results.lanes = [LaneRecord(lane=lane.lane_id, backend=lane.backend, base_url=lane.base_url,
                                fingerprint=lane.fingerprint) for lane in lanes]
    summary, case_summaries = summarize(results.units, iterations, units_total)
    summary.stopped_reason = stop_reason
    results.summary, results.cases = summary, case_summaries
    results.cleanup_failures = list(cleanup_failures)
    results.lane_failures = list(lane_failures)


def write_final(results: EvalResults, writer: ResultsWriter, output_dir: Path, *, baseline_path: Path | None,
                hook_comparison: dict[str, object] | None, hook_baseline: EvalResults | None,
                hook_status: tuple[ComparisonStatus, str | None] | None = None) -> list[str]:
    """Comparison and the final files; return the errors met (each one line, redacted). How the
    comparison went is recorded as n8n's ``comparisonStatus`` (``run/persist.ts``): ``ok``, or why
    not — a gated tier or no baseline source (``not_attempted``), what a hook found
    (``hook_status``: ``no_baseline``, ``self_baseline``, ``fetch_failed``), or a ``--baseline``
    file that could not be read (``fetch_failed``)."""
    errors: list[str] = []
    comparison = baseline = None
    reason = "no baseline given (--baseline)"
    status: ComparisonStatus = "not_attempted"
    status_error: str | None = None
    tier = results.config.get("tier")
    if is_gated_tier(tier if isinstance(tier, str) else None):
        # n8n's rule (run/langsmith-driver.ts): a gated tier reports its absolute gate instead of
        # a baseline comparison
        reason = f"tier {tier} is gated: the absolute gate stands in for a baseline comparison"
        baseline_path = hook_baseline = hook_comparison = None
        hook_status = None
    if baseline_path is not None:
        try:
            baseline = load_results(baseline_path, role="baseline")
        except UserError as exc:
            reason = str(exc)
            errors.append(reason)
            status, status_error = "fetch_failed", reason
    elif hook_baseline is not None:
        baseline = hook_baseline
    if baseline is not None:
        comparison = compare(results, baseline)
        results.comparison = comparison_dict(comparison)
        status = "ok"
    elif hook_comparison is not None:
        results.comparison = hook_comparison
        status = "ok"
    elif hook_status is not None and status == "not_attempted":
        status, status_error = hook_status
        reason = status_error or reason
    results.comparison_status = status
    results.comparison_error = redact(status_error)[:1000] if status == "fetch_failed" and status_error else None
    try:
        writer.flush()
        write_pr_comment(output_dir, render_pr_comment(results, comparison, baseline, no_baseline_reason=reason))
        write_report(output_dir, results)
    except OSError as exc:
        errors.append(redact(str(exc) if isinstance(exc, ResultsWriteError) else f"cannot write results to {output_dir}: {exc}"))
    return errors
