"""How long each case took in an earlier run, read from its results, so the next run can start the
longest units first (:func:`orchestrator.allocator.durations.expected_seconds` turns this into the
queue's order).

History comes from an earlier ``eval-results.json`` in any shape :func:`~orchestrator.results.
contract.from_document` reads (ours, with the units under ``orchestrator``; ours before the
contract; n8n's harness) or a run's ``units.jsonl``: ``--durations-from FILE``, else the baseline
when one is given, else the newest finished run in the state dir. A case's time is the median wall
time of its finished units there.

Nothing here raises on a bad or missing file: history only orders the queue, so a file that cannot
be read gives no history (logged) and the run goes on.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from orchestrator.domain import BuildStatus
from orchestrator.ledger import runs_root

from .contract import NotEvalResults, from_document
from .model import EvalResults, UnitResult
from .writer import RUN_FILENAME, read_units, stored_output_dir

log = logging.getLogger(__name__)

#: Build statuses whose duration says nothing about the case (never started, or the lane failed).
_UNINFORMATIVE = {BuildStatus.skipped, BuildStatus.lane_failure}

#: How many of the state dir's newest results files are opened to find the newest finished run.
_NEWEST_CANDIDATES = 20


def _unit_seconds(unit: UnitResult) -> float | None:
    """The unit's wall time (else its build + verify time), or ``None`` when it says nothing."""
    if unit.build.status in _UNINFORMATIVE:
        return None
    wall = unit.finished_at - unit.started_at
    seconds = wall if wall > 0 else unit.build.duration_s + unit.verify_duration_s
    return seconds if seconds > 0 else None


def durations_from_units(units: Iterable[UnitResult]) -> dict[str, float]:
    """Median seconds per case slug."""
    per_case: dict[str, list[float]] = {}
    for unit in units:
        seconds = _unit_seconds(unit)
        if seconds is not None:
            per_case.setdefault(unit.case, []).append(seconds)
    return {case: statistics.median(values) for case, values in per_case.items()}


def _read_results(path: Path) -> EvalResults | None:
    try:
        return from_document(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, NotEvalResults, ValidationError) as exc:
        log.warning("durations history %s not used: %s", path, type(exc).__name__)
        return None


def _finished_at(path: Path) -> float | None:
    """When the run of one of our results files finished (``None``: still running, or unreadable);
    without validating the whole document, as up to :data:`_NEWEST_CANDIDATES` are opened."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        ours = doc.get("orchestrator", doc)  # the contract's shape, else ours before it
        return float(ours.get("finished_at") or 0.0) or None
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def load_durations(path: Path) -> dict[str, float]:
    """``{case slug: expected seconds}`` from an ``eval-results.json`` or a ``units.jsonl``
    (``{}`` when the file cannot be read, logged)."""
    if Path(path).suffix == ".jsonl":
        return durations_from_units(read_units(Path(path)))
    results = _read_results(path)
    return durations_from_units(results.units) if results is not None else {}


def default_durations_source(state_dir: Path, baseline: Path | None, *, exclude_run: str | None = None) -> Path | None:
    """Where history comes from when ``--durations-from`` is not given: the baseline when one is
    given, else the ``eval-results.json`` of the newest finished run recorded in ``state_dir``
    (``runs/<id>/run.json`` names its output folder), never run ``exclude_run``; else ``None``."""
    if baseline is not None:
        return baseline
    runs = runs_root(Path(state_dir))
    if not runs.is_dir():
        return None
    candidates: list[tuple[float, Path]] = []
    for run_json in runs.glob(f"*/{RUN_FILENAME}"):
        if exclude_run is not None and run_json.parent.name == exclude_run:
            continue
        output_dir = stored_output_dir(run_json.parent)
        if output_dir is None:
            continue
        path = output_dir / "eval-results.json"
        try:
            candidates.append((path.stat().st_mtime, path))
        except OSError:
            continue
    best: tuple[float, Path] | None = None
    for _mtime, candidate in sorted(candidates, reverse=True)[:_NEWEST_CANDIDATES]:
        finished = _finished_at(candidate)
        if finished and (best is None or finished > best[0]):
            best = (finished, candidate)
    return best[1] if best else None
