"""n8n's LangSmith record shape for one unit (``run/langsmith-driver.ts``, ``run/reshape.ts``; read
back by ``comparison/fetch-baseline.ts``), and back: the root runs a unit becomes, their feedback,
and the units a baseline's runs rebuild into (ours losslessly, n8n's from its rows).

:mod:`orchestrator.experiments.langsmith_sync` writes and reads them through the SDK.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from orchestrator.domain import Attribution, BuildStatus, Verdict
from orchestrator.redact import redact, redact_obj
from orchestrator.results.model import (
    BuildRecord,
    ExpectationResult,
    ScenarioResult,
    UnitResult,
)
from orchestrator.results.scoring import BUILDER_FAILURES, UNSCORED_BUILDS, UnitOutcome, unit_outcome
from orchestrator.verify.workflow_checks import feedback

#: Version of our unit record under ``outputs.orchestrator``.
OUTPUT_SCHEMA = 2
#: n8n's row name for a case without scenarios (``langsmith/dataset-sync.ts``).
BUILD_ONLY_SCENARIO_NAME = "__build_only__"
MAX_COMMENT = 2000


@dataclass(frozen=True)
class RowSpec:
    """One root run in n8n's record shape."""

    scenario: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]


#: The verdict kinds n8n's ``BuildExpectationResult`` names (absent for process and outcome verdicts).
N8N_VERDICT_KINDS = frozenset({"memory", "context"})


def _expectation_results(unit: UnitResult) -> list[dict[str, Any]]:
    """n8n's ``expectationResults`` (``run/reshape.ts``): ``{expectation, pass, reason, incomplete?}``
    (a row stamped incomplete afterwards keeps its graded ``pass``), with ``attribution`` as n8n's
    verdicts carry it and ``kind`` only where n8n writes one (``memory``, ``context``)."""
    neutral = unit.build.status in UNSCORED_BUILDS
    out = []
    for e in unit.expectations:
        row: dict[str, Any] = {"expectation": e.text, "pass": (e.judged or e.verdict) is Verdict.passed and not neutral,
                               "reason": e.reason}
        if e.kind in N8N_VERDICT_KINDS:
            row["kind"] = e.kind
        if e.verdict is Verdict.incomplete or neutral:
            row["incomplete"] = True
        if e.attribution is not None and e.verdict is not Verdict.passed:
            row["attribution"] = e.attribution.value
        out.append(row)
    return out


def unit_rows(unit: UnitResult, scenario_names: list[str] | None = None,
              expectation_texts: list[str] | None = None) -> list[RowSpec]:
    """The unit as n8n records it: one row per scenario of the case (a build-only case: one
    ``__build_only__`` row), every row carrying the (case, iteration)'s expectation verdicts. Each
    row says what its scenario row says here: a failed one fails (a framework failure too, with its
    attribution), an ``incomplete`` one is ``incomplete`` (a timed-out iteration: every row, with
    ``buildTimeout``); an older record of a failed build without rows fails every scenario
    (``build_failure``) and every declared expectation."""
    names = list(dict.fromkeys([*(scenario_names or []), *(s.name for s in unit.scenarios)]))
    by_name = {s.name: s for s in unit.scenarios}
    neutral = unit.build.status in UNSCORED_BUILDS
    built = unit.build.status is BuildStatus.ok
    expectations = _expectation_results(unit)
    failure_reason = unit.build.error or unit.build.root_cause or unit.build.status.value
    if unit.build.status is BuildStatus.failed and not unit.expectations and not unit.scenarios:
        expectations = [{"expectation": t, "pass": False, "reason": failure_reason} for t in expectation_texts or []]
    nodes = (unit.workflow or {}).get("nodes") if built else None
    common: dict[str, Any] = {"buildSuccess": built, "expectationResults": expectations,
                              "buildCostUsd": unit.build.cost_usd, "buildTurns": unit.build.turns, "execErrors": [],
                              "buildDurationMs": round(unit.build.duration_s * 1000),
                              "nodeCount": len(nodes) if isinstance(nodes, list) else 0, "execDurationMs": 0}
    if unit.build.workflow_id:
        common["workflowId"] = unit.build.workflow_id
    if unit.build.thread_id:
        common["threadId"] = unit.build.thread_id
    if unit.build.timeout is not None:
        common["buildTimeout"] = dict(unit.build.timeout)
    rows: list[RowSpec] = []
    for name in names or [BUILD_ONLY_SCENARIO_NAME]:
        out: dict[str, Any] = dict(common)
        s = by_name.get(name)
        if name == BUILD_ONLY_SCENARIO_NAME:
            judged = [e for e in expectations if not e.get("incomplete")]
            failed = [e for e in judged if not e["pass"]]
            out.update(passed=bool(judged) and not failed,
                       score=(len(judged) - len(failed)) / len(judged) if judged else 0.0,
                       reasoning=f"build-only case: {len(judged) - len(failed)}/{len(judged)} expectation(s) passed")
            if unit.build.timeout is not None:
                out.update(incomplete=True, failureCategory="build_timeout", attribution="timeout")
            elif not judged:
                out.update(incomplete=True, failureCategory="verification_failure", attribution="verification_gap")
            elif failed:
                out.update(failureCategory="expectations_failed", attribution="builder_issue")
        elif s is None and unit.build.status not in BUILDER_FAILURES:
            out.update(passed=False, score=0.0, incomplete=True, reasoning=failure_reason)
        elif s is None:  # an older record of a failed build: the scenario never ran
            out.update(passed=False, score=0.0, reasoning=failure_reason,
                       failureCategory=unit.failure_category or "build_failure",
                       attribution=(unit.attribution or Attribution.builder_issue).value)
        else:
            graded = s.judged or s.verdict
            out.update(passed=graded is Verdict.passed and not neutral, score=1.0 if graded is Verdict.passed else 0.0,
                       reasoning=s.reason or failure_reason, execDurationMs=round(s.duration_s * 1000),
                       planRejections=unit.build.plan_rejections)
            out["execErrors"] = list((s.execution or {}).get("errors") or [])
            if s.verdict is Verdict.incomplete or neutral:
                out["incomplete"] = True
            if s.verdict is Verdict.failed or s.attribution is Attribution.timeout:
                out["failureCategory"] = s.failure_category or unit.failure_category or "builder_issue"
            if s.verdict is not Verdict.passed and s.attribution is not None:
                out["attribution"] = s.attribution.value
            root = s.root_cause or (unit.build.root_cause if s.verdict is Verdict.failed else None)
            if root:
                out["rootCause"] = root
        rows.append(RowSpec(name, {"testCaseFile": unit.case, "scenarioName": name, "_iteration": unit.iteration},
                            redact_obj(out)))
    rows[0].outputs["orchestrator"] = redact_obj({"schema": OUTPUT_SCHEMA, "outcome": unit_outcome(unit).value,
                                                  "unit": unit.model_dump(mode="json")})
    return rows


def unit_outputs(unit: UnitResult) -> dict[str, Any]:
    """The outputs of the unit's first row (n8n's fields plus our whole unit under ``orchestrator``)."""
    return unit_rows(unit)[0].outputs


def unit_from_outputs(outputs: Mapping[str, Any] | None) -> UnitResult | None:
    """The unit a run of ours recorded (``orchestrator.unit``, or ``unit`` before schema 2);
    ``None`` for runs of another shape."""
    if not outputs:
        return None
    ours = outputs.get("orchestrator")
    raw = ours.get("unit") if isinstance(ours, dict) else outputs.get("unit")
    if not isinstance(raw, dict):
        return None
    try:
        return UnitResult.model_validate(raw)
    except ValidationError:
        return None


def _as_bool(value: Any) -> bool:
    return value is True


def units_from_n8n_rows(rows: list[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[UnitResult]:
    """Units rebuilt from root runs in n8n's record shape, with n8n's reading rules
    (``fetch-baseline.ts`` ``fetchBaselineBucket``): a row without ``testCaseFile`` / ``scenarioName``
    or without outputs is skipped; expectation verdicts come from the first row of a (case,
    iteration) that carries them; the ``__build_only__`` row is no scenario; an ``incomplete`` row
    is no trial."""
    grouped: dict[tuple[str, int], dict[str, Any]] = {}
    for inputs, outputs in rows:
        case, name = inputs.get("testCaseFile"), inputs.get("scenarioName")
        iteration = inputs.get("_iteration", 0)
        if not isinstance(case, str) or not case or not isinstance(name, str) or not name:
            continue
        if not isinstance(iteration, int) or isinstance(iteration, bool) or iteration < 0:
            continue
        if not isinstance(outputs, Mapping) or not outputs:
            continue
        entry = grouped.setdefault((case, iteration), {"scenarios": {}, "expectations": None, "workflow": None,
                                                       "thread": None, "built": False, "cost": 0.0, "turns": 0})
        results = outputs.get("expectationResults")
        if entry["expectations"] is None and isinstance(results, list):
            entry["expectations"] = [
                ExpectationResult(kind="outcome", text=str(v.get("expectation")),
                                  verdict=Verdict.incomplete if v.get("incomplete") else
                                  Verdict.passed if _as_bool(v.get("pass")) else Verdict.failed,
                                  reason=str(v.get("reason") or ""),
                                  attribution=None if v.get("incomplete") or _as_bool(v.get("pass"))
                                  else Attribution.builder_issue)
                for v in results if isinstance(v, Mapping) and isinstance(v.get("expectation"), str)]
        entry["built"] = entry["built"] or _as_bool(outputs.get("buildSuccess"))
        for key, field_name in (("workflow", "workflowId"), ("thread", "threadId")):
            if entry[key] is None and isinstance(outputs.get(field_name), str):
                entry[key] = outputs[field_name]
        for key, field_name in (("cost", "buildCostUsd"), ("turns", "buildTurns")):
            value = outputs.get(field_name)
            if not entry[key] and isinstance(value, (int, float)) and not isinstance(value, bool):
                entry[key] = type(entry[key])(value)
        if name == BUILD_ONLY_SCENARIO_NAME:
            continue
        passed = _as_bool(outputs.get("passed"))
        category = outputs.get("failureCategory") if isinstance(outputs.get("failureCategory"), str) else None
        verdict = Verdict.incomplete if outputs.get("incomplete") else Verdict.passed if passed else Verdict.failed
        entry["scenarios"][name] = ScenarioResult(
            name=name, verdict=verdict, reason=str(outputs.get("reasoning") or ""),
            failure_category=category if verdict is Verdict.failed else None,
            root_cause=outputs.get("rootCause") if isinstance(outputs.get("rootCause"), str) else None)
    units = []
    for (case, iteration), entry in sorted(grouped.items()):
        units.append(UnitResult(
            case=case, iteration=iteration, started_at=0.0, finished_at=0.0, builder="n8n-langsmith",
            build=BuildRecord(status=BuildStatus.ok, workflow_id=entry["workflow"], thread_id=entry["thread"],
                              attempts=1, cost_usd=entry["cost"], turns=entry["turns"]),
            scenarios=list(entry["scenarios"].values()), expectations=entry["expectations"] or []))
    return units


@dataclass(frozen=True)
class FeedbackSpec:
    key: str
    score: float | None = None
    value: str | None = None
    comment: str | None = None


def _key_part(text: str, limit: int = 60) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:limit].rstrip("-") or "unnamed"


def _comment(text: str | None) -> str | None:
    return redact(text)[:MAX_COMMENT] if text else None


def unit_feedback(unit: UnitResult) -> list[FeedbackSpec]:
    """Our feedback for one unit, on its first row: each judged scenario and expectation,
    ``unit_pass`` and the unit's attribution (``incomplete`` verdicts are left out: they judge nothing)."""
    out: list[FeedbackSpec] = []
    for s in unit.scenarios:
        if s.verdict is not Verdict.incomplete:
            out.append(FeedbackSpec(f"scenario.{_key_part(s.name)}", 1.0 if s.verdict is Verdict.passed else 0.0,
                                    value=s.attribution.value if s.attribution else None, comment=_comment(s.reason)))
    for e in unit.expectations:
        if e.verdict is not Verdict.incomplete:
            out.append(FeedbackSpec(f"expectation.{e.kind}.{_key_part(e.text)}",
                                    1.0 if e.verdict is Verdict.passed else 0.0,
                                    value=e.attribution.value if e.attribution else None,
                                    comment=_comment(e.text + (f" — {e.reason}" if e.reason else ""))))
    outcome = unit_outcome(unit)
    if outcome in (UnitOutcome.passed, UnitOutcome.failed):
        out.append(FeedbackSpec("unit_pass", 1.0 if outcome is UnitOutcome.passed else 0.0, value=outcome.value))
    rows: list[ScenarioResult | ExpectationResult] = [*unit.scenarios, *unit.expectations]
    attribution = unit.attribution or next(
        (r.attribution for r in rows if r.verdict is Verdict.failed and r.attribution), None)
    if attribution is not None:
        out.append(FeedbackSpec("attribution", value=attribution.value, comment=_comment(unit.failure_category)))
    return out


#: Builders whose builds n8n records cost and turns for (its ``--build-via-mcp`` rows).
MCP_ROW_BUILDERS = frozenset({"mcp", "remote", "build-via-mcp"})


def row_feedback(row: RowSpec, unit: UnitResult | None = None) -> list[FeedbackSpec]:
    """n8n's per-row feedback (``feedbackExtractor`` in ``run/langsmith-driver.ts``, 04d53711), on every
    row of the build: ``scenario_pass`` (left out for an incomplete row), ``failure_category``
    (``none`` on a pass), ``exec_duration_s``, ``node_count``, ``build_duration_s``,
    ``plan_rejection_count`` (scenario rows), ``build_cost_usd`` / ``build_turns`` (MCP builds) and
    the workflow checks ``evals.workflows.<dimension>.<check>`` (1 pass, 0 fail; N/A and errors left out)."""
    out = row.outputs
    category = "none" if out.get("passed") else str(out.get("failureCategory") or "unknown")
    rows = [] if out.get("incomplete") else [FeedbackSpec("scenario_pass", float(out.get("score") or 0.0),
                                                          comment=_comment(out.get("reasoning")))]
    rows.append(FeedbackSpec("failure_category", value=category))
    rows.append(FeedbackSpec("exec_duration_s", float(out.get("execDurationMs") or 0) / 1000))
    rows.append(FeedbackSpec("node_count", float(out.get("nodeCount") or 0)))
    if out.get("buildDurationMs") is not None:
        rows.append(FeedbackSpec("build_duration_s", float(out["buildDurationMs"]) / 1000))
    if out.get("planRejections") is not None:
        rows.append(FeedbackSpec("plan_rejection_count", float(out["planRejections"])))
    if unit is None:
        return rows
    if (unit.builder or "mcp") in MCP_ROW_BUILDERS:
        rows += [FeedbackSpec("build_cost_usd", float(unit.build.cost_usd)), FeedbackSpec("build_turns", float(unit.build.turns))]
    by_key = {f"evals.workflows.{c.dimension}.{c.name}": c for c in unit.structural if c.dimension}
    for key, score in feedback(unit.structural).items():
        rows.append(FeedbackSpec(key, float(score), comment=_comment(by_key[key].detail) if key in by_key else None))
    return rows


def per_run_pass_metrics(runs: list[tuple[str, Mapping[str, Any], Mapping[str, Any]]]) -> list[tuple[str, FeedbackSpec]]:
    """n8n's ``writePerRunPassMetrics`` (``run/langsmith-driver.ts``): the experiment's root runs
    ``(run id, inputs, outputs)`` grouped by dataset example — one (case, scenario) row, the build-only
    row included — and, over each group's runs that are not ``incomplete``, ``pass_at_k`` = pass@n
    (1 when any passed) and ``pass_hat_k`` = (c/n)^n, written on every such run (none for n = 0)."""
    groups: dict[tuple[str, str], list[tuple[str, bool]]] = {}
    for run_id, inputs, outputs in runs:
        case, scenario = inputs.get("testCaseFile"), inputs.get("scenarioName")
        if not isinstance(case, str) or not isinstance(scenario, str) or outputs.get("incomplete") \
                or not isinstance(outputs.get("passed"), bool):
            continue
        groups.setdefault((case, scenario), []).append((run_id, bool(outputs["passed"])))
    out: list[tuple[str, FeedbackSpec]] = []
    for members in groups.values():
        n, c = len(members), sum(1 for _, passed in members if passed)
        at, hat = (1.0 if c else 0.0), (c / n) ** n
        for run_id, _ in members:
            out += [(run_id, FeedbackSpec("pass_at_k", at)), (run_id, FeedbackSpec("pass_hat_k", hat))]
    return out


@dataclass(frozen=True)
class Span:
    """A traced step under a row's root run (n8n's ``traceable`` wrappers in ``run/eval-session.ts``)."""

    name: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    start: float
    end: float


def trace_spans(unit: UnitResult, row: RowSpec, *, first: bool) -> list[Span]:
    """The spans n8n traces under a row: ``workflow_build`` under the first row of a build driven
    through the chat (MCP and prebuilt builds are not traced so), and ``scenario_execution`` — or
    ``agent_scenario_execution`` for an Agent's — under each scenario row whose scenario ran."""
    spans: list[Span] = []
    build_end = unit.started_at + unit.build.duration_s
    traced_build = (unit.builder or "mcp") not in MCP_ROW_BUILDERS and unit.builder != "prebuilt"
    if first and traced_build and unit.build.attempts:
        spans.append(Span("workflow_build",
                          redact_obj({"testCaseFile": unit.case, "iteration": unit.iteration, "builder": unit.builder}),
                          redact_obj({"success": unit.build.status is BuildStatus.ok, "workflowId": unit.build.workflow_id,
                                      "threadId": unit.build.thread_id, "attempts": unit.build.attempts,
                                      "durationMs": round(unit.build.duration_s * 1000), "error": unit.build.error,
                                      "buildTimeout": unit.build.timeout}),
                          unit.started_at, build_end))
    scenario = next((s for s in unit.scenarios if s.name == row.scenario), None)
    if scenario is not None and scenario.duration_s > 0:
        agent = isinstance(scenario.execution, dict) and "agentRun" in scenario.execution
        spans.append(Span("agent_scenario_execution" if agent else "scenario_execution",
                          redact_obj({"workflowId": unit.build.workflow_id, "scenario": scenario.name}),
                          redact_obj({"verdict": (scenario.judged or scenario.verdict).value, "reasoning": scenario.reason,
                                      "failureCategory": scenario.failure_category, "executionId": scenario.execution_id}),
                          build_end, build_end + scenario.duration_s))
    return spans
