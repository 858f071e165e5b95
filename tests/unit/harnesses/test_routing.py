"""``orchestrator routing`` without lanes: the case labels, the committing calls, which trials and
cases pass, the verdict rows, the routing files, and the scripted judge.

Rules followed, by n8n file (``packages/@n8n/instance-ai/evaluations/``): ``routing/cases.ts`` (tags
``bucket:`` / ``accepts:`` / ``after:``, the bucket always passes except clarify, a stage-direction
turn needs an ``after:`` tag), ``routing/route-rules.ts`` (committing calls), ``routing/grade.ts``
(accept tokens with a steer, after-answer routes, 2 answers at most), ``discovery/cli.ts`` (a case
passes with 2 of 3 trials), ``discovery/routing-eval-results.ts`` and ``routing/expectation.ts``
(one expectation ``Routes to one of: …``, an ungraded trial is ``incomplete``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.eval_results_factory import unit

from orchestrator.cases import CaseLoadError, EvalCase, LoadedCase
from orchestrator.domain import Attribution, Verdict
from orchestrator.harnesses.routing import judge as rj
from orchestrator.harnesses.routing.cases import (
    expectation_text,
    labels,
    load_routing_files,
    routing_case,
    routing_cases,
)
from orchestrator.harnesses.routing.grade import can_reply, case_passes, incomplete_reason, label, trial_passes
from orchestrator.harnesses.routing.harness import outcomes, results_file, summary_markdown, trial_verdict
from orchestrator.results.model import EvalResults
from orchestrator.scripted import routing as scripted_routing

CASES = Path(__file__).resolve().parents[3] / "cases" / "routing"


def _case(tags: list[str], *, direction: str | None = None, slug: str = "route-x") -> Any:
    turns = [{"role": "user", "text": "Do the thing."}] + ([{"role": "user", "text": direction}] if direction else [])
    case = EvalCase.model_validate({"conversation": turns, "complexity": "simple", "tags": ["routing", *tags],
                                    "processExpectations": ["Routes well"]})
    return routing_case(LoadedCase(slug, f"{slug}.json", case))


def test_labels_from_tags() -> None:
    assert labels(["bucket:workflow", "accepts:one-off"]) == ("workflow", ("workflow", "one-off"), ("workflow", "one-off"))
    assert labels(["bucket:clarify", "accepts:clarify:open"]) == ("clarify", ("clarify:open",), ())
    assert labels(["bucket:agent", "accepts:agent", "after:workflow"]) == ("agent", ("agent",), ("workflow",))
    for bad, message in ((["bucket:x"], "exactly one bucket"), (["bucket:agent", "bucket:workflow"], "exactly one"),
                         (["bucket:clarify"], "needs an accepts"), (["bucket:agent", "accepts:nope"], "unknown accepts"),
                         (["bucket:agent", "after:clarify"], "unknown after")):
        with pytest.raises(ValueError, match=message):
            labels(bad)


def test_case_shape_rules() -> None:
    with pytest.raises(ValueError, match="after:<route>"):
        _case(["bucket:clarify", "accepts:clarify:open"], direction="[Say Slack.]")
    with pytest.raises(ValueError, match="only \\[stage directions\\]"):
        _case(["bucket:workflow"], direction="Slack, please [and nothing else]")
    with pytest.raises(ValueError, match='no "routing" tag'):
        routing_case(LoadedCase("x", "x.json", EvalCase.model_validate({
            "conversation": [{"role": "user", "text": "hi"}], "complexity": "simple", "tags": ["bucket:agent"],
            "processExpectations": ["x"]})))
    case = _case(["bucket:clarify", "accepts:clarify:open", "after:workflow"], direction="[Say Slack.]")
    assert case.direction == "[Say Slack.]" and case.after == ("workflow",)


def test_every_bundled_case_loads_one_route_each(tmp_path: Path) -> None:
    loaded, issues = load_routing_files([CASES])
    assert issues == []
    cases, skipped = routing_cases(loaded)
    assert skipped == [] and {c.bucket for c in cases} == {"agent", "workflow", "one-off", "debug", "answer", "clarify",
                                                          "multi", "decline"}
    (tmp_path / "notes.json").write_text("{}")  # not route-*.json: never read
    (tmp_path / "route-bad.json").write_text(json.dumps({"conversation": [{"role": "user", "text": "x"}],
                                                         "complexity": "simple", "tags": ["routing"],
                                                         "processExpectations": ["x"]}))
    with pytest.raises(CaseLoadError, match="bucket"):
        routing_cases(load_routing_files([tmp_path])[0])


def test_committing_calls() -> None:
    assert rj.committing("build-workflow", {}) and rj.committing("ask-user", {}) and rj.committing("create-tasks", {})
    assert rj.committing("build-agent", {"name": "x"}) and not rj.committing("build-agent", {"operation": "exploring"})
    assert rj.committing("executions", {"action": "run"}) and not rj.committing("executions", {"action": "list"})
    assert rj.committing("data-tables", {"action": "insert-rows"})
    assert not any(rj.committing("data-tables", {"action": a}) for a in ("list", "create", "add-column", None))
    assert rj.committing("workflows", {"action": "publish"}) and not rj.committing("workflows", {"action": "get-as-code"})
    assert rj.committing("nodes", {"action": "execute"}) and not rj.committing("nodes", {"action": "search"})
    assert not any(rj.committing(t, {}) for t in ("load_skill", "n8n-docs", "research", "credentials"))
    assert rj.is_orchestrator("orchestrator-run_abc") and not rj.is_orchestrator("builder-xyz")


def test_which_trials_and_cases_pass() -> None:
    case = _case(["bucket:clarify", "accepts:clarify:open", "accepts:answer:agent", "after:workflow"],
                 direction="[Say Slack.]")
    assert trial_passes(case, {"route": "clarify", "steer": "none"})
    assert not trial_passes(case, {"route": "clarify", "steer": "workflow"})  # open: any steer but workflow
    assert trial_passes(case, {"route": "answer", "steer": "both"}) and not trial_passes(case, {"route": "answer",
                                                                                             "steer": "none"})
    after = {"route": "workflow", "steer": "workflow", "questions": [{"route": "clarify", "steer": "none"}]}
    assert trial_passes(case, after) and not trial_passes(case, {**after, "route": "agent"})
    assert trial_passes(case, {"route": "clarify", "steer": "workflow", "questions": [{"route": "clarify"}]})
    assert can_reply(case, {"route": "clarify", "steer": "none"}) and not can_reply(case, {"route": "workflow"})
    assert not can_reply(_case(["bucket:clarify", "accepts:clarify:open"]), {"route": "clarify", "steer": "none"})
    assert label(after) == "clarify:none>workflow"
    assert [case_passes(p, 3) for p in (1, 2, 3)] == [False, True, True] and not case_passes(0, 0)


def test_verdict_rows_and_ungraded_trials() -> None:
    case = _case(["bucket:workflow"])
    text = expectation_text(case.accepts)
    assert text == "Routes to one of: workflow"
    ok = trial_verdict(case, {"route": "workflow", "steer": "workflow", "evidence": "build-workflow call"})
    assert (ok.text, ok.verdict, ok.kind) == (text, Verdict.passed, "process")
    bad = trial_verdict(case, {"route": "answer", "steer": "none", "evidence": "end of turn (completed)"})
    assert bad.verdict is Verdict.failed and bad.attribution is Attribution.builder_issue and "workflow" in bad.reason
    timed = trial_verdict(case, {"route": "none", "streamStatus": "timed-out"})
    assert (timed.verdict, timed.attribution) == (Verdict.incomplete, Attribution.timeout)
    judge_failed = {"route": "none", "streamStatus": "completed", "judgeError": "routing judge failed: boom"}
    assert incomplete_reason(judge_failed) == ("verification_gap", "not graded: routing judge failed: boom")
    # a route decided before the run failed is graded
    assert incomplete_reason({"route": "workflow", "streamStatus": "error"}) is None


def test_routing_files_list_every_trial() -> None:
    case = _case(["bucket:workflow"], slug="route-a")
    units = []
    for i, (route, passed) in enumerate((("workflow", True), ("answer", False), ("none", None))):
        u = unit("route-a", i, {})
        u.harness = {"route": route, "steer": "none", "evidence": "e", "label": route, "passed": passed,
                     "streamStatus": "completed", "tools": ["build-workflow"]}
        units.append(u)
    results = EvalResults(run_id="r1", started_at=1.0, finished_at=2.0, units=units)
    found = outcomes(results, [case])
    assert (found[0].passed, found[0].graded, found[0].verdict) == (1, 2, "fail")  # 1 of 2 graded: below 2/3
    doc = results_file(found, results, variant="v1", stop_on_route=False, model="m", trials=3)
    assert doc["cases"][0]["accepts"] == ["workflow"] and [t["trial"] for t in doc["cases"][0]["trials"]] == [1, 2, 3]
    text = summary_markdown(found, results, variant="v1", trials=3)
    assert "| route-a | workflow | workflow | workflow, answer, none | 1/2 fail (1 not graded) |" in text
    assert "| workflow | 0/1 |" in text and "## Failing trials" in text


def _judged(trace: str) -> dict[str, str]:
    request = {"system": rj.SYSTEM_PROMPT, "messages": [{"role": "user", "content": trace}]}
    assert scripted_routing.is_routing_judge(request)
    return json.loads(scripted_routing.routing_judge(request).blocks[0].text)


def test_scripted_judge_decides_every_route() -> None:
    assert scripted_routing.JUDGE_MARKER == rj.JUDGE_MARKER
    call = lambda tool, args=None: {"kind": "call", "tool": tool, "args": args or {}}  # noqa: E731
    said = lambda text: {"kind": "text", "text": text}  # noqa: E731
    running = {
        "agent": [call("build-agent", {"name": "Helper"})],
        "workflow": [said("I'll build it."), call("build-workflow", {"filePath": "a"})],
        "multi": [said("I'll plan it as two separate workflows."), call("build-workflow")],
        "one-off": [call("executions", {"action": "run", "workflowId": "w"})],
        "clarify": [call("ask-user", {"questions": [{"question": "Which channel?"}]})],
    }
    for route, steps in running.items():
        verdict = _judged(rj.render_trace(steps))
        assert (verdict["decision"], verdict["route"]) == ("stop", route), route
    assert _judged(rj.render_trace([call("load_skill"), call("workflows", {"action": "setup"})]))["decision"] == "continue"
    ended = {
        "debug": [call("workflows", {"action": "list"}), call("executions", {"action": "list"}), said("It failed: 401.")],
        "answer": [said("Use a cron expression for that.")],
        "clarify": [said("Which chat tool should I notify?")],
        "decline": [said("I can't help with that.")],
    }
    for route, steps in ended.items():
        assert _judged(rj.render_trace(steps, "completed"))["route"] == route, route
    assert rj.parse_verdict(json.dumps(_judged(rj.render_trace(ended["clarify"], "completed")))) is not None


def test_judge_reply_must_be_the_verdict_asked_for() -> None:
    assert rj.parse_verdict('{"decision": "stop", "route": "agent", "steer": "agent", "reason": "x"}') == \
        rj.RouteVerdict("stop", "agent", "agent", "x")
    assert rj.parse_verdict('{"decision": "stop", "route": "maybe", "steer": "agent"}') is None
    assert rj.parse_verdict("nothing") is None
