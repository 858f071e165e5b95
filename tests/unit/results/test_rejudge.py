"""Judge inputs are kept beside the results (never inside them) and replayed by ``rejudge``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.eval_results_factory import unit

from orchestrator.results.model import BuildStatus, EvalResults
from orchestrator.results.writer import JUDGE_INPUTS_FILENAME, ResultsWriter
from orchestrator.scripted.scripts import judge, verdict_list
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.verify.judge import EXPECTATION_SYSTEM, SCENARIO_SYSTEM

REPO = Path(__file__).resolve().parents[3]


def _write_run(out: Path, tmp: Path) -> None:
    writer = ResultsWriter(EvalResults(run_id="r1", started_at=1.0, config={"iterations": 1}), out, tmp)
    u = unit("greet", 0, {"happy": True}, {"Uses a Set node": True})
    u.scenarios[0].judge_input = {"system": SCENARIO_SYSTEM, "prompt": "## Scenario 0: happy\nall good", "count": 1}
    u.expectations[0].judge_input = {"system": EXPECTATION_SYSTEM, "prompt": "## Expectations\n0. Uses a Set node\n",
                                     "count": 1, "texts": ["Uses a Set node"]}
    writer.add(u)
    writer.flush()


def test_judge_inputs_go_beside_the_results_not_into_them(tmp_path: Path) -> None:
    _write_run(tmp_path / "out", tmp_path)
    lines = [json.loads(line) for line in (tmp_path / "out" / JUDGE_INPUTS_FILENAME).read_text().splitlines()]
    assert [(x["target"], x["names"]) for x in lines] == [("scenario", ["happy"]), ("expectations", ["Uses a Set node"])]
    assert "judge_input" not in (tmp_path / "out" / "eval-results.json").read_text()
    assert "judge_input" not in (tmp_path / "units.jsonl").read_text()


@pytest.mark.slow
def test_rejudge_replays_on_another_model(tmp_path: Path) -> None:
    _write_run(tmp_path / "out", tmp_path)
    with ScriptedModelServer(judge(verdict_list(False, reason="stricter judge", category="builder_issue"))) as srv:
        env = {"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": "sk-ant-rejudge-test-0000", "ANTHROPIC_BASE_URL": srv.base_url,
               "N8N_INSTANCE_AI_EVAL_JUDGE_EFFORT": "low"}
        done = subprocess.run([str(REPO / ".venv" / "bin" / "orchestrator"), "rejudge", str(tmp_path / "out"),
                               "--judge-model", "anthropic/claude-haiku-4-5"], env=env, capture_output=True, text=True,
                              timeout=120)
        calls = [r for r in srv.requests if r.is_messages]
    assert done.returncode == 0, done.stderr
    assert len(calls) == 2 and all(c.body["model"] == "claude-haiku-4-5" for c in calls)
    assert "2 verdict(s) changed" in done.stderr
    doc = json.loads((tmp_path / "out" / "rejudged-anthropic-claude-haiku-4-5" / "eval-results.json").read_text())
    run = doc["testCases"][0]["scenarios"][0]["runs"][0]
    assert run["passed"] is False and run["reasoning"] == "stricter judge" and run["failureCategory"] == "builder_issue"
    assert doc["testCases"][0]["buildExpectations"][0]["passCount"] == 0
    assert doc["orchestrator"]["config"]["judge_model"] == "anthropic/claude-haiku-4-5"


def test_rejudge_without_inputs_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer = ResultsWriter(EvalResults(run_id="r1", started_at=1.0), out, tmp_path)
    writer.add(unit("greet", 0, {"happy": True}))
    writer.flush()
    done = subprocess.run([str(REPO / ".venv" / "bin" / "orchestrator"), "rejudge", str(out), "--judge-model", "m"],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and JUDGE_INPUTS_FILENAME in done.stderr


async def test_a_rejudged_timed_out_iteration_stays_neutral() -> None:
    """n8n ``run/case-pipeline.ts`` ``attachExpectations``: a timed-out iteration's rows are
    ``incomplete`` whatever they were graded; re-judging one changes what was graded (kept in
    ``judged``), never its place in the counts."""
    from orchestrator.domain import Attribution, Verdict
    from orchestrator.verify.judge import Judge, JudgeConfig
    from orchestrator.verify.rejudge import rejudge

    u = unit("greet", 0, {"happy": True}, status=BuildStatus.timeout)
    res = EvalResults(run_id="r1", started_at=1.0, config={"iterations": 1}, units=[u])
    inputs = [{"case": "greet", "iteration": 0, "target": "scenario", "names": ["happy"], "count": 1,
               "system": SCENARIO_SYSTEM, "prompt": "## Scenario 0: happy"}]
    with ScriptedModelServer(judge(verdict_list(False, reason="stricter"))) as srv:
        j = Judge(JudgeConfig(api_key="sk-ant-rejudge-test-0000", base_url=srv.base_url, effort="low", backoff_s=0))
        out = await rejudge(res, inputs, j)
        await j.aclose()
    [s] = out.results.units[0].scenarios
    assert (s.verdict, s.judged, s.attribution) == (Verdict.incomplete, Verdict.failed, Attribution.timeout)
    assert out.changed == [] and out.results.summary is not None and out.results.summary.trials == 0
