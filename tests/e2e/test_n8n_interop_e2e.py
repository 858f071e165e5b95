"""n8n's own results as the baseline of a real offline run, and n8n's reader on ours (issue 23).

A real run — a process lane, n8n's own Instance AI agent (``--builder instance-ai``) played by the
embedded scripted model — is compared against two baselines in n8n's shapes, both written by us:
an ``eval-results.json`` as ``comparison/bucket-from-results-json.ts`` reads it (``--baseline``),
and an ``instance-ai-baseline-*`` experiment in n8n's record shape on the loopback LangSmith
stand-in. Then the run's own ``eval-results.json`` goes through n8n's reader rules.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any, cast

import pytest
from support.langsmith_fake import API_KEY, FakeLangSmith, serve
from support.n8n_reader import bucket_from_results_json
from support.tools import require

from orchestrator.experiments.langsmith_sync import LangSmithHooks
from orchestrator.results.model import EvalResults
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import run
from orchestrator.toolchain import Toolchain, default_cache_dir

pytestmark = [pytest.mark.n8n]
CASES = Path(__file__).resolve().parents[2] / "cases"
CASE = "smoke-manual-set-static-fields"
SCENARIO = "happy-path"


class CapturingHooks(LangSmithHooks):
    comparison: dict[str, Any] | None = None

    async def on_finish(self, results: EvalResults) -> dict[str, object] | None:
        self.comparison = cast(dict[str, Any] | None, await super().on_finish(results))
        return self.comparison


def _expectation() -> str:
    return str(json.loads((CASES / f"{CASE}.json").read_text())["outcomeExpectations"][0])


def _n8n_results_file(path: Path) -> Path:
    """A small eval-results.json in the shape n8n's ``bucketFromResultsJson`` reads (ours, not n8n's)."""
    doc: dict[str, Any] = {
        "timestamp": "2026-11-30T12:00:00.000Z", "totalRuns": 3, "experimentName": "instance-ai-baseline-local",
        "testCases": [
            {"name": "Set static fields", "testCaseFile": CASE,
             "scenarios": [{"name": SCENARIO, "passCount": 3, "evaluatedCount": 3,
                            "runs": [{"passed": True, "score": 1, "reasoning": "fields set"}] * 3}],
             "buildExpectations": [{"expectation": _expectation(), "passCount": 3, "evaluatedCount": 3}]},
            {"name": "Only in n8n's run", "testCaseFile": "n8n-only-case",
             "scenarios": [{"name": "s", "passCount": 1, "evaluatedCount": 2,
                            "runs": [{"passed": True}, {"passed": False, "failureCategory": "mock_issue"}]}],
             "buildExpectations": []},
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


async def test_n8n_baselines_are_read_by_a_real_offline_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """n8n's ``comparison/bucket-from-results-json.ts`` (a file baseline) and
    ``comparison/fetch-baseline.ts`` (``findLatestBaseline`` + ``fetchBaselineBucket``, a LangSmith
    baseline) on the reading side; ``bucketFromResultsJson`` again on our output."""
    require("n8n", Toolchain(default_cache_dir()).n8n_ready, "run `orchestrator lanes install`")
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "N8N_INSTANCE_AI_MODEL_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    baseline_file = _n8n_results_file(tmp_path / "n8n" / "eval-results.json")
    store = FakeLangSmith()
    server, url = serve(store)
    try:
        verdicts = [{"expectation": _expectation(), "pass": True, "reason": "one Set node"}]
        store.add_n8n_experiment(
            "instance-ai-baseline-n8n00001", dt.datetime.now(dt.UTC) - dt.timedelta(days=1),
            [(CASE, SCENARIO, i, {"passed": True, "score": 1, "buildSuccess": True, "expectationResults": verdicts})
             for i in range(3)])
        run_id = f"interop-{int(time.time()) % 100000}"
        cfg = RunConfig(cases_paths=[CASES], filter=CASE, iterations=2, backend="process", lanes=1,
                        builder="instance-ai", model_server="scripted", baseline=baseline_file,
                        experiment_name="interop", state_dir=tmp_path / "state", output_dir=tmp_path / "out",
                        run_id=run_id)
        hooks = CapturingHooks.from_env(cfg, {"LANGSMITH_API_KEY": API_KEY, "LANGSMITH_ENDPOINT": url},
                                        retries=0, feedback_attempts=1)
        assert isinstance(hooks, CapturingHooks)
        outcome = await run(cfg, [hooks])
    finally:
        server.shutdown()
        server.server_close()
    assert outcome.ok, outcome.errors
    assert hooks.failures == [] and store.unknown == []

    doc = json.loads((tmp_path / "out" / "eval-results.json").read_text())
    # the file baseline, read as n8n reads it
    result = doc["comparison"]["result"]
    assert doc["comparison"]["baseline"] == "instance-ai-baseline-local" and doc["comparisonStatus"] == "ok"
    units = {u["key"]: u for u in result["evaluationUnits"]}
    assert (units[f"{CASE}/{SCENARIO}"]["baselinePasses"], units[f"{CASE}/{SCENARIO}"]["baselineTotal"]) == (3, 3)
    exp_key = f"{CASE}#expectation:{_expectation()}"
    assert (units[exp_key]["baselinePasses"], units[exp_key]["baselineTotal"]) == (3, 3)
    assert {"kind": "scenario", "testCaseFile": "n8n-only-case", "name": "s", "key": "n8n-only-case/s"} \
        in result["baselineOnly"]
    assert result["aggregate"]["intersectionSize"] == len(result["evaluationUnits"])

    # the LangSmith baseline in n8n's record shape
    assert hooks.comparison is not None
    ls_units = {u["key"]: u for u in hooks.comparison["evaluationUnits"]}
    assert hooks.comparison["baseline"] == {"experimentName": "instance-ai-baseline-n8n00001"}
    assert (ls_units[f"{CASE}/{SCENARIO}"]["baselinePasses"], ls_units[f"{CASE}/{SCENARIO}"]["baselineTotal"]) == (3, 3)
    assert (ls_units[exp_key]["baselinePasses"], ls_units[exp_key]["baselineTotal"]) == (3, 3)

    # our run as n8n records and reads it: scripted, tagged, per-scenario rows, no dataset written
    ours = [s for s in store.sessions.values() if s["name"].startswith("scripted-interop-")]
    assert len(ours) == 1 and ours[0]["extra"]["metadata"]["model_server"] == "scripted"
    assert "pass_rate_per_iter" in ours[0]["extra"]["metadata"]
    rows = [r for r in store.runs.values() if r["session_id"] == ours[0]["id"] and not r.get("parent_run_id")]
    assert sorted((r["inputs"]["scenarioName"], r["inputs"]["_iteration"]) for r in rows) == [(SCENARIO, 0), (SCENARIO, 1)]
    assert all(r["tags"] == ["model-server:scripted"] for r in rows)
    assert store.datasets == {}

    # n8n's reader accepts our file and counts what our comparison counted for this run
    bucket, _, _ = bucket_from_results_json(doc)
    for key, u in units.items():
        assert bucket[key] == (u["prPasses"], u["prTotal"])
    (tc,) = doc["testCases"]
    assert len(tc["threadIds"]) == 2 and all(isinstance(t, str) and t for t in tc["threadIds"])
