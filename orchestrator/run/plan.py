"""Plan stage: the cases and units of a resolved run, its lock, its results writer.

Which run this is (``--resume ID``, ``--run-id ID --resume-existing``) and where its results go was
decided by :func:`~orchestrator.run.resolve.resolve`; a resumed run leaves out the units that finished.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.allocator import WorkUnit
from orchestrator.allocator.durations import expected_seconds
from orchestrator.cases import LoadedCase, load_selected
from orchestrator.errors import UserError
from orchestrator.ledger import Ledger, RunLock
from orchestrator.results.history import default_durations_source, load_durations
from orchestrator.results.model import EvalResults, UnitResult
from orchestrator.results.writer import (
    RUN_FILENAME,
    UNITS_FILENAME,
    ResultsWriteError,
    ResultsWriter,
    read_units,
)
from orchestrator.run.resolve import ResolvedRun, run_dir
from orchestrator.run.stages import CaseLoader

log = logging.getLogger(__name__)


@dataclass
class Plan:
    run_id: str
    run_dir: Path
    ledger: Ledger
    cases: list[LoadedCase]
    units: list[WorkUnit]  # what is left to run
    units_total: int
    results: EvalResults
    writer: ResultsWriter
    lock: RunLock  # held while this process runs it: `cleanup` leaves the run alone

    @property
    def output_dir(self) -> Path:
        return self.writer.output_dir


def resumable_units(records: list[UnitResult]) -> list[UnitResult]:
    """The last record of each unit that really finished; a ``skipped`` unit never ran, so
    ``--resume`` runs it again."""
    last: dict[tuple[str, int], UnitResult] = {}
    for record in records:
        last[(record.case, record.iteration)] = record
    return [r for r in last.values() if r.build.status.value != "skipped"]


def kept_units(directory: Path) -> list[UnitResult]:
    """What ``--resume`` of the run whose state folder is ``directory`` keeps (none if it never ran)."""
    return resumable_units(read_units(directory / UNITS_FILENAME))


def plan_units(cases: list[LoadedCase], iterations: int, finished: list[UnitResult]) -> list[WorkUnit]:
    """Every (case, iteration) unit but those in ``finished`` (a resumed run's kept units)."""
    done = {(u.case, u.iteration) for u in finished}
    return [WorkUnit(c.slug, i) for c in cases for i in range(iterations) if (c.slug, i) not in done]


async def make_plan(run: ResolvedRun, load: CaseLoader | None = None) -> Plan:
    """The plan of the resolved ``run`` (``--resume``'s selection and run id are already decided):
    its lock taken, ``run.json`` written, cases loaded (``load``: a harness's case loader, else
    ``cases/`` or the suite), the units left to run."""
    cfg = run.config
    ledger = Ledger.for_run(run.run_id, cfg.state_dir)
    lock = RunLock(ledger.run_dir)
    if not lock.acquire():
        raise UserError(f"--run-id {run.run_id}: that run is still going (another process holds {lock.path})")
    try:
        return await _plan(run, ledger, lock, load)
    except BaseException:
        lock.release()
        raise


async def _plan(run: ResolvedRun, ledger: Ledger, lock: RunLock, load: CaseLoader | None = None) -> Plan:
    cfg, run_id = run.config, run.run_id
    directory = run_dir(cfg.state_dir, run_id)
    (directory / RUN_FILENAME).write_text(json.dumps(cfg.public(), indent=2, default=str))

    if load is not None:
        cases = await load(cfg)
    else:
        cases = await load_selected(cfg.source, cfg.cases_paths, cfg.suite, cfg.filter, cfg.exclude, cfg.tier)
    if not cases:
        raise UserError("no cases selected: check the case paths and --filter / --exclude / --tier")
    results = EvalResults(run_id=run_id, experiment_name=cfg.experiment_name, started_at=time.time(), config=cfg.public())
    try:
        writer = ResultsWriter(results, run.output_dir, directory)
    except ResultsWriteError as exc:  # nothing started yet: a plain one-line error
        raise UserError(str(exc)) from None
    finished = kept_units(directory) if run.resumed else []
    writer.preload(finished)
    units = plan_units(cases, cfg.iterations, finished)
    return Plan(run_id, directory, ledger, cases, units, len(cases) * cfg.iterations, results, writer, lock)


def expected_for_run(
    complexities: Mapping[str, str],
    *,
    durations_from: Path | None,
    state_dir: Path,
    baseline: Path | None,
    run_id: str | None = None,
) -> dict[str, float]:
    """What the run passes as ``Allocator.submit(units, expected_s=...)``: ``complexities`` is
    ``{case.slug: case.case.complexity}`` of the selected cases; history from ``--durations-from``,
    else :func:`~orchestrator.results.history.default_durations_source` (never this run's own)."""
    source = durations_from or default_durations_source(state_dir, baseline, exclude_run=run_id)
    history = load_durations(source) if source is not None else {}
    if source is not None:
        log.info("queue ordered longest first from %s (%d of %d cases seen there)",
                 source, sum(1 for s in complexities if s in history), len(complexities))
    return expected_seconds(complexities, history)
