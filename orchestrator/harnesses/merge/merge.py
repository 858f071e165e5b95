"""``orchestrator merge``: the ``eval-results.json`` of sharded runs as one result (n8n's
``cli/merge-results.ts``; its LangSmith step ``upload-merged-experiment.ts``).

Shards split the cases of one run across processes (``--filter``s, machines, CI jobs), so their
cases never overlap: their units are put together as they are and every figure is computed again
from them — the summary (pass rate, pass@k, pass^k, attribution, failure categories), the per-case
figures, the workflow checks — exactly what one run of the same units writes. A shard file that is
missing or unreadable is reported and left out (one dead shard does not sink the merge); a case in
two shards is an error naming it; shards run with different iteration counts are merged at the
largest, with a warning. Each shard is ours or n8n's (``orchestrator compare``'s reader).

Output, in ``--output-dir``: ``eval-results.json`` (``orchestrator.merged``: the shard files and
the ones left out) and ``eval-pr-comment.md`` as ``run`` writes them (and its ``report.html``).
``--upload-experiment`` records the merged units as one LangSmith experiment and compares it with
the newest baseline (``--dataset``, ``--baseline-prefix``, ``--experiment-name``), best-effort as
every LangSmith step of a run: a failure is logged and the merge stands.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.compare.load import load_results
from orchestrator.errors import UserError
from orchestrator.redact import redact
from orchestrator.results.model import EvalResults
from orchestrator.results.scoring import summarize

log = logging.getLogger(__name__)


@dataclass
class Merged:
    results: EvalResults
    shards: list[Path]
    missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def shard_paths(paths: list[Path], input_dir: Path | None) -> list[Path]:
    """The shard files named, and every ``eval-results.json`` under ``--input-dir``, sorted, once each."""
    found = list(paths)
    if input_dir is not None:
        if not input_dir.is_dir():
            raise UserError(f"--input-dir: {input_dir} is not a directory")
        found += sorted(input_dir.rglob("eval-results.json"))
    unique = sorted({p.resolve(): p for p in found}.values())
    if not unique:
        raise UserError("no eval-results.json to merge: pass shard files or --input-dir")
    return unique


def _iterations(shard: EvalResults) -> int:
    value = shard.config.get("iterations")
    if isinstance(value, int) and value > 0:
        return value
    return max((u.iteration + 1 for u in shard.units), default=1)


def merge(paths: list[Path]) -> Merged:
    """Merge shards' ``eval-results.json`` into one run's results. A shard that cannot be loaded is
    skipped (listed in ``missing``); differing iteration counts are a warning. Raises ``UserError``
    when no shard is usable or two shards hold the same case."""
    shards: list[tuple[Path, EvalResults]] = []
    missing: list[str] = []
    for path in paths:
        try:
            shards.append((path, load_results(path, role="shard")))
        except UserError as exc:
            message = redact(str(exc))
            log.warning("skipping %s", message)
            missing.append(message)
    if not shards:
        raise UserError("no usable shard: " + "; ".join(missing))
    owner: dict[str, Path] = {}
    for path, shard in shards:
        for case in {u.case for u in shard.units}:
            if case in owner:
                raise UserError(f"case {case!r} is in two shards ({owner[case]} and {path}): shards must be disjoint")
            owner[case] = path
    warnings = []
    counts = sorted({_iterations(s) for _, s in shards})
    if len(counts) > 1:
        warnings.append(f"shards disagree on iterations ({', '.join(map(str, counts))}): merged at {counts[-1]}")
    k = counts[-1]
    units = [u for _, s in shards for u in s.units]
    total = sum(s.summary.units_total if s.summary else len(s.units) for _, s in shards)
    first = shards[0][1]
    results = EvalResults(
        run_id=f"merged-{time.strftime('%Y%m%d-%H%M%S')}", experiment_name=first.experiment_name,
        started_at=min(s.started_at for _, s in shards),
        finished_at=max((s.finished_at or s.started_at) for _, s in shards),
        config={**first.config, "iterations": k,
                "merged": {"shards": [str(p) for p, _ in shards], "missing": missing, "runs": [s.run_id for _, s in shards]}},
        lanes=[lane for _, s in shards for lane in s.lanes], units=units,
        cleanup_failures=[c for _, s in shards for c in s.cleanup_failures],
        lane_failures=[f for _, s in shards for f in s.lane_failures],
    )
    results.summary, results.cases = summarize(units, k, max(total, len(units)))
    return Merged(results, [p for p, _ in shards], missing, warnings)
