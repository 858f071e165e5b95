"""Random JSON-ish input never crashes the loader: it yields a case or a list of issues."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.cases import CaseIssue, EvalCase, parse_case, parse_case_text

FUZZ = settings(max_examples=150, deadline=timedelta(milliseconds=500), suppress_health_check=[HealthCheck.too_slow])

CASE_KEYS = [
    "description", "conversation", "complexity", "tags", "triggerType", "datasets", "executionScenarios",
    "processExpectations", "outcomeExpectations", "credentials", "messageBudget", "requiresMemoryCompaction",
    "allowUserExecution", "seed", "buildExpectations", "seedFile", "priorConversation",
]
SEED_KEYS = ["mode", "messages", "workflows", "dataTables", "agents", "folders", "projects", "priorRuns",
             "threadId", "project", "endpoint", "liveTurnRunId"]
WORDS = st.sampled_from([
    "user", "assistant", "inline", "replay", "custom", "llm", "simple", "manual", "slackApi", "setup-panel-execute",
    "", " ", "[note here]", "2025-01-01T00:00:00Z", "9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00",
    "abcdefgh", "wf-1", "a/b", *CASE_KEYS, *SEED_KEYS, "role", "text", "attach", "workflow", "agent", "id", "name",
    "parentFolderId", "config", "skills", "content", "type", "createdAt",
])
SCALARS = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False) | st.text(max_size=12) | WORDS
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(WORDS | st.text(max_size=6), inner, max_size=5),
    max_leaves=25,
)

VALID: dict[str, Any] = {
    "conversation": [{"role": "user", "text": "hi", "attach": {"workflow": "wfAbcdefgh"}}, {"role": "user", "text": ["[note me]"]}],
    "complexity": "simple",
    "tags": ["t"],
    "credentials": [{"type": "slackApi", "description": " x "}],
    "outcomeExpectations": ["o"],
    "seed": {
        "mode": "inline",
        "messages": [{"role": "user", "text": "earlier"}, {"id": "m1", "type": "custom", "createdAt": "2025-01-01T00:00:00Z"}],
        "workflows": [{"id": "wfAbcdefgh", "name": "W", "parentFolderId": "folderAbcd"}],
        "folders": [{"id": "folderAbcd", "name": "F"}],
        "agents": [{"id": "agentAbcdef", "config": {"name": "A", "skills": [{"id": "s"}]}, "skills": {"s": {}}}],
        "priorRuns": [{"workflow": "wfAbcdefgh"}],
    },
}


def paths(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def assert_outcome(case: EvalCase | None, issues: list[CaseIssue]) -> None:
    if case is None:
        assert issues and all(isinstance(i, CaseIssue) and i.field and i.message for i in issues)
        assert all(str(i).count(": ") >= 2 for i in issues)
    else:
        assert issues == []
        assert EvalCase.model_validate(case.to_json()) == case


@FUZZ
@given(JSON)
def test_any_json_value(data: object) -> None:
    assert_outcome(*parse_case(data, "fuzz"))


@FUZZ
@given(st.dictionaries(st.sampled_from(CASE_KEYS), JSON, max_size=8), st.dictionaries(st.sampled_from(SEED_KEYS), JSON, max_size=6))
def test_case_shaped_objects(top: dict[str, Any], seed: dict[str, Any]) -> None:
    if seed:
        top = {**top, "seed": seed}
    assert_outcome(*parse_case(top, "fuzz"))


@FUZZ
@given(st.data())
def test_mutations_of_a_valid_case(data: st.DataObject) -> None:
    body = copy.deepcopy(VALID)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths(body)))
        replacement = data.draw(JSON)
        if not path:
            body = replacement  # type: ignore[assignment]
            break
        parent: Any = body
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = replacement
    assert_outcome(*parse_case(body, "fuzz"))


@FUZZ
@given(st.text(max_size=60) | JSON.map(json.dumps).map(lambda s: s[: len(s) // 2 + 1]))
def test_any_text(text: str) -> None:
    assert_outcome(*parse_case_text(text, "fuzz"))


def test_valid_base_is_valid() -> None:
    case, issues = parse_case(copy.deepcopy(VALID), "fuzz")
    assert issues == [] and case is not None


def test_nan_and_infinity_are_not_json() -> None:
    """JSON has no NaN or Infinity (n8n's loader, ``JSON.parse``, refuses them); Python's reader
    accepts them, so the loader refuses them itself — in the text, and in a decoded body (where a
    round trip through JSON could not keep them: the fuzzer found ``inf`` in a seeded skill)."""
    case, issues = parse_case_text('{"complexity": NaN}', "f.json")
    assert case is None and [(i.field, i.message) for i in issues] == [("<json>", "NaN is not a JSON value")]
    body = copy.deepcopy(VALID)
    body["tags"] = ["t", float("inf")]
    case, issues = parse_case(body, "f.json")
    assert case is None and [(i.field, i.message) for i in issues] == [("tags.1", "NaN and Infinity are not JSON numbers")]
