"""n8n-side faults through a loopback fault proxy in front of the real shared lane: 5xx answers on
the verification fetch, and deletes that fail (once, or for good).

The run sees only the proxy (``--backend static --base-url <proxy>``); claude's MCP traffic goes
through it too. The lane behind it must end as it started.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.ledger import Ledger
from orchestrator.run.pipeline import Run
from orchestrator.run.resolve import prepare

from .helpers import (
    ORCH,
    SharedLane,
    assert_nothing_left,
    lane_inventory,
    ledger_records,
    static_config,
    unique,
    units_of,
)
from .proxy import FaultProxy

pytestmark = [pytest.mark.n8n, pytest.mark.claude]

WORKFLOW_BY_ID = r"/rest/workflows/[A-Za-z0-9]{8,}"
USER_BY_ID = r"/rest/users/[0-9a-f-]{36}"


@pytest.fixture
def proxy(shared_lane: SharedLane) -> Iterator[FaultProxy]:
    with FaultProxy(shared_lane.base_url) as p:
        yield p


@pytest.mark.parametrize("failures,expect_pass", [(2, True), (None, False)], ids=["transient", "persistent"])
async def test_5xx_on_workflow_fetch_is_retried_then_attributed(model, shared_lane: SharedLane, proxy: FaultProxy,
                                                               tmp_path: Path, failures: int | None,
                                                               expect_pass: bool) -> None:
    before = await lane_inventory(shared_lane.base_url, shared_lane.owner)
    rule = proxy.fail("GET", WORKFLOW_BY_ID, 500, times=failures)
    run_id = unique("fetch5xx")
    cfg = static_config(tmp_path, run_id, shared_lane, base_url=proxy.base_url)
    outcome = await Run(await prepare(cfg)).execute()
    assert outcome.ok and outcome.cleanup_failures == []
    [unit] = units_of(cfg.output_dir)
    assert unit["build"]["status"] == "ok" and unit["build"]["workflow_id"]
    fetches = proxy.requests("GET", WORKFLOW_BY_ID)
    if expect_pass:  # two 500s, then the client's third try got the workflow
        assert rule.hits == 2 and [f.injected for f in fetches][:3] == [500, 500, None]
        assert all(s["verdict"] == "pass" for s in unit["scenarios"])
    else:  # every try failed: not the builder's fault, yet counted (n8n's run/case-pipeline.ts: a scenario
        # whose execution still fails after its retries is a framework_issue row, not incomplete, so a failed trial)
        assert rule.hits == 3 and all(f.injected == 500 for f in fetches)
        scenarios, expectations = unit["scenarios"], unit["expectations"]
        assert scenarios and all(s["verdict"] == "fail" and s["failure_category"] == "framework_issue"
                                 for s in scenarios)
        # the expectations have no workflow to be judged on: incomplete, charged to the framework
        assert expectations and all(e["verdict"] == "incomplete" for e in expectations)
        verdicts = scenarios + expectations
        assert all(v["attribution"] == "framework_issue" for v in verdicts)
        assert all("could not fetch workflow" in v["reason"] and "500" in v["reason"] for v in verdicts)
        assert outcome.results.summary.trials == len(scenarios) and outcome.results.summary.passed_trials == 0
    assert await lane_inventory(shared_lane.base_url, shared_lane.owner) == before
    assert_nothing_left(run_id, cfg.state_dir)


async def test_failed_delete_stays_in_the_ledger_and_is_retried_at_the_end(model, shared_lane: SharedLane,
                                                                          proxy: FaultProxy, tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """The build user's delete gets 500 on all three tries of the client: the ledger keeps it
    open with the error; the end-of-run retry deletes it and says so by name."""
    caplog.set_level(logging.INFO)
    before = await lane_inventory(shared_lane.base_url, shared_lane.owner)
    rule = proxy.fail("DELETE", USER_BY_ID, 500, times=3)
    run_id = unique("delonce")
    cfg = static_config(tmp_path, run_id, shared_lane, base_url=proxy.base_url)
    outcome = await Run(await prepare(cfg)).execute()
    assert outcome.ok and outcome.cleanup_failures == []
    assert rule.hits == 3
    [unit] = units_of(cfg.output_dir)
    assert unit["build"]["status"] == "ok"

    records = ledger_records(run_id, cfg.state_dir)
    failed = [r for r in records if r["op"] == "delete_failed" and r["kind"] == "user"]
    assert len(failed) == 1 and "500" in failed[0]["error"]
    user_id = failed[0]["id"]
    ops = [r["op"] for r in records if r["kind"] == "user" and r["id"] == user_id]
    assert ops == ["create", "delete_failed", "delete"]
    assert f"user {user_id} deleted at the end of the run" in caplog.text
    assert await lane_inventory(shared_lane.base_url, shared_lane.owner) == before
    assert_nothing_left(run_id, cfg.state_dir)


async def test_delete_that_keeps_failing_is_reported_by_name_and_cleanup_removes_it(
        model, shared_lane: SharedLane, proxy: FaultProxy, tmp_path: Path) -> None:
    before = await lane_inventory(shared_lane.base_url, shared_lane.owner)
    proxy.fail("DELETE", USER_BY_ID, 500)  # every user delete, for the whole run
    run_id = unique("delever")
    cfg = static_config(tmp_path, run_id, shared_lane, base_url=proxy.base_url)
    outcome = await Run(await prepare(cfg)).execute()
    assert outcome.ok
    [unit] = units_of(cfg.output_dir)
    assert unit["build"]["status"] == "ok"

    ledger = Ledger(cfg.state_dir / "runs" / run_id)
    stuck = [e for e in ledger.open_entries() if e.kind == "user"]
    assert stuck and all("500" in e.last_error for e in stuck)
    build_user = next(r["id"] for r in ledger.records() if r["op"] == "delete_failed")
    reported = "\n".join(outcome.cleanup_failures)
    assert len(outcome.cleanup_failures) == len(stuck)
    for entry in stuck:  # each by name: lane, kind and id
        assert f"s0: user {entry.id} was not deleted" in reported
    assert build_user in reported
    assert outcome.results.cleanup_failures == outcome.cleanup_failures  # in eval-results.json too
    assert {e.lane for e in ledger.open_entries("lane")} == {"s0"}  # where they live, for cleanup

    proxy.clear()  # the lane answers again: `orchestrator cleanup` finishes the job
    done = subprocess.run([*ORCH, "cleanup", "--run-id", run_id, "--state-dir", str(cfg.state_dir),
                           "--backend", "process", "--email", shared_lane.owner.email],
                          env={**os.environ, "N8N_EVAL_PASSWORD": shared_lane.owner.password},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"s0: user {build_user}" in done.stderr
    assert await lane_inventory(shared_lane.base_url, shared_lane.owner) == before
    assert_nothing_left(run_id, cfg.state_dir)
