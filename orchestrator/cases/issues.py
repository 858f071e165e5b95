"""What a case-load failure looks like: one :class:`CaseIssue` per problem, each naming the file
(or suite entry), the JSON field path and what is wrong.

Cross-field rules are raised from pydantic validators as a single ``case_rule`` error that carries
its violations (each with a location relative to the model that raised it), so one validation
pass yields every problem with an exact path such as ``seed.folders.1.parentFolderId``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from orchestrator.errors import OrchestratorError

Loc = tuple[str | int, ...]

#: Where a problem with the case as a whole (not one field) is reported.
ROOT_FIELD = "(case)"
#: Field name used for problems that stop the file being parsed at all.
JSON_FIELD = "<json>"
FILE_FIELD = "<file>"

_RULE_ERROR = "case_rule"
_SEED_TAGS = frozenset({"inline", "replay"})


@dataclass(frozen=True)
class CaseIssue:
    source: str  # a file path, or "langtracer:<suite>/<name>"
    field: str  # dotted JSON path, e.g. "conversation.0.text"
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.field}: {self.message}"


class CaseLoadError(OrchestratorError):
    """One or more cases failed to load; ``issues`` lists every problem found."""

    def __init__(self, issues: Sequence[CaseIssue]) -> None:
        self.issues: list[CaseIssue] = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


@dataclass(frozen=True)
class Violation:
    """A broken rule, located relative to the model whose validator found it."""

    loc: Loc
    message: str


def raise_violations(found: Iterable[Violation]) -> None:
    """Raise the collected violations as one pydantic error (no-op when there are none)."""
    found = list(found)
    if not found:
        return
    summary = "; ".join(f"{format_path(v.loc)}: {v.message}" for v in found)
    raise PydanticCustomError(_RULE_ERROR, "{summary}", {"summary": summary, "violations": found})


def _segment(part: str | int) -> str:
    text = str(part)
    # A key that is empty or holds the separator is quoted so the path stays unambiguous.
    return json.dumps(text) if isinstance(part, str) and (not text or "." in text) else text


def format_path(loc: Loc) -> str:
    """A field path as users read it (``conversation[0].text``); ``(case)`` for the case itself."""
    return ".".join(_segment(part) for part in loc) if loc else ROOT_FIELD


def _normalise_loc(loc: Sequence[str | int]) -> Loc:
    """Drop the discriminator tag pydantic inserts after ``seed`` (``seed.inline.folders`` →
    ``seed.folders``) so paths read like the JSON the author wrote."""
    parts = list(loc)
    if len(parts) >= 2 and parts[0] == "seed" and parts[1] in _SEED_TAGS:
        del parts[1]
    return tuple(parts)


#: pydantic type-error kinds → the shape expected, in words.
_EXPECTED = {
    "list_type": "a list (JSON array)",
    "tuple_type": "a list (JSON array)",
    "set_type": "a list (JSON array)",
    "string_type": "text (a JSON string)",
    "dict_type": "an object ({\"key\": value, …})",
    "model_type": "an object ({\"key\": value, …})",
    "model_attributes_type": "an object ({\"key\": value, …})",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "literal_error": None,  # pydantic's own message lists the allowed values
}


def _given(value: object) -> str:
    kinds = {str: "a string", bool: "true/false", int: "a number", float: "a number", dict: "an object",
             list: "an array", type(None): "null"}
    return kinds.get(type(value), "a value of another kind")


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    expected = _EXPECTED.get(kind)
    if expected:
        return f"expected {expected}, got {_given(error.get('input'))}"
    if kind == "extra_forbidden":
        return "unknown key (not part of the case schema)"
    if kind == "missing":
        return "required field is missing"
    if kind == "union_tag_not_found":
        return "seed needs a mode: 'inline' or 'replay'"
    if kind == "union_tag_invalid":
        tag = (error.get("ctx") or {}).get("tag")
        return f"unknown seed mode {tag!r}: use 'inline' or 'replay'"
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    return message


def issues_from_validation_error(source: str, exc: ValidationError) -> list[CaseIssue]:
    """One :class:`CaseIssue` per error of a pydantic validation of the case at ``source``: each
    cross-field rule violation on its own field, a bad seed ``mode`` on ``mode``."""
    issues: list[CaseIssue] = []
    for error in exc.errors(include_url=False):
        loc = _normalise_loc(error["loc"])
        if error["type"] == _RULE_ERROR:
            for violation in error["ctx"]["violations"]:
                field = format_path(loc + violation.loc)
                issues.append(CaseIssue(source, field, violation.message))
            continue
        if error["type"] in ("union_tag_not_found", "union_tag_invalid"):
            loc = loc + ("mode",)
        issues.append(CaseIssue(source, format_path(loc), _message(error)))
    return issues
