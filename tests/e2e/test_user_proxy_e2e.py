"""The user proxy end to end: a multi-turn corpus case built by n8n's real Instance AI agent on a
real process lane with the embedded sandbox; the model (agent and proxy alike) is the scripted
server on loopback. Asserted on the build's transcript: at least two live turns through the proxy,
the stop at ``messageBudget``, and a withheld value given only after the agent asked for it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support.model_switch import SharedModel
from support.static_lane import StaticLane, lane_turn

from orchestrator.builders.builder import BuilderSettings, BuildRequest, get_builder
from orchestrator.builders.lane import BuildLane
from orchestrator.cases import EvalCase, load_disk
from orchestrator.domain import BuildStatus
from orchestrator.ledger import Ledger
from orchestrator.scripted import instance_ai as ia
from orchestrator.scripted import user_proxy as sp
from orchestrator.scripted.scripts import demo_script
from orchestrator.transcript import read_transcript

pytestmark = [pytest.mark.n8n]
CASES = Path(__file__).resolve().parents[2] / "cases"
KEY = "scripted-proxy-key-0000"


@pytest.fixture(scope="module")
def lane_and_model(shared_sandbox_lane: StaticLane, shared_model: SharedModel):
    """The session's sandbox lane (``_static_lane``), its model calls answered by the demo script."""
    with lane_turn(shared_sandbox_lane, shared_model, demo_script()) as turn:
        yield turn.lane, turn.ledger, turn.model, shared_sandbox_lane.lane_env


def _case(slug: str, **update: Any) -> EvalCase:
    loaded, problems = load_disk([CASES])
    assert not problems
    case = next(c for c in loaded if c.slug == slug).case
    return case.model_copy(update=update) if update else case


async def _build(lane, ledger: Ledger, model, lane_env: dict[str, str], tmp: Path,
                 case: EvalCase, name: str) -> tuple[Any, list[dict[str, Any]]]:
    ctx = await BuildLane.open(lane, ledger)
    settings = BuilderSettings(run_id=lane.run_id, run_dir=tmp, model="claude-sonnet-4-6", outage_waits_s=(0.1,),
                               api_key=KEY, base_url=model.base_url, lane_env=lane_env)
    builder = get_builder("instance-ai")(settings)
    await builder.prepare_lane(ctx)
    user = await ctx.users.acquire(case.credentials, mcp_key=False)
    transcript = tmp / f"{name}.jsonl"
    try:
        result = await builder.build(BuildRequest(case, 0, 0, 240_000, transcript), ctx, user)
    finally:
        failures = await ctx.users.release(user)
        failures += await ctx.close()
    assert failures == []
    return result, read_transcript(transcript)


def _seq(entries: list[dict[str, Any]], pred) -> list[int]:
    return [e["seq"] for e in entries if pred(e)]


def test_a_multi_turn_case_runs_through_the_proxy_on_a_real_lane(lane_and_model, tmp_path: Path) -> None:
    lane, ledger, model, lane_env = lane_and_model

    # 1. the agent asks before building; the withheld channel is given only after that question
    case = _case("behaviour-asks-before-picking-chat-tool")
    result, entries = asyncio.run(_build(lane, ledger, model, lane_env, tmp_path, case, "asks"))
    assert result.status == BuildStatus.ok, result.error
    users = [e for e in entries if e["kind"] == "user"]
    assert len(users) >= 2, users  # two live turns: the opening, then the proxy's answer
    assert users[0]["text"] == case.opening_prompt()
    value = "Microsoft Teams, channel 'Onboarding' in the team 'Growth'"
    asked_at = _seq(entries, lambda e: e["kind"] == "assistant" and e.get("text") == ia.CLARIFYING_QUESTION)
    given_at = _seq(entries, lambda e: value in str(e.get("text", "")))
    assert asked_at and given_at and min(given_at) > asked_at[0]  # never before the agent asked
    assert users[1]["text"] == value
    proxies = [e for e in entries if e["kind"] == "proxy"]
    assert proxies[0]["action"] == "answer" and proxies[0]["by"] == "model" and proxies[0]["text"] == value
    assert proxies[-1]["action"] == "stop"
    # the build followed the answer; no stage direction ever reached the lane's agent
    builds = _seq(entries, lambda e: e["kind"] == "tool_result" and e.get("tool") == "build-workflow")
    assert builds and min(builds) > users[1]["seq"]
    agent_calls = [r for r in model.message_requests if r.is_build_call]
    assert agent_calls
    notes = [n for t in case.conversation for n in t.director_notes]
    for call in agent_calls:
        body = str(call.body.get("messages"))
        assert all(note not in body for note in notes)
    assert any(sp.is_user_proxy_request(r.body) for r in model.message_requests)

    # 2. a list of changes, cut at messageBudget (follow-ups only, n8n's UserProxyLlm.decideFollowUp):
    #    the opening + two changes, then the proxy stops
    case = _case("behaviour-applies-changes-in-order", message_budget=2)
    result, entries = asyncio.run(_build(lane, ledger, model, lane_env, tmp_path, case, "budget"))
    assert result.status == BuildStatus.ok, result.error
    said = [e["text"] for e in entries if e["kind"] == "user"]
    assert said == [case.opening_prompt(), "Keep only issues that carry the label 'bug'.",
                     "Post the number of remaining issues to Slack #eng-triage."]
    runs = [e for e in entries if e["kind"] == "run"]
    assert len(runs) == 3 and all(r["status"] == "completed" for r in runs)
    stop = [e for e in entries if e["kind"] == "proxy"][-1]
    assert stop["action"] == "stop" and stop["by"] == "rule" and "messageBudget" in stop["reason"]
    assert stop["seq"] > runs[-1]["seq"]
    # each change was its own build (the agent rebuilt after every live turn)
    assert len(_seq(entries, lambda e: e["kind"] == "tool_result" and e.get("tool") == "build-workflow")) >= 3
