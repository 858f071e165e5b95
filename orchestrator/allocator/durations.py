"""How long each case is expected to take (build + verify), from an earlier run, so the allocator
can start the longest units first.

History comes from a previous ``eval-results.json`` (``--durations-from FILE``; by default the
baseline when one is given, else the newest finished run in the state dir). A case's expected time
is the median wall time of its finished units there. Cases the history has not seen get a prior
from their complexity: the median of the seen cases of the same complexity, else the median of
all seen cases scaled by :data:`COMPLEXITY_WEIGHT`, else the weight alone (only the order matters).

Nothing here raises on a bad or missing history file: history only orders the queue, so a file
that cannot be read gives no history (logged) and the run goes on.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Relative cost of a case by complexity when nothing better is known (``complex`` cases also get
#: 1.5x the unit timeout in ``run/unit.py``; builds of complex cases take ~2-3x the turns).
COMPLEXITY_WEIGHT: dict[str, float] = {"simple": 1.0, "medium": 2.0, "complex": 3.0}

#: Build statuses whose duration says nothing about the case (never started, or the lane failed).
_UNINFORMATIVE = {"skipped", "lane_failure"}


def _unit_seconds(unit: Mapping[str, Any]) -> float | None:
    build = unit.get("build") or {}
    if not isinstance(build, Mapping) or build.get("status") in _UNINFORMATIVE:
        return None
    try:
        wall = float(unit.get("finished_at") or 0.0) - float(unit.get("started_at") or 0.0)
        parts = float(build.get("duration_s") or 0.0) + float(unit.get("verify_duration_s") or 0.0)
    except (TypeError, ValueError):
        return None
    seconds = wall if wall > 0 else parts
    return seconds if seconds > 0 else None


def durations_from_units(units: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Median seconds per case slug over unit records (``UnitResult`` dumps)."""
    per_case: dict[str, list[float]] = {}
    for unit in units:
        case = unit.get("case")
        seconds = _unit_seconds(unit)
        if isinstance(case, str) and seconds is not None:
            per_case.setdefault(case, []).append(seconds)
    return {case: statistics.median(values) for case, values in per_case.items()}


def load_durations(path: Path) -> dict[str, float]:
    """``{case slug: expected seconds}`` from an ``eval-results.json`` (or a run's ``units.jsonl``).

    An unreadable or malformed file gives ``{}`` (logged): history is a hint, never a failure.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
        if Path(path).suffix == ".jsonl":
            units = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            units = json.loads(text).get("units") or []
    except (OSError, ValueError, AttributeError) as exc:
        log.warning("durations history %s not used: %s", path, type(exc).__name__)
        return {}
    if not isinstance(units, list):
        return {}
    return durations_from_units(u for u in units if isinstance(u, Mapping))


def _finished_at(results_path: Path) -> float | None:
    try:
        data = json.loads(results_path.read_text(encoding="utf-8"))
        value = data.get("finished_at")
        return float(value) if value else None
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def default_durations_source(state_dir: Path, baseline: Path | None, *, exclude_run: str | None = None) -> Path | None:
    """Where history comes from when ``--durations-from`` is not given: the baseline when one is
    given, else the ``eval-results.json`` of the newest finished run recorded in ``state_dir``
    (``runs/<id>/run.json`` names its output folder), else ``None``."""
    if baseline is not None:
        return baseline
    runs = Path(state_dir) / "runs"
    if not runs.is_dir():
        return None
    candidates: list[tuple[float, Path]] = []
    for run_json in runs.glob("*/run.json"):
        if exclude_run is not None and run_json.parent.name == exclude_run:
            continue
        try:
            output_dir = json.loads(run_json.read_text(encoding="utf-8")).get("output_dir")
        except (OSError, ValueError, AttributeError):
            continue
        if not output_dir:
            continue
        results = Path(output_dir) / "eval-results.json"
        try:
            candidates.append((results.stat().st_mtime, results))
        except OSError:
            continue
    best: tuple[float, Path] | None = None
    for _mtime, results in sorted(candidates, reverse=True)[:20]:  # newest files first; finished ones only
        finished = _finished_at(results)
        if finished is not None and (best is None or finished > best[0]):
            best = (finished, results)
    return best[1] if best else None


def expected_seconds(
    complexities: Mapping[str, str], history: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Expected seconds for every case in ``complexities`` (``{slug: complexity}``): its history
    when known, else the complexity prior described in the module docstring."""
    history = {k: v for k, v in (history or {}).items() if v > 0}
    by_complexity: dict[str, list[float]] = {}
    for slug, seconds in history.items():
        if slug in complexities:
            by_complexity.setdefault(complexities[slug], []).append(seconds)
    # The scale for unseen complexities: the seen cases of this selection (else all history),
    # their median time per unit of complexity weight.
    seen = [s for s in history if s in complexities] or list(history)
    overall = statistics.median(history[s] for s in seen) if seen else None
    overall_weight = statistics.median(COMPLEXITY_WEIGHT.get(complexities.get(s, ""), 2.0) for s in seen) if seen else 2.0
    expected: dict[str, float] = {}
    for slug, complexity in complexities.items():
        if slug in history:
            expected[slug] = history[slug]
        elif complexity in by_complexity:
            expected[slug] = statistics.median(by_complexity[complexity])
        else:
            weight = COMPLEXITY_WEIGHT.get(complexity, 2.0)
            expected[slug] = overall * weight / overall_weight if overall is not None else weight
    return expected


def expected_for_run(
    complexities: Mapping[str, str],
    *,
    durations_from: Path | None,
    state_dir: Path,
    baseline: Path | None,
    run_id: str | None = None,
) -> dict[str, float]:
    """What the run pipeline passes as ``Allocator.submit(units, expected_s=...)``:
    ``complexities`` is ``{case.slug: case.case.complexity}`` of the selected cases; history from
    ``--durations-from``, else :func:`default_durations_source` (never this run's own results)."""
    source = durations_from or default_durations_source(state_dir, baseline, exclude_run=run_id)
    history = load_durations(source) if source is not None else {}
    if source is not None:
        log.info("queue ordered longest first from %s (%d of %d cases seen there)",
                 source, sum(1 for s in complexities if s in history), len(complexities))
    return expected_seconds(complexities, history)
