"""Author expectations of a build: which to judge, against what, in ONE judge call.

As n8n's harness does it (``build-expectations/select.ts`` ``selectAuthorExpectations``,
``build-expectations/verifier.ts`` ``verifyBuildExpectations``):

- a build whose transcript holds agent output: its process AND outcome expectations (process first)
  are judged together, in one call, against the transcript, the workflow (or "(no workflow
  built)"), the agent / config-eval sections and the conversation metrics — also when the build
  failed;
- a build that succeeded but left no agent output (MCP builds by default, prebuilt workflows, a
  lost event stream): only the outcome expectations are judged, with the case's authored user turns
  as the conversation; the process expectations are recorded ``incomplete``;
- a build that failed without any agent output: every expectation is recorded ``incomplete`` (an
  empty transcript would only be graded confidently wrong); so is every expectation of a failed MCP
  build — n8n treats MCP builds as prebuilt (``run/build-orchestrator.ts`` ``isPrebuilt``), with
  no transcript, so a failed one has nothing it grades, whatever claude printed.

MCP builds have a transcript here (claude's stream), but n8n never judges process expectations for
them; ``judge_mcp_process`` (the ``--judge-mcp-process`` opt-in) judges them anyway. Those verdicts
are recorded with ``opt_in`` reasons but stay ``incomplete`` for scoring unless opted in, so the
headline numbers are n8n's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.cases import EvalCase, strip_director_notes
from orchestrator.domain import Verdict
from orchestrator.n8n.run_debug import opening_input_tokens, summarize_usage, usage_by_run
from orchestrator.results.model import ExpectationResult
from orchestrator.transcript import gradable, read_transcript, render_for_judge, turn_run_ids
from orchestrator.verify import context, memory
from orchestrator.verify.intent import agent_reply_text, grade_intent
from orchestrator.verify.judge import BUILD_JUDGE_SYSTEM, Judge, build_expectations_prompt

NO_AGENT_OUTPUT = "not judged: the build produced no agent output, so there was nothing to grade"
NO_TRANSCRIPT_PROCESS = "not judged: process expectations need the build's transcript, and this build left no agent output"
MCP_FAILED_NOT_JUDGED = ("not judged: an MCP build that saved no workflow has no agent transcript n8n grades "
                         "(it treats MCP builds as prebuilt), so nothing was judged")
MCP_PROCESS_SKIPPED = ("not judged: process expectations are not judged for MCP builds (as in n8n); "
                       "--judge-mcp-process judges them as an extra")


@dataclass(frozen=True)
class JudgeScope:
    """What the builder's transcript is worth to the expectation judge."""

    #: the transcript is a conversation whose process n8n grades (Instance AI chat); False for MCP builds
    process_gradable: bool = True
    #: judge the process expectations of a non-gradable (MCP) transcript anyway (an opt-in extra)
    judge_process_anyway: bool = False


def authored_conversation(case: EvalCase) -> str:
    """The case's user turns as the conversation, for a build with no transcript of its own."""
    lines = [f"[user, turn {i}] {strip_director_notes(t.text)}" for i, t in enumerate(case.conversation)
             if t.role == "user"]
    return "\n".join(lines) or "(no authored conversation)"


def conversation_metrics(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts measured from the transcript, given to the judge as ground truth (n8n's
    ``ConversationMetrics``: turn count, per-turn figures, confirmations asked, clean finish)."""
    per_turn: list[dict[str, Any]] = []
    by_kind: Counter[str] = Counter()
    runs: list[str] = []
    current: dict[str, Any] | None = None
    for e in entries:
        kind = e.get("kind")
        if kind == "user":
            current = {"turn": e.get("turn", len(per_turn)), "toolCalls": 0, "confirmationsAsked": 0,
                       "assistantMessages": 0}
            per_turn.append(current)
        elif current is None:
            continue
        elif kind == "tool_call":
            current["toolCalls"] += 1
        elif kind == "assistant":
            current["assistantMessages"] += 1
        elif kind == "confirmation":
            current["confirmationsAsked"] += 1
            by_kind[str(e.get("input_type") or "approval")] += 1
        elif kind == "run":
            runs.append(str(e.get("status") or ""))
            current["runStatus"] = e.get("status")
    edits = [{"turn": e.get("turn"), "kind": e.get("edit", "rename"), "workflowId": e.get("workflow_id"),
              "from": e.get("from"), "to": e.get("to"), "applied": bool(e.get("applied")), "reason": e.get("reason")}
             for e in entries if e.get("kind") == "external_edit"]
    metrics: dict[str, Any] = {
        "turnCount": len(per_turn),
        "perTurn": per_turn,
        "confirmationAskedTotal": sum(by_kind.values()),
        "confirmationAskedByKind": dict(sorted(by_kind.items())),
        "reachedRunFinishCleanly": bool(runs) and runs[-1] == "completed",
    }
    if edits:  # n8n's ExternalEditFact list (buildConversationMetrics)
        metrics["externalEdits"] = [{k: v for k, v in e.items() if v is not None} for e in edits]
    return metrics


def tool_calls_per_turn(entries: list[dict[str, Any]]) -> str:
    """The build's tool calls counted per user turn, one line each (``turn N: tool ×k, …``), from the
    transcript ``entries``; for the expectations judge."""
    lines: list[str] = []
    counts: Counter[str] | None = None
    turn: Any = None

    def flush() -> None:
        if counts is not None:
            listed = ", ".join(f"{name} ×{n}" for name, n in sorted(counts.items())) or "no tool calls"
            lines.append(f"turn {turn}: {listed}")

    for e in entries:
        if e.get("kind") == "user":
            flush()
            counts, turn = Counter(), e.get("turn", len(lines))
        elif e.get("kind") == "tool_call" and counts is not None:
            counts[str(e.get("tool") or "?")] += 1
    flush()
    return "\n".join(lines) or "(no turns)"


async def judge_build_expectations(case: EvalCase, judge: Judge, *, transcript_path: Path | None,
                                   workflow: dict[str, Any] | None, build_succeeded: bool,
                                   scope: JudgeScope = JudgeScope(), artifact_context: str | None = None,
                                   ground_truth: str | None = None,
                                   run_debug: list[dict[str, Any]] | None = None) -> list[ExpectationResult]:
    """The case's process and outcome expectations, selected and judged as n8n does (module doc),
    then an agents-exam case's ``intentExpectation`` units, graded without a judge on the agent's
    fenced ``intent`` block (:mod:`orchestrator.verify.intent`), then its ``memoryExpectations``
    (judged on the captured context) and ``contextAssertions`` (exact match on it), graded on the
    build's ``run_debug`` (:mod:`orchestrator.verify.memory`, :mod:`orchestrator.verify.context`):
    not judged for a build without an Instance AI thread (MCP), nor for a failed build that produced
    no agent output."""
    entries = read_transcript(transcript_path) if transcript_path is not None and transcript_path.is_file() else []
    rows = await _judge_author_expectations(case, judge, entries, workflow=workflow,
                                            build_succeeded=build_succeeded, scope=scope,
                                            artifact_context=artifact_context, ground_truth=ground_truth,
                                            run_debug=run_debug)
    if case.intent_expectation is not None:
        rows += grade_intent(case.intent_expectation, agent_reply_text(entries))
    return rows + await _context_units(case, judge, run_debug, scope=scope,
                                       has_output=gradable(entries), build_succeeded=build_succeeded)


async def _context_units(case: EvalCase, judge: Judge, run_debug: list[dict[str, Any]] | None, *, scope: JudgeScope,
                         has_output: bool, build_succeeded: bool) -> list[ExpectationResult]:
    """``memoryExpectations`` then ``contextAssertions``, gated as n8n's ``select.ts`` gates them."""
    if not case.memory_expectations and not case.context_assertions:
        return []
    if not scope.process_gradable:
        reason: str | None = context.NO_THREAD
    elif not build_succeeded and not has_output:
        reason = context.NO_AGENT_OUTPUT
    else:
        reason = None
    if reason is not None:
        return memory.not_graded(case.memory_expectations, reason) + context.not_graded(case.context_assertions, reason)
    return (await memory.judge_memory_expectations(case.memory_expectations, run_debug, judge)
            + context.check_context_assertions(case.context_assertions, run_debug))


def usage_totals(run_debug: list[dict[str, Any]] | None) -> str:
    """The judge's token ground truth for the whole build (n8n's ``build-expectations/verifier.ts``
    totals block), or "(no run debug captured)"."""
    total = summarize_usage(run_debug)
    if total is None:
        return "(no run debug captured)"
    runs = sum(1 for r in run_debug or [] if r.get("steps"))
    opening = opening_input_tokens(run_debug)
    return (f"Total: {total.input} tokens in / {total.output} tokens out across {total.steps} LLM steps, "
            f"{runs} {'run' if runs == 1 else 'runs'}\n"
            f"Cache: {total.cache_read} tokens read / {total.cache_write} tokens written\n"
            f"Opening step: {opening or 0} input tokens on the first LLM call (instructions, tool schemas and the "
            "first message; a seeded case also carries its restored history here)")


def turn_headers(entries: list[dict[str, Any]], run_debug: list[dict[str, Any]] | None) -> dict[int, str]:
    """Each user turn's token figures, joined by the runs the turn spans: ``Turn 2 (3 steps, 47446
    tokens in [41220 cached], 812 tokens out)``."""
    by_run = usage_by_run(run_debug)
    headers: dict[int, str] = {}
    for turn, run_ids in turn_run_ids(entries).items():
        used = [by_run[r] for r in run_ids if r in by_run]
        if not used:
            continue
        steps = sum(u.steps for u in used)
        tokens_in = sum(u.input for u in used)
        cached = sum(u.cache_read for u in used)
        tokens_out = sum(u.output for u in used)
        headers[turn] = f"### Turn {turn} ({steps} steps, {tokens_in} tokens in [{cached} cached], {tokens_out} tokens out)"
    return headers


def _rows(kind: str, texts: list[str], verdict: Verdict, reason: str) -> list[ExpectationResult]:
    return [ExpectationResult(kind=kind, text=t, verdict=verdict, reason=reason) for t in texts]  # type: ignore[arg-type]


async def _judge_author_expectations(case: EvalCase, judge: Judge, entries: list[dict[str, Any]], *,
                                     workflow: dict[str, Any] | None, build_succeeded: bool, scope: JudgeScope,
                                     artifact_context: str | None, ground_truth: str | None,
                                     run_debug: list[dict[str, Any]] | None = None) -> list[ExpectationResult]:
    process, outcome = list(case.process_expectations), list(case.outcome_expectations)
    if not process and not outcome:
        return []
    has_output = gradable(entries)
    if not build_succeeded and not (has_output and scope.process_gradable):
        # no agent output to grade; an MCP build has none n8n grades (it treats the build as prebuilt,
        # with no transcript: build-orchestrator.ts isPrebuilt, select.ts), whatever claude printed
        reason = NO_AGENT_OUTPUT if not has_output else MCP_FAILED_NOT_JUDGED
        return _rows("process", process, Verdict.incomplete, reason) + _rows("outcome", outcome, Verdict.incomplete, reason)
    skipped: list[ExpectationResult] = []
    tokens: str | None = None
    if has_output and (scope.process_gradable or scope.judge_process_anyway):
        judged = [("process", t) for t in process] + [("outcome", t) for t in outcome]
        transcript_text = render_for_judge(entries, turn_headers=turn_headers(entries, run_debug))
        metrics: dict[str, Any] | None = conversation_metrics(entries)
        per_turn = tool_calls_per_turn(entries)
        tokens = usage_totals(run_debug) if scope.process_gradable else None
    else:
        reason = NO_TRANSCRIPT_PROCESS if not has_output else MCP_PROCESS_SKIPPED
        skipped = _rows("process", process, Verdict.incomplete, reason)
        judged = [("outcome", t) for t in outcome]
        transcript_text, metrics, per_turn = authored_conversation(case), None, "(no transcript captured)"
    if not judged:
        return skipped
    texts = [t for _, t in judged]
    prompt = build_expectations_prompt(texts, workflow=workflow, transcript_text=transcript_text, metrics=metrics,
                                       tool_calls_per_turn=per_turn, artifact_context=artifact_context,
                                       ground_truth=ground_truth, token_totals=tokens)
    verdicts = await judge.judge_expectations(BUILD_JUDGE_SYSTEM, prompt, len(texts))
    rows = [ExpectationResult(kind=kind, text=t, verdict=j.verdict, attribution=j.attribution, reason=j.reason)  # type: ignore[arg-type]
            for (kind, t), j in zip(judged, verdicts)]
    rows[0].judge_input = {"system": BUILD_JUDGE_SYSTEM, "prompt": prompt, "count": len(rows), "texts": texts,
                           "kinds": [k for k, _ in judged], "partial": True}
    if not scope.process_gradable and scope.judge_process_anyway:  # an extra: never in the headline numbers
        for row in rows:
            if row.kind == "process":
                row.reason = f"[--judge-mcp-process extra, not scored: {row.verdict.value}] {row.reason}"
                row.verdict = Verdict.incomplete
                row.attribution = None
    # process rows first, then outcome: the order n8n lists them
    ordered = [r for r in rows if r.kind == "process"] + skipped + [r for r in rows if r.kind == "outcome"]
    return ordered
