"""Turn raw input (JSON text or a decoded object) into an :class:`EvalCase` or a list of issues.

Never raises for bad input: every problem becomes a :class:`CaseIssue`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import ValidationError

from orchestrator.cases.issues import (
    JSON_FIELD,
    ROOT_FIELD,
    CaseIssue,
    issues_from_validation_error,
)
from orchestrator.cases.model import EvalCase
from orchestrator.errors import UserError

ParseResult = tuple[EvalCase | None, list[CaseIssue]]


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array"}
    return names.get(type(value), type(value).__name__)


def _case_level_issues(data: dict[str, Any], source: str) -> list[CaseIssue]:
    """The case-level rules that need only the raw body, for a case whose fields already failed
    (pydantic runs the model's own cross-field rules only once every field is valid), so one pass
    reports every problem: a legacy ``prompt`` file also hears that it has no conversation."""
    seed = data.get("seed")
    replay = isinstance(seed, dict) and seed.get("mode") == "replay"
    issues: list[CaseIssue] = []
    conversation = data.get("conversation")
    if not replay and (not isinstance(conversation, list) or not conversation):
        issues.append(CaseIssue(source, "conversation", "a case needs a conversation, or a seed with "
                                                        "mode 'replay' (which supplies the live turn)"))
    if not any(isinstance(data.get(key), list) and data[key]
               for key in ("executionScenarios", "processExpectations", "outcomeExpectations")):
        issues.append(CaseIssue(source, ROOT_FIELD, "a case needs at least one executionScenario, "
                                                    "processExpectation or outcomeExpectation to grade it"))
    return issues


def _non_finite(value: object, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Where ``value`` holds NaN or ±Infinity (JSON has neither; n8n's ``JSON.parse`` refuses them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _non_finite(v, (*path, str(k)))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _non_finite(v, (*path, i))]
    return []


def parse_case(data: object, source: str) -> ParseResult:
    """Validate one decoded case body; every problem comes back in one pass."""
    if not isinstance(data, dict):
        message = f"a case must be a JSON object, got {_json_type(data)}"
        return None, [CaseIssue(source, ROOT_FIELD, message)]
    try:
        bad_numbers = _non_finite(data)
    except RecursionError:
        return None, [CaseIssue(source, ROOT_FIELD, "the case is nested too deeply to validate")]
    if bad_numbers:
        return None, [CaseIssue(source, ".".join(str(s) for s in where), "NaN and Infinity are not JSON numbers")
                      for where in bad_numbers]
    try:
        return EvalCase.model_validate(data), []
    except ValidationError as exc:
        issues = issues_from_validation_error(source, exc)
        known = {(i.field, i.message) for i in issues}
        issues += [i for i in _case_level_issues(data, source) if (i.field, i.message) not in known]
        return None, issues
    except RecursionError:
        return None, [CaseIssue(source, ROOT_FIELD, "the case is nested too deeply to validate")]


class _DuplicateKeys(UserError):
    def __init__(self, key: str) -> None:
        self.key = key


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKeys(key)
        result[key] = value
    return result


class _NotJson(UserError):
    def __init__(self, name: str) -> None:
        self.name = name


def _reject_constant(name: str) -> float:
    raise _NotJson(name)


def decode_json(text: str, source: str) -> tuple[object, list[CaseIssue]]:
    """Decode JSON text; a syntax error is reported with its line and column."""
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicate_keys, parse_constant=_reject_constant), []
    except json.JSONDecodeError as exc:
        message = f"{exc.msg} (line {exc.lineno}, column {exc.colno})"
        return None, [CaseIssue(source, JSON_FIELD, message)]
    except _DuplicateKeys as exc:
        message = f"duplicate key {exc.key!r} in one object (only one value would survive)"
        return None, [CaseIssue(source, JSON_FIELD, message)]
    except _NotJson as exc:  # Python reads NaN / Infinity; JSON (and n8n's JSON.parse) has neither
        return None, [CaseIssue(source, JSON_FIELD, f"{exc.name} is not a JSON value")]
    except RecursionError:
        return None, [CaseIssue(source, JSON_FIELD, "the document is nested too deeply")]


def parse_case_text(text: str, source: str) -> ParseResult:
    """Parse a case file's text: ``(case, [])``, or ``(None, issues)`` naming ``source`` and each field
    at fault (bad JSON included)."""
    data, issues = decode_json(text, source)
    if issues:
        return None, issues
    return parse_case(data, source)
