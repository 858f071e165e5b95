"""Model-side faults on a real lane with the real claude CLI: provider storms and outages, claude
failing (non-zero exit, malformed answers, no trailer) and a judge that never answers.

Every run goes to the session's shared lane (static backend) and must leave its users,
workflows and credentials exactly as it found them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.domain import PROVIDER_OUTAGE_ROOT_CAUSE
from orchestrator.run.pipeline import Run
from orchestrator.run.resolve import prepare
from orchestrator.scripted import scripts as ms
from orchestrator.scripted.replies import HttpError

from .helpers import (
    ModelDesk,
    SharedLane,
    assert_nothing_left,
    lane_inventory,
    static_config,
    unique,
    units_of,
)

pytestmark = [pytest.mark.n8n, pytest.mark.claude]


async def _run_on_shared_lane(tmp_path: Path, shared_lane: SharedLane, prefix: str, **overrides):
    before = await lane_inventory(shared_lane.base_url, shared_lane.owner)
    run_id = unique(prefix)
    cfg = static_config(tmp_path, run_id, shared_lane, **overrides)
    outcome = await Run(await prepare(cfg)).execute()
    assert outcome.ok, outcome.errors
    assert outcome.cleanup_failures == []
    assert await lane_inventory(shared_lane.base_url, shared_lane.owner) == before
    assert_nothing_left(run_id, cfg.state_dir)
    [unit] = units_of(cfg.output_dir)
    return outcome, unit


async def test_rate_limit_storm_is_waited_out(model: ModelDesk, shared_lane: SharedLane, tmp_path: Path) -> None:
    """429 on the first two build requests: the model gateway retries the first once, centrally; the
    second reaches claude (told not to retry it), whose attempt fails; the unit waits (tiny outage
    waits) and its next attempt builds. The gateway counts the one 429 that reached the build."""
    model.use(ms.demo_script(builder=ms.status_storm(429, count=2, then=ms.mcp_builder())))
    outcome, unit = await _run_on_shared_lane(tmp_path, shared_lane, "storm429")
    assert unit["build"]["status"] == "ok" and unit["build"]["workflow_id"]
    assert unit["build"]["attempts"] == 2  # the gateway absorbed one 429, one attempt hit the other
    assert [s["failed_calls"] for s in unit["model_cost"]["stages"] if s["stage"] == "build"] == [1]
    assert all(s["verdict"] == "pass" for s in unit["scenarios"])
    assert outcome.results.summary.passed_trials == outcome.results.summary.trials > 0


async def test_overload_outage_is_a_framework_issue_and_the_run_completes(model: ModelDesk, shared_lane: SharedLane,
                                                                          tmp_path: Path) -> None:
    """529 for ever: three attempts (the waits in between), then the unit is a provider outage —
    charged to the framework, and the run itself completes normally. As in n8n
    (``run/case-pipeline.ts``: the build-failure row of a ``buildFailedOnInfra`` build;
    ``run/aggregator.ts`` drops only incomplete rows): every scenario fails as ``framework_issue``
    and counts ("the pass rate shows the leak"); with no agent output the expectations are not
    judged (``build-expectations/select.ts``)."""
    model.use(ms.demo_script(builder=ms.status_storm(529)))
    outcome, unit = await _run_on_shared_lane(tmp_path, shared_lane, "outage529")
    build = unit["build"]
    assert build["status"] == "provider_outage" and build["attempts"] == 3
    assert build["root_cause"].startswith(PROVIDER_OUTAGE_ROOT_CAUSE + ": ") and "529" in build["root_cause"]
    assert unit["failure_category"] == "framework_issue" and unit["attribution"] == "framework_issue"
    assert unit["scenarios"] and all((s["verdict"], s["attribution"]) == ("fail", "framework_issue")
                                     for s in unit["scenarios"])
    assert all(e["verdict"] == "incomplete" for e in unit["expectations"])
    summary = outcome.results.summary
    assert summary.units_finished == 1 and summary.trials == len(unit["scenarios"]) and summary.passed_trials == 0
    assert summary.attribution["framework_issue"] == summary.trials  # filtered out by attribution, not dropped


@pytest.mark.parametrize(
    "script,reason",
    [
        pytest.param(lambda r: HttpError(400), "API Error: 400", id="claude-exits-non-zero"),
        pytest.param(ms.malformed(), "JSON Parse error", id="malformed-answer"),
        pytest.param(ms.no_trailer(), "no WORKFLOW_ID", id="no-trailer"),
    ],
)
async def test_claude_failures_are_retried_then_a_build_failure(model: ModelDesk, shared_lane: SharedLane,
                                                                tmp_path: Path, script, reason: str) -> None:
    model.use(ms.demo_script(builder=script))
    _, unit = await _run_on_shared_lane(tmp_path, shared_lane, "claudefail")
    build = unit["build"]
    assert build["status"] == "failed" and build["attempts"] == 3
    assert reason in build["error"]
    assert unit["failure_category"] == "build_failure" and unit["attribution"] == "builder_issue"


async def test_judge_timeout_leaves_verdicts_incomplete_and_out_of_scoring(model: ModelDesk, shared_lane: SharedLane,
                                                                          tmp_path: Path) -> None:
    model.use(ms.demo_script(judge_script=ms.hang(120)))
    outcome, unit = await _run_on_shared_lane(tmp_path, shared_lane, "judgehang", judge_attempt_timeout_s=1.0)
    assert unit["build"]["status"] == "ok" and unit["build"]["workflow_id"]
    judged = unit["scenarios"] + [e for e in unit["expectations"] if e["kind"] == "outcome"]
    assert judged and all(v["verdict"] == "incomplete" for v in judged)
    assert all("not judged" in v["reason"] and "Timeout" in v["reason"] for v in judged)
    assert all(v["attribution"] == "verification_gap" for v in judged)
    summary = outcome.results.summary
    assert summary.trials == 0 and summary.pass_rate is None  # excluded from scoring, not failed
