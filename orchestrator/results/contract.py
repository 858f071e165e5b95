"""``eval-results.json`` in the reference harness's contract, and back.

The file n8n's tooling reads (the PR-comment step, LangTracer ingestion, ``build-cost-report.ts``)
is camelCase and case-oriented: ``testCases[]`` with per-iteration arrays (``buildCostUsdPerRun``,
``buildTurnsPerRun``, ``buildExpectationResultsPerRun``, ``harnessUsagePerRun``,
``workflowChecksPerRun``), ``scenarios[].runs[]`` with ``passed`` / ``failureCategory`` /
``rootCause`` / ``attribution``, run totals in ``summary`` (``mcpBuild``, ``workflowChecks``) and
``comparison.result.evaluationUnits``. :func:`to_document` writes that shape; everything that is
ours alone (run id, config, lanes and their fingerprints, the unit timeline, builder, model route)
stays, unchanged, under the ``orchestrator`` key, so nothing is lost and nothing of ours collides
with a reference field.

:func:`from_document` reads three shapes: this one (through its ``orchestrator`` block), our
older snake_case files (the block on its own), and a file written by n8n's TypeScript harness
(rebuilt into units from ``testCases``), so ``orchestrator compare`` and the baseline lookup accept
any of them.

The JSON Schema of the document is :mod:`orchestrator.results.schema` (``json_schema``); it is published as ``orchestrator/results/eval-results.schema.json`` (a test keeps the two
identical).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from orchestrator.domain import Attribution, BuildStatus, Verdict
from orchestrator.errors import UserError
from orchestrator.results.model import (
    BuildRecord,
    EvalResults,
    ExpectationResult,
    ScenarioResult,
    StructuralCheck,
    UnitResult,
    UsageEntry,
)
from orchestrator.results.model_cost import per_run_columns
from orchestrator.results.schema import SCHEMA_VERSION
from orchestrator.results.scoring import (
    BUILD_FAILED_CATEGORY,
    BUILD_ONLY_SCENARIO,
    BUILDER_FAILURES,
    UNSCORED_BUILDS,
    terminal_rates,
)

#: Harness-code categories folded into the four attribution buckets (the reference's table).
_CATEGORY_ATTRIBUTION = {
    "builder_issue": Attribution.builder_issue,
    "mock_issue": Attribution.mock_issue,
    "framework_issue": Attribution.framework_issue,
    "verification_gap": Attribution.verification_gap,
    "build_failure": Attribution.builder_issue,
    "build_failed": Attribution.builder_issue,
    "expectations_failed": Attribution.builder_issue,
    "verification_failure": Attribution.verification_gap,
}


def attribution_for(category: str | None, given: Attribution | None = None) -> Attribution | None:
    """The attribution a failure carries in ``eval-results.json``: ``given`` when the verdict named
    one, else the one its failure ``category`` implies (None for a category without one)."""
    if given is not None:
        return given
    return _CATEGORY_ATTRIBUTION.get(category or "")


# --------------------------------------------------------------------------- helpers


def _rates(n: int, c: int, k: int) -> dict[str, float]:
    """n8n's per-unit ``passAtK`` / ``passHatK`` (terminal k = n, plug-in pass^k; ``terminalRate``
    in ``run/persist.ts``), and ours alone: ``passHatKUnbiased`` = C(c,k')/C(n,k'), k' = min(k, n)."""
    at, hat = terminal_rates(n, c)
    unbiased = math.comb(c, max(1, min(k, n))) / math.comb(n, max(1, min(k, n))) if n else 0.0
    return {"passAtK": at, "passHatK": hat, "passHatKUnbiased": unbiased}


def _iso(ts: float | None) -> str:
    return datetime.fromtimestamp(ts or 0.0, tz=UTC).isoformat().replace("+00:00", "Z")


def _usage_entry(u: UsageEntry) -> dict[str, Any]:
    return {"agent": u.agent, "model": u.model, "calls": u.calls, "inputTokens": u.input_tokens,
            "uncachedInputTokens": u.uncached_input_tokens, "outputTokens": u.output_tokens,
            "reasoningTokens": u.reasoning_tokens}


def _attr(value: Attribution | None) -> str | None:
    return value.value if value is not None else None


def workflow_checks_summary(units: list[UnitResult]) -> dict[str, Any] | None:
    """Per check across every build that has check outcomes: pass / fail / N/A / error counts and
    the pass rate over pass + fail (``None`` when the check never applied). ``None`` with no build."""
    per_check: dict[str, dict[str, Any]] = {}
    scored = 0
    for unit in units:
        if not unit.structural:
            continue
        scored += 1
        for check in unit.structural:
            entry = per_check.setdefault(check.name, {
                "kind": check.kind, "dimension": check.dimension or "structure",
                "passes": 0, "fails": 0, "nA": 0, "errors": 0,
            })
            entry[{"pass": "passes", "fail": "fails", "n_a": "nA", "error": "errors"}[check.status]] += 1
    if not scored:
        return None
    for entry in per_check.values():
        judged = entry["passes"] + entry["fails"]
        entry["passRate"] = entry["passes"] / judged if judged else None
    return {"scoredBuilds": scored, "perCheck": per_check}


# --------------------------------------------------------------------------- writing


def _by_case(results: EvalResults) -> dict[str, dict[int, UnitResult]]:
    out: dict[str, dict[int, UnitResult]] = defaultdict(dict)
    for unit in results.units:
        out[unit.case][unit.iteration] = unit  # the last record of a unit wins (``--resume``)
    return out


def _total_runs(results: EvalResults, by_case: dict[str, dict[int, UnitResult]]) -> int:
    configured = results.config.get("iterations")
    seen = max((i + 1 for runs in by_case.values() for i in runs), default=0)
    return max(configured if isinstance(configured, int) else 0, seen, 1 if by_case else 0)


def _charged(unit: UnitResult | None) -> bool:
    """A failed build without verdicts: every unit of its case fails once (scoring.py's rule, and
    n8n's ``aggregateResults``, which puts a failed "scenario not executed" result in its place)."""
    return unit is not None and unit.build.status in BUILDER_FAILURES and not (unit.scenarios or unit.expectations)


def _failed_build_row(unit: UnitResult) -> dict[str, Any]:
    category = unit.failure_category or BUILD_FAILED_CATEGORY
    return _drop_absent({"workflowId": unit.build.workflow_id, "passed": False, "score": 0.0,
                         "reasoning": "build failed: scenario not executed", "failureCategory": category,
                         "rootCause": unit.build.root_cause or unit.build.error,
                         "attribution": _attr(attribution_for(category, unit.attribution)), "execErrors": []})


def _scenario_run(unit: UnitResult | None, s: ScenarioResult | None) -> dict[str, Any]:
    if unit is not None and s is None and _charged(unit):
        return _failed_build_row(unit)
    if unit is None or s is None:
        return {"workflowId": unit.build.workflow_id if unit else None, "passed": False, "incomplete": True,
                "score": None, "reasoning": "not run", "execErrors": []}
    neutral = unit.build.status in UNSCORED_BUILDS  # never ran: not a judgement
    graded = s.judged or s.verdict  # a timed-out row keeps what it was graded, for the record
    failed = s.verdict is Verdict.failed and not neutral
    stamped = s.attribution is Attribution.timeout  # n8n's attachExpectations: build_timeout / timeout
    category = s.failure_category or unit.failure_category
    run: dict[str, Any] = {
        "workflowId": unit.build.workflow_id,
        "passed": graded is Verdict.passed and not neutral,
        "score": None if neutral else 1.0 if graded is Verdict.passed else 0.0 if graded is Verdict.failed else None,
        "reasoning": s.reason,
        "failureCategory": category if failed or stamped else None,
        "rootCause": (s.root_cause or unit.build.root_cause or (s.reason[:300] if s.reason else None)) if failed else None,
        "attribution": _attr(attribution_for(category, s.attribution or unit.attribution)) if failed
        else _attr(s.attribution),
        "execErrors": list((s.execution or {}).get("errors") or []),
    }
    if s.verdict is Verdict.incomplete or neutral:
        run["incomplete"] = True
    if neutral:
        run["rootCause"] = unit.build.root_cause or unit.build.error or unit.build.status.value
    if stamped and unit.build.timeout is not None:
        run["buildTimeout"] = dict(unit.build.timeout)
        if not run["execErrors"] and unit.build.status is BuildStatus.timeout and unit.build.error:
            run["execErrors"] = [unit.build.error]
    if s.execution_id:
        run["executionId"] = s.execution_id
    return _drop_absent(run)


#: Optional string fields n8n leaves out when unset (``JSON.stringify`` drops ``undefined``); its
#: reader (``bucket-from-results-json.ts``) takes them as ``z.string().optional()``, which refuses null.
_OPTIONAL_STRINGS = ("failureCategory", "rootCause", "attribution")


def _drop_absent(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if not (k in _OPTIONAL_STRINGS and v is None)}


def _expectation_row(unit: UnitResult, e: ExpectationResult) -> dict[str, Any]:
    neutral = unit.build.status in UNSCORED_BUILDS
    graded = e.judged or e.verdict
    row: dict[str, Any] = {"expectation": e.text, "kind": e.kind, "pass": graded is Verdict.passed and not neutral,
                           "reason": e.reason}
    if e.verdict is Verdict.incomplete or neutral:
        row["incomplete"] = True
        if e.attribution is not None:
            row["attribution"] = e.attribution.value
    elif e.verdict is Verdict.failed:
        category = unit.failure_category if unit.build.status is not BuildStatus.ok else "expectations_failed"
        row["failureCategory"] = category
        row["attribution"] = _attr(attribution_for(category, e.attribution))
        row["rootCause"] = unit.build.root_cause or (e.reason[:300] if e.reason else None)
    return row


def _case_status(scenarios: list[dict[str, Any]], expectations: list[dict[str, Any]]) -> str:
    evaluated = [s for s in scenarios if s["evaluatedCount"]] + [e for e in expectations if e["evaluatedCount"]]
    if not evaluated:
        return "notVerified"
    return "pass" if all(u["passCount"] == u["evaluatedCount"] for u in evaluated) else "fail"


def _test_case(case: str, runs: dict[int, UnitResult], total: int, k: int) -> dict[str, Any]:
    ordered = [runs.get(i) for i in range(total)]
    scenario_names: list[str] = []
    expectation_texts: list[str] = []
    for unit in ordered:
        for s in unit.scenarios if unit else []:
            if s.name not in scenario_names:
                scenario_names.append(s.name)
        for e in unit.expectations if unit else []:
            if e.text not in expectation_texts:
                expectation_texts.append(e.text)
    if not scenario_names and not expectation_texts and any(_charged(u) for u in ordered):
        scenario_names.append(BUILD_ONLY_SCENARIO)  # scoring's stand-in unit for a case never judged

    scenarios = []
    for name in scenario_names:
        rows = [_scenario_run(u, next((s for s in u.scenarios if s.name == name), None) if u else None)
                for u in ordered]
        judged = [r for r in rows if not r.get("incomplete")]
        passes = sum(1 for r in judged if r["passed"])
        scenarios.append({"name": name, "passCount": passes, "evaluatedCount": len(judged), "totalRuns": total,
                          **_rates(len(judged), passes, k), "runs": rows})

    per_run_expectations: list[list[dict[str, Any]] | None] = []
    for unit in ordered:
        if unit is not None and _charged(unit) and expectation_texts:
            category = unit.failure_category or BUILD_FAILED_CATEGORY
            per_run_expectations.append([_drop_absent({
                "expectation": text, "pass": False, "reason": "build failed: not judged", "failureCategory": category,
                "attribution": _attr(attribution_for(category, unit.attribution)),
                "rootCause": unit.build.root_cause or unit.build.error}) for text in expectation_texts])
            continue
        per_run_expectations.append([_expectation_row(unit, e) for e in unit.expectations]
                                    if unit is not None and unit.expectations else None)
    expectations = []
    for text in expectation_texts:
        verdicts = [row for rows in per_run_expectations if rows for row in rows
                    if row["expectation"] == text and not row.get("incomplete")]
        passes = sum(1 for v in verdicts if v["pass"])
        expectations.append({"expectation": text, "passCount": passes, "evaluatedCount": len(verdicts),
                             **_rates(len(verdicts), passes, k)})

    first_workflow = next((u.workflow for u in ordered if u is not None and u.workflow), None)
    return {
        "name": case,
        "testCaseFile": case,
        "status": _case_status(scenarios, expectations),
        "buildSuccessCount": sum(1 for u in ordered if u is not None and u.build.status is BuildStatus.ok),
        "workflowJson": first_workflow,
        "totalRuns": total,
        "workflowChecksPerRun": [{c.name: c.status for c in u.structural} if u is not None and u.structural else None
                                 for u in ordered],
        "buildExpectationResultsPerRun": per_run_expectations,
        "buildExpectations": expectations,
        "threadIds": [u.build.thread_id if u is not None else None for u in ordered],
        "buildCostUsdPerRun": [u.build.cost_usd if u is not None and u.build.status is not BuildStatus.skipped else None
                               for u in ordered],
        "buildTurnsPerRun": [u.build.turns if u is not None and u.build.status is not BuildStatus.skipped else None
                             for u in ordered],
        "harnessUsagePerRun": [[_usage_entry(e) for e in u.harness_usage] if u is not None and u.harness_usage is not None
                               else None for u in ordered],
        **per_run_columns(ordered),  # the model gateway's count (issue 37): cost per run and stage, build tokens
        "scenarios": scenarios,
    }


def _pass_rate_per_iter(test_cases: list[dict[str, Any]], total: int) -> str:
    rates = []
    for i in range(total):
        passed = judged = 0
        for tc in test_cases:
            for s in tc["scenarios"]:
                run = s["runs"][i]
                if not run.get("incomplete"):
                    judged += 1
                    passed += bool(run["passed"])
            for row in tc["buildExpectationResultsPerRun"][i] or []:
                if not row.get("incomplete"):
                    judged += 1
                    passed += bool(row["pass"])
        rates.append(f"{round(passed / judged * 100)}%" if judged else "n/a")
    return " / ".join(rates)


#: Builders whose builds are claude driving a lane's MCP server (what ``summary.mcpBuild`` reports).
MCP_BUILDERS = frozenset({"mcp", "remote", "build-via-mcp"})


def _mcp_build(units: list[UnitResult], run_builder: object = None) -> dict[str, Any] | None:
    """Cost and turns of the MCP builds, or None when none of the builds were MCP builds (n8n's
    tooling reads the key's presence as "an MCP run"). A unit that does not name its builder takes
    the run's; one that names neither (an older result file) counts as MCP, the default builder."""
    def is_mcp(unit: UnitResult) -> bool:
        builder = unit.builder or run_builder
        return builder is None or builder in MCP_BUILDERS

    builds = [u for u in units if u.build.status is not BuildStatus.skipped and u.build.attempts > 0 and is_mcp(u)]
    if not builds:
        return None
    return {"builds": len(builds), "totalCostUsd": round(sum(u.build.cost_usd for u in builds), 2),
            "avgTurns": round(sum(u.build.turns for u in builds) / len(builds), 1)}


def _comparison(results: EvalResults) -> dict[str, Any] | None:
    """n8n's ``comparison``: ``{baseline: <experiment name>, result: ComparisonResult}`` (as
    ``writeEvalResults`` in ``run/persist.ts`` writes it). A comparison stored by an older
    orchestrator (snake_case ``units``) stays under ``orchestrator`` only."""
    ours: dict[str, Any] = dict(results.comparison or {})
    if isinstance(ours.get("result"), dict):  # already wrapped (read back)
        return ours
    if "evaluationUnits" not in ours:
        return None
    baseline = ours.get("baseline")
    name = baseline.get("experimentName") if isinstance(baseline, dict) else None
    return {"baseline": str(name or ""), "result": ours}


def to_document(results: EvalResults) -> dict[str, Any]:
    """The whole ``eval-results.json``: the reference's fields, ours under ``orchestrator``."""
    by_case = _by_case(results)
    total = _total_runs(results, by_case)
    k = results.summary.k if results.summary else total or 1
    test_cases = [_test_case(case, by_case[case], total, k) for case in sorted(by_case)]
    units = [u for case in by_case.values() for u in case.values()]
    scored = [u for tc in test_cases for u in (*tc["scenarios"], *tc["buildExpectations"]) if u["evaluatedCount"]]
    summary: dict[str, Any] = {
        "testCases": len(test_cases),
        "built": sum(1 for tc in test_cases if tc["buildSuccessCount"] > 0),
        "scenariosTotal": sum(len(tc["scenarios"]) for tc in test_cases),
        "passAtK": sum(u["passAtK"] for u in scored) / len(scored) if scored else 0.0,
        "passHatK": sum(u["passHatK"] for u in scored) / len(scored) if scored else 0.0,
        # ours alone, never the headline: the unbiased pass^k
        "passHatKUnbiased": sum(u["passHatKUnbiased"] for u in scored) / len(scored) if scored else 0.0,
        "passRatePerIter": _pass_rate_per_iter(test_cases, total),
        "notVerified": sum(1 for tc in test_cases if tc["status"] == "notVerified"),
    }
    checks = workflow_checks_summary(units)
    if checks:
        summary["workflowChecks"] = checks
    mcp = _mcp_build(units, results.config.get("builder"))
    if mcp:
        summary["mcpBuild"] = mcp
    if results.summary is not None:
        summary["attribution"] = dict(results.summary.attribution)
    comparison = _comparison(results)
    finished = results.finished_at or max((u.finished_at for u in units), default=results.started_at)
    doc: dict[str, Any] = {
        "schemaVersion": SCHEMA_VERSION,
        "timestamp": _iso(finished),
        "duration": int(max(0.0, finished - results.started_at) * 1000),
        "totalRuns": total,
        "experimentName": results.experiment_name or results.run_id,
        "summary": summary,
        "comparisonStatus": results.comparison_status or ("ok" if comparison else "not_attempted"),
        **({"comparisonError": results.comparison_error}
           if results.comparison_status == "fetch_failed" and results.comparison_error else {}),
        **({"gate": gate} if (gate := _gate(results, test_cases, total)) is not None else {}),
        "testCases": test_cases,
        "orchestrator": json.loads(results.model_dump_json()),
    }
    if comparison:
        doc["comparison"] = comparison
    return doc


def _gate(results: EvalResults, test_cases: list[dict[str, Any]], total: int) -> dict[str, Any] | None:
    """n8n's absolute gate for a gated tier (``pr``), else None."""
    from orchestrator.results.gate import evaluate_gate, is_gated_tier

    tier = results.config.get("tier")
    return evaluate_gate(test_cases, total) if is_gated_tier(tier if isinstance(tier, str) else None) else None


# --------------------------------------------------------------------------- reading


class NotEvalResults(UserError, ValueError):
    """The document is none of the shapes :func:`from_document` knows; the message says why."""


def _ts(value: Any) -> float:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return float(value) if isinstance(value, (int, float)) else 0.0


def _verdict(passed: Any, incomplete: Any) -> Verdict:
    if incomplete:
        return Verdict.incomplete
    return Verdict.passed if passed else Verdict.failed


def _attribution(value: Any, category: Any) -> Attribution | None:
    if isinstance(value, str) and value in Attribution.__members__:
        return Attribution(value)
    return attribution_for(category if isinstance(category, str) else None)


def _count(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0


def _with_runs(scenario: dict[str, Any]) -> dict[str, Any]:
    """A scenario of n8n's file with its ``runs``; n8n's reader (``bucket-from-results-json.ts``)
    counts ``passCount`` / ``evaluatedCount`` and lets ``runs`` default to empty, so a file without
    runs stands for that many passes and failures."""
    runs = scenario.get("runs")
    if isinstance(runs, list) and runs:
        return scenario
    passes, evaluated = _count(scenario.get("passCount")), _count(scenario.get("evaluatedCount"))
    made = [{"passed": i < passes} for i in range(max(passes, evaluated))]
    return {**scenario, "runs": made}


def _per_run_from_counts(expectations: list[Any]) -> list[list[dict[str, Any]]]:
    """Per-iteration expectation rows from ``buildExpectations`` counts, when a file has no
    ``buildExpectationResultsPerRun`` (an unevaluated expectation is unmeasured, as n8n reads it)."""
    rows: list[list[dict[str, Any]]] = []
    for e in expectations:
        if not isinstance(e, dict) or not isinstance(e.get("expectation"), str):
            continue
        passes, evaluated = _count(e.get("passCount")), _count(e.get("evaluatedCount"))
        for i in range(max(passes, evaluated)):
            while len(rows) <= i:
                rows.append([])
            rows[i].append({"expectation": e["expectation"], "pass": i < passes})
    return rows


def _reference_units(doc: dict[str, Any]) -> list[UnitResult]:
    started = _ts(doc.get("timestamp")) - float(doc.get("duration") or 0) / 1000.0
    units: list[UnitResult] = []
    for index, tc in enumerate(doc.get("testCases") or []):
        if not isinstance(tc, dict):
            raise NotEvalResults(f"testCases.{index}: expected an object")
        slug = str(tc.get("testCaseFile") or tc.get("name") or f"case-{index}")
        scenarios = [_with_runs(s) for s in tc.get("scenarios") or [] if isinstance(s, dict)]
        per_run = tc.get("buildExpectationResultsPerRun") or _per_run_from_counts(tc.get("buildExpectations") or [])
        costs = tc.get("buildCostUsdPerRun") or []
        turns = tc.get("buildTurnsPerRun") or []
        total = int(tc.get("totalRuns") or doc.get("totalRuns") or 0)
        total = max(total, *(len(s.get("runs") or []) for s in scenarios), len(per_run), 0)
        for i in range(total):
            scenario_results: list[ScenarioResult] = []
            workflow_id = None
            for s in scenarios:
                runs = s.get("runs") or []
                if i >= len(runs):
                    continue
                run = runs[i]
                workflow_id = workflow_id or run.get("workflowId")
                verdict = _verdict(run.get("passed"), run.get("incomplete"))
                category = run.get("failureCategory") if verdict is Verdict.failed else None
                scenario_results.append(ScenarioResult(
                    name=str(s.get("name")), verdict=verdict, failure_category=category,
                    attribution=_attribution(run.get("attribution"), category) if verdict is Verdict.failed else None,
                    reason=str(run.get("reasoning") or ""), root_cause=run.get("rootCause"),
                    execution_id=run.get("executionId"),
                ))
            expectation_results = [
                ExpectationResult(
                    kind="process" if row.get("kind") == "process" else "outcome",
                    text=str(row.get("expectation")), verdict=_verdict(row.get("pass"), row.get("incomplete")),
                    attribution=_attribution(row.get("attribution"), row.get("failureCategory") or "expectations_failed")
                    if not row.get("pass") and not row.get("incomplete") else None,
                    reason=str(row.get("reason") or ""),
                )
                for row in (per_run[i] if i < len(per_run) and per_run[i] else [])
            ]
            built = workflow_id is not None or any(
                s.failure_category not in ("build_failure", "build_failed") for s in scenario_results)
            cost = costs[i] if i < len(costs) and costs[i] is not None else 0.0
            turn = turns[i] if i < len(turns) and turns[i] is not None else 0
            units.append(UnitResult(
                case=slug, iteration=i, lane=None, started_at=started, finished_at=started,
                build=BuildRecord(status=BuildStatus.ok if built else BuildStatus.failed, workflow_id=workflow_id,
                                  attempts=1, cost_usd=float(cost), turns=int(turn)),
                scenarios=scenario_results, expectations=expectation_results,
                structural=[StructuralCheck(name=name, passed=None if st in ("n_a", "error") else st == "pass",
                                            errored=st == "error")
                            for name, st in ((tc.get("workflowChecksPerRun") or [None] * total)[i] or {}).items()]
                if i < len(tc.get("workflowChecksPerRun") or []) else [],
                builder="reference",
            ))
    return units


def from_document(doc: Any) -> EvalResults:
    """Our results from any ``eval-results.json`` we know (raises :class:`NotEvalResults` or
    pydantic's ``ValidationError``)."""
    if not isinstance(doc, dict):
        raise NotEvalResults("expected a JSON object at the top level")
    if isinstance(doc.get("orchestrator"), dict):
        return EvalResults.model_validate(doc["orchestrator"])
    if "run_id" in doc:  # our files before the contract (schema 0)
        return EvalResults.model_validate(doc)
    if isinstance(doc.get("testCases"), list):  # written by n8n's TypeScript harness
        try:
            units = _reference_units(doc)
        except ValidationError:
            raise
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:  # a field of another shape
            raise NotEvalResults(f"testCases: a field is not what n8n's harness writes ({type(exc).__name__}: {exc})") from None
        name = str(doc.get("experimentName") or "reference")
        return EvalResults(run_id=name, experiment_name=name, started_at=units[0].started_at if units else 0.0,
                           finished_at=_ts(doc.get("timestamp")) or None,
                           config={"iterations": int(doc.get("totalRuns") or 1), "source": "reference"}, units=units)
    raise NotEvalResults("neither testCases (reference harness) nor run_id/units (orchestrator) found")
