"""The JSON Schema (draft 2020-12) of ``eval-results.json`` as :mod:`orchestrator.results.contract`
writes it, and the copy published with the package (``eval-results.schema.json``; a test keeps the
two identical). Regenerate the published file with ``python -m orchestrator.results.schema``."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, get_args

from orchestrator.domain import Attribution
from orchestrator.results.model import ComparisonStatus, EvalResults, ExpectationKind

SCHEMA_VERSION = "1.0.0"
SCHEMA_ID = "https://n8n-eval-orchestrator.local/schemas/eval-results/1.0.0.json"
SCHEMA_RESOURCE = "eval-results.schema.json"


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of :func:`to_document`'s output."""
    nullable_num = {"type": ["number", "null"]}
    nullable_str = {"type": ["string", "null"]}
    attribution = {"enum": [a.value for a in Attribution] + [None]}
    build_timeout = {"type": "object", "required": ["kind", "turn", "elapsedMs"],
                     "properties": {"kind": {"type": "string"}, "turn": {"type": "integer"},
                                    "elapsedMs": {"type": "integer"}}}
    usage = {
        "type": "object",
        "required": ["agent", "model", "inputTokens", "uncachedInputTokens", "outputTokens", "reasoningTokens"],
        "properties": {"agent": {"type": "string"}, "model": {"type": "string"}, "calls": {"type": "integer"},
                       "inputTokens": {"type": "integer"}, "uncachedInputTokens": {"type": "integer"},
                       "outputTokens": {"type": "integer"}, "reasoningTokens": {"type": "integer"}},
    }
    expectation_row = {
        "type": "object",
        "required": ["expectation", "pass"],
        "properties": {"expectation": {"type": "string"}, "kind": {"enum": list(get_args(ExpectationKind))},
                       "pass": {"type": "boolean"}, "incomplete": {"type": "boolean"}, "reason": {"type": "string"},
                       "failureCategory": nullable_str, "attribution": attribution, "rootCause": nullable_str},
    }
    scenario_run = {
        "type": "object",
        "required": ["workflowId", "passed", "reasoning", "execErrors"],
        "properties": {"workflowId": nullable_str, "passed": {"type": "boolean"}, "incomplete": {"type": "boolean"},
                       "score": nullable_num, "reasoning": {"type": "string"}, "failureCategory": {"type": "string"},
                       "rootCause": {"type": "string"}, "attribution": {"enum": [a.value for a in Attribution]},
                       "executionId": {"type": "string"}, "buildTimeout": build_timeout,
                       "execErrors": {"type": "array", "items": {"type": "string"}}},
    }
    rate = {"type": "number", "minimum": 0, "maximum": 1}

    def per_run(item: dict[str, Any]) -> dict[str, Any]:
        return {"type": "array", "items": {"anyOf": [item, {"type": "null"}]}}

    test_case = {
        "type": "object",
        "required": ["name", "testCaseFile", "status", "buildSuccessCount", "totalRuns", "buildCostUsdPerRun",
                     "buildTurnsPerRun", "buildExpectations", "buildExpectationResultsPerRun", "harnessUsagePerRun",
                     "workflowChecksPerRun", "scenarios"],
        "properties": {
            "name": {"type": "string"}, "testCaseFile": {"type": "string"},
            "status": {"enum": ["pass", "fail", "notVerified"]},
            "buildSuccessCount": {"type": "integer", "minimum": 0}, "totalRuns": {"type": "integer", "minimum": 0},
            "workflowJson": {"type": ["object", "null"]},
            "buildCostUsdPerRun": per_run({"type": "number"}),
            "buildTurnsPerRun": per_run({"type": "integer"}),
            "threadIds": per_run({"type": "string"}),
            "harnessUsagePerRun": per_run({"type": "array", "items": usage}),
            "workflowChecksPerRun": per_run({"type": "object", "additionalProperties":
                                             {"enum": ["pass", "fail", "n_a", "error"]}}),
            "buildExpectationResultsPerRun": per_run({"type": "array", "items": expectation_row}),
            # the model gateway's count (issue 37)
            "modelCostUsdPerRun": per_run({"type": "number", "minimum": 0}),
            "modelCostByStagePerRun": per_run({"type": "object", "additionalProperties": {"type": "number"}}),
            "buildTokensPerRun": per_run({"type": "object", "required": [
                "uncachedInput", "cacheRead", "cacheWrite", "output", "totalTokens", "steps"],
                "properties": {k: {"type": "integer", "minimum": 0} for k in (
                    "uncachedInput", "cacheRead", "cacheWrite", "output", "totalTokens", "steps")}}),
            "buildExpectations": {"type": "array", "items": {
                "type": "object", "required": ["expectation", "passCount", "evaluatedCount", "passAtK", "passHatK"],
                "properties": {"expectation": {"type": "string"}, "passCount": {"type": "integer"},
                               "evaluatedCount": {"type": "integer"}, "passAtK": rate, "passHatK": rate,
                               "passHatKUnbiased": rate}}},
            "scenarios": {"type": "array", "items": {
                "type": "object",
                "required": ["name", "passCount", "evaluatedCount", "totalRuns", "passAtK", "passHatK", "runs"],
                "properties": {"name": {"type": "string"}, "passCount": {"type": "integer"},
                               "evaluatedCount": {"type": "integer"}, "totalRuns": {"type": "integer"},
                               "passAtK": rate, "passHatK": rate, "passHatKUnbiased": rate,
                               "runs": {"type": "array", "items": scenario_run}}}},
        },
    }
    check_counts = {
        "type": "object", "required": ["kind", "dimension", "passes", "fails", "nA", "errors", "passRate"],
        "properties": {"kind": {"enum": ["deterministic", "llm"]}, "dimension": {"type": "string"},
                       "passes": {"type": "integer"}, "fails": {"type": "integer"}, "nA": {"type": "integer"},
                       "errors": {"type": "integer"}, "passRate": {"type": ["number", "null"]}},
    }
    verdicts = ["hard_regression", "soft_regression", "watch", "improvement", "stable", "unreliable_baseline",
                "insufficient_data"]
    unit_ref = {
        "type": "object", "required": ["kind", "testCaseFile", "name"],
        "properties": {"kind": {"enum": ["scenario", "expectation"]}, "testCaseFile": {"type": "string"},
                       "name": {"type": "string"}, "key": {"type": "string"}},
    }
    evaluation_unit = {
        "type": "object",
        "required": ["kind", "testCaseFile", "name", "prPasses", "prTotal", "baselinePasses", "baselineTotal",
                     "verdict", "prPassRate", "baselinePassRate", "delta", "pValueLeft", "pValueRight"],
        "properties": {"kind": {"enum": ["scenario", "expectation"]}, "testCaseFile": {"type": "string"},
                       "name": {"type": "string"}, "prPasses": {"type": "integer"}, "prTotal": {"type": "integer"},
                       "baselinePasses": {"type": "integer"}, "baselineTotal": {"type": "integer"},
                       "verdict": {"enum": verdicts}, "prPassRate": rate, "baselinePassRate": rate,
                       "delta": {"type": "number"}, "pValueLeft": rate, "pValueRight": rate,
                       "key": {"type": "string"}, "qValueLeft": nullable_num, "qValueRight": nullable_num,
                       "bhVerdict": {"enum": [*verdicts, None]}, "survivesBh": {"type": "boolean"}},
    }
    ci = {"type": "object", "required": ["lower", "upper"], "properties": {"lower": rate, "upper": rate}}
    gate_unit = {
        "type": "object", "required": ["slug", "kind", "passCount", "total", "passRate", "green"],
        "properties": {"slug": {"type": "string"}, "kind": {"enum": ["scenario", "buildExpectation"]},
                       "passCount": {"type": "integer"}, "total": {"type": "integer"}, "passRate": rate,
                       "green": {"type": "boolean"},
                       "failureCategories": {"type": "object", "additionalProperties": {"type": "integer"}}},
    }
    ours = EvalResults.model_json_schema(ref_template="#/$defs/orchestrator/$defs/{model}")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "eval-results.json",
        "description": "Results of one orchestrator run in the contract of n8n's instance-ai evaluation harness; "
                       "orchestrator-only data lives under `orchestrator`.",
        "type": "object",
        "required": ["schemaVersion", "timestamp", "duration", "totalRuns", "summary", "testCases", "orchestrator"],
        "properties": {
            "schemaVersion": {"const": SCHEMA_VERSION},
            "timestamp": {"type": "string"}, "duration": {"type": "integer", "minimum": 0},
            "totalRuns": {"type": "integer", "minimum": 0}, "experimentName": nullable_str,
            "comparisonStatus": {"enum": list(get_args(ComparisonStatus))},
            "comparisonError": {"type": "string"},
            "summary": {
                "type": "object",
                "required": ["testCases", "built", "scenariosTotal", "passAtK", "passHatK", "passRatePerIter",
                             "notVerified"],
                "properties": {
                    "testCases": {"type": "integer"}, "built": {"type": "integer"},
                    "scenariosTotal": {"type": "integer"}, "passAtK": rate, "passHatK": rate,
                    "passHatKUnbiased": rate,
                    "passRatePerIter": {"type": "string"}, "notVerified": {"type": "integer"},
                    "attribution": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "mcpBuild": {"type": "object", "required": ["builds", "totalCostUsd", "avgTurns"],
                                 "properties": {"builds": {"type": "integer"}, "totalCostUsd": {"type": "number"},
                                                "avgTurns": {"type": "number"}}},
                    "workflowChecks": {"type": "object", "required": ["scoredBuilds", "perCheck"],
                                       "properties": {"scoredBuilds": {"type": "integer"},
                                                      "perCheck": {"type": "object",
                                                                   "additionalProperties": check_counts}}},
                },
            },
            "comparison": {
                "type": "object", "required": ["baseline", "result"],
                "properties": {"baseline": {"type": "string"}, "result": {
                    "type": "object",
                    "required": ["pr", "baseline", "aggregate", "evaluationUnits", "prOnly", "baselineOnly",
                                 "failureCategories"],
                    "properties": {
                        "aggregate": {"type": "object",
                                      "required": ["intersectionSize", "prAggregatePassRate",
                                                   "baselineAggregatePassRate", "prAggregateCI",
                                                   "baselineAggregateCI", "delta"],
                                      "properties": {"intersectionSize": {"type": "integer"},
                                                     "prAggregatePassRate": rate, "baselineAggregatePassRate": rate,
                                                     "prAggregateCI": ci, "baselineAggregateCI": ci,
                                                     "delta": {"type": "number"}}},
                        "evaluationUnits": {"type": "array", "items": evaluation_unit},
                        "prOnly": {"type": "array", "items": unit_ref},
                        "baselineOnly": {"type": "array", "items": unit_ref},
                        "failureCategories": {"type": "array", "items": {
                            "type": "object",
                            "required": ["category", "prCount", "prRate", "baselineCount", "baselineRate", "delta",
                                         "notable"]}}}}},
            },
            "gate": {
                "type": "object",
                "required": ["criterion", "totalRuns", "green", "units", "failing", "excluded", "aggregate"],
                "properties": {"criterion": {"type": "object"}, "totalRuns": {"type": "integer"},
                               "green": {"type": "boolean"}, "units": {"type": "array", "items": gate_unit},
                               "failing": {"type": "array", "items": gate_unit},
                               "excluded": {"type": "array", "items": gate_unit},
                               "aggregate": {"type": "object", "required": ["passed", "total", "rate"]}},
            },
            "testCases": {"type": "array", "items": test_case},
            "orchestrator": {"$ref": "#/$defs/orchestrator"},
        },
        "$defs": {"orchestrator": ours},
    }


def published_schema() -> dict[str, Any]:
    """The schema file shipped with the package."""
    text = resources.files("orchestrator.results").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


if __name__ == "__main__":  # regenerate the published schema: python -m orchestrator.results.schema
    target = resources.files("orchestrator.results").joinpath(SCHEMA_RESOURCE)
    with resources.as_file(target) as path:
        path.write_text(json.dumps(json_schema(), indent=2) + "\n", encoding="utf-8")
        print(path)
