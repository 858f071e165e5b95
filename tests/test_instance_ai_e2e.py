"""The ``instance-ai`` builder end to end on a real n8n process lane with the embedded sandbox.

The only stand-in is the model (the scripted server on loopback): the lane's real Instance AI agent
loads the skill, writes the workflow into the real (bubblewrap) sandbox workspace and calls the real
``build-workflow``; the builder drives the chat over the real event stream. Afterwards no thread,
sandbox, workflow, member or credential is left on the lane.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from _process_lanes import leftovers

from orchestrator.build.builder import BuilderSettings, BuildRequest, get_builder
from orchestrator.build.lane import BuildLane
from orchestrator.build.transcript import read_transcript
from orchestrator.cases import load_disk
from orchestrator.lanes.bringup import bring_up, make_owner, teardown_pool
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process import ProcessBackend
from orchestrator.ledger import Ledger
from orchestrator.results.model import BuildStatus
from orchestrator.scripted.scripts import demo_script
from orchestrator.scripted.server import ScriptedModelServer

pytestmark = [pytest.mark.n8n]
CASES = Path(__file__).resolve().parents[1] / "cases"
RUN_ID = "ia-e2e-lane"


@pytest.fixture(scope="module")
def model() -> ScriptedModelServer:
    server = ScriptedModelServer(demo_script()).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sandbox_lane(model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory):
    state = tmp_path_factory.mktemp("ia-lane-state")
    ledger = Ledger.for_run(RUN_ID, state)
    backend = ProcessBackend(RUN_ID, ledger, state, sandbox=True)
    owner = make_owner(RUN_ID)
    spec = make_spec("eval", [f"N8N_INSTANCE_AI_MODEL_URL={model.base_url}/route/lane-a",
                              "N8N_INSTANCE_AI_MODEL_API_KEY=scripted-key-000"])

    async def up():
        try:
            return (await bring_up(backend, 1, spec, owner)).lanes[0]
        finally:
            await backend.close()

    async def down(lane):
        again = ProcessBackend(RUN_ID, ledger, state, sandbox=True)
        try:
            return await teardown_pool(again, [lane])
        finally:
            await again.close()

    lane = asyncio.run(up())
    yield lane, ledger, state
    assert asyncio.run(down(lane)) == []
    assert leftovers(RUN_ID, state) == []
    assert not list((state / "runs" / RUN_ID / "sandboxes").glob("*/*")) if (state / "runs" / RUN_ID / "sandboxes").exists() else True


def _case(slug: str):
    loaded, problems = load_disk([CASES])
    assert not problems
    return next(c for c in loaded if c.slug == slug)


async def _build(lane, ledger: Ledger, tmp: Path, slug: str):
    ctx = await BuildLane.open(lane, ledger)
    builder = get_builder("instance-ai")(BuilderSettings(run_id=RUN_ID, run_dir=tmp, model="anthropic/claude-sonnet-4-6",
                                                        outage_waits_s=(0.1, 0.1)))
    await builder.prepare_lane(ctx)
    loaded = _case(slug)
    user = await ctx.users.acquire(loaded.case.credentials, mcp_key=False)
    transcript = tmp / f"{slug}.0.jsonl"
    try:
        result = await builder.build(BuildRequest(loaded.case, 0, 0, 240_000, transcript), ctx, user)
        workflow = await ctx.owner.get_workflow(result.workflow_id) if result.workflow_id else None
        threads = await ctx.owner.get("/rest/instance-ai/threads")
    finally:
        failures = await ctx.users.release(user)
        failures += await ctx.close()
    return result, workflow, threads, failures, transcript


def test_smoke_case_builds_through_chat_and_leaves_nothing(sandbox_lane, model: ScriptedModelServer, tmp_path: Path) -> None:
    lane, ledger, state = sandbox_lane
    result, workflow, threads, failures, transcript = asyncio.run(
        _build(lane, ledger, tmp_path, "smoke-manual-set-static-fields"))
    assert failures == []
    assert result.status == BuildStatus.ok, result.error
    assert result.workflow_id and workflow is not None
    types = sorted(n["type"] for n in workflow["nodes"])
    assert types == ["n8n-nodes-base.manualTrigger", "n8n-nodes-base.set"]
    fields = {a["name"]: a["value"] for a in workflow["nodes"][1]["parameters"]["assignments"]["assignments"]} \
        if workflow["nodes"][1]["type"].endswith(".set") else \
        {a["name"]: a["value"] for a in workflow["nodes"][0]["parameters"]["assignments"]["assignments"]}
    assert fields == {"status": "ok", "version": 3}
    # the thread (and its sandbox) is gone right after the build
    listed = threads if isinstance(threads, list) else (threads or {}).get("threads", threads)
    assert not listed, listed
    # the transcript holds the chat: the user turn, the tool calls and the build result
    entries = read_transcript(transcript)
    kinds = [e["kind"] for e in entries]
    assert kinds[0] == "meta" and "user" in kinds and "assistant" in kinds and kinds[-1] == "run"
    tools = [e["tool"] for e in entries if e["kind"] == "tool_call"]
    assert tools[-1] == "build-workflow" and "load_skill" in tools
    assert any(e["kind"] == "tool_result" and e.get("tool") == "build-workflow" and e["result"]["success"] for e in entries)
    # the lane's build calls came through its route, asking for the lane's model
    assert model.models_by_route().get("/route/lane-a") == {"claude-sonnet-4-6"}
    # ledger: thread created and deleted; the built workflow recorded (the pool deleted it with the member)
    records = [json.loads(line) for line in (state / "runs" / RUN_ID / "ledger.jsonl").read_text().splitlines()]
    thread_ops = [r["op"] for r in records if r["kind"] == "thread"]
    assert thread_ops == ["create", "delete"]
    assert any(r["op"] == "create" and r["kind"] == "workflow" and r["id"] == result.workflow_id for r in records)
