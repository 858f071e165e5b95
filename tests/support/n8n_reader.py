"""n8n's reader of ``eval-results.json`` (``comparison/bucket-from-results-json.ts``,
``parseEvalResults`` + ``bucketFromResultsJson``), restated field by field so our tests can check
that n8n accepts what we write and counts it as we do. Facts from n8n's source, our own code."""

from __future__ import annotations

from typing import Any


class N8nParseError(AssertionError):
    pass


def _num(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise N8nParseError(f"{where}: expected number, got {value!r}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise N8nParseError(f"{where}: expected string, got {value!r}")
    return value


def _optional(row: dict[str, Any], key: str, kind: type, where: str) -> None:
    """zod ``.optional()``: absent is fine, ``null`` is not."""
    if key in row and not isinstance(row[key], kind):
        raise N8nParseError(f"{where}.{key}: expected {kind.__name__} or absent, got {row[key]!r}")


def bucket_from_results_json(doc: dict[str, Any]) -> tuple[dict[str, tuple[int, int]], dict[str, int], int]:
    """``(unit key → (passed, total), failure-category totals, trial total)`` as n8n reads the file;
    raises :class:`N8nParseError` where n8n's schema would reject it."""
    _optional(doc, "timestamp", str, "root")
    if "totalRuns" in doc:
        _num(doc["totalRuns"], "totalRuns")
    if not isinstance(doc.get("testCases"), list):
        raise N8nParseError("testCases: expected array")
    units: dict[str, tuple[int, int]] = {}
    categories: dict[str, int] = {}
    trials = 0
    for i, tc in enumerate(doc["testCases"]):
        where = f"testCases.{i}"
        _optional(tc, "name", str, where)
        _optional(tc, "testCaseFile", str, where)
        slug = tc.get("testCaseFile")
        if not slug:
            raise N8nParseError(f"{where}: no testCaseFile")
        for j, s in enumerate(tc.get("scenarios", [])):
            sw = f"{where}.scenarios.{j}"
            name = _str(s.get("name"), f"{sw}.name")
            passed, evaluated = _num(s.get("passCount"), f"{sw}.passCount"), _num(s.get("evaluatedCount"), f"{sw}.evaluatedCount")
            for k, run in enumerate(s.get("runs", [])):
                rw = f"{sw}.runs.{k}"
                if not isinstance(run.get("passed"), bool):
                    raise N8nParseError(f"{rw}.passed: expected boolean")
                _optional(run, "incomplete", bool, rw)
                _optional(run, "failureCategory", str, rw)
                if run.get("incomplete"):
                    continue
                trials += 1
                if not run["passed"] and run.get("failureCategory"):
                    categories[run["failureCategory"]] = categories.get(run["failureCategory"], 0) + 1
            units[f"{slug}/{name}"] = (int(passed), int(evaluated))
        for j, e in enumerate(tc.get("buildExpectations", [])):
            ew = f"{where}.buildExpectations.{j}"
            text = _str(e.get("expectation"), f"{ew}.expectation")
            passed, evaluated = _num(e.get("passCount"), f"{ew}.passCount"), _num(e.get("evaluatedCount"), f"{ew}.evaluatedCount")
            if evaluated == 0:
                continue
            units[f"{slug}#expectation:{text}"] = (int(passed), int(evaluated))
    return units, categories, trials
