"""``orchestrator merge`` without lanes, following n8n's ``cli/merge-results.ts`` (shards are
case-disjoint; the headline is computed again from the concatenated cases; a missing or malformed
shard is skipped, not fatal; overlapping cases are an error; disagreeing iteration counts merge at
the largest) and ``cli/upload-merged-experiment.ts`` (one experiment for the merged run)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.eval_results_factory import unit
from support.langsmith_fake import API_KEY, FakeLangSmith, running
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.errors import UserError
from orchestrator.harnesses.merge.merge import merge, shard_paths
from orchestrator.results.contract import to_document
from orchestrator.results.model import EvalResults
from orchestrator.results.scoring import summarize


def _run(run_id: str, units: list, iterations: int = 2) -> EvalResults:
    summary, cases = summarize(units, iterations, len(units))
    return EvalResults(run_id=run_id, started_at=time.time() - 60, finished_at=time.time(), units=units,
                       summary=summary, cases=cases, config={"iterations": iterations, "model_server": "scripted"})


def _write(path: Path, results: EvalResults) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_document(results)))
    return path


UNITS = {
    "alpha": [unit("alpha", 0, {"happy": True}, {"has a trigger": True}), unit("alpha", 1, {"happy": False})],
    "beta": [unit("beta", 0, {"happy": (False, "builder_issue")}), unit("beta", 1, {"happy": True})],
    "gamma": [unit("gamma", 0, {"s": True}), unit("gamma", 1, {"s": None})],
}


def test_two_shards_merge_to_what_one_run_of_the_same_units_says(tmp_path: Path) -> None:
    a = _write(tmp_path / "a" / "eval-results.json", _run("a", UNITS["alpha"] + UNITS["beta"]))
    b = _write(tmp_path / "b" / "eval-results.json", _run("b", UNITS["gamma"]))
    assert shard_paths([b], tmp_path) == [a, b]  # named and found once each
    single = _run("single", [u for units in UNITS.values() for u in units])
    merged = merge(shard_paths([], tmp_path)).results
    assert merged.summary is not None and single.summary is not None
    for field in ("trials", "passed_trials", "pass_at_k", "pass_hat_k", "scoring_units", "units_finished",
                  "units_total", "attribution", "failure_categories"):
        assert getattr(merged.summary, field) == getattr(single.summary, field), field
    assert merged.summary.pass_rate == single.summary.pass_rate
    assert [c.model_dump() for c in merged.cases] == [c.model_dump() for c in single.cases]
    assert merged.config["merged"]["runs"] == ["a", "b"] and shard_paths([a, a], None) == [a]


def test_a_dead_shard_is_skipped_and_overlapping_cases_refused(tmp_path: Path) -> None:
    good = _write(tmp_path / "good.json", _run("g", UNITS["alpha"]))
    (tmp_path / "bad.json").write_text("{not json")
    merged = merge([good, tmp_path / "bad.json", tmp_path / "gone.json"])
    assert len(merged.missing) == 2 and {u.case for u in merged.results.units} == {"alpha"}
    with pytest.raises(UserError, match="no usable shard"):
        merge([tmp_path / "bad.json"])
    twice = _write(tmp_path / "twice.json", _run("t", UNITS["alpha"]))
    with pytest.raises(UserError, match="'alpha' is in two shards"):
        merge([good, twice])
    other = _write(tmp_path / "three.json", _run("c", [unit("delta", i, {"s": True}) for i in range(3)], iterations=3))
    assert merge([good, other]).warnings == ["shards disagree on iterations (2, 3): merged at 3"]


def test_a_shard_written_by_n8ns_harness_is_read(tmp_path: Path) -> None:
    doc = {"totalRuns": 1, "experimentName": "n8n-shard", "summary": {}, "testCases": [
        {"name": "epsilon", "testCaseFile": "epsilon", "buildSuccessCount": 1, "totalRuns": 1,
         "scenarios": [{"name": "happy", "passCount": 1, "totalRuns": 1, "passAtK": 1, "passHatK": 1,
                        "runs": [{"workflowId": "w1", "passed": True, "score": 1, "reasoning": "ok"}]}]}]}
    (tmp_path / "n8n.json").write_text(json.dumps(doc))
    ours = _write(tmp_path / "ours.json", _run("o", UNITS["beta"]))
    merged = merge([tmp_path / "n8n.json", ours]).results
    assert {u.case for u in merged.units} == {"epsilon", "beta"}


@pytest.fixture
def fake() -> Iterator[tuple[FakeLangSmith, str]]:
    with running() as found:
        yield found


def test_cli_writes_the_files_and_uploads_one_experiment(fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, url = fake
    monkeypatch.setenv("LANGSMITH_API_KEY", API_KEY)
    monkeypatch.setenv("LANGSMITH_ENDPOINT", url)
    a = _write(tmp_path / "a.json", _run("a", UNITS["alpha"]))
    b = _write(tmp_path / "b.json", _run("b", UNITS["beta"]))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["merge", str(a), str(b), "--output-dir", str(out), "--upload-experiment",
                                      "--experiment-name", "nightly-merged", "--baseline-prefix", "mcp-baseline",
                                      "--state-dir", str(tmp_path / "state")])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "eval-results.json").read_text())
    assert {tc["testCaseFile"] for tc in doc["testCases"]} == {"alpha", "beta"}
    assert (out / "eval-pr-comment.md").read_text().startswith("### ")
    experiments = [s for s in store.sessions.values() if "nightly-merged" in s["name"]]
    assert len(experiments) == 1 and experiments[0]["name"].startswith("scripted-nightly-merged-")  # a scripted merge
    assert {r["session_id"] for r in store.runs.values()} == {experiments[0]["id"]} and len(store.runs) >= 4
    assert doc["comparisonStatus"] == "no_baseline" and store.unknown == []
