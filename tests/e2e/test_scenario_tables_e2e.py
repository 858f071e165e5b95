"""Execution-scenario data tables (``seedDataTables``) on a real process lane (embedded sandbox,
n8n 2.41.1, the scripted model as the only stand-in), ``--builder instance-ai``: the tables exist
empty under ``[seed …]`` names before the build, the agent's opening message names them and the
transcript does not, each scenario finds exactly its own rows when it runs, and nothing is left after
the member's release."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from support.model_switch import SharedModel
from support.static_lane import StaticLane, lane_turn

from orchestrator.builders import seeds
from orchestrator.builders.builder import BuilderSettings, BuildRequest, get_builder
from orchestrator.builders.lane import BuildLane
from orchestrator.cases import EvalCase
from orchestrator.domain import BuildStatus
from orchestrator.scripted import instance_ai as ia
from orchestrator.scripted.replies import Action
from orchestrator.scripted.scripts import demo_script
from orchestrator.transcript import read_transcript
from orchestrator.verify import verifier
from orchestrator.verify.judge import Judge, JudgeConfig
from orchestrator.verify.scenarios import execute_scenario

pytestmark = [pytest.mark.n8n]
KEY = "scripted-tables-key-0000"


class Recorder:
    """The demo script, keeping every request the lane's agent made."""

    def __init__(self) -> None:
        self.script = demo_script()
        self.agent_requests: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> Action:
        if ia.is_instance_ai_agent(request):
            self.agent_requests.append(request)
        return self.script(request)


RECORDER = Recorder()
ORDERS = {"id": "ordersTable0001", "name": "Orders",
          "columns": [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "number"}]}


def _case() -> EvalCase:
    return EvalCase.model_validate({
        "conversation": [{"role": "user", "text": "Build a workflow I can run by hand that reads my Orders table."}],
        "complexity": "simple", "tags": ["scenario-tables"],
        "executionScenarios": [
            {"name": "two-orders", "description": "", "dataSetup": "two orders exist", "successCriteria": "ok",
             "seedDataTables": [{**ORDERS, "rows": [{"order_id": "row_001", "amount": 5},
                                                    {"order_id": "row_002", "amount": 7}]}]},
            {"name": "one-order", "description": "", "dataSetup": "one order exists", "successCriteria": "ok",
             # a second declaration of "Orders" with other rows: the table is shared, the rows are its own
             "seedDataTables": [{**ORDERS, "rows": [{"order_id": "row_999", "amount": 1}]}]},
        ],
    })


@pytest.fixture(scope="module")
def lane_and_model(shared_sandbox_lane: StaticLane, shared_model: SharedModel):
    """The session's sandbox lane (``_static_lane``), its model calls answered by the recorder."""
    with lane_turn(shared_sandbox_lane, shared_model, RECORDER) as turn:
        yield turn.lane, turn.ledger, turn.model, shared_sandbox_lane.lane_env


def test_each_scenario_runs_on_its_own_rows_and_the_tables_go_with_the_member(
        lane_and_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """n8n ``harness/build-workflow.ts`` (the pre-build block creating ``dedupeScenarioSeedTables``'
    union empty, ``buildSeededTablesNote`` as the sent message's ``openingMessageSuffix`` only) and
    ``harness/seed-tables.ts`` ``reseedScenarioTables`` / ``scenariosRequireSerialSeeding``, called
    from ``runScenario`` before each scenario executes."""
    lane, ledger, model, lane_env = lane_and_model
    case = _case()
    seen: dict[str, Any] = {"at_run": []}

    async def scenario() -> None:
        ctx = await BuildLane.open(lane, ledger)
        settings = BuilderSettings(run_id=lane.run_id, run_dir=tmp_path, model="claude-sonnet-4-6", outage_waits_s=(0.1,),
                                   api_key=KEY, base_url=model.base_url, lane_env=lane_env)
        builder = get_builder("instance-ai")(settings)
        user = await ctx.users.acquire(case.credentials, mcp_key=False)
        project = user.project_id
        real_execute = execute_scenario

        async def observed(owner, workflow_id, data_setup, timeout_ms):  # what the table holds as it runs
            table_id = seen["result"].scenario_tables.ids_by_name["Orders"]
            listed = await owner.get(f"/rest/projects/{project}/data-tables/{table_id}/rows")
            rows = listed["data"] if isinstance(listed, dict) else listed
            seen["at_run"].append((data_setup, sorted(r["order_id"] for r in rows)))
            return await real_execute(owner, workflow_id, data_setup, timeout_ms)

        monkeypatch.setattr(verifier, "execute_scenario", observed)
        try:
            seen["result"] = result = await builder.build(BuildRequest(case, 0, 0, 240_000, tmp_path / "t.jsonl"), ctx, user)
            tables = await ctx.owner.get(f"/rest/projects/{project}/data-tables")
            seen["tables"] = tables.get("data") if isinstance(tables, dict) else tables
            j = Judge(JudgeConfig(api_key=KEY, base_url=model.base_url, effort="low", backoff_s=0, attempts=1))
            try:
                seen["verification"] = await verifier.verify_workflow(
                    case, result.workflow_id, ctx.owner, j, timeout_ms=60_000, transcript_path=result.transcript_path,
                    scenario_tables=result.scenario_tables)
            finally:
                await j.aclose()
        finally:
            seen["failures"] = await ctx.users.release(user)
            remaining = await ctx.owner.get("/rest/data-tables-global")
            seen["after"] = remaining.get("data") if isinstance(remaining, dict) else remaining
            seen["failures"] += await ctx.close()
        seen["open"] = [(e.kind, e.id) for e in ledger.open_entries() if e.kind not in ("lane", "sandbox", "process")]

    asyncio.run(scenario())
    result = seen["result"]
    assert result.status == BuildStatus.ok, result.error

    # before the build: one table (two declarations of one name), empty, under this build's seed name
    (table,) = seen["tables"]
    assert seeds.base_name(table["name"]) == "Orders"
    assert sorted(c["name"] for c in table["columns"]) == ["amount", "order_id"]
    assert result.scenario_tables.ids_by_name == {"Orders": table["id"]}

    # the agent was told about it; the recorded turn was not
    opening = ia.user_texts(RECORDER.agent_requests[0])[-1][1]
    assert table["name"] in json.dumps(opening) and "order_id: string" in json.dumps(opening)
    entries = read_transcript(tmp_path / "t.jsonl")
    users = [e for e in entries if e["kind"] == "user"]
    assert users and users[0]["text"] == case.opening_prompt()
    assert table["name"] not in json.dumps(entries)

    # each scenario, one after the other, found exactly its own rows
    assert seen["at_run"] == [("two orders exist", ["row_001", "row_002"]), ("one order exists", ["row_999"])]
    assert [s.name for s in seen["verification"].scenarios] == ["two-orders", "one-order"]
    assert all(s.attribution != "framework_issue" for s in seen["verification"].scenarios), seen["verification"].scenarios

    # after the member's release: the table and the kept thread are gone, the ledger closed
    assert seen["failures"] == []
    assert not any(seeds.base_name(str(t.get("name"))) == "Orders" for t in seen["after"] or [])
    assert seen["open"] == []
