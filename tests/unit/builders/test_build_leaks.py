"""Build-isolation leaks (issue 16, item 6): reading a workflow the build neither created nor seeded
fails the unit's rows as ``framework_issue``; a timeout still wins."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from orchestrator.allocator import Outcome, WorkUnit
from orchestrator.builders.builder import Builder, BuilderSettings, BuildRequest, BuildResult
from orchestrator.builders.lane import BuildLane
from orchestrator.builders.leaks import foreign_workflow_reads
from orchestrator.builders.users import BuildUser, BuildUserPool
from orchestrator.cases import load_disk
from orchestrator.lanes.model import Lane
from orchestrator.ledger import Ledger
from orchestrator.n8n.rest import N8nClient, N8nSession
from orchestrator.results.model import Attribution, BuildStatus, Verdict
from orchestrator.run.unit import Attempts, UnitRunner, UnitSettings
from orchestrator.verify.judge import Judge, JudgeConfig

REPO = Path(__file__).resolve().parents[3]


def call(call_id: str, tool: str, **args: Any) -> dict[str, Any]:
    return {"kind": "tool_call", "tool": tool, "call_id": call_id, "args": args}


def result(call_id: str, tool: str, value: Any) -> dict[str, Any]:
    return {"kind": "tool_result", "tool": tool, "call_id": call_id, "result": value}


BUILT = [call("b1", "build-workflow", filePath="/w/main.ts"),
         result("b1", "build-workflow", {"success": True, "workflowId": "builtWf0001"})]


def test_reading_own_built_or_seeded_workflows_is_no_leak() -> None:
    entries = BUILT + [
        call("g1", "workflows", action="get", workflowId="builtWf0001"),
        result("g1", "workflows", {"id": "builtWf0001", "nodes": []}),
        call("g2", "workflows", action="get-as-code", workflowId="seededWf001"),
        result("g2", "workflows", {"code": "…"}),
        call("l1", "workflows", action="list"),
        result("l1", "workflows", {"workflows": [{"id": "foreignWf01"}]}),
    ]
    assert foreign_workflow_reads(entries, seeded_ids={"seededWf001"}) == []
    # without the seed's ids, reading it is a leak
    assert foreign_workflow_reads(entries) == ["seededWf001"]


def test_a_successful_read_of_a_foreign_workflow_is_a_leak_named_once() -> None:
    entries = BUILT + [
        call("g1", "workflows", action="get", workflowId="foreignWf01"),
        result("g1", "workflows", {"id": "foreignWf01", "name": "Someone else's"}),
        call("g2", "workflows", action="get-as-code", workflowId="foreignWf01"),
        result("g2", "workflows", {"code": "…"}),
        call("r1", "executions", action="run", workflowId="otherWf0002"),
        result("r1", "executions", {"executionId": "7", "status": "success"}),
    ]
    assert foreign_workflow_reads(entries, created_ids=["builtWf0001"]) == ["foreignWf01", "otherWf0002"]


def test_failed_or_unanswered_reads_showed_nothing() -> None:
    entries = BUILT + [
        call("g1", "workflows", action="get", workflowId="missingWf01"),
        result("g1", "workflows", {"success": False, "error": "Workflow not found"}),
        call("g2", "workflows", action="get", workflowId="deniedWf001"),
        {"kind": "tool_error", "tool": "workflows", "call_id": "g2", "error": "forbidden"},
        call("g3", "workflows", action="get", workflowId="cancelledWf"),  # run cancelled: no result
        call("g4", "nodes", action="get", workflowId="notAWfTool1"),  # not a workflow-reading tool
        result("g4", "nodes", {"ok": True}),
    ]
    assert foreign_workflow_reads(entries) == []


class _FixedBuilder(Builder):
    """A builder plug-in that returns a prepared result (what the instance-ai builder would report)."""

    name = "fixed-result"

    def __init__(self, settings: BuilderSettings, answer: BuildResult) -> None:
        super().__init__(settings)
        self.answer = answer

    async def build(self, request: BuildRequest, lane: BuildLane, user: BuildUser) -> BuildResult:
        return self.answer


async def _run_unit(tmp_path: Path, answer: BuildResult) -> Any:
    loaded, issues = load_disk([REPO / "cases" / "seeded-repair-vat-code-attach.json"])
    assert not issues
    case = loaded[0]
    lane = Lane("leak-0", 0, "http://127.0.0.1:9", "process", "leak-test")
    client = N8nClient(lane.base_url)
    owner = N8nSession(client, "cookie", {"id": "owner"})
    ctx = BuildLane(lane, client, owner, BuildUserPool(lane, owner, client, Ledger(tmp_path)))
    settings = BuilderSettings(run_id="leak-test", run_dir=tmp_path, model="scripted")
    runner = UnitRunner({case.slug: case}, {lane.lane_id: ctx}, _FixedBuilder(settings, answer),
                        Judge(JudgeConfig(api_key=None)),
                        UnitSettings(max_attempts=1, timeout_ms=60_000, build_timeout_ms=60_000,
                                     keep_workflows=False))
    user = BuildUser("member", "m@x.invalid", owner, None, "project")
    try:
        return case.case, await runner._build_and_verify(ctx, WorkUnit(case.slug, 0), case.case, user, Attempts(), 0)
    finally:
        await client.aclose()


async def test_a_leak_fails_every_row_as_framework_issue_and_logs_the_workflow(tmp_path: Path, caplog) -> None:
    answer = BuildResult(BuildStatus.ok, workflow_id="builtWf0001", leaked_workflows=["foreignWf01"])
    with caplog.at_level(logging.WARNING, logger="orchestrator.run.unit"):
        case, (outcome, record) = await _run_unit(tmp_path, answer)
    assert outcome is Outcome.done
    assert record.failure_category == "framework_issue" and record.attribution == Attribution.framework_issue
    rows = [*record.scenarios, *record.expectations]
    assert len(rows) == len(case.execution_scenarios) + len(case.outcome_expectations) + len(case.process_expectations) > 0
    assert {(r.verdict, r.attribution) for r in rows} == {(Verdict.failed, Attribution.framework_issue)}
    assert all("foreignWf01" in r.reason for r in rows)
    assert "foreignWf01" in caplog.text and "foreignWf01" in (record.build.error or "")


async def test_a_timeout_still_wins_over_a_leak(tmp_path: Path) -> None:
    answer = BuildResult(BuildStatus.timeout, error="build timed out", leaked_workflows=["foreignWf01"])
    _, (outcome, record) = await _run_unit(tmp_path, answer)
    assert outcome is Outcome.done and record.build.status == BuildStatus.timeout
    assert record.failure_category == "build_timeout" and record.attribution is Attribution.timeout
    assert all(r.verdict == Verdict.incomplete for r in [*record.scenarios, *record.expectations])


async def test_a_budget_timeout_still_wins_over_a_leak_when_a_workflow_was_saved(tmp_path: Path) -> None:
    """n8n README ("a timeout still wins: if the build also timed out, the run stays neutral as
    timeout") with ``harness/build-workflow.ts`` and ``run/case-pipeline.ts`` (a92ceee3: the
    ``harnessFault`` row goes through ``attachExpectations``): a conversation a budget ended still
    carries its saved workflow; when it also read a foreign workflow, every row is the harness
    fault's, stamped ``incomplete`` / ``timeout`` — a neutral timeout."""
    answer = BuildResult(BuildStatus.ok, workflow_id="builtWf0001", leaked_workflows=["foreignWf01"],
                         budget_timeout="Run timed out after 1800000ms (conversation budget, user turn 3)",
                         budget_breach={"kind": "conversation", "turn": 3, "elapsedMs": 1_800_000})
    _, (outcome, record) = await _run_unit(tmp_path, answer)
    assert outcome is Outcome.done and record.build.timeout == answer.budget_breach
    assert record.failure_category == "build_timeout" and record.attribution is Attribution.timeout
    rows = [*record.scenarios, *record.expectations]
    assert rows and {(r.verdict, r.attribution) for r in rows} == {(Verdict.incomplete, Attribution.timeout)}
