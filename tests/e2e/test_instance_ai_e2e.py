"""The ``instance-ai`` builder end to end on a real n8n process lane with the embedded sandbox.

The only stand-in is the model (the scripted server on loopback): the lane's real Instance AI agent
loads the skill, writes the workflow into the real (bubblewrap) sandbox workspace and calls the real
``build-workflow``; the builder drives the chat over the real event stream. Afterwards no thread,
sandbox, workflow, member or credential is left on the lane.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.model_switch import SharedModel, Switch
from support.process_lanes import leftovers
from support.static_lane import LaneTurn, StaticLane, lane_turn, started_static_lane
from support.tools import require

from orchestrator.builders.builder import (
    BuilderSettings,
    BuildEvents,
    BuildRequest,
    BuildResult,
    get_builder,
)
from orchestrator.builders.claude.options import ClaudeOptions
from orchestrator.builders.instance_ai.compaction import NO_CURSOR
from orchestrator.builders.lane import BuildLane
from orchestrator.cases import EvalCase, LoadedCase, load_disk
from orchestrator.domain import PROVIDER_OUTAGE_ROOT_CAUSE, BuildStatus, CleanupFailure, Verdict
from orchestrator.ledger import Ledger
from orchestrator.n8n.rest import N8nClient
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import run
from orchestrator.scripted import instance_ai as ia
from orchestrator.scripted.replies import Action, Hang, HttpError, Reply, Script, ToolUseBlock, text_reply
from orchestrator.scripted.scripts import demo_script
from orchestrator.toolchain import Toolchain, default_cache_dir
from orchestrator.transcript import read_transcript
from orchestrator.verify.expectations import JudgeScope
from orchestrator.verify.judge import Judge, JudgeConfig
from orchestrator.verify.verifier import verify_workflow

pytestmark = [pytest.mark.n8n]
CASES = Path(__file__).resolve().parents[2] / "cases"
FAKE_KEY = "sk-ant-ia-e2e-fake-key-0123456789"
SERVER_URL = [""]


SWITCH = Switch(demo_script())


@pytest.fixture(scope="module")
def shared_turn(shared_sandbox_lane: StaticLane, shared_model: SharedModel):
    """The session's sandbox lane (``_static_lane``: route ``/route/lane-a``), its model calls
    answered by this module's switch."""
    with lane_turn(shared_sandbox_lane, shared_model, SWITCH) as turn:
        SERVER_URL[0] = turn.model.base_url
        yield turn


@pytest.fixture(scope="module")
def model(shared_turn: LaneTurn):
    return shared_turn.model


@pytest.fixture
def script_override():
    yield SWITCH
    SWITCH.override = None


@pytest.fixture(scope="module")
def sandbox_lane(shared_turn: LaneTurn):
    return shared_turn.lane, shared_turn.ledger, shared_turn


def _case(slug: str) -> LoadedCase:
    loaded, problems = load_disk([CASES])
    assert not problems
    return next(c for c in loaded if c.slug == slug)


async def _build(lane, ledger: Ledger, tmp: Path, slug: str | EvalCase, *, builder_name: str = "instance-ai",
                 events: BuildEvents | None = None, judge: Judge | None = None, timeout_ms: int = 240_000,
                 judge_mcp_process: bool = False):
    (tmp / "builds").mkdir(exist_ok=True)
    ctx = await BuildLane.open(lane, ledger)
    settings = BuilderSettings(run_id=lane.run_id, run_dir=tmp, model="claude-opus-4-8", outage_waits_s=(0.1, 0.1),
                               claude_bin=Toolchain(default_cache_dir()).claude_bin, api_key=FAKE_KEY,
                               base_url=SERVER_URL[0],
                               # the claude builders' retries are their options' (the instance-ai builder takes none)
                               options=ClaudeOptions.model_validate({"build_max_retries": 0}) if builder_name == "mcp" else None)
    builder = get_builder(builder_name)(settings, events)
    await builder.prepare_lane(ctx)
    case = slug if isinstance(slug, EvalCase) else _case(slug).case
    user = await ctx.users.acquire(case.credentials, mcp_key=builder.needs_mcp_key)
    transcript = tmp / f"{builder_name}.0.jsonl"
    verification = None
    try:
        result = await builder.build(BuildRequest(case, 0, 0, timeout_ms, transcript), ctx, user)
        workflow = await ctx.owner.get_workflow(result.workflow_id) if result.workflow_id else None
        threads = await ctx.owner.get("/rest/instance-ai/threads")
        if judge is not None:
            scope = JudgeScope(process_gradable=builder.process_gradable, judge_process_anyway=judge_mcp_process)
            verification = await verify_workflow(case, result.workflow_id, ctx.owner, judge, timeout_ms=60_000,
                                                 transcript_path=result.transcript_path, scope=scope)
    finally:
        failures = await ctx.users.release(user)
        failures += await ctx.close()
    return Built(result, workflow, threads, failures, transcript, verification)


@dataclass
class Built:
    result: Any
    workflow: dict[str, Any] | None
    threads: Any
    failures: list[CleanupFailure]
    transcript: Path
    verification: Any


def test_smoke_case_builds_through_chat_and_leaves_nothing(sandbox_lane, model, tmp_path: Path) -> None:
    lane, ledger, turn = sandbox_lane
    built = asyncio.run(_build(lane, ledger, tmp_path, "smoke-manual-set-static-fields"))
    result, workflow, threads, failures, transcript = built.result, built.workflow, built.threads, built.failures, built.transcript
    assert failures == []
    assert result.status == BuildStatus.ok, result.error
    assert result.workflow_id and workflow is not None
    types = sorted(n["type"] for n in workflow["nodes"])
    assert types == ["n8n-nodes-base.manualTrigger", "n8n-nodes-base.set"]
    fields = {a["name"]: a["value"] for a in workflow["nodes"][1]["parameters"]["assignments"]["assignments"]} \
        if workflow["nodes"][1]["type"].endswith(".set") else \
        {a["name"]: a["value"] for a in workflow["nodes"][0]["parameters"]["assignments"]["assignments"]}
    assert fields == {"status": "ok", "version": 3}
    # the narration (for the communication check) is the agent's reply to the last turn, naming what it built
    assert result.narration and result.narration.endswith("You can run it from the editor.")
    assert f'I built the workflow "{workflow["name"]}" (id {result.workflow_id})' in result.narration
    # the thread (and its sandbox) is gone right after the build
    listed = threads if isinstance(threads, list) else (threads or {}).get("threads", threads)
    assert not listed, listed
    # the transcript holds the chat: the user turn, the tool calls and the build result
    entries = read_transcript(transcript)
    kinds = [e["kind"] for e in entries]
    assert kinds[0] == "meta" and "user" in kinds and "assistant" in kinds and kinds[-1] == "run"
    assert entries[0]["lane"] == lane.lane_id
    tools = [e["tool"] for e in entries if e["kind"] == "tool_call"]
    assert tools[-1] == "build-workflow" and "load_skill" in tools
    assert any(e["kind"] == "tool_result" and e.get("tool") == "build-workflow" and e["result"]["success"] for e in entries)
    # the lane's build calls came through its route, asking for the lane's model
    assert model.models_by_route().get("/route/lane-a") == {"claude-sonnet-4-6"}
    # ledger: thread created and deleted; the built workflow recorded (the pool deleted it with the member)
    records = turn.records()  # the module's own (the lane is the session's)
    thread_ops = [r["op"] for r in records if r["kind"] == "thread"]
    assert thread_ops == ["create", "delete"]
    assert any(r["op"] == "create" and r["kind"] == "workflow" and r["id"] == result.workflow_id for r in records)


PROCESS = ["The assistant told the user which workflow it built."]


def _judge() -> Judge:
    return Judge(JudgeConfig(api_key=FAKE_KEY, base_url=SERVER_URL[0], effort="low", backoff_s=0, attempts=1))


def _with_process(slug: str) -> EvalCase:
    return _case(slug).case.model_copy(update={"process_expectations": PROCESS})


@pytest.mark.claude
def test_both_builders_keep_a_transcript_that_process_expectations_are_judged_on(sandbox_lane, model, tmp_path: Path) -> None:
    """Both builders keep a transcript. Instance AI builds have their process expectations judged
    and scored; MCP builds only with ``--judge-mcp-process``, and then never scored (n8n
    ``build-expectations/select.ts``: no process expectations for MCP builds)."""
    lane, ledger, _ = sandbox_lane
    require("claude", Toolchain(default_cache_dir()).claude_ready, "run `orchestrator lanes install`")
    for name in ("instance-ai", "mcp"):
        built = asyncio.run(_build(lane, ledger, tmp_path, _with_process("smoke-manual-set-static-fields"),
                                   builder_name=name, judge=_judge(), judge_mcp_process=True))
        assert built.result.status == BuildStatus.ok, (name, built.result.error)
        assert built.result.transcript_path == built.transcript and built.failures == []
        entries = read_transcript(built.transcript)
        assert entries[0]["builder"] == name and any(e["kind"] == "tool_call" for e in entries)
        assert FAKE_KEY not in built.transcript.read_text()
        process = [e for e in built.verification.expectations if e.kind == "process"]
        if name == "instance-ai":
            assert [e.verdict for e in process] == [Verdict.passed], (name, process)
        else:  # judged as an extra, never scored
            assert [e.verdict for e in process] == [Verdict.incomplete], (name, process)
            assert process[0].reason.startswith("[--judge-mcp-process extra, not scored: pass]"), process
        judged = [r for r in model.message_requests if "## Conversation transcript" in json.dumps(r.body)]
        assert judged and any("[tool call" in json.dumps(r.body) for r in judged)


def test_every_user_turn_is_sent_and_the_update_approval_is_answered(sandbox_lane, model, tmp_path: Path) -> None:
    lane, ledger, _ = sandbox_lane
    case = EvalCase.model_validate({
        "conversation": [
            {"role": "user", "text": 'Build a workflow with a Manual Trigger and a Set node: status, the string "ok".'},
            {"role": "assistant", "text": "Done."},
            {"role": "user", "text": "Please also count the turns, and ask me about the style. [agree to whatever is asked]"},
        ],
        "complexity": "simple", "tags": ["t"], "outcomeExpectations": ["It has a Set node."],
    })
    built = asyncio.run(_build(lane, ledger, tmp_path, case))
    assert built.result.status == BuildStatus.ok, built.result.error
    entries = read_transcript(built.transcript)
    users = [e["text"] for e in entries if e["kind"] == "user"]
    assert users == [case.conversation[0].text, "Please also count the turns, and ask me about the style."]
    assert [e["status"] for e in entries if e["kind"] == "run"] == ["completed", "completed"]
    asked = [e for e in entries if e["kind"] == "confirmation"]
    answered = [e for e in entries if e["kind"] == "answer"]
    assert asked and [a["request_id"] for a in answered] == [c["request_id"] for c in asked]
    assert asked[0]["tool"] == "ask-user" and asked[0]["input_type"] == "questions"
    assert answered[0]["answer"] == {"kind": "questions", "answers": [{"questionId": "style", "selectedOptions": ["Compact"]}]}
    assert "You chose: Compact." in [e["text"] for e in entries if e["kind"] == "assistant"][-1]
    fields = {a["name"]: a["value"] for n in built.workflow["nodes"] if n["type"].endswith(".set")
              for a in n["parameters"]["assignments"]["assignments"]}
    assert fields == {"status": "ok", "turns": 2}  # the second turn updated the same workflow
    assert built.result.turns == 2 and built.failures == []


def test_a_compaction_case_on_the_default_observer_threshold_is_never_judged(sandbox_lane, model,
                                                                             tmp_path: Path) -> None:
    """requiresMemoryCompaction (n8n's harness/build-workflow.ts): 2.41.1 has no memory route, so the
    premise is read from the build's run debug; on the lane's default Observer threshold a short thread
    never compacts, so every expectation ends incomplete with that reason (never judged, never a pass
    for free)."""
    lane, ledger, _ = sandbox_lane
    case = _case("context-compaction-keeps-disk-threshold").case
    built = asyncio.run(_build(lane, ledger, tmp_path, case, judge=_judge()))
    assert built.result.not_judged_reason == NO_CURSOR and built.result.judge_context is None
    assert built.result.leaked_workflows == [] and built.failures == []
    if built.result.status == BuildStatus.ok:  # the unit path hands the reason to verification
        v = asyncio.run(_verify_not_judged(lane, case, built.result))
        build_expectations = [e for e in v.expectations if e.kind != "context"]
        assert build_expectations and {(e.verdict, e.reason) for e in build_expectations} == {(Verdict.incomplete, NO_CURSOR)}
        # the context assertion stands whatever the premise: graded on the run debug the build captured
        context = [e for e in v.expectations if e.kind == "context"]
        assert len(context) == len(case.context_assertions) and all(e.verdict != Verdict.incomplete for e in context)


async def _verify_not_judged(lane, case: EvalCase, result: Any):
    async with N8nClient(lane.base_url) as client:
        owner = await client.login(lane.owner.email, lane.owner.password)
        try:
            return await verify_workflow(case, None, owner, _judge(), timeout_ms=60_000,
                                         not_judged_reason=result.not_judged_reason, run_debug=result.run_debug)
        finally:
            await owner.aclose()


def _tool_walk(tool: str, list_args: dict[str, Any], follow: Any, done: str) -> Script:
    """An agent that lists with ``tool``, then calls ``follow(item)`` for every listed item, then says ``done``."""

    def script(request: dict[str, Any]) -> Action:
        if not ia.is_instance_ai_agent(request):
            return SWITCH.default(request)
        calls = [(c, r) for c, r in ia.calls_since(request, ia.user_texts(request)[-1][0]) if c.get("name") == tool]
        if not calls:
            return Reply([ToolUseBlock(tool, list_args)])
        listed = ia.result_json(calls[0][1])
        items = listed.get("credentials") or listed.get("workflows") or listed.get("data") or []
        for item in items[len(calls) - 1:]:
            return Reply([ToolUseBlock(tool, follow(item))])
        return text_reply(done)

    return script


def test_the_agent_sees_exactly_the_declared_credentials_and_valid_false_fails_its_test(
        sandbox_lane, model, tmp_path: Path, script_override: Switch) -> None:
    lane, ledger, _ = sandbox_lane
    script_override.override = _tool_walk("credentials", {"action": "list"},
                                          lambda c: {"action": "test", "credentialId": c["id"]}, "Checked them all.")
    case = EvalCase.model_validate({
        "conversation": [{"role": "user", "text": "Which Slack and GitHub accounts can you use? Test each one."}],
        "complexity": "simple", "tags": ["credential"], "outcomeExpectations": ["It tested every credential."],
        "credentials": [{"type": "slackApi", "description": "Team workspace, posts to #ops"},
                        {"type": "slackApi", "name": "Old Slack", "valid": False}, {"type": "githubApi"}],
    })
    built = asyncio.run(_build(lane, ledger, tmp_path, case))
    assert built.result.status == BuildStatus.ok and built.failures == [], built.result.error
    entries = read_transcript(built.transcript)
    results = [e["result"] for e in entries if e["kind"] == "tool_result" and e.get("tool") == "credentials"]
    listed = results[0]["credentials"]
    assert sorted((c["name"], c["type"]) for c in listed) == [
        ("Old Slack", "slackApi"), ("[eval] GitHub", "githubApi"), ("[eval] Slack", "slackApi")]
    assert {c["name"]: c.get("description") for c in listed}["[eval] Slack"] == "Team workspace, posts to #ops"
    tests = {c["name"]: r for c, r in zip(listed, results[1:], strict=True)}
    assert tests["[eval] Slack"]["success"] is True and tests["[eval] GitHub"]["success"] is True
    assert tests["Old Slack"]["success"] is False  # valid: false: really tested, and it fails


def test_reading_a_workflow_the_build_did_not_create_or_seed_is_a_leak(
        sandbox_lane, model, tmp_path: Path, script_override: Switch) -> None:
    lane, ledger, _ = sandbox_lane
    script_override.override = _tool_walk("workflows", {"action": "list"},
                                          lambda w: {"action": "get", "workflowId": w["id"]}, "Read them.")
    case = EvalCase.model_validate({
        "conversation": [{"role": "user", "text": "What workflows are there? Open each one."}],
        "complexity": "simple", "tags": ["leak"], "outcomeExpectations": ["It opened the workflows."]})

    async def go() -> tuple[BuildResult, str, list[CleanupFailure]]:
        ctx = await BuildLane.open(lane, ledger)
        settings = BuilderSettings(run_id=lane.run_id, run_dir=tmp_path, model="claude-opus-4-8", outage_waits_s=(0.1,))
        builder = get_builder("instance-ai")(settings)
        user = await ctx.users.acquire([], mcp_key=False)
        try:  # a workflow in the build's project that the case never seeded: isolation broken on purpose
            planted = await user.session.create_workflow({"name": "Not yours", "nodes": [], "connections": {},
                                                          "projectId": user.project_id})
            result = await builder.build(BuildRequest(case, 0, 0, 120_000, tmp_path / "leak.jsonl"), ctx, user)
        finally:
            failures = await ctx.users.release(user)
            failures += await ctx.close()
        return result, planted, failures

    result, planted, failures = asyncio.run(go())
    assert failures == [] and result.status == BuildStatus.ok, result.error
    assert result.leaked_workflows == [planted]


def test_a_provider_outage_is_retried_on_a_fresh_thread_then_reported(sandbox_lane, model, tmp_path: Path,
                                                                      script_override: Switch) -> None:
    lane, ledger, turn = sandbox_lane
    released = threading.Event()
    agent = ia.instance_ai_agent()

    def stormy(request: dict[str, Any]) -> Action:
        if ia.is_instance_ai_agent(request) and not released.is_set():
            return HttpError(529)
        return SWITCH.default(request)

    script_override.override = stormy
    retries: list[int] = []
    def on_outage_retry() -> None:
        retries.append(1)
        released.set()

    events = BuildEvents(on_outage_retry=on_outage_retry)
    built = asyncio.run(_build(lane, ledger, tmp_path, "smoke-manual-set-static-fields", events=events))
    assert built.result.status == BuildStatus.ok and built.result.attempts == 2 and retries == [1], built.result.error
    entries = read_transcript(built.transcript)
    errors = [e for e in entries if e["kind"] == "error"]
    assert errors and any(e.get("status") == 529 or "529" in str(e.get("message")) or "verloaded" in str(e.get("message"))
                          for e in errors), errors
    # a storm that never ends: provider_outage with the root-cause marker, after every wait
    released.clear()
    script_override.override = lambda request: HttpError(529) if ia.is_instance_ai_agent(request) else SWITCH.default(request)
    built = asyncio.run(_build(lane, ledger, tmp_path, "smoke-manual-set-static-fields"))
    assert built.result.status == BuildStatus.provider_outage and built.result.attempts == 3
    assert built.result.root_cause.startswith(PROVIDER_OUTAGE_ROOT_CAUSE) and built.failures == []
    del agent
    records = turn.records()
    open_threads = {r["id"] for r in records if r["kind"] == "thread" and r["op"] == "create"} - \
        {r["id"] for r in records if r["kind"] == "thread" and r["op"] == "delete"}
    assert open_threads == set()


def test_the_case_timeout_cancels_the_run_and_is_a_timeout(sandbox_lane, model, tmp_path: Path, script_override: Switch) -> None:
    lane, ledger, _ = sandbox_lane
    script_override.override = lambda request: (Hang(20) if ia.is_instance_ai_agent(request) else SWITCH.default(request))
    t0 = time.monotonic()
    built = asyncio.run(_build(lane, ledger, tmp_path, "smoke-manual-set-static-fields", timeout_ms=4_000))
    assert built.result.status == BuildStatus.timeout, built.result.error
    assert time.monotonic() - t0 < 40 and built.failures == []
    assert not (built.threads if isinstance(built.threads, list) else [])


async def _inventory(base_url: str, email: str, password: str) -> tuple[set[str], list[dict[str, Any]], list[dict[str, Any]], Any]:
    async with N8nClient(base_url) as client:
        owner = await client.login(email, password)
        users = {u["email"] for u in await owner.list_users()}
        workflows = await owner.list_workflows()
        credentials = await owner.list_credentials()
        threads = await owner.get("/rest/instance-ai/threads")
        await owner.aclose()
    return users, workflows, credentials, threads


async def test_orchestrator_run_with_the_instance_ai_builder(sandbox_lane, model, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole pipeline (``orchestrator run --builder instance-ai``) on the sandboxed lane used as a
    static lane: every unit built through chat, verified, and nothing left on the lane or the host."""
    lane, _, _ = sandbox_lane
    owner = lane.owner
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model.base_url)
    before = await _inventory(lane.base_url, owner.email, owner.password)
    cfg = RunConfig(
        cases_paths=[CASES], filter="smoke-manual-set-static-fields,smoke-manual-filter-adults", iterations=1,
        backend="static", base_url=lane.base_url, lanes=1, email=owner.email, password=owner.password,
        model_server="real", state_dir=tmp_path / "state", output_dir=tmp_path / "out", run_id="ia-run",
        builder="instance-ai",
    )
    outcome = await run(cfg)
    assert outcome.ok, outcome.errors
    assert outcome.cleanup_failures == []
    data = json.loads((tmp_path / "out" / "eval-results.json").read_text())["orchestrator"]  # our own keys
    assert data["config"]["builder"] == "instance-ai"
    assert len(data["units"]) == 2
    for unit in data["units"]:
        assert unit["build"]["status"] == "ok" and unit["build"]["workflow_id"], unit["build"]
        assert all(s["verdict"] == "pass" for s in unit["scenarios"]), unit["scenarios"]
        # the chat's reply reached the communication check: graded, not N/A for want of a narration
        [comm] = [c for c in unit["structural"] if c["name"] == "response_describes_changes_accurately"]
        assert comm["passed"] is True, comm
    after = await _inventory(lane.base_url, owner.email, owner.password)
    assert after == before
    assert Ledger.for_run("ia-run", tmp_path / "state").open_entries() == []
    assert leftovers("ia-run", tmp_path / "state") == []
    async with N8nClient(lane.base_url) as client:  # a static lane is someone else's: it still runs
        assert await client.ready()


@pytest.fixture
def crash_lane(model, tmp_path_factory: pytest.TempPathFactory):
    """A lane of its own: the crash test kills its sandbox service."""
    run_id = "ia-e2e-crash"
    SERVER_URL[0] = model.base_url
    with started_static_lane(run_id, tmp_path_factory.mktemp("ia-crash-state"), model.base_url, sandbox=True) as lane:
        yield lane.lane, lane.ledger, lane.state, run_id


def test_a_sandbox_crash_mid_build_is_a_framework_fault(crash_lane, model, tmp_path: Path, script_override: Switch) -> None:
    lane, ledger, state, run_id = crash_lane
    records = [json.loads(line) for line in (state / "runs" / run_id / "ledger.jsonl").read_text().splitlines()]
    (pid,) = [int(r["meta"]["pid"]) for r in records if r["kind"] == "sandbox" and r["op"] == "create"]
    killed = threading.Event()

    def crash_then_answer(request: dict[str, Any]) -> Action:
        if ia.is_instance_ai_agent(request) and not killed.is_set():
            os.killpg(pid, signal.SIGKILL)  # the service and every jail of it
            killed.set()
        return SWITCH.default(request)

    script_override.override = crash_then_answer
    built = asyncio.run(_build(lane, ledger, tmp_path, "smoke-manual-set-static-fields", timeout_ms=120_000))
    assert killed.is_set()
    assert built.result.status == BuildStatus.failed and built.result.framework_fault, built.result
    assert "sandbox" in (built.result.error or "").lower() and built.failures == []


async def test_a_failed_build_still_has_its_expectations_judged(sandbox_lane, model, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                script_override: Switch) -> None:
    """n8n ``build-expectations/select.ts`` ``selectAuthorExpectations`` and the runner: a build that
    saved no workflow but where the agent said something has its expectations judged (one call,
    "(no workflow built)"); its scenarios fail as the builder's."""
    lane, _, _ = sandbox_lane
    owner = lane.owner
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model.base_url)
    script_override.override = lambda request: (text_reply("I would rather not build this one.")
                                                if ia.is_instance_ai_agent(request) else SWITCH.default(request))
    cfg = RunConfig(
        cases_paths=[CASES], filter="smoke-manual-set-static-fields", iterations=1, backend="static",
        base_url=lane.base_url, lanes=1, email=owner.email, password=owner.password, model_server="real",
        state_dir=tmp_path / "state", output_dir=tmp_path / "out", run_id="ia-failed-build", builder="instance-ai",
    )
    outcome = await run(cfg)
    assert outcome.ok, outcome.errors
    [unit] = json.loads((tmp_path / "out" / "eval-results.json").read_text())["orchestrator"]["units"]
    assert unit["build"]["status"] == "failed" and unit["attribution"] == "builder_issue", unit["build"]
    assert {s["verdict"] for s in unit["scenarios"]} == {"fail"}
    assert unit["expectations"] and {e["verdict"] for e in unit["expectations"]} <= {"pass", "fail"}, unit["expectations"]
    inputs = [json.loads(x) for x in (tmp_path / "out" / "judge-inputs.jsonl").read_text().splitlines() if x.strip()]
    [call] = [i for i in inputs if i["target"] == "expectations"]
    assert "(no workflow built)" in call["prompt"] and "I would rather not build this one." in call["prompt"]
