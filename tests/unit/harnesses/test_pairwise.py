"""``orchestrator pairwise`` without lanes: the panel's rules, the examples loader, the folder's
summary, the comparison page's verdicts, the scripted judge, and the LangSmith upload.

Rules followed, by n8n file: ``ai-workflow-builder.ee/evaluations/evaluators/pairwise/judge-panel.ts``
(majority = ceil(N / 2), mean diagnostic), ``judge-chain.ts`` (a judge passes with no violation,
diagnostic = passes / all), ``index.ts`` (the feedback keys); ``instance-ai/evaluations/cli/pairwise.ts``
(examples from LangSmith's shape or a results.jsonl, deduped; a failed build counts 0 in the primary
pass rate, a failed panel is left out; the output files); ``cli/compare-pairwise.ts`` (rows joined on
the prompt with whitespace collapsed; a side's failed build is a fail).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.eval_results_factory import unit
from support.langsmith_fake import API_KEY, FakeLangSmith, running

from orchestrator.errors import UserError
from orchestrator.harnesses.pairwise import compare
from orchestrator.harnesses.pairwise import panel as pn
from orchestrator.harnesses.pairwise.examples import as_case, criteria, read_examples, select
from orchestrator.harnesses.pairwise.harness import PairwiseSettings, error_class, summarize, write_folder
from orchestrator.harnesses.pairwise.upload import upload_folder
from orchestrator.results.model import BuildStatus, EvalResults
from orchestrator.scripted import pairwise as scripted_pairwise


def _judge(passes: int, violations: int) -> pn.JudgeResult:
    return pn.JudgeResult([{"rule": f"p{i}", "justification": ""} for i in range(passes)],
                          [{"rule": f"v{i}", "justification": "missing"} for i in range(violations)])


def test_panel_passes_by_majority_and_averages_the_diagnostic() -> None:
    rows = pn.feedback([_judge(3, 0), _judge(2, 1), _judge(3, 0)])
    by = {r["metric"]: r for r in rows}
    assert by["pairwise_primary"]["score"] == 1 and by["pairwise_primary"]["comment"] == "2/3 judges passed"
    assert by["pairwise_diagnostic"]["score"] == pytest.approx((1 + 2 / 3 + 1) / 3)
    assert (by["pairwise_judges_passed"]["score"], by["pairwise_total_passes"]["score"],
            by["pairwise_total_violations"]["score"]) == (2, 8, 1)
    assert by["judge2"]["score"] == 0 and by["judge2"]["comment"] == "[v0] missing" and "comment" not in by["judge1"]
    # ceil(N / 2): one of two judges is a majority, one of three is not
    assert pn.feedback([_judge(1, 0), _judge(0, 1)])[0]["score"] == 1
    assert pn.feedback([_judge(1, 0), _judge(0, 1), _judge(0, 1)])[0]["score"] == 0
    assert pn.JudgeResult().diagnostic == 0.0  # a judge that listed nothing scores 0


def test_judge_reply_must_be_the_json_asked_for() -> None:
    assert pn.parse_judge_reply('Sure.\n{"passes": [{"rule": "a", "justification": "b"}], "violations": []}') == \
        pn.JudgeResult([{"rule": "a", "justification": "b"}], [])
    assert pn.parse_judge_reply('{"passes": []}') is None
    assert pn.parse_judge_reply("no json here") is None


class _FlakyJudge:
    def __init__(self, replies: list[str]) -> None:
        self.replies = replies

    async def ask(self, system: str, prompt: str, timeout_s: float | None = None) -> str:
        return self.replies.pop(0)


async def test_a_judge_is_asked_twice_then_the_panel_fails() -> None:
    ok = json.dumps({"passes": [{"rule": "x", "justification": "y"}], "violations": []})
    assert (await pn.one_judge(_FlakyJudge(["garbage", ok]), "p")).primary_pass
    with pytest.raises(pn.PanelFailed):
        await pn.one_judge(_FlakyJudge(["garbage", "still garbage"]), "p")


def test_examples_from_langsmith_shape_and_results_jsonl(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps([
        {"id": "e1", "inputs": {"prompt": "Build A", "evals": {"dos": "Use X\nUse Y", "donts": "add Z"}}},
        {"id": "e2", "inputs": {"prompt": "Build B", "context": {"dos": "Use W"}}},
        {"id": "e3", "inputs": {"prompt": "   "}},
    ]))
    examples, issues = read_examples(tmp_path / "a.json")
    assert [e.id for e in examples] == ["e1", "e2"] and len(issues) == 1  # a blank prompt is named
    assert criteria(examples[0]) == (["Use X", "Use Y"], ["DO NOT add Z"])
    assert criteria(examples[1]) == (["Use W"], ["Do not add unnecessary complexity"])  # n8n's default don't
    assert as_case(examples[0], "x").case.outcome_expectations == ["Use X", "Use Y", "DO NOT add Z"]
    rows = [{"exampleId": "e1", "iteration": i, "prompt": "Build A", "dos": "Use X"} for i in (1, 2, 3)]
    (tmp_path / "r.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    again, _ = read_examples(tmp_path / "r.jsonl")
    assert [e.id for e in again] == ["e1"]  # one row per iteration, one example
    ids = tmp_path / "ids.txt"
    ids.write_text("# rerun\ne2\n\n")
    assert [e.id for e in select(examples, ids, None)] == ["e2"]
    assert [e.id for e in select(examples, None, 1)] == ["e1"]


def _results(units: list) -> EvalResults:
    return EvalResults(run_id="r", started_at=1000.0, finished_at=1100.0, units=units)


def _pairwise_unit(case: str, iteration: int, *, primary: int | None, diag: float | None = None,
                   status: BuildStatus = BuildStatus.ok, error: str | None = None) -> Any:
    u = unit(case, iteration, {}, status=status)
    u.build.error = error
    if status is BuildStatus.ok:
        feedback = [] if primary is None else [{"metric": "pairwise_primary", "score": primary},
                                               {"metric": "pairwise_diagnostic", "score": diag}]
        u.harness = {"workflow": {"name": "w", "nodes": [], "connections": {}}, "feedback": feedback}
        if primary is None:
            u.harness["judgeError"] = "judge panel failed"
    return u


def test_folder_counts_a_failed_build_as_a_fail_and_leaves_a_failed_panel_out(tmp_path: Path) -> None:
    from orchestrator.harnesses.pairwise.examples import Example

    examples = [Example("a", "Build A"), Example("b", "Build B"), Example("c", "Build C"), Example("d", "Build D")]
    units = [
        _pairwise_unit("a", 0, primary=1, diag=1.0),
        _pairwise_unit("a", 1, primary=0, diag=0.5),
        _pairwise_unit("b", 0, primary=None, status=BuildStatus.timeout),
        _pairwise_unit("c", 0, primary=None, status=BuildStatus.failed,
                       error="the agent finished without a successful build-workflow result"),
        _pairwise_unit("d", 0, primary=None),  # built, the panel failed: a tooling gap
    ]
    settings = PairwiseSettings(examples=examples, judges=3, output_dir=tmp_path / "out", iterations=2)
    summary = write_folder(_results(units), settings)
    totals = summary["totals"]
    assert totals["runs"] == 5 and totals["examples"] == 4 and totals["buildSuccess"] == 3
    assert totals["buildFailures"] == {"build_timeout": 1, "no_workflow_built": 1}
    assert totals["primaryPassRate"] == pytest.approx(1 / 4)  # (1 + 0 + 0 + 0) / 4: d is left out
    assert totals["avgDiagnostic"] == pytest.approx(0.75)
    assert set(summary["interactivity"]) == {"askUserCount", "planToolCount", "autoApprovedSuspensions",
                                             "mockedCredentialTypes"}
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [(r["exampleId"], r["iteration"]) for r in rows] == [("a", 1), ("a", 2), ("b", 1), ("c", 1), ("d", 1)]
    failed = next(r for r in rows if r["exampleId"] == "b")
    assert failed["workflow"] is None and failed["feedback"] == [] and failed["build"]["errorClass"] == "build_timeout"
    assert sorted(p.name for p in (tmp_path / "out" / "workflows").iterdir()) == ["a_1.json", "a_2.json", "d_1.json"]
    assert (tmp_path / "out" / "results.csv").read_text().splitlines()[0].startswith("exampleId,iteration,buildSuccess")


def test_error_classes() -> None:
    assert error_class(_pairwise_unit("x", 0, primary=None, status=BuildStatus.provider_outage)) == "agent_error"
    assert error_class(_pairwise_unit("x", 0, primary=None, status=BuildStatus.failed, error="no workflow built: "
                                      "run error (boom)")) == "agent_error"
    assert error_class(_pairwise_unit("x", 0, primary=1, diag=1.0)) is None


def _run(prompt: str, example_id: str, iteration: int, passed: bool | None) -> compare.Run:
    """passed None: the build failed."""
    feedback = [] if passed is None else [{"metric": "pairwise_primary", "score": 1 if passed else 0}]
    return compare.Run(prompt, example_id, iteration, passed is not None, {"nodes": []} if passed is not None else None,
                       feedback, error_class=None if passed is not None else "build_timeout")


def test_comparison_verdicts_over_iterations_joined_on_the_prompt() -> None:
    a = compare.Side("A", [_run("p1", "1", 1, True), _run("p2", "2", 1, True), _run("p3", "3", 1, False),
                           _run("p4", "4", 1, True), _run("p4", "4", 2, False), _run("only a", "5", 1, True)])
    b = compare.Side("B", [_run("p1", "1", 1, True), _run("  p2 ", "2", 1, None), _run("p3", "3", 1, False),
                           _run("p4", "4", 1, False), _run("p4", "4", 2, True)])
    rows = {r.prompt.strip(): r.verdict for r in compare.pair(a, b)}
    assert rows == {"p1": "both-pass", "p2": "a-only", "p3": "both-fail", "p4": "tie", "only a": "a-only"}
    order = [r.verdict for r in compare.pair(a, b)]
    assert order == sorted(order, key=compare.VERDICTS.index)


def test_an_ee_folder_is_read_and_anything_else_is_refused(tmp_path: Path) -> None:
    ex = tmp_path / "ee" / "example-000-ab12cd"
    ex.mkdir(parents=True)
    (ex / "prompt.txt").write_text("p1")
    (ex / "workflow.json").write_text(json.dumps({"nodes": []}))
    (ex / "feedback.json").write_text(json.dumps({"status": "pass", "durationMs": 5,
                                                  "allFeedback": [{"metric": "pairwise_primary", "score": 1}]}))
    side = compare.load_side(tmp_path / "ee", "EE")
    assert [(r.example_id, r.passed) for r in side.runs] == [("example-000-ab12cd", True)]
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="not a pairwise folder"):
        compare.load_side(tmp_path / "empty")


def test_page_keeps_heavy_parts_in_templates_and_escapes(tmp_path: Path) -> None:
    a = compare.Side("A", [_run("Build <b>x</b>", "1", 1, True)])
    b = compare.Side("B", [_run("Build <b>x</b>", "1", 1, None)])
    page, rows = compare.write_page(a, b, tmp_path / "c.html")
    text = page.read_text()
    assert [r.verdict for r in rows] == ["a-only"]
    assert "&lt;b&gt;x&lt;/b&gt;" in text and "<b>x</b>" not in text
    assert text.count("<template>") == 1 and 'class="wf"' in text.split("<template>")[1]
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text


def test_scripted_judge_follows_the_node_types_a_criterion_names() -> None:
    assert scripted_pairwise.PANEL_MARKER == pn.PANEL_MARKER
    workflow = {"nodes": [{"type": "n8n-nodes-base.manualTrigger"}, {"type": "n8n-nodes-base.set"}]}
    prompt = pn.panel_prompt(["Use a Manual Trigger node", "Use an HTTP Request node", "Follow the prompt"],
                             ["DO NOT add a Code node", "DO NOT use n8n-nodes-base.set"], workflow)
    request = {"system": pn.SYSTEM_PROMPT, "messages": [{"role": "user", "content": prompt}]}
    assert scripted_pairwise.is_pairwise_judge(request)
    reply = json.loads(scripted_pairwise.pairwise_judge(request).blocks[0].text)
    assert [p["rule"] for p in reply["passes"]] == ["Use a Manual Trigger node", "Follow the prompt",
                                                   "DO NOT add a Code node"]
    assert [v["rule"] for v in reply["violations"]] == ["Use an HTTP Request node", "DO NOT use n8n-nodes-base.set"]


@pytest.fixture
def fake() -> Iterator[tuple[FakeLangSmith, str]]:
    with running() as found:
        yield found


async def test_upload_records_one_experiment_with_the_feedback(fake, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    store, url = fake
    monkeypatch.setenv("LANGSMITH_API_KEY", API_KEY)
    monkeypatch.setenv("LANGSMITH_ENDPOINT", url)
    from orchestrator.harnesses.pairwise.examples import Example

    units = [_pairwise_unit("a", 0, primary=1, diag=1.0),
             _pairwise_unit("b", 0, primary=None, status=BuildStatus.timeout)]
    write_folder(_results(units), PairwiseSettings(examples=[Example("a", "A"), Example("b", "B")],
                                                   output_dir=tmp_path / "f", experiment_name="pw-night"))
    name, count = await upload_folder(tmp_path / "f")
    assert name.startswith("pw-night-") and count == 2
    (session,) = [s for s in store.sessions.values() if s["name"] == name]
    assert session["extra"]["metadata"]["numJudges"] == 3
    assert sorted(r["name"] for r in store.runs.values()) == ["a#1", "b#1"]
    assert {(f["key"], f["score"]) for f in store.feedback} == {("pairwise_primary", 1), ("pairwise_diagnostic", 1.0)}
    assert store.unknown == []
    monkeypatch.delenv("LANGSMITH_API_KEY")
    with pytest.raises(UserError, match="LANGSMITH_API_KEY"):
        await upload_folder(tmp_path / "f")


def test_summary_of_no_records_is_all_zero() -> None:
    summary = summarize([], PairwiseSettings(examples=[]), 0.0, None)
    assert summary["totals"]["primaryPassRate"] == 0.0 and summary["totals"]["runs"] == 0
