"""The results writer: records survive, fsyncs happen off the event loop, the document is atomic
and never goes back to an older snapshot. Plus the durations history read from those files."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

import pytest
from support.eval_results_factory import results, unit

from orchestrator.allocator.durations import expected_seconds
from orchestrator.results import writer as writer_module
from orchestrator.results.contract import from_document
from orchestrator.results.history import default_durations_source, load_durations
from orchestrator.results.model import BuildStatus, EvalResults
from orchestrator.results.writer import ResultsWriteError, ResultsWriter, read_units
from orchestrator.run.plan import expected_for_run


def new_writer(tmp_path: Path) -> ResultsWriter:
    (tmp_path / "run").mkdir(exist_ok=True)
    return ResultsWriter(results("r1", []), tmp_path / "out", tmp_path / "run")


def test_async_adds_fsync_in_worker_threads_and_keep_every_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fsync_threads: list[threading.Thread] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        fsync_threads.append(threading.current_thread())
        real_fsync(fd)

    monkeypatch.setattr(writer_module.os, "fsync", recording_fsync)
    writer = new_writer(tmp_path)

    async def main() -> threading.Thread:
        await asyncio.gather(*(writer.add_async(unit(f"c{i}", 0)) for i in range(5)))
        for i in range(5, 8):
            writer.add_in_background(unit(f"c{i}", 0))
        await writer.drain()
        await writer.flush_async()
        return threading.current_thread()

    loop_thread = asyncio.run(main())
    assert fsync_threads and all(t is not loop_thread for t in fsync_threads)
    assert sorted(u.case for u in read_units(writer.units_path)) == [f"c{i}" for i in range(8)]
    document = from_document(json.loads(writer.results_path.read_text()))  # the published contract, read back
    assert len(document.units) == 8
    assert [p.name for p in writer.results_path.parent.iterdir()] == ["eval-results.json"]  # no temp file left


def test_an_older_snapshot_never_overwrites_a_newer_document(tmp_path: Path) -> None:
    writer = new_writer(tmp_path)
    writer.results.units.append(unit("a", 0))
    older = writer._snapshot()
    writer.results.units.append(unit("b", 0))
    newer = writer._snapshot()
    writer._write_snapshot(*newer)
    writer._write_snapshot(*older)  # a slower thread finishing late
    assert len(from_document(json.loads(writer.results_path.read_text())).units) == 2


def test_a_refused_write_reaches_on_error_and_the_unit_stays_in_memory(tmp_path: Path) -> None:
    writer = new_writer(tmp_path)
    errors: list[ResultsWriteError] = []
    writer.units_path = tmp_path / "missing" / "units.jsonl"

    async def main() -> None:
        writer.add_in_background(unit("c", 0), on_error=errors.append)
        await writer.drain()

    asyncio.run(main())
    assert len(errors) == 1 and "cannot write" in str(errors[0]) and "units.jsonl" in str(errors[0])
    assert [u.case for u in writer.results.units] == ["c"]


# --------------------------------------------------------------------------- durations history


def written(doc: EvalResults, out: Path) -> Path:
    """``doc`` as a run writes it: the ``eval-results.json`` of ``out`` (units under ``orchestrator``)
    and the run's ``units.jsonl`` beside it."""
    (out / "run").mkdir(parents=True)
    writer = ResultsWriter(doc.model_copy(update={"units": []}), out, out / "run")
    for u in doc.units:
        writer.add(u)
    writer.flush()
    return writer.results_path


def test_load_durations_takes_the_median_wall_time_per_case_from_the_file_a_run_writes(tmp_path: Path) -> None:
    doc = results("old", [
        unit("slow", 0, duration=300.0), unit("slow", 1, duration=500.0), unit("slow", 2, duration=400.0),
        unit("fast", 0, duration=20.0),
        unit("skipped", 0, duration=999.0, status=BuildStatus.skipped),
        unit("lost", 0, duration=999.0, status=BuildStatus.lane_failure),
    ])
    path = written(doc, tmp_path / "out")
    assert "orchestrator" in json.loads(path.read_text())  # the contract's shape, not our model's dump
    assert load_durations(path) == {"slow": 400.0, "fast": 20.0}
    assert load_durations(tmp_path / "out" / "run" / "units.jsonl") == {"slow": 400.0, "fast": 20.0}
    (tmp_path / "pre-contract.json").write_text(doc.model_dump_json())  # our files before the contract
    assert load_durations(tmp_path / "pre-contract.json") == {"slow": 400.0, "fast": 20.0}
    (tmp_path / "broken.json").write_text("{not json")
    assert load_durations(tmp_path / "broken.json") == {}
    (tmp_path / "other.json").write_text('{"testCase": []}')
    assert load_durations(tmp_path / "other.json") == {}
    (tmp_path / "odd.json").write_text('{"testCases": [{"scenarios": [{"name": "s", "runs": ["x"]}]}]}')
    assert load_durations(tmp_path / "odd.json") == {}  # history never stops a run
    assert load_durations(tmp_path / "absent.json") == {}


def test_the_default_history_is_the_baseline_else_the_newest_finished_run(tmp_path: Path) -> None:
    state = tmp_path / "state"

    def record_run(run_id: str, finished_at: float | None) -> Path:
        out = tmp_path / "out" / run_id
        doc = results(run_id, [unit("c", 0)])
        doc.finished_at = finished_at
        path = written(doc, out)
        (state / "runs" / run_id).mkdir(parents=True)
        (state / "runs" / run_id / "run.json").write_text(json.dumps({"output_dir": str(out)}))
        return path

    assert default_durations_source(state, None) is None
    older = record_run("older", 1000.0)
    newer = record_run("newer", 2000.0)
    record_run("unfinished", None)
    assert default_durations_source(state, None) == newer
    assert default_durations_source(state, None, exclude_run="newer") == older
    baseline = tmp_path / "baseline.json"
    assert default_durations_source(state, baseline) == baseline


def test_the_next_run_in_a_state_dir_starts_with_the_case_the_last_run_found_longest(tmp_path: Path) -> None:
    # the default source end to end, as `orchestrator run` calls it: "long" is simple and "short"
    # complex, so only history can put "long" first
    state, out = tmp_path / "state", tmp_path / "out"
    written(results("last", [unit("long", 0, duration=900.0), unit("short", 0, duration=30.0)]), out)
    (state / "runs" / "last").mkdir(parents=True)
    (state / "runs" / "last" / "run.json").write_text(json.dumps({"output_dir": str(out)}))
    expected = expected_for_run({"long": "simple", "short": "complex"}, durations_from=None, state_dir=state,
                                baseline=None, run_id="this")
    assert expected == {"long": 900.0, "short": 30.0}


def test_unseen_cases_get_a_prior_from_their_complexity() -> None:
    complexities = {"seen-simple": "simple", "seen-complex": "complex", "new-complex": "complex",
                    "new-medium": "medium", "new-simple": "simple"}
    history = {"seen-simple": 100.0, "seen-complex": 300.0, "not-selected": 50.0}
    expected = expected_seconds(complexities, history)
    assert expected["seen-simple"] == 100.0 and expected["seen-complex"] == 300.0
    assert expected["new-complex"] == 300.0  # the seen cases of the same complexity
    assert expected["new-simple"] == 100.0
    assert expected["new-simple"] < expected["new-medium"] < expected["new-complex"]
    bare = expected_seconds({"a": "simple", "b": "complex"})
    assert bare["a"] < bare["b"]


def test_expected_for_run_reads_the_flag_first(tmp_path: Path) -> None:
    path = written(results("old", [unit("long", 0, duration=900.0), unit("short", 0, duration=30.0)]), tmp_path / "out")
    expected = expected_for_run({"long": "simple", "short": "complex", "new": "medium"},
                                durations_from=path, state_dir=tmp_path / "state", baseline=None)
    assert expected["long"] == 900.0 and expected["short"] == 30.0 and expected["new"] > 0
    assert expected_for_run({"a": "simple"}, durations_from=None, state_dir=tmp_path / "none", baseline=None) == {"a": 1.0}
