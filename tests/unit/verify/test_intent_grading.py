"""The agents-exam tier: the intent-classification preamble and the deterministic grading of the
agent's fenced ``intent`` block, rule by rule as n8n's harness has them (each test names the n8n file
and function it follows). Our own case bodies; the judge, where one is needed, is the real
``anthropic`` client talking to the embedded scripted model over loopback HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.cases import EvalCase
from orchestrator.cases.intent import INTENT_PREAMBLE
from orchestrator.results.model import Verdict
from orchestrator.scripted.instance_ai import instance_ai_agent
from orchestrator.scripted.replies import Reply, TextBlock, ToolUseBlock
from orchestrator.scripted.scripts import judge, verdict_list
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.transcript import Transcript
from orchestrator.verify.expectations import judge_build_expectations
from orchestrator.verify.intent import (
    NO_AGENT_OUTPUT,
    NO_BLOCK,
    UNIT_NAME,
    IntentBlockError,
    IntentTuple,
    grade_intent,
    parse_intent_block,
)
from orchestrator.verify.judge import Judge, JudgeConfig
from orchestrator.verify.verifier import expectations_not_judged


def _block(body: str, before: str = "My reasoning.") -> str:
    return f"{before}\n```intent\n{body}\n```"


def _case(intent: dict[str, Any], datasets: tuple[str, ...] = ("agents-exam",)) -> EvalCase:
    return EvalCase.model_validate({
        "conversation": [{"role": "user", "text": "Every Friday, email me the open invoices."}],
        "complexity": "simple", "tags": ["intent"], "datasets": list(datasets),
        "intentExpectation": intent,
        "processExpectations": ["The agent explains who owns the control flow."],
    })


SINGLE = {"accepts": [{"anchor": "wf", "embedsOther": False}]}
PARTS = {"parts": [{"label": "digest", "accepts": [{"anchor": "wf", "embedsOther": False}]},
                   {"label": "helper", "accepts": [{"anchor": "agent", "embedsOther": False},
                                                   {"anchor": "agent", "embedsOther": True}]}]}


def test_the_block_vocabulary_is_normalized_and_the_last_block_wins() -> None:
    """n8n: ``build-expectations/intent.ts`` ``parseIntentBlock`` (``findLastIntentBlock``,
    ``normalizeAnchor``, ``normalizeEmbedsOther``): the LAST fenced block counts; leading blanks
    before the fence and CRLF line ends are tolerated; anchor and embeds_other spellings map to one
    vocabulary; ``embedsOther`` is read when ``embeds_other`` is absent."""
    assert parse_intent_block(_block('{"anchor": "workflow-anchored", "embeds_other": false}')) == IntentTuple("wf", False)
    two = _block('{"anchor": "agent", "embeds_other": true}') + "\n" + _block('{"anchor": "META"}', before="")
    assert parse_intent_block(two) == IntentTuple("out-of-scope", "n/a")
    crlf = "Why.\r\n   ```intent\r\n{\"anchor\": \"Needs-Clarification\", \"embeds_other\": \"n/a\"}\r\n   ```"
    assert parse_intent_block(crlf) == IntentTuple("clarify", "n/a")
    assert parse_intent_block(_block('{"anchor": "wf-anchored", "embedsOther": "true"}')) == IntentTuple("wf", True)
    assert parse_intent_block(_block('{"parts": [{"anchor": "wf", "embeds_other": false}, {"anchor": "agent"}]}')) == [
        IntentTuple("wf", False), IntentTuple("agent", "n/a")]
    assert parse_intent_block("no fence at all") is None


@pytest.mark.parametrize(("body", "message"), [
    ("{not json", "intent block is not valid JSON"),
    ("[1, 2]", "intent block is not a JSON object"),
    ('{"parts": {"anchor": "wf"}}', 'intent block "parts" is not an array'),
    ('{"parts": ["wf"]}', "intent block part is not a JSON object"),
    ('{"anchor": "bogus", "embeds_other": false}', 'unrecognized anchor value: "bogus"'),
    ('{"anchor": "wf", "embeds_other": "maybe"}', 'unrecognized embeds_other value: "maybe"'),
])
def test_a_malformed_block_fails_every_unit_naming_the_fault(body: str, message: str) -> None:
    """n8n: ``build-expectations/intent.ts`` ``parseIntentBlock`` errors, and
    ``gradeIntentExpectation``: a malformed block fails each unit (not incomplete) with the error."""
    with pytest.raises(IntentBlockError, match=message.replace("[", r"\[")):
        parse_intent_block(_block(body))
    rows = grade_intent(_case(PARTS).intent_expectation, _block(body))
    assert [(r.verdict, r.reason) for r in rows] == [(Verdict.failed, message)] * 2


def test_single_classification_matches_any_accepted_tuple() -> None:
    """n8n: ``build-expectations/intent.ts`` ``gradeIntentExpectation`` / ``tuplesMatch``: one unit
    named ``intent: anchor + embeds_other exact-match``; anchors must agree, then embeds_other
    unless the accepted anchor is clarify / out-of-scope or the accepted embedsOther is "n/a"; a
    parts block fails a single-classification case; no block fails, no output is incomplete."""
    single = _case(SINGLE).intent_expectation
    assert single is not None
    [ok] = grade_intent(single, _block('{"anchor": "workflow-anchored", "embeds_other": false}'))
    assert (ok.kind, ok.text, ok.verdict, ok.reason) == ("process", UNIT_NAME, Verdict.passed,
                                                         "matched {anchor: wf, embeds_other: false}")
    [wrong] = grade_intent(single, _block('{"anchor": "workflow-anchored", "embeds_other": true}'))
    assert wrong.verdict == Verdict.failed
    assert wrong.reason == "got {anchor: wf, embeds_other: true}; accepted: [{anchor: wf, embeds_other: false}]"
    clarify = _case({"accepts": [{"anchor": "clarify", "embedsOther": "n/a"}]}).intent_expectation
    assert clarify is not None
    assert grade_intent(clarify, _block('{"anchor": "clarify", "embeds_other": true}'))[0].verdict == Verdict.passed
    loose = _case({"accepts": [{"anchor": "agent", "embedsOther": "n/a"}]}).intent_expectation
    assert loose is not None
    assert grade_intent(loose, _block('{"anchor": "agent", "embeds_other": false}'))[0].verdict == Verdict.passed
    [parts] = grade_intent(single, _block('{"parts": [{"anchor": "wf", "embeds_other": false}]}'))
    assert (parts.verdict, parts.reason) == (Verdict.failed, "expected a single classification, got 1 parts")
    assert [(r.verdict, r.reason) for r in grade_intent(single, "I classified it in prose only.")] == [
        (Verdict.failed, NO_BLOCK)]
    assert [(r.verdict, r.reason) for r in grade_intent(single, None)] == [(Verdict.incomplete, NO_AGENT_OUTPUT)]


def test_a_compound_request_is_one_unit_per_part_matched_in_order() -> None:
    """n8n: ``build-expectations/intent.ts`` ``gradeIntentExpectation`` with ``parts``: one unit per
    expected part (``intent [<label>]: …``), part i against expected part i's accepts; a count
    mismatch fails every unit naming both counts; a single block counts as one part."""
    expectation = _case(PARTS).intent_expectation
    assert expectation is not None
    rows = grade_intent(expectation, _block('{"parts": [{"anchor": "wf", "embeds_other": false}, '
                                            '{"anchor": "agent-anchored", "embeds_other": true}]}'))
    assert [(r.text, r.verdict) for r in rows] == [
        ("intent [digest]: anchor + embeds_other exact-match", Verdict.passed),
        ("intent [helper]: anchor + embeds_other exact-match", Verdict.passed)]
    swapped = grade_intent(expectation, _block('{"parts": [{"anchor": "agent", "embeds_other": true}, '
                                               '{"anchor": "wf", "embeds_other": false}]}'))
    assert [r.verdict for r in swapped] == [Verdict.failed, Verdict.failed]
    one = grade_intent(expectation, _block('{"anchor": "wf", "embeds_other": false}'))
    assert [(r.verdict, r.reason) for r in one] == [(Verdict.failed, "expected 2 parts, got 1")] * 2


def test_the_exam_tier_opening_turn_carries_the_preamble() -> None:
    """n8n: ``data/agents-exam/index.ts`` ``withIntentClassificationPreamble``: the first user turn
    of an agents-exam case is the preamble, a newline, then the authored text; cases of other tiers
    are sent as authored. (Our preamble's words are our own; it asks for the same block.)"""
    exam = _case(SINGLE)
    assert exam.is_intent_exam
    assert exam.opening_prompt() == f"{INTENT_PREAMBLE}\nEvery Friday, email me the open invoices."
    assert "```intent" in INTENT_PREAMBLE and '"embeds_other"' in INTENT_PREAMBLE
    for word in ("workflow-anchored", "agent-anchored", "needs-clarification", "out-of-scope", '"parts"'):
        assert word in INTENT_PREAMBLE
    other = _case(SINGLE, datasets=("agents",))
    assert not other.is_intent_exam
    assert other.opening_prompt() == "Every Friday, email me the open invoices."


def _judge(server: ScriptedModelServer) -> Judge:
    return Judge(JudgeConfig(api_key="sk-ant-judge-test-000000", base_url=server.base_url, effort="low", backoff_s=0))


async def test_intent_units_follow_the_judged_expectations_and_need_no_judge_call(tmp_path: Path) -> None:
    """n8n: ``build-expectations/intent.ts`` ``gradeIntentExpectation`` ("mirrors
    ``verifyBuildExpectations``'s result shape"): the intent units join the judged process
    expectations as further rows, graded from the agent's captured text without an LLM call."""
    case = _case(SINGLE)
    path = tmp_path / "u.jsonl"
    with Transcript(path, builder="instance-ai") as t:
        t.user(case.opening_prompt(), 0)
        t.add("assistant", text="A fixed weekly schedule feeding one email: a workflow.", agent="orchestrator")
        t.add("assistant", text=_block('{"anchor": "workflow-anchored", "embeds_other": false}', before=""),
              agent="orchestrator")
        t.add("run", status="completed")
    with ScriptedModelServer(judge(verdict_list([True]))) as srv:
        j = _judge(srv)
        rows = await judge_build_expectations(case, j, transcript_path=path, workflow=None, build_succeeded=True)
        await j.aclose()
        asked = [r.body["messages"][0]["content"] for r in srv.message_requests]
    assert [(r.kind, r.text, r.verdict) for r in rows] == [
        ("process", "The agent explains who owns the control flow.", Verdict.passed),
        ("process", UNIT_NAME, Verdict.passed)]
    assert len(asked) == 1 and UNIT_NAME not in asked[0]
    silent = tmp_path / "silent.jsonl"
    with Transcript(silent, builder="instance-ai") as t:
        t.user(case.opening_prompt(), 0)
    rows = await judge_build_expectations(case, j, transcript_path=silent, workflow=None, build_succeeded=False)
    assert [(r.text, r.verdict, r.reason) for r in rows][-1] == (UNIT_NAME, Verdict.incomplete, NO_AGENT_OUTPUT)
    assert [r.text for r in expectations_not_judged(case, "premise failed")][-1] == UNIT_NAME


def test_the_scripted_agent_answers_the_preamble_with_a_block_and_builds_nothing() -> None:
    """n8n: ``data/agents-exam/index.ts`` (the exam asks for the block, nothing built) graded by
    ``build-expectations/intent.ts``: the scripted agent's reply to any exam opening turn parses,
    so an agents-exam case is scored offline; a compound request gets a parts block."""
    agent = instance_ai_agent(load_skill=False, use_workspace=False)
    for request, expected in [("Every Friday, email me the open invoices.", IntentTuple("wf", False)),
                              ("What can you build?", IntentTuple("out-of-scope", "n/a"))]:
        prompt = f"{INTENT_PREAMBLE}\n{request}"
        reply = agent({"tools": [{"name": "build-workflow"}], "messages": [{"role": "user", "content": prompt}]})
        assert isinstance(reply, Reply) and not any(isinstance(b, ToolUseBlock) for b in reply.blocks)
        text = "".join(b.text for b in reply.blocks if isinstance(b, TextBlock))
        assert parse_intent_block(text) == expected
    compound = f"{INTENT_PREAMBLE}\n1) Every Monday, post the sales numbers to Slack. 2) A support assistant customers chat with."
    reply = agent({"tools": [{"name": "build-workflow"}], "messages": [{"role": "user", "content": compound}]})
    assert isinstance(reply, Reply)
    parsed = parse_intent_block("".join(b.text for b in reply.blocks if isinstance(b, TextBlock)))
    assert parsed == [IntentTuple("wf", False), IntentTuple("agent", False)]
