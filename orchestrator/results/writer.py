"""Write results as units finish, so a crash loses nothing already finished.

Two files:

- ``<run dir>/units.jsonl`` — one finished unit a line, appended and fsynced as each unit ends.
  It is the source of truth for ``--resume``.
- ``<output dir>/eval-results.json`` — the whole document in the reference harness's contract
  (:mod:`orchestrator.results.contract`), rewritten atomically (temp file + rename) after each
  unit (throttled for big runs) and once more at the end.

A write that fails (disk full, read-only folder) raises :class:`ResultsWriteError` naming the path;
the run then stops starting units and still tears its lanes down.

From async code use :meth:`ResultsWriter.add_async` (or :meth:`ResultsWriter.add_in_background`
from a sync callback on the loop, then ``await writer.drain()`` before the final flush): the unit
is in memory at once, and the append, the fsync and the atomic rewrite run in a worker thread,
so the event loop never waits on the disk. The rewrite serialises a snapshot taken on the loop,
and an older snapshot never overwrites a newer one.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchestratorError
from orchestrator.redact import redact, redact_obj
from orchestrator.results.contract import to_document
from orchestrator.results.model import EvalResults, UnitResult

REWRITE_EVERY_S = 2.0
JUDGE_INPUTS_FILENAME = "judge-inputs.jsonl"
UNITS_FILENAME = "units.jsonl"  # in the run's state folder, beside its run.json
RUN_FILENAME = "run.json"  # the run's stored config (``RunConfig.public()``), written when it is planned


def stored_run(run_dir: Path) -> dict[str, Any] | None:
    """The config a run stored in its state folder; None when it has none or it cannot be read."""
    try:
        stored = json.loads((run_dir / RUN_FILENAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return stored if isinstance(stored, dict) else None


def stored_output_dir(run_dir: Path) -> Path | None:
    """Where the run stored in ``run_dir`` writes its results (None when unknown)."""
    output_dir = (stored_run(run_dir) or {}).get("output_dir")
    return Path(output_dir) if output_dir else None


def judge_input_lines(unit: UnitResult) -> list[str]:
    """One redacted JSON line per judge call of ``unit`` (scenarios; the outcome-expectation batch)."""
    lines = []
    for s in unit.scenarios:
        if s.judge_input:
            lines.append({"case": unit.case, "iteration": unit.iteration, "target": "scenario", "names": [s.name],
                          **s.judge_input})
    for e in unit.expectations:
        if e.judge_input:
            texts = e.judge_input.get("texts") or [e.text]
            lines.append({"case": unit.case, "iteration": unit.iteration, "target": "expectations",
                          "names": texts, **{k: v for k, v in e.judge_input.items() if k != "texts"}})
    return [redact(json.dumps(line)) + "\n" for line in lines]


class ResultsWriteError(OSError, OrchestratorError):
    """Results could not be written; the message names the file."""

    def __str__(self) -> str:  # "cannot write <path>: <reason>", without OSError's "[Errno N]" prefix
        return str(self.strerror or super().__str__())


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise ResultsWriteError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from exc


def read_units(path: Path) -> list[UnitResult]:
    """Finished units from a ``units.jsonl`` (a torn last line from a crash is skipped)."""
    units: list[UnitResult] = []
    if not path.exists():
        return units
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            units.append(UnitResult.model_validate_json(line))
        except ValueError:
            continue
    return units


class ResultsWriter:
    def __init__(self, results: EvalResults, output_dir: Path, run_dir: Path) -> None:
        self.results = results
        self.output_dir = output_dir
        self.units_path = run_dir / UNITS_FILENAME
        self.results_path = output_dir / "eval-results.json"
        self.judge_inputs_path = output_dir / JUDGE_INPUTS_FILENAME
        self._lock = threading.Lock()
        self._last_rewrite = 0.0
        self._snapshots = 0  # snapshots taken for a rewrite (on the loop thread)
        self._written = 0  # the newest snapshot written (under _lock)
        self._background: set[asyncio.Task[None]] = set()
        try:
            output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ResultsWriteError(exc.errno, f"--output-dir: cannot create {output_dir}: {exc.strerror}") from exc

    def preload(self, units: Iterable[UnitResult]) -> None:
        """Units finished by an earlier attempt of this run (``--resume``)."""
        self.results.units.extend(units)

    def add(self, unit: UnitResult) -> None:
        """Record a finished unit. It is kept in memory even when the disk refuses it (the final
        document still holds it); the :class:`ResultsWriteError` tells the caller to stop.

        The judge inputs the unit carries go to ``judge-inputs.jsonl`` (one line per judge call),
        not into the results: ``orchestrator rejudge`` replays them on another judge model."""
        line, snapshot, inputs = self._take(unit)
        self._persist(line, snapshot, inputs)

    async def add_async(self, unit: UnitResult) -> None:
        """:meth:`add` with the file I/O and fsyncs in a worker thread. The unit is in memory
        before this first awaits; raises :class:`ResultsWriteError` like :meth:`add`."""
        line, snapshot, inputs = self._take(unit)
        await asyncio.to_thread(self._persist, line, snapshot, inputs)

    def add_in_background(
        self, unit: UnitResult, on_error: Callable[[ResultsWriteError], None] | None = None
    ) -> asyncio.Task[None]:
        """:meth:`add_async` from a sync callback running on the event loop; ``on_error`` gets a
        write failure (on the loop). ``await drain()`` waits for every such write."""

        async def write() -> None:
            try:
                await self.add_async(unit)
            except ResultsWriteError as exc:
                if on_error is None:
                    raise
                on_error(exc)

        task = asyncio.get_running_loop().create_task(write(), name=f"results:{unit.unit_id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def drain(self) -> None:
        """Wait for the writes :meth:`add_in_background` started (errors went to ``on_error``)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    def _take(self, unit: UnitResult) -> tuple[str, tuple[int, EvalResults] | None, list[str]]:
        """On the caller's thread: the unit into memory, its redacted line, its judge inputs, and a
        snapshot of the document when a rewrite is due."""
        line = redact(unit.model_dump_json()) + "\n"
        inputs = judge_input_lines(unit)
        self.results.units.append(unit)
        due = time.monotonic() - self._last_rewrite >= (0 if len(self.results.units) < 200 else REWRITE_EVERY_S)
        if not due:
            return line, None, inputs
        self._last_rewrite = time.monotonic()
        return line, self._snapshot(), inputs

    def _snapshot(self) -> tuple[int, EvalResults]:
        self._snapshots += 1
        copy = self.results.model_copy(update={"units": list(self.results.units), "lanes": list(self.results.lanes)})
        return self._snapshots, copy

    def _persist(self, line: str, snapshot: tuple[int, EvalResults] | None, inputs: list[str]) -> None:
        with self._lock:
            try:
                with self.units_path.open("a", encoding="utf-8") as fh:
                    fh.write(line)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                raise ResultsWriteError(exc.errno, f"cannot write {self.units_path}: {exc.strerror or exc}") from exc
            if snapshot is not None:
                self._write_snapshot(*snapshot)
            if inputs:  # last: the unit is safe in units.jsonl and eval-results.json already
                try:
                    with self.judge_inputs_path.open("a", encoding="utf-8") as fh:
                        fh.write("".join(inputs))
                except OSError as exc:
                    raise ResultsWriteError(exc.errno, f"cannot write {self.judge_inputs_path}: {exc.strerror or exc}") from exc

    def _write_snapshot(self, seq: int, results: EvalResults) -> None:
        if seq <= self._written:  # a newer document is already on disk
            return
        data = redact_obj(to_document(results))
        _atomic_write(self.results_path, json.dumps(data, indent=2) + "\n")
        self._written = seq

    def flush(self) -> None:
        """Write ``eval-results.json`` now from the current results, whatever the rewrite interval
        (blocking; :meth:`flush_async` from the loop)."""
        with self._lock:
            self._write_snapshot(*self._snapshot())
        self._last_rewrite = time.monotonic()

    async def flush_async(self) -> None:
        """:meth:`flush` in a worker thread (after the pending background writes)."""
        await self.drain()
        snapshot = self._snapshot()
        self._last_rewrite = time.monotonic()

        def write() -> None:
            with self._lock:
                self._write_snapshot(*snapshot)

        await asyncio.to_thread(write)

    def write_text(self, name: str, text: str) -> Path:
        """Write ``text``, redacted, atomically to ``name`` in the output directory; returns its path."""
        path = self.output_dir / name
        _atomic_write(path, redact(text))
        return path
