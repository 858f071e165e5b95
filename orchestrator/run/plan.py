"""Plan stage: which run this is, which cases and units it has, where its results go.

``--resume ID`` restores the stored selection of that run and leaves out the units that finished;
``--run-id ID --resume-existing`` does so when the state dir holds run ID (what a replaced
orchestrator pod of the same Job finds on the durable results volume), else starts run ID.
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
from orchestrator.errors import ConfigError, UserError
from orchestrator.ids import new_run_id
from orchestrator.ledger import Ledger, RunLock
from orchestrator.results.history import default_durations_source, load_durations
from orchestrator.results.model import EvalResults, UnitResult
from orchestrator.results.writer import (
    RUN_FILENAME,
    UNITS_FILENAME,
    ResultsWriteError,
    ResultsWriter,
    read_units,
    stored_run,
)
from orchestrator.run.config import RunConfig
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


def run_dir(cfg: RunConfig, run_id: str) -> Path:
    return cfg.state_dir / "runs" / run_id


def resume_config(cfg: RunConfig) -> RunConfig:
    """``--resume ID``: the stored selection of that run, this invocation's lane/runtime options."""
    directory = run_dir(cfg, str(cfg.resume))
    if not (directory / RUN_FILENAME).is_file():
        raise ConfigError(f"--resume: no run {cfg.resume!r} under {cfg.state_dir / 'runs'}")
    stored = stored_run(directory)
    if stored is None:
        raise ConfigError(f"--resume: run {cfg.resume!r}: {directory / RUN_FILENAME} cannot be read (cut short?)")
    for key in ("source", "suite", "filter", "exclude", "tier", "iterations", "experiment_name", "output_dir"):
        if stored.get(key) is not None:
            setattr(cfg, key, stored[key] if key != "output_dir" else Path(stored[key]))
    cfg.cases_paths = [Path(p) for p in stored.get("cases_paths") or [str(p) for p in cfg.cases_paths]]
    cfg.run_id = cfg.resume
    return cfg


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
    done = {(u.case, u.iteration) for u in finished}
    return [WorkUnit(c.slug, i) for c in cases for i in range(iterations) if (c.slug, i) not in done]


async def make_plan(cfg: RunConfig, load: CaseLoader | None = None) -> Plan:
    """``load``: a harness's case loader (``run/stages.py``); None loads ``cases/`` or the suite."""
    if cfg.resume_existing and not cfg.resume:
        if not cfg.run_id:
            raise ConfigError("--resume-existing: needs --run-id (the run to resume when its state exists)")
        if (run_dir(cfg, cfg.run_id) / RUN_FILENAME).is_file():  # a replaced orchestrator pod: its state survived
            cfg.resume = cfg.run_id
    if cfg.resume:
        resume_config(cfg)
    run_id = cfg.run_id = cfg.run_id or new_run_id()
    ledger = Ledger.for_run(run_id, cfg.state_dir)
    lock = RunLock(ledger.run_dir)
    if not lock.acquire():
        raise UserError(f"--run-id {run_id}: that run is still going (another process holds {lock.path})")
    try:
        return await _plan(cfg, run_id, ledger, lock, load)
    except BaseException:
        lock.release()
        raise


async def _plan(cfg: RunConfig, run_id: str, ledger: Ledger, lock: RunLock, load: CaseLoader | None = None) -> Plan:
    cfg.output_dir = output_dir = cfg.output_dir or Path("results") / run_id
    directory = run_dir(cfg, run_id)
    (directory / RUN_FILENAME).write_text(json.dumps(cfg.public(), indent=2, default=str))

    if load is not None:
        cases = await load(cfg)
    else:
        cases = await load_selected(cfg.source, cfg.cases_paths, cfg.suite, cfg.filter, cfg.exclude, cfg.tier)
    if not cases:
        raise UserError("no cases selected: check the case paths and --filter / --exclude / --tier")
    results = EvalResults(run_id=run_id, experiment_name=cfg.experiment_name, started_at=time.time(), config=cfg.public())
    try:
        writer = ResultsWriter(results, output_dir, directory)
    except ResultsWriteError as exc:  # nothing started yet: a plain one-line error
        raise UserError(str(exc)) from None
    finished = kept_units(directory) if cfg.resume else []
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
