"""n8n's build semantics on a real process lane (embedded sandbox, n8n 2.41.1, the scripted model
as the only stand-in): the bundled corpus with ``--builder instance-ai``.

- ``credential-engage-creates-github``: the engaged card offers no GitHub credential, so the
  simulated user creates one and the built workflow carries it (the case can pass);
- ``behaviour-user-runs-it-themselves`` (``allowUserExecution``): the workflow really runs on the
  lane before the proxy tells the agent it ran it (asserted on the lane's executions);
- a single-prompt case gets n8n's answers: a clarifying question gets none, a credential card is
  deferred before any model call;
- a budget that fires in a later turn still grades the workflow the first turn saved.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support.model_switch import SharedModel, Switch
from support.static_lane import StaticLane, lane_turn

from orchestrator.builders.builder import BuilderSettings, BuildRequest, get_builder
from orchestrator.builders.lane import BuildLane
from orchestrator.cases import EvalCase, load_disk
from orchestrator.domain import BuildStatus, Verdict
from orchestrator.ledger import Ledger
from orchestrator.scripted import instance_ai as ia
from orchestrator.scripted import user_proxy as sp
from orchestrator.scripted.replies import Action, Hang
from orchestrator.scripted.scripts import demo_script
from orchestrator.transcript import read_transcript
from orchestrator.verify.judge import Judge, JudgeConfig
from orchestrator.verify.verifier import verify_workflow

pytestmark = [pytest.mark.n8n]
CASES = Path(__file__).resolve().parents[2] / "cases"
KEY = "scripted-fidelity-key-0000"
SWITCH = Switch(demo_script())


@pytest.fixture(scope="module")
def lane_and_model(shared_sandbox_lane: StaticLane, shared_model: SharedModel):
    """The session's sandbox lane (``_static_lane``), its model calls answered by this module's script."""
    with lane_turn(shared_sandbox_lane, shared_model, SWITCH) as turn:
        yield turn.lane, turn.ledger, turn.model, shared_sandbox_lane.lane_env


@pytest.fixture
def script_override():
    yield SWITCH
    SWITCH.override = None


def _corpus(slug: str) -> EvalCase:
    loaded, problems = load_disk([CASES])
    assert not problems
    return next(c for c in loaded if c.slug == slug).case


async def _build(lane, ledger: Ledger, model, lane_env: dict[str, str], tmp: Path,
                 case: EvalCase, name: str, *, timeout_ms: int = 240_000, judge: bool = False) -> dict[str, Any]:
    """Build (and verify, with ``judge``) one case; what the lane held is read before the member goes."""
    ctx = await BuildLane.open(lane, ledger)
    settings = BuilderSettings(run_id=lane.run_id, run_dir=tmp, model="claude-sonnet-4-6", outage_waits_s=(0.1,),
                               api_key=KEY, base_url=model.base_url, lane_env=lane_env)
    builder = get_builder("instance-ai")(settings)
    await builder.prepare_lane(ctx)
    user = await ctx.users.acquire(case.credentials, mcp_key=False)
    transcript = tmp / f"{name}.jsonl"
    out: dict[str, Any] = {}
    try:
        result = await builder.build(BuildRequest(case, 0, 0, timeout_ms, transcript), ctx, user)
        out["result"] = result
        out["workflow"] = await ctx.owner.get_workflow(result.workflow_id) if result.workflow_id else None
        out["credentials"] = await user.session.list_credentials()
        out["executions"] = await ctx.owner.get("/rest/executions", params={
            "filter": f'{{"workflowId": "{result.workflow_id}"}}'}) if result.workflow_id else None
        if judge:
            j = Judge(JudgeConfig(api_key=KEY, base_url=model.base_url, effort="low", backoff_s=0, attempts=1))
            try:
                out["verification"] = await verify_workflow(case, result.workflow_id, ctx.owner, j, timeout_ms=60_000,
                                                            transcript_path=result.transcript_path)
            finally:
                await j.aclose()
    finally:
        failures = await ctx.users.release(user)
        failures += await ctx.close()
    assert failures == []
    out["entries"] = read_transcript(transcript)
    return out


def test_an_engaged_card_without_a_credential_creates_one_and_the_case_can_pass(lane_and_model, tmp_path: Path) -> None:
    """n8n ``utils/user-proxy/index.ts`` ``UserProxyLlm.createCredential`` (the ``manual`` action
    with zero candidates): a real credential of the card's type is created from the seeder's
    template, added to the thread's allowlist with its test bypassed, and selected on the card."""
    lane, ledger, model, lane_env = lane_and_model
    case = _corpus("credential-engage-creates-github")
    assert case.credentials == []  # nothing declared: the card offers no GitHub credential
    built = asyncio.run(_build(lane, ledger, model, lane_env, tmp_path, case, "github", judge=True))
    result, entries = built["result"], built["entries"]
    assert result.status == BuildStatus.ok, result.error
    [card] = [e for e in entries if e["kind"] == "confirmation"]
    assert card["tool"] == "workflows" and card["args"]["action"] == "setup"
    created = [e for e in entries if e["kind"] == "proxy" and "was created" in str(e.get("reason"))]
    assert len(created) == 1 and created[0]["by"] == "rule" and created[0]["seq"] > card["seq"]
    cid = created[0]["answers"]["githubApi"]
    [answer] = [e for e in entries if e["kind"] == "answer" and e["request_id"] == card["request_id"]]
    assert answer["answer"]["kind"] == "setupWorkflowApply"
    assert answer["answer"]["nodeCredentials"] == {"Create Issue": {"githubApi": cid}}
    assert [(c["id"], c["type"]) for c in built["credentials"]] == [(cid, "githubApi")]
    setup = [e["result"] for e in entries if e["kind"] == "tool_result" and e.get("tool") == "workflows"]
    assert setup and setup[-1].get("success") is True and not setup[-1].get("deferred"), setup
    github = [n for n in built["workflow"]["nodes"] if n["type"] == "n8n-nodes-base.github"]
    assert github and github[0]["credentials"]["githubApi"]["id"] == cid
    verification = built["verification"]
    assert verification.expectations and all(e.verdict == Verdict.passed for e in verification.expectations), \
        verification.expectations


def test_a_user_run_really_executes_before_the_proxy_says_so(lane_and_model, tmp_path: Path) -> None:
    """n8n ``harness/chat-loop.ts`` ``applyUserExecution``: with ``allowUserExecution`` the proxy's
    ``runWorkflowId`` is run through the normal execution route (no mocks) and waited for before
    the follow-up ("I ran it") is delivered."""
    lane, ledger, model, lane_env = lane_and_model
    case = _corpus("behaviour-user-runs-it-themselves")
    assert case.allow_user_execution
    built = asyncio.run(_build(lane, ledger, model, lane_env, tmp_path, case, "user-run"))
    result, entries = built["result"], built["entries"]
    assert result.status == BuildStatus.ok, result.error
    [run] = [e for e in entries if e["kind"] == "user_run"]
    assert run["workflow_id"] == result.workflow_id and run["status"] == "success"
    users = [e for e in entries if e["kind"] == "user"]
    assert len(users) == 2 and users[1]["text"].startswith("I ran it")
    assert run["seq"] < users[1]["seq"]  # run, then said
    decided = [e for e in entries if e["kind"] == "proxy" and e.get("run_workflow_id")]
    assert decided and decided[0]["run_workflow_id"] == result.workflow_id
    listed = built["executions"]
    rows = listed.get("results") or listed.get("data") or [] if isinstance(listed, dict) else listed
    [execution] = [r for r in rows if str(r.get("id")) == run["execution_id"]]
    assert execution["mode"] == "manual" and execution["status"] == "success" and execution.get("stoppedAt")


def test_a_single_prompt_case_gets_n8ns_answers(lane_and_model, tmp_path: Path) -> None:
    """n8n ``harness/chat-loop.ts`` ``buildAutoApprovePayload``: a single-prompt case's clarifying
    ``ask-user`` question gets no answer (``answers: []``) and its setup card is applied as it
    stands (``setupWorkflowApply``, no credential picked or created), without any model call (no
    user proxy runs). The standalone credential card's deferral is in tests/unit/builders/instance_ai/test_instance_ai.py."""
    lane, ledger, model, lane_env = lane_and_model
    vague = EvalCase.model_validate({
        "conversation": [{"role": "user", "text": 'Build a workflow with a Manual Trigger and a Set node: status, '
                                                  'the string "ok". Ask me about the style.'}],
        "complexity": "simple", "tags": ["vague"], "outcomeExpectations": ["It has a Set node."]})
    before = sum(1 for r in model.message_requests if sp.is_user_proxy_request(r.body))
    built = asyncio.run(_build(lane, ledger, model, lane_env, tmp_path, vague, "vague"))
    entries = built["entries"]
    [asked] = [e for e in entries if e["kind"] == "confirmation"]
    assert asked["tool"] == "ask-user" and asked["input_type"] == "questions"
    [answer] = [e for e in entries if e["kind"] == "answer"]
    assert answer["answer"] == {"kind": "questions", "answers": []}
    assert "You chose: no option." in [e["text"] for e in entries if e["kind"] == "assistant"][-1]
    # the setup card of a single-prompt case: applied as it stands, nothing selected, nothing created
    github = _corpus("credential-engage-creates-github")
    single = github.model_copy(update={"conversation": github.conversation[:1]})
    assert single.is_single_prompt
    built = asyncio.run(_build(lane, ledger, model, lane_env, tmp_path, single, "card"))
    entries = built["entries"]
    [card] = [e for e in entries if e["kind"] == "confirmation"]
    [answer] = [e for e in entries if e["kind"] == "answer"]
    assert card["tool"] == "workflows" and answer["answer"] == {"kind": "setupWorkflowApply"}  # applied as it stands
    assert built["credentials"] == [] and not [e for e in entries if e["kind"] == "proxy"]
    github_nodes = [n for n in (built["workflow"] or {}).get("nodes", []) if n["type"] == "n8n-nodes-base.github"]
    assert all(not n.get("credentials") for n in github_nodes)
    assert sum(1 for r in model.message_requests if sp.is_user_proxy_request(r.body)) == before


def test_a_budget_that_fires_in_a_later_turn_grades_what_was_saved(lane_and_model, tmp_path: Path,
                                                                   script_override: Switch) -> None:
    """n8n ``harness/build-workflow.ts`` ``driveMultiTurnConversation`` with ``harness/chat-loop.ts``
    ``waitForAllActivity``: a budget that fires inside a later turn cancels that run and ends the
    conversation, not the build — the workflow the first turn saved is graded, stamped with the
    timeout (``Run timed out after …ms (turn budget, user turn 2)``)."""
    lane, ledger, model, lane_env = lane_and_model

    def hang_on_turn_two(request: dict[str, Any]) -> Action:
        if ia.is_instance_ai_agent(request) and len(ia.user_texts(request)) >= 2:
            return Hang(60)
        return SWITCH.default(request)

    script_override.override = hang_on_turn_two
    case = EvalCase.model_validate({
        "conversation": [
            {"role": "user", "text": 'Build a workflow with a Manual Trigger and a Set node: status, the string "ok".'},
            {"role": "assistant", "text": "Done."},
            {"role": "user", "text": "Please also count the turns."},
        ],
        "complexity": "simple", "tags": ["t"], "outcomeExpectations": ["It has a Set node."]})
    built = asyncio.run(_build(lane, ledger, model, lane_env, tmp_path, case, "late", timeout_ms=25_000))
    result, entries = built["result"], built["entries"]
    assert result.status == BuildStatus.ok and result.workflow_id, result.error
    assert result.budget_timeout and "(turn budget, user turn 2)" in result.budget_timeout
    # n8n's BuildTimeout ({kind, turn, elapsedMs}): the unit runner stamps every row of the iteration
    # with it (incomplete, attribution timeout; tests/unit/run/test_fidelity_counts.py)
    assert result.budget_breach is not None and (result.budget_breach["kind"], result.budget_breach["turn"]) == ("turn", 2)
    [stamp] = [e for e in entries if e["kind"] == "timeout"]
    assert (stamp["budget"], stamp["turn"]) == ("turn", 2)
    assert [e["status"] for e in entries if e["kind"] == "run"][0] == "completed"
