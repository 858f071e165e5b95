"""A seeded case on a real n8n process lane (embedded sandbox, scripted model): during the build the
lane holds the restored messages, the ``[seed …]`` workflows and the seed's folders; the attached
workflow reaches the chat under its remapped id; afterwards none of it is left."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from support.model_switch import SharedModel
from support.static_lane import LaneTurn, StaticLane, lane_turn

from orchestrator.builders import seeds
from orchestrator.builders.builder import BuilderSettings, BuildEvents, BuildRequest, get_builder
from orchestrator.builders.lane import BuildLane
from orchestrator.builders.users import BuildUser, BuildUserPool
from orchestrator.cases import EvalCase
from orchestrator.domain import BuildStatus
from orchestrator.n8n.instance_ai import InstanceAiChat
from orchestrator.n8n.rest import N8nSession
from orchestrator.scripted import instance_ai as ia
from orchestrator.scripted.replies import Action, HttpError
from orchestrator.scripted.scripts import demo_script
from orchestrator.toolchain import Toolchain, default_cache_dir
from orchestrator.transcript import read_transcript

pytestmark = [pytest.mark.n8n]
CASES = Path(__file__).resolve().parents[2] / "cases"
FOLDER = "Seeds E2E Folder"


class Gate:
    """Holds the lane's first agent call of a build until the test has looked at the lane."""

    def __init__(self) -> None:
        self.script = demo_script()
        self.reached = threading.Event()
        self.release = threading.Event()
        self.agent_requests: list[dict[str, Any]] = []
        self.storm = threading.Event()  # set: every agent call is a 529 (a provider outage)

    def reset(self) -> None:
        self.reached.clear()
        self.release.clear()

    def __call__(self, request: dict[str, Any]) -> Action:
        if ia.is_instance_ai_agent(request):
            if self.storm.is_set():
                return HttpError(529)
            self.agent_requests.append(request)
            if not self.reached.is_set():
                self.reached.set()
                self.release.wait(90)
        return self.script(request)


GATE = Gate()


@pytest.fixture(scope="module")
def shared_turn(shared_sandbox_lane: StaticLane, shared_model: SharedModel):
    """The session's sandbox lane (``_static_lane``), its model calls answered through the gate."""
    try:
        with lane_turn(shared_sandbox_lane, shared_model, GATE) as turn:
            yield turn
    finally:
        GATE.release.set()


@pytest.fixture(scope="module")
def model(shared_turn: LaneTurn):
    return shared_turn.model


@pytest.fixture(scope="module")
def seed_lane(shared_turn: LaneTurn):
    return shared_turn.lane, shared_turn.ledger, shared_turn.shared.state


def _case() -> EvalCase:
    """The VAT repair case (history with a build-workflow call, an attached workflow) with its
    workflow placed in a seeded folder."""
    body = json.loads((CASES / "seeded-repair-vat-code-attach.json").read_text())
    body["seed"]["folders"] = [{"id": "seedsE2eRoot01", "name": FOLDER}]
    body["seed"]["workflows"][0]["parentFolderId"] = "seedsE2eRoot01"
    body["seed"]["dataTables"] = [{"id": "seedsE2eRates01", "name": "VAT Rates", "columns": [{"name": "country", "type": "string"}],
                                   "rows": [{"country": "Narnia-Secret-Row"}]}]
    body["seed"]["messages"][1]["content"][0]["text"] += " Rates live in table seedsE2eRates01 (first row: Narnia-Secret-Row)."
    return EvalCase.model_validate(body)


async def _seeded_names(owner) -> list[str]:
    return sorted(str(w.get("name")) for w in await owner.list_workflows() if seeds.base_name(str(w.get("name") or "")))


def test_a_seeded_case_is_on_the_lane_during_its_build_and_gone_after(seed_lane, model, tmp_path: Path) -> None:
    lane, ledger, _ = seed_lane
    case = _case()

    async def scenario() -> dict[str, Any]:
        ctx = await BuildLane.open(lane, ledger)
        settings = BuilderSettings(run_id=lane.run_id, run_dir=tmp_path, model="claude-opus-4-8", outage_waits_s=(0.1,),
                                   claude_bin=Toolchain(default_cache_dir()).claude_bin, api_key="sk-ant-seeds-fake-000",
                                   base_url=model.base_url)
        builder = get_builder("instance-ai")(settings, None)
        user = await ctx.users.acquire(case.credentials, mcp_key=False)
        seen: dict[str, Any] = {}
        try:
            # a leftover of an earlier, crashed run: same base name, a seed suffix → evicted
            await ctx.owner.create_workflow({"name": "Invoice VAT [seed 00000000]", "nodes": [], "connections": {}})
            mine = await ctx.owner.personal_project()  # … and a same-named root folder holding a workflow
            stale_folder = await ctx.owner._send("POST", f"/rest/projects/{mine}/folders", {"name": FOLDER})
            await ctx.owner.create_workflow({"name": "Inside the stale folder", "nodes": [], "connections": {},
                                             "parentFolderId": stale_folder["id"], "projectId": mine})
            build = asyncio.create_task(builder.build(BuildRequest(case, 0, 0, 240_000, tmp_path / "t.jsonl"), ctx, user))
            for _ in range(1200):
                if GATE.reached.is_set() or build.done():
                    break
                await asyncio.sleep(0.1)
            assert GATE.reached.is_set(), f"the agent was never called: {build.done() and build.result()}"
            try:
                thread = next(e.id for e in ledger.open_entries("thread") if e.meta.get("user") == user.user_id)
                seen["messages"] = await InstanceAiChat(ctx.owner).messages(thread)
                seen["workflows"] = await _seeded_names(ctx.owner)
                seen["folders"] = [f["name"] for f in await seeds.list_root_folders(ctx.owner, user.project_id)]
                seen["owner_folders"] = [f["name"] for f in await seeds.list_root_folders(ctx.owner, mine)]
                seen["all_names"] = [w.get("name") for w in await ctx.owner.list_workflows()]
                tables = await ctx.owner.get(f"/rest/projects/{user.project_id}/data-tables")
                seen["tables"] = tables.get("data") if isinstance(tables, dict) else tables
            except Exception as exc:  # the build must not stay gated
                seen["error"] = repr(exc)
            finally:
                GATE.release.set()
            seen["result"] = await build
            seen["built"] = await ctx.owner.get_workflow(seen["result"].workflow_id) if seen["result"].workflow_id else None
        finally:
            seen["failures"] = await ctx.users.release(user)
            seen["after_workflows"] = await _seeded_names(ctx.owner)
            seen["failures"] += await ctx.close()
        seen["open"] = [(e.kind, e.id) for e in ledger.open_entries() if e.kind not in ("lane", "sandbox", "process")]
        return seen

    seen = asyncio.run(scenario())
    assert "error" not in seen, seen.get("error")
    result = seen["result"]
    assert result.status == BuildStatus.ok, result.error

    # during the build: the restored history, the [seed …] workflow (the leftover evicted), the folder
    messages = json.dumps(seen["messages"])
    assert "Build a workflow I can run by hand that lists two invoice lines" in messages
    assert "an &#x27;Add VAT&#x27; Code node" in messages or "an 'Add VAT' Code node" in messages
    (name,) = seen["workflows"]
    assert name.startswith("Invoice VAT [seed ") and name != "Invoice VAT [seed 00000000]"
    assert seen["folders"] == [FOLDER]
    assert seen["owner_folders"] == [] and "Inside the stale folder" not in seen["all_names"]  # evicted with its contents
    (table,) = seen["tables"]  # schema only, under its own [seed …] name, its n8n id remapped into the history
    assert seeds.base_name(table["name"]) == "VAT Rates" and [c["name"] for c in table["columns"]] == ["country"]
    assert table["id"] in messages and "seedsE2eRates01" not in messages
    assert "Narnia-Secret-Row" not in messages and seeds.REDACTED in messages

    # the attached workflow reached the chat under its remapped id, and the agent edited it in place
    first = GATE.agent_requests[0]
    live = ia.user_texts(first)[-1][1]
    (attached,) = ia.attached_resources(live)
    assert attached["type"] == "workflow" and attached["name"] == name and attached["id"] != "invVat7Qk2Lm9P0x"
    assert result.workflow_id == attached["id"]
    assert seen["built"]["name"] == name
    restored = json.dumps(first["messages"])
    assert "lists two invoice lines" in restored and "invVat7Qk2Lm9P0x" not in restored
    entries = read_transcript(tmp_path / "t.jsonl")
    assert [e["role"] for e in entries if e["kind"] == "seeded"] == ["user", "assistant"]
    assert any(e["kind"] == "attach" and e["attachments"][0]["id"] == attached["id"] for e in entries)

    # after: nothing seeded is left, the ledger is closed
    assert seen["failures"] == []
    assert seen["after_workflows"] == []
    assert seen["open"] == []


def test_a_seed_this_n8n_cannot_restore_fails_the_build_as_the_harness_s_fault(seed_lane, model, tmp_path: Path) -> None:
    lane, ledger, _ = seed_lane
    case = EvalCase.model_validate({
        "conversation": [{"role": "user", "text": "List my Ops project's workflows."}], "complexity": "simple",
        "tags": ["seeded"], "outcomeExpectations": ["x"],
        "seed": {"mode": "inline", "projects": [{"id": "projOpsSeed01", "name": "Ops"}]},
    })

    async def scenario():
        ctx = await BuildLane.open(lane, ledger)
        settings = BuilderSettings(run_id=lane.run_id, run_dir=tmp_path, model="claude-opus-4-8", outage_waits_s=(0.1,),
                                   claude_bin=Toolchain(default_cache_dir()).claude_bin, api_key="sk-ant-seeds-fake-000",
                                   base_url=model.base_url)
        user = await ctx.users.acquire([], mcp_key=False)
        try:
            return await get_builder("instance-ai")(settings, None).build(
                BuildRequest(case, 0, 0, 60_000, tmp_path / "p.jsonl"), ctx, user)
        finally:
            assert await ctx.users.release(user) == []
            await ctx.close()

    requests_before = len(GATE.agent_requests)
    result = asyncio.run(scenario())
    assert result.status == BuildStatus.failed and result.framework_fault
    assert "seed restore failed" in (result.error or "") and "projects" in (result.error or "")
    assert len(GATE.agent_requests) == requests_before  # nothing was sent to the agent


def test_an_outage_retry_restores_the_seed_afresh_without_a_second_copy(seed_lane, model, tmp_path: Path) -> None:
    """The first attempt's thread got the seed, then the provider failed: the retry's fresh thread
    gets its own restore, and the first attempt's copies are gone before it (one "[seed …]" workflow,
    one folder for the agent to find)."""
    lane, ledger, _ = seed_lane
    case = _case()
    GATE.reset()
    GATE.storm.set()

    async def scenario() -> dict[str, Any]:
        ctx = await BuildLane.open(lane, ledger)
        settings = BuilderSettings(run_id=lane.run_id, run_dir=tmp_path, model="claude-opus-4-8", outage_waits_s=(0.1,),
                                   claude_bin=Toolchain(default_cache_dir()).claude_bin, api_key="sk-ant-seeds-fake-000",
                                   base_url=model.base_url)
        builder = get_builder("instance-ai")(settings, BuildEvents(on_outage_retry=GATE.storm.clear))
        user = await ctx.users.acquire([], mcp_key=False)
        seen: dict[str, Any] = {}
        try:
            build = asyncio.create_task(builder.build(BuildRequest(case, 0, 0, 240_000, tmp_path / "r.jsonl"), ctx, user))
            for _ in range(1800):
                if GATE.reached.is_set() or build.done():
                    break
                await asyncio.sleep(0.1)
            try:
                seen["workflows"] = await _seeded_names(ctx.owner)
                seen["folders"] = [f["name"] for f in await seeds.list_root_folders(ctx.owner, user.project_id)]
            finally:
                GATE.release.set()
            seen["result"] = await build
        finally:
            seen["failures"] = await ctx.users.release(user)
            seen["after"] = await _seeded_names(ctx.owner)
            seen["failures"] += await ctx.close()
        return seen

    seen = asyncio.run(scenario())
    result = seen["result"]
    assert GATE.reached.is_set(), result
    assert result.status == BuildStatus.ok and result.attempts == 2, result.error
    assert len(seen["workflows"]) == 1 and seen["folders"] == [FOLDER], seen
    assert seen["failures"] == [] and seen["after"] == []


def test_a_session_boundary_seed_is_an_earlier_thread_and_the_live_turn_opens_a_new_one(
        seed_lane, model, tmp_path: Path) -> None:
    """n8n CONTEXT-EVALS (``seed.sessionBoundary``, as ``harness/conversation-seed.ts`` restores it):
    the seeded history goes into a thread of its own — an earlier session — and the graded turn opens
    a fresh thread, so the agent's live request carries the turn but none of the seeded history;
    both threads are gone after the build."""
    lane, ledger, _ = seed_lane
    preference = "House rule: every workflow name starts with ZEBRA-OPS-."
    case = EvalCase.model_validate({
        "conversation": [{"role": "user", "text": 'Build a workflow that sets status to the string "ok".'}],
        "complexity": "simple", "tags": ["memory"], "outcomeExpectations": ["The workflow sets status to ok."],
        "seed": {"mode": "inline", "sessionBoundary": True,
                 "messages": [{"role": "user", "text": preference},
                              {"role": "assistant", "text": "Understood: every workflow gets the ZEBRA-OPS- prefix."}]},
    })
    GATE.reset()
    GATE.storm.clear()
    requests_before = len(GATE.agent_requests)

    async def scenario() -> dict[str, Any]:
        ctx = await BuildLane.open(lane, ledger)
        settings = BuilderSettings(run_id=lane.run_id, run_dir=tmp_path, model="claude-opus-4-8", outage_waits_s=(0.1,),
                                   claude_bin=Toolchain(default_cache_dir()).claude_bin, api_key="sk-ant-seeds-fake-000",
                                   base_url=model.base_url)
        user = await ctx.users.acquire([], mcp_key=False)
        seen: dict[str, Any] = {}
        try:
            build = asyncio.create_task(get_builder("instance-ai")(settings, None).build(
                BuildRequest(case, 0, 0, 240_000, tmp_path / "s.jsonl"), ctx, user))
            for _ in range(1200):
                if GATE.reached.is_set() or build.done():
                    break
                await asyncio.sleep(0.1)
            try:
                chat = InstanceAiChat(ctx.owner)
                threads = [e.id for e in ledger.open_entries("thread") if e.meta.get("user") == user.user_id]
                seen["threads"] = {t: json.dumps(await chat.messages(t)) for t in threads}
            finally:
                GATE.release.set()
            seen["result"] = await build
        finally:
            seen["failures"] = await ctx.users.release(user)
            seen["failures"] += await ctx.close()
        seen["open"] = [e.id for e in ledger.open_entries("thread")]
        return seen

    seen = asyncio.run(scenario())
    assert seen["result"].status == BuildStatus.ok, seen["result"].error
    assert len(seen["threads"]) == 2, seen["threads"].keys()
    with_history = [t for t, text in seen["threads"].items() if "ZEBRA-OPS-" in text]
    assert len(with_history) == 1  # the earlier session holds the history, the live thread does not
    live = GATE.agent_requests[requests_before]
    assert "sets status to the string" in ia.user_texts(live)[-1][1]
    assert "ZEBRA-OPS-" not in json.dumps(live["messages"])
    assert [e["role"] for e in read_transcript(tmp_path / "s.jsonl") if e["kind"] == "seeded"] == ["user", "assistant"]
    assert seen["failures"] == [] and seen["open"] == []


class _OwnerReleasingAMember(N8nSession):
    """The owner's session (same client and cookie) that releases ``member`` from the pool right
    after the first listing of the lane's projects."""

    def __init__(self, owner: N8nSession, users: BuildUserPool, member: BuildUser) -> None:
        super().__init__(owner.client, owner.cookie, owner.user)
        self.users, self.member = users, member
        self.released: list[bool] = []

    async def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        answer = await super().get(path, params)
        if path == "/rest/projects" and not self.released:
            self.released.append(await self.users.release(self.member) == [])
        return answer


def test_the_leftover_eviction_survives_another_build_s_member_going_meanwhile(seed_lane, tmp_path: Path) -> None:
    """Issue 34 item 11, the race behind "seed restore failed: HTTP 404: Project not found": a
    seed's leftover eviction lists every project on the lane (a crashed run's folder sits in another
    build's project), then each project's root folders. Another unit on the same lane releases its
    member meanwhile — since a finished unit's clean-up runs after its slot is given back — and its
    personal project goes with it. Here that interleaving is forced on a real lane: the second
    member is deleted right after the project listing. The eviction must skip the project that is
    gone (nothing of this run is there) instead of failing the seed restore (n8n: a seeding failure
    is the framework's, and this one was not even a failure of the seed)."""
    lane, ledger, _ = seed_lane
    seed = _case().inline_seed
    assert seed is not None
    plan = seeds.plan_restore(seed)

    async def scenario() -> list[str]:
        ctx = await BuildLane.open(lane, ledger)
        mine = await ctx.users.acquire([], mcp_key=False)
        other = await ctx.users.acquire([], mcp_key=False)
        owner = _OwnerReleasingAMember(ctx.owner, ctx.users, other)
        try:
            return await seeds.evict_leftovers(owner, mine.project_id, plan, ledger, lane.lane_id)
        finally:
            assert owner.released == [True]
            assert await ctx.users.release(mine) == []
            await ctx.close()

    assert asyncio.run(scenario()) == []
