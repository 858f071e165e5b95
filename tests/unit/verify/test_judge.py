"""The judge against the scripted model over real HTTP: parsing, retries, and its two fallbacks."""

from __future__ import annotations

from orchestrator.results.model import Attribution, Verdict
from orchestrator.scripted.scripts import hang, judge, status_storm, text_only, verdict_list
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.verify.judge import EXPECTATION_SYSTEM, Judge, JudgeConfig, expectation_prompt, parse_verdicts

PROMPT = expectation_prompt({"nodes": []}, ["has a trigger", "posts to Slack"])


def _judge(server: ScriptedModelServer, **kw) -> Judge:
    cfg = JudgeConfig(api_key="sk-ant-judge-test-000000", base_url=server.base_url, effort="low", backoff_s=0, **kw)
    return Judge(cfg)


async def test_verdicts_are_parsed_per_index() -> None:
    with ScriptedModelServer(judge(verdict_list([True, False], category="mock_issue"))) as srv:
        j = _judge(srv)
        out = await j.judge(EXPECTATION_SYSTEM, PROMPT, 2)
        await j.aclose()
    assert [v.verdict for v in out] == [Verdict.passed, Verdict.failed]
    assert out[1].attribution == Attribution.mock_issue and out[0].attribution is None


async def test_unparseable_answers_leave_the_items_without_a_verdict_after_retries() -> None:
    """n8n ``comparison/gate.ts`` (units whose verifier was exhausted carry no verdict and are
    excluded) and ``checklist/verifier.ts`` ``verifyChecklist`` (no parseable results → none)."""
    with ScriptedModelServer(text_only("I think it is fine.")) as srv:
        j = _judge(srv, attempts=2)
        out = await j.judge(EXPECTATION_SYSTEM, PROMPT, 2)
        await j.aclose()
        assert len([r for r in srv.requests if r.is_messages]) == 2
    assert {v.verdict for v in out} == {Verdict.incomplete}
    assert all(v.attribution == Attribution.verification_gap and v.reason.startswith("not judged") for v in out)


def test_scenario_attempts_escalate_their_cap() -> None:
    """n8n ``checklist/verifier.ts`` ``VERIFY_ATTEMPT_TIMEOUTS_MS``: 60 s, 120 s, 240 s per attempt;
    a run's lower ``judge_attempt_timeout_s`` caps every one."""
    j = Judge(JudgeConfig(api_key="k"))
    assert [j.ladder_timeout(i) for i in (1, 2, 3, 4)] == [60.0, 120.0, 240.0, 240.0]
    low = Judge(JudgeConfig(api_key="k", attempt_timeout_s=1.0))
    assert [low.ladder_timeout(i) for i in (1, 2, 3)] == [1.0, 1.0, 1.0]


async def test_judge_timeout_or_outage_is_incomplete_not_a_failure() -> None:
    with ScriptedModelServer(hang(30)) as srv:
        j = _judge(srv, attempts=2, attempt_timeout_s=0.5)
        out = await j.judge(EXPECTATION_SYSTEM, PROMPT, 2)
        await j.aclose()
    assert {v.verdict for v in out} == {Verdict.incomplete}
    with ScriptedModelServer(status_storm(529)) as srv:
        j = _judge(srv, attempts=2)
        out = await j.judge(EXPECTATION_SYSTEM, PROMPT, 1)
        await j.aclose()
    assert out[0].verdict == Verdict.incomplete and "529" in out[0].reason


def test_parse_rejects_missing_indexes() -> None:
    assert parse_verdicts('{"verdicts": [{"index": 0, "pass": true}]}', 2) is None
    assert parse_verdicts("no json", 1) is None
    assert parse_verdicts('{"verdicts": [{"index": 0, "pass": "yes"}]}', 1) is None
