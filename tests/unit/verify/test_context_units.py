"""The units graded on a build's captured run debug — ``contextAssertions``, ``memoryExpectations`` —
and the token figures the expectation judge is given, each against n8n's rule on hand-built run
debug (the shape n8n 2.41.1's ``GET /rest/instance-ai/debug/runs/:runId`` answers)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.cases.model import ContextAssertion, MemoryExpectation
from orchestrator.domain import Verdict
from orchestrator.n8n.run_debug import compact_run, step_instructions, summarize_usage, usage_by_run
from orchestrator.scripted import memory_judge
from orchestrator.scripted.scripts import demo_script
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.transcript import Transcript
from orchestrator.verify import context, memory
from orchestrator.verify.expectations import turn_headers, usage_totals
from orchestrator.verify.judge import Judge, JudgeConfig


def _step(n: int, *, system: str, messages: list[dict[str, Any]], usage: dict[str, Any] | None = None,
          instructions_shape: str = "message") -> dict[str, Any]:
    prompt: Any = {"role": "system", "content": system} if instructions_shape == "message" else system
    return {"stepNumber": n, "input": {"instructions": prompt, "messages": messages},
            "output": {"usage": usage} if usage is not None else {}}


def _msg(role: str, *parts: Any) -> dict[str, Any]:
    return {"role": role, "content": list(parts)}


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


SEEDED = _msg("user", _text("Post the digest to #ops-digest every weekday at 17:00."))
LIVE = _msg("user", _text("Go ahead and build it."))
FETCHED = _msg("tool", {"type": "tool-result", "toolName": "workflows", "output": {"channel": "#fetched-late"}})


def _runs() -> list[dict[str, Any]]:
    """An earlier run, then the graded one: its probe has the seeded history; by its end the agent
    had fetched ``#fetched-late``; observational memory holds a CRITICAL row at the turn end."""
    early = {"runId": "r1", "startedAt": 1, "steps": [_step(0, system="old prompt", messages=[_msg("user", _text("x"))])]}
    graded = {"runId": "r2", "startedAt": 2, "steps": [
        _step(1, system="You build workflows.", messages=[SEEDED, LIVE],
              usage={"inputTokens": 1000, "inputTokenDetails": {"noCacheTokens": 200, "cacheReadTokens": 800,
                                                                "cacheWriteTokens": 0}, "outputTokens": 20,
                     "totalTokens": 1020}),
        _step(2, system="You build workflows.\n<observations>\n* CRITICAL (09:00) digest time agreed as 17:00\n"
                        "</observations>", messages=[SEEDED, LIVE, FETCHED],
              usage={"inputTokens": 1500, "outputTokens": 30, "totalTokens": 1530}),
    ]}
    return [graded, early]  # any order: the graded run is the newest with steps


def test_the_step_prompt_is_read_from_instructions_then_system() -> None:
    """n8n 2.41.1 carries the prompt in ``input.instructions`` (AI SDK 7; api-types ``stepInstructions``),
    earlier builds in ``input.system`` — n8n's harness read only ``system`` and once lost the
    compaction check to the rename (``evaluations/ARCHITECTURE.md``)."""
    assert step_instructions({"instructions": {"role": "system", "content": "A"}}) == "A"
    assert step_instructions({"instructions": [{"role": "system", "content": "A"}, {"content": "B"}]}) == "A\nB"
    assert step_instructions({"instructions": "A"}) == step_instructions({"system": "A"}) == "A"
    kept = compact_run({"runId": "r", "steps": [{"stepNumber": 0, "input": {"instructions": "p", "tools": {"big": 1},
                                                                             "messages": []},
                                                 "output": {"usage": {}, "request": {"body": "x"}}}]})
    assert kept["steps"][0] == {"stepNumber": 0, "input": {"instructions": "p", "messages": []}, "output": {"usage": {}}}


def test_usage_is_summed_as_n8n_sums_it() -> None:
    """n8n ``harness/usage-summary.ts`` (1cc28ee2): every step of every run; ``noCacheTokens`` taken
    as given (an explicit 0 too), else input − cache read − cache write; ``promptTokens`` /
    ``completionTokens`` as fallbacks; a step without usage skipped; no usage at all → none."""
    runs = _runs()
    total = summarize_usage(runs)
    assert total is not None
    assert (total.uncached_input, total.cache_read, total.cache_write, total.output, total.steps) == (1700, 800, 0, 50, 2)
    zero = summarize_usage([{"steps": [{"output": {"usage": {"inputTokens": 10, "inputTokenDetails": {
        "noCacheTokens": 0, "cacheReadTokens": 10}, "outputTokens": 1}}}]}])
    assert zero is not None and (zero.uncached_input, zero.cache_read) == (0, 10)
    legacy = summarize_usage([{"steps": [{"output": {"usage": {"promptTokens": 7, "completionTokens": 3}}}]}])
    assert legacy is not None and (legacy.input, legacy.output) == (7, 3)
    assert summarize_usage([{"steps": [{"output": {}}]}]) is None and summarize_usage(None) is None


def test_the_judge_gets_the_token_totals_and_each_turns_figures(tmp_path: Any) -> None:
    """n8n ``build-expectations/verifier.ts`` (the newer of its two stored versions): a Total line, a
    Cache line and the Opening step's input tokens — or "(no run debug captured)" — and each
    transcript turn headed by its steps and tokens, joined by the runs the turn spans."""
    runs = _runs()
    text = usage_totals(runs)
    assert text.splitlines() == [
        "Total: 2500 tokens in / 50 tokens out across 2 LLM steps, 2 runs",
        "Cache: 800 tokens read / 0 tokens written",
        "Opening step: 1000 input tokens on the first LLM call (instructions, tool schemas and the first message; "
        "a seeded case also carries its restored history here)",
    ]
    assert usage_totals(None) == "(no run debug captured)"
    with Transcript(None, builder="instance-ai") as t:
        t.user("Go ahead and build it.", 0)
        t.add("run", status="completed", run_id="r2")
        t.user("And now?", 1)
        t.add("run", status="completed", run_id="r9")
    headers = turn_headers(t.entries, runs)
    assert headers == {0: "### Turn 0 (2 steps, 2500 tokens in [800 cached], 50 tokens out)"}
    assert usage_by_run(runs)["r2"].steps == 2


@pytest.mark.parametrize(("assertion", "verdict", "reason"), [
    (ContextAssertion(text="#OPS-digest"), Verdict.passed, "retained — present at the probe in: message window"),
    (ContextAssertion(text="#fetched-late"), Verdict.failed,
     "NOT retained — absent at the probe, but present by the end of the turn in: message window. "
     "The agent re-derived it rather than carrying it forward."),
    (ContextAssertion(text="#fetched-late", anchor="turn-end"), Verdict.passed,
     "present by the end of the turn in: message window — carried in or fetched during it"),
    (ContextAssertion(text="#never-said"), Verdict.failed, "not present at the probe, nor anywhere by the end of the turn"),
    (ContextAssertion(text="#never-said", must_appear=False), Verdict.passed,
     "correctly absent from every context tier at the probe"),
    (ContextAssertion(text="17:00", must_appear=False, anchor="turn-end"), Verdict.failed,
     "still present by the end of the turn in: observation block, message window"),
    (ContextAssertion(text="old prompt"), Verdict.failed, "not present at the probe, nor anywhere by the end of the turn"),
])
def test_context_assertions_follow_n8ns_rules(assertion: ContextAssertion, verdict: Verdict, reason: str) -> None:
    """n8n ``harness/context-assertions.ts`` with ``harness/context-capture.ts`` (135abd20,
    ``context-hack-eval-prep``): the graded run is the newest with steps (the earlier run's prompt is
    not searched), the probe its first step, the turn end the newest of each tier; a
    case-insensitive substring over the tiers; no judge."""
    [row] = context.check_context_assertions([assertion], _runs())
    assert (row.kind, row.verdict, row.reason) == ("context", verdict, reason)
    assert row.attribution is None


def test_context_assertion_labels_and_what_cannot_be_checked() -> None:
    """n8n ``harness/context-assertions.ts``: the label is the unit's identity; no run debug, or no
    usable probe for a probe claim, is ``incomplete`` — never a pass or a fail."""
    noted = ContextAssertion(text="x", must_appear=False, anchor="turn-end", note="why")
    assert context.label(noted) == 'context excludes "x" [by turn end] (why)'
    assert context.label(ContextAssertion(text="y")) == 'context contains "y"'
    [none] = context.check_context_assertions([ContextAssertion(text="y")], None)
    assert (none.verdict, none.reason) == (Verdict.incomplete, context.NO_CAPTURE)
    no_probe = [{"runId": "r", "startedAt": 1, "steps": [
        _step(0, system="", messages=[]), _step(1, system="s", messages=[LIVE])]}]
    [probe, end] = context.check_context_assertions([ContextAssertion(text="build"),
                                                     ContextAssertion(text="build", anchor="turn-end")], no_probe)
    assert (probe.verdict, probe.reason) == (Verdict.incomplete, context.NO_PROBE)
    assert end.verdict is Verdict.passed


def test_the_memory_judges_context_block_caps_what_n8n_caps() -> None:
    """n8n ``harness/memory-context.ts`` (aafa6938): a message part at 4,000 characters, the window at
    80,000 (head and tail, the middle named as unknown), the system prompt at 40,000; the capture's
    counts as ground truth; no observation block is said to be no failure."""
    big = _msg("tool", {"type": "tool-result", "toolName": "t", "output": "z" * 9000})
    many = [_msg("user", _text(f"{i:05d} " + "w" * 3990)) for i in range(30)]
    runs = [{"runId": "r", "startedAt": 1, "steps": [_step(0, system="S" * 50_000, messages=[big, *many])]}]
    captured = context.captured_context(runs)
    assert captured is not None
    block = memory.context_block(captured, "probe")
    assert "z" * 3900 in block and "z" * 4001 not in block and "…[payload truncated]" in block
    assert "characters of the middle of the window omitted — treat absence here as unknown" in block
    assert "00000 " in block and "00029 " in block and "00015 " not in block
    assert "S" * 40_000 + "\n\n[…truncated]" in block and "S" * 40_001 not in block
    assert '"compressionRan": false' in block and "This is NOT itself a failure" in block


async def test_memory_expectations_are_judged_per_anchor_on_the_context_alone() -> None:
    """n8n ``build-expectations/memory-verifier.ts`` (449ea184): one judge call per anchor group, the
    author's order kept, kind ``memory``, the context block and the claims only (never the transcript);
    no run debug → every claim ``incomplete`` and no call. The scripted judge grades each claim on its
    literals (so the units can pass and fail offline)."""
    claims = [MemoryExpectation(text="The context still holds '#ops-digest'."),
              MemoryExpectation(text="By the end the agent knew '#fetched-late'.", anchor="turn-end"),
              MemoryExpectation(text="The context holds '#growth-team'.")]
    with ScriptedModelServer(demo_script()) as srv:
        judge = Judge(JudgeConfig(api_key="sk-ant-memory-test-00000", base_url=srv.base_url, effort="low", backoff_s=0))
        rows = await memory.judge_memory_expectations(claims, _runs(), judge)
        none = await memory.judge_memory_expectations(claims, None, judge)
        await judge.aclose()
        prompts = [r.body["messages"][0]["content"] for r in srv.message_requests]
    assert [(r.kind, r.text, r.verdict) for r in rows] == [
        ("memory", claims[0].text, Verdict.passed), ("memory", claims[1].text, Verdict.passed),
        ("memory", claims[2].text, Verdict.failed)]
    assert len(prompts) == 2  # probe claims together, the turn-end claim on its own
    probe_prompt = next(p for p in prompts if "#growth-team" in str(p))
    assert "as the probe arrived" in str(probe_prompt) and "Go ahead and build it." in str(probe_prompt)
    assert rows[0].judge_input is not None and rows[0].judge_input["kinds"] == ["memory", "memory"]
    assert {(r.verdict, r.reason) for r in none} == {(Verdict.incomplete, memory.NO_RUN_DEBUG)}


def test_the_scripted_memory_judge_grades_claims_by_their_literals() -> None:
    """The offline stand-in's rule (``orchestrator.scripted.memory_judge``): a claim passes when all
    its literals are in the context, an absence claim when none is."""
    assert memory.MEMORY_SYSTEM.startswith(memory_judge.MEMORY_JUDGE_MARK)
    ctx = "user\nsend it to finance-weekly@example.com at 17:00 via #ops"
    assert memory_judge.grade("It keeps 'finance-weekly@example.com' and 17:00.", ctx)[0] is True
    assert memory_judge.grade("It keeps '#growth' too.", ctx)[0] is False
    assert memory_judge.grade("The recipient finance-weekly@example.com is not carried over.", ctx)[0] is False
    assert memory_judge.grade("The agent's context does not hold '#sales'.", ctx)[0] is True
    assert memory_judge.literals("the agent's 'x' and `y` #z 1234") == ["x", "y", "#z", "1234"]
