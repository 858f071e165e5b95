"""The user proxy's decisions, against the embedded scripted model server (no n8n).

The proxy talks to the scripted server through the real ``anthropic`` SDK; the scripted server
recognises the proxy's system prompt and answers deterministically from the screenplay it is given
(:mod:`orchestrator.scripted.user_proxy`). The agent's side of the conversation is written into the
transcript the way the builder's event reader writes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.scripted_reply import reply_of, reply_text, text_of, tool_of

from orchestrator.builders.instance_ai import user_proxy as bp
from orchestrator.builders.instance_ai.builder import answer_confirmation
from orchestrator.builders.instance_ai.proxy_decision import SYSTEM_PROMPT
from orchestrator.builders.instance_ai.user_proxy import (
    AutoApprove,
    ProxyConfig,
    UserProxy,
    conversation_driver,
    parse_decision,
)
from orchestrator.cases import EvalCase
from orchestrator.redact import MASK, register_secret
from orchestrator.scripted import instance_ai as ia
from orchestrator.scripted import user_proxy as sp
from orchestrator.scripted.replies import HttpError
from orchestrator.scripted.scripts import demo_script
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.transcript import Transcript

CASES = Path(__file__).resolve().parents[4] / "cases"
MULTI_TURN = ["behaviour-applies-changes-in-order", "behaviour-asks-before-picking-chat-tool",
              "behaviour-user-runs-it-themselves", "credential-engage-creates-github",
              "credential-picks-named-teams-account", "context-compaction-keeps-disk-threshold"]


def corpus(slug: str, **update: Any) -> EvalCase:
    case = EvalCase.model_validate(json.loads((CASES / f"{slug}.json").read_text()))
    return case.model_copy(update=update) if update else case


def case_of(*turns: tuple[str, str], **extra: Any) -> EvalCase:
    body = {"conversation": [{"role": r, "text": t} for r, t in turns], "complexity": "simple", "tags": ["behaviour"],
            "processExpectations": ["The agent behaved."], **extra}
    return EvalCase.model_validate(body)


@pytest.fixture(scope="module")
def server():
    srv = ScriptedModelServer(demo_script()).start()
    yield srv
    srv.stop()


def proxy_for(case: EvalCase, server: ScriptedModelServer, transcript: Transcript | None = None) -> UserProxy:
    config = ProxyConfig(api_key="scripted-key", base_url=server.base_url, effort="low", attempt_timeout_s=10)
    return UserProxy(case, config, transcript or Transcript(None, builder="instance-ai"),
                     approve=lambda p: answer_confirmation(p))


def agent_says(proxy: UserProxy, text: str, *, built: bool = False) -> None:
    """One finished agent run, as the builder's reader records it."""
    if built:
        proxy.transcript.add("tool_call", tool="build-workflow", call_id="c1", args={})
        proxy.transcript.add("tool_result", tool="build-workflow", call_id="c1",
                             result={"success": True, "workflowId": "wf1", "workflowName": "W"})
    proxy.transcript.add("assistant", text=text)
    proxy.transcript.add("run", status="completed")


def sent_by(proxy: UserProxy, text: str | None) -> None:
    if text is not None:
        proxy.transcript.user(text, len(proxy.sent) - 1)


def proxy_entries(proxy: UserProxy) -> list[dict[str, Any]]:
    return [e for e in proxy.transcript.entries if e["kind"] == "proxy"]


def proxy_requests(server: ScriptedModelServer) -> int:
    return sum(1 for r in server.message_requests if sp.is_user_proxy_request(r.body))


# ------------------------------------------------------------------------------------------------
# the driver choice


def test_single_prompt_cases_keep_auto_approve_and_never_build_a_proxy() -> None:
    case = corpus("smoke-manual-set-static-fields")

    def no_config() -> ProxyConfig:
        raise AssertionError("a single-prompt case must not configure a proxy")

    driver = conversation_driver(case, no_config, Transcript(None, builder="x"), turns=["hello"],
                                 approve=lambda p: {"kind": "approval", "approved": True})
    assert isinstance(driver, AutoApprove)
    assert driver.opening() == "hello"


@pytest.mark.parametrize("slug", MULTI_TURN)
def test_every_multi_turn_corpus_case_gets_the_proxy(slug: str) -> None:
    driver = conversation_driver(corpus(slug), ProxyConfig(), Transcript(None, builder="x"), turns=[],
                                 approve=answer_confirmation)
    assert isinstance(driver, UserProxy)


def test_the_scripted_marker_is_the_proxys() -> None:
    assert sp.PROXY_MARKER == bp.PROXY_MARKER and SYSTEM_PROMPT.startswith(sp.PROXY_MARKER)


# ------------------------------------------------------------------------------------------------
# stage directions, the budget, withheld values


@pytest.mark.parametrize("slug", MULTI_TURN)
async def test_stage_directions_never_reach_the_builder(slug: str, server: ScriptedModelServer) -> None:
    case = corpus(slug, message_budget=8)
    proxy = proxy_for(case, server)
    sent = [proxy.opening()]
    sent_by(proxy, sent[0])
    for reply in ["Which channel should I use?", "Done, I built it.", "Anything else to change?", "Built.", "Built."]:
        agent_says(proxy, reply, built=True)
        message = await proxy.next_message()
        if message is None:
            break
        sent.append(message)
        sent_by(proxy, message)
    await proxy.aclose()
    notes = [n for t in case.conversation for n in t.director_notes]
    assert notes, "every multi-turn corpus case carries a stage direction"
    for message in sent:
        assert "[" not in message and "]" not in message, message
        for note in notes:
            assert note not in message
    # the transcript's user turns are exactly what was sent
    assert [e["text"] for e in proxy.transcript.entries if e["kind"] == "user"] == sent


async def test_the_message_budget_counts_follow_ups_not_the_opening(server: ScriptedModelServer) -> None:
    """n8n ``utils/user-proxy/index.ts`` ``UserProxyLlm.decideFollowUp``: ``messageBudget`` caps the
    follow-ups the proxy sends (``messagesSent`` starts at 0; the harness sends the opening itself),
    so a budget of 2 is the opening plus two follow-ups."""
    case = corpus("behaviour-applies-changes-in-order", message_budget=2)
    proxy = proxy_for(case, server)
    sent = [proxy.opening()]
    sent_by(proxy, sent[0])
    for _ in range(5):
        agent_says(proxy, "I updated the workflow.", built=True)
        message = await proxy.next_message()
        if message is None:
            break
        sent.append(message)
        sent_by(proxy, message)
    await proxy.aclose()
    assert len(sent) == 3
    assert sent[1] == "Keep only issues that carry the label 'bug'."
    assert sent[2] == "Post the number of remaining issues to Slack #eng-triage."
    stop = proxy_entries(proxy)[-1]
    assert stop["action"] == "stop" and stop["by"] == "rule" and "messageBudget" in stop["reason"]
    assert proxy.model_calls == 2  # the budget stop costs no model call


async def test_the_list_is_sent_in_order_then_the_proxy_stops(server: ScriptedModelServer) -> None:
    proxy = proxy_for(corpus("behaviour-applies-changes-in-order"), server)
    sent_by(proxy, proxy.opening())
    messages = []
    while (message := await proxy.next_message()) is not None:
        messages.append(message)
        sent_by(proxy, message)
        agent_says(proxy, "Updated and rebuilt.", built=True)
    assert messages == ["Keep only issues that carry the label 'bug'.",
                        "Post the number of remaining issues to Slack #eng-triage.",
                        "Change the schedule from hourly to every weekday at 08:30."]
    assert proxy_entries(proxy)[-1]["action"] == "stop" and proxy.pending == []


async def test_a_withheld_value_is_given_only_after_the_agent_asks(server: ScriptedModelServer) -> None:
    case = corpus("behaviour-asks-before-picking-chat-tool")
    # the agent does not ask: the value stays withheld, and nothing else is due → stop
    quiet = proxy_for(case, server)
    sent_by(quiet, quiet.opening())
    agent_says(quiet, "I built the sign-up workflow and it notifies Slack.", built=True)
    assert await quiet.next_message() is None
    assert "Microsoft Teams" not in json.dumps(quiet.transcript.entries)
    assert [d.index for d in quiet.pending] == [0]
    # the agent asks: the value is given, and the direction is done
    asking = proxy_for(case, server)
    sent_by(asking, asking.opening())
    agent_says(asking, ia.CLARIFYING_QUESTION)
    answer = await asking.next_message()
    assert answer == "Microsoft Teams, channel 'Onboarding' in the team 'Growth'"
    assert asking.pending == []
    entry = proxy_entries(asking)[-1]
    assert entry["action"] == "answer" and entry["by"] == "model" and entry["situation"] == "reply"


async def test_an_ask_user_question_gets_the_withheld_value(server: ScriptedModelServer) -> None:
    proxy = proxy_for(corpus("behaviour-asks-before-picking-chat-tool"), server)
    sent_by(proxy, proxy.opening())
    payload = {"requestId": "r1", "toolName": "ask-user", "inputType": "questions",
               "questions": [{"id": "tool", "question": "Where should I post?", "type": "single",
                              "options": ["Slack", "Email"]}]}
    body = await proxy.answer(payload)
    assert body == {"kind": "questions", "answers": [
        {"questionId": "tool", "selectedOptions": [], "customText": "Microsoft Teams, channel 'Onboarding' in the team 'Growth'"}]}
    assert proxy.pending == []


async def test_a_refusing_direction_answers_that_the_user_has_none(server: ScriptedModelServer) -> None:
    case = case_of(("user", "Post a summary of new orders every evening."),
                   ("user", "[The user has no channel and won't provide one. If asked — question or setup card, even "
                            "repeatedly — skip it; never invent one.]"))
    proxy = proxy_for(case, server)
    sent_by(proxy, proxy.opening())
    agent_says(proxy, "Which channel should I post to?")
    assert await proxy.next_message() == sp.NONE_ANSWER
    assert [d.index for d in proxy.pending] == [0]  # holds firm on a re-ask
    agent_says(proxy, "I still need a channel. Which one?")
    assert await proxy.next_message() == sp.NONE_ANSWER


# ------------------------------------------------------------------------------------------------
# confirmations: network, setup cards, credentials


NETWORK = {"requestId": "n1", "toolName": "research", "message": "Fetch https://example.com/docs?",
           "domainAccess": {"url": "https://example.com/docs", "host": "example.com"}, "args": {}}


async def test_network_access_is_granted_without_a_model_call_when_no_direction_is_pending(server) -> None:
    """n8n ``utils/confirmation-payload.ts`` ``tryInfrastructureResponse``: domain access and web
    search are both granted as ``domainAccessApprove`` / ``allow_all``, before any model call."""
    case = case_of(("user", "Build a workflow that checks the docs."), ("assistant", "Sure."),
                   ("user", "Also add a summary step."))
    proxy = proxy_for(case, server)
    before = proxy_requests(server)
    assert await proxy.answer(NETWORK) == {"kind": "domainAccessApprove", "domainAccessAction": "allow_all"}
    assert await proxy.answer({**NETWORK, "domainAccess": None, "webSearch": {"query": "n8n"}}) == \
        {"kind": "domainAccessApprove", "domainAccessAction": "allow_all"}
    assert proxy.model_calls == 0 and proxy_requests(server) == before
    assert [e["by"] for e in proxy_entries(proxy)] == ["rule", "rule"]


async def test_a_pending_direction_sends_network_access_to_the_model_which_denies_it(server) -> None:
    case = case_of(("user", "Build a workflow that summarises the n8n docs."),
                   ("user", "[Deny the web-search request — the user doesn't want it searching the web.]"))
    proxy = proxy_for(case, server)
    before = proxy_requests(server)
    assert await proxy.answer(NETWORK) == {"kind": "domainAccessDeny"}
    assert proxy.model_calls == 1 and proxy_requests(server) == before + 1
    entry = proxy_entries(proxy)[-1]
    assert entry["situation"] == "network" and entry["action"] == "deny" and entry["by"] == "model"


def _setup_card(existing: list[dict[str, str]]) -> dict[str, Any]:
    return {"requestId": "s1", "toolName": "setup-workflow", "message": "Configure your workflow", "args": {},
            "setupRequests": [{"node": {"name": "Teams", "type": "n8n-nodes-base.microsoftTeams", "typeVersion": 2,
                                        "parameters": {}, "position": [0, 0], "id": "n1"},
                               "credentialType": "microsoftTeamsOAuth2Api", "existingCredentials": existing,
                               "isTrigger": False}]}


async def test_a_credential_setup_card_is_deferred_by_default_without_the_model(server) -> None:
    proxy = proxy_for(corpus("behaviour-applies-changes-in-order"), server)
    body = await proxy.answer(_setup_card([{"id": "c1", "name": "Team"}]))
    assert body == {"kind": "approval", "approved": False}  # n8n: "User skipped workflow setup for now"
    assert proxy.model_calls == 0


async def test_an_engaging_direction_fills_the_card_with_the_named_credential(server) -> None:
    proxy = proxy_for(corpus("credential-picks-named-teams-account"), server)
    body = await proxy.answer(_setup_card([{"id": "c-sales", "name": "Sales Teams"},
                                           {"id": "c-support", "name": "Support Teams"}]))
    assert body == {"kind": "setupWorkflowApply", "nodeCredentials": {"Teams": {"microsoftTeamsOAuth2Api": "c-support"}}}
    assert proxy.pending == [] and proxy.model_calls == 0


async def test_a_setup_card_with_an_open_value_is_dismissed_when_a_direction_withholds_it(server) -> None:
    case = case_of(("user", "Call our billing API every night."),
                   ("user", "[When the setup card asks for the API base URL, dismiss it — the user hasn't decided yet.]"))
    proxy = proxy_for(case, server)
    card = _setup_card([])
    card["setupRequests"][0].update(credentialType=None, parameterIssues={"url": ["Parameter is required"]})
    assert await proxy.answer(card) == {"kind": "approval", "approved": False}
    assert proxy.model_calls == 1 and proxy_entries(proxy)[-1]["action"] == "deny"


async def test_a_standalone_credential_card_is_deferred(server) -> None:
    """n8n ``utils/confirmation-payload.ts`` ``tryInfrastructureResponse``: without an engaging
    direction a standalone credential card is answered before any model call with an empty
    ``credentialSelection``."""
    proxy = proxy_for(corpus("behaviour-user-runs-it-themselves"), server)
    payload = {"requestId": "c1", "toolName": "credentials", "message": "Connect Slack", "args": {},
               "credentialRequests": [{"credentialType": "slackApi", "reason": "post", "existingCredentials": []}]}
    assert await proxy.answer(payload) == {"kind": "credentialSelection", "credentials": {}}
    assert proxy.model_calls == 0


async def test_a_plan_is_approved_by_the_model(server) -> None:
    proxy = proxy_for(corpus("behaviour-applies-changes-in-order"), server)
    body = await proxy.answer({"requestId": "p1", "toolName": "plan", "inputType": "plan-review", "message": "Plan",
                               "args": {}, "planItems": [{"id": "1", "title": "Build", "kind": "build", "spec": "",
                                                          "deps": []}]})
    assert body == {"kind": "approval", "approved": True} and proxy.model_calls == 1


# ------------------------------------------------------------------------------------------------
# robustness and the transcript


def test_a_refused_answer_falls_back_to_the_same_yes_or_no() -> None:
    assert bp.fallback_answer({"kind": "domainAccessDeny"}) == {"kind": "approval", "approved": False}
    assert bp.fallback_answer({"kind": "questions", "answers": [{"questionId": "q", "selectedOptions": [],
                                                                 "skipped": True}]}) == {"kind": "approval", "approved": False}
    assert bp.fallback_answer({"kind": "setupWorkflowApply", "nodeCredentials": {}}) == {"kind": "approval", "approved": True}
    denial = {"kind": "approval", "approved": False, "userInput": "no"}
    assert bp.fallback_answer(denial) is denial


def test_decisions_parse_from_fences_prose_and_loose_shapes() -> None:
    fenced = parse_decision('```json\n{"action": "SEND", "text": "hi"}\n```')
    assert fenced is not None and fenced.action == "send"
    decision = parse_decision('Sure. {"action": "answer", "answers": [{"questionId": "q", "answer": "A"}]} thanks')
    assert decision is not None and decision.answers == {"q": "A"}
    first = parse_decision('{"action": "answer", "text": "x"} and {"more": 1}')
    assert first is not None and first.action == "answer"
    assert parse_decision('{"action": "dance"}') is None
    assert parse_decision("no json at all") is None


async def test_an_unusable_proxy_falls_back_and_says_so() -> None:
    with ScriptedModelServer(lambda request: HttpError(529, error_type="overloaded_error")) as down:
        proxy = proxy_for(corpus("behaviour-applies-changes-in-order"), down)
        sent_by(proxy, proxy.opening())
        agent_says(proxy, "Built.", built=True)
        assert await proxy.next_message() is None
        await proxy.aclose()
    entry = proxy_entries(proxy)[-1]
    assert entry["by"] == "fallback" and entry["action"] == "stop" and "proxy unavailable" in entry["reason"]


async def test_proxy_entries_are_redacted(server: ScriptedModelServer) -> None:
    secret = "sk-ant-proxy-secret-0123456789abcdef"
    register_secret(secret)
    case = case_of(("user", "Build a workflow that calls our API."), ("assistant", "Sure."),
                   ("user", f"Use the key {secret} for it."))
    proxy = proxy_for(case, server)
    sent_by(proxy, proxy.opening())
    agent_says(proxy, "Built.", built=True)
    assert await proxy.next_message() == f"Use the key {secret} for it."  # the builder gets the words
    entry = proxy_entries(proxy)[-1]
    assert secret not in json.dumps(proxy.transcript.entries) and MASK in entry["text"]


def test_config_follows_the_reference_variables() -> None:
    cfg = ProxyConfig.from_env(api_key="k", base_url="http://127.0.0.1:1", environ={},
                               lane_env={"N8N_INSTANCE_AI_MODEL": "anthropic/claude-opus-4-8"})
    assert (cfg.model, cfg.api_model, cfg.effort) == ("anthropic/claude-opus-4-8", "claude-opus-4-8", "medium")
    cfg = ProxyConfig.from_env(api_key=None, base_url=None, environ={})
    assert cfg.model == "anthropic/claude-sonnet-4-6"
    cfg = ProxyConfig.from_env(api_key=None, base_url=None, environ={
        "N8N_INSTANCE_AI_EVAL_MODEL": "anthropic/claude-haiku-4-5", "N8N_INSTANCE_AI_MODEL": "x",
        "N8N_INSTANCE_AI_EVAL_EFFORT": "low"})
    assert (cfg.api_model, cfg.effort) == ("claude-haiku-4-5", "low")
    with pytest.raises(Exception, match="N8N_INSTANCE_AI_EVAL_EFFORT"):
        ProxyConfig.from_env(api_key=None, base_url=None, environ={"N8N_INSTANCE_AI_EVAL_EFFORT": "huge"})


# ------------------------------------------------------------------------------------------------
# the scripted agent's conversation archetypes


def test_the_scripted_agent_asks_before_building_only_on_the_first_turn() -> None:
    opening = corpus("behaviour-asks-before-picking-chat-tool").opening_prompt()
    assert ia.clarifying_question([(0, opening)]) == ia.CLARIFYING_QUESTION
    assert ia.clarifying_question([(0, opening), (4, "Microsoft Teams")]) is None
    assert ia.clarifying_question([(0, corpus("behaviour-applies-changes-in-order").opening_prompt())]) is None
    assert ia.clarifying_question([(0, "Send new sign-ups to Slack #growth and notify the team.")]) is None


def test_the_scripted_agent_answers_without_building_when_nothing_is_to_be_built() -> None:
    assert ia.answers_without_building(corpus("context-compaction-keeps-disk-threshold").opening_prompt())
    assert ia.answers_without_building("Just tell me what a webhook node does.")
    assert not ia.answers_without_building("Now build the disk-space alert we planned at the start.")
    assert not ia.answers_without_building(corpus("smoke-manual-set-static-fields").opening_prompt())
    assert "?" not in ia.answer_text("When would I pick a cron expression?")


def _agent_request(*user_texts: str) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for i, text in enumerate(user_texts):
        messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
        if i < len(user_texts) - 1:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": "ok"}]})
    return {"model": "m", "messages": messages, "tools": [{"name": "build-workflow"}, {"name": "ask-user"}]}


def test_the_scripted_agent_replies_with_text_instead_of_a_build_for_both_archetypes() -> None:
    agent = ia.instance_ai_agent(load_skill=False)
    asks = agent(_agent_request(corpus("behaviour-asks-before-picking-chat-tool").opening_prompt()))
    assert [text_of(b) for b in reply_of(asks).blocks] == [ia.CLARIFYING_QUESTION]
    answers = agent(_agent_request("Unrelated question: when would I pick a cron expression?"))
    assert "did not build" in reply_text(answers)
    builds = agent(_agent_request(corpus("behaviour-asks-before-picking-chat-tool").opening_prompt(), "Microsoft Teams"))
    assert [tool_of(b).name for b in reply_of(builds).blocks] == ["build-workflow"]


def test_the_instance_ai_builder_checks_the_proxy_effort_before_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.builders.instance_ai.builder import InstanceAiBuilder
    from orchestrator.errors import ConfigError

    monkeypatch.setenv("N8N_INSTANCE_AI_EVAL_EFFORT", "huge")
    with pytest.raises(ConfigError, match="N8N_INSTANCE_AI_EVAL_EFFORT"):
        InstanceAiBuilder.check_config(None)
    monkeypatch.setenv("N8N_INSTANCE_AI_EVAL_EFFORT", "high")
    InstanceAiBuilder.check_config(None)


def test_without_message_budget_five_follow_ups_are_allowed() -> None:
    """n8n ``utils/user-proxy/index.ts``: ``DEFAULT_MESSAGE_BUDGET = 5`` follow-ups (the opening
    not counted)."""
    from orchestrator.builders.instance_ai.user_proxy import DEFAULT_MESSAGE_BUDGET, Screenplay

    case = corpus("behaviour-applies-changes-in-order", message_budget=None)
    assert DEFAULT_MESSAGE_BUDGET == 5 and Screenplay.of(case).budget == 5
