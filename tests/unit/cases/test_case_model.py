"""The case model: normalisation, defaults, aliases, seed expansion and stamping, helpers."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cases import (
    CaseIssue,
    CaseLoadError,
    EvalCase,
    InlineSeed,
    ReplaySeed,
    load_disk,
    parse_case,
    seed_slot,
)

CORPUS = Path(__file__).resolve().parents[3] / "cases"

BASE: dict[str, Any] = {
    "conversation": [{"role": "user", "text": "Build a workflow that returns 42."}],
    "complexity": "simple",
    "tags": ["t"],
    "outcomeExpectations": ["It returns 42."],
}


def load(**over: Any) -> EvalCase:
    body = copy.deepcopy(BASE)
    body.update(over)
    case, issues = parse_case(body, "test")
    assert issues == [], [str(i) for i in issues]
    assert case is not None
    return case


def messages_of(case: EvalCase) -> list[Any]:
    assert isinstance(case.seed, InlineSeed)
    return case.seed.messages


def envelope(msg_id: str, stamp: str, text: str = "x", role: str = "user") -> dict[str, Any]:
    return {"id": msg_id, "role": role, "type": "llm", "createdAt": stamp, "content": [{"type": "text", "text": text}]}


def test_text_list_is_joined_with_newlines() -> None:
    case = load(conversation=[{"role": "user", "text": ["first line", "second line"]}])
    assert case.conversation[0].text == "first line\nsecond line"
    assert case.opening_prompt() == "first line\nsecond line"


def test_defaults() -> None:
    case = load()
    assert case.datasets == ["full"]
    assert case.execution_scenarios == []
    assert case.credentials == []
    assert case.requires_memory_compaction is False
    assert case.allow_user_execution is False
    assert case.seed is None
    assert case.is_build_only
    assert case.is_single_prompt


def test_snake_case_attributes_accept_both_spellings() -> None:
    camel = load(triggerType="manual", messageBudget=3, requiresMemoryCompaction=True, allowUserExecution=True)
    snake_body = {**BASE, "trigger_type": "manual", "message_budget": 3, "requires_memory_compaction": True, "allow_user_execution": True}
    snake = EvalCase.model_validate(snake_body)
    assert camel == snake
    assert (camel.trigger_type, camel.message_budget, camel.requires_memory_compaction) == ("manual", 3, True)


def test_flags_and_budget_are_not_coerced_from_strings() -> None:
    for key, value in (("messageBudget", "3"), ("requiresMemoryCompaction", "yes"), ("allowUserExecution", 1)):
        _, issues = parse_case({**BASE, key: value}, "test")
        assert [i.field for i in issues] == [key]


def test_scenarios_use_camel_case_json_names() -> None:
    case = load(executionScenarios=[{"name": "happy", "description": "d", "dataSetup": "ds", "successCriteria": "sc"}])
    scenario = case.execution_scenarios[0]
    assert (scenario.name, scenario.description, scenario.data_setup, scenario.success_criteria) == ("happy", "d", "ds", "sc")
    assert not case.is_build_only


def test_json_round_trip_preserves_the_case() -> None:
    for path in sorted(CORPUS.glob("*.json")):
        original = EvalCase.model_validate(json.loads(path.read_text()))
        dumped = original.to_json()
        assert not {"buildExpectations", "seedFile", "seedThread"} & set(dumped)
        assert EvalCase.model_validate(dumped) == original, path.name


def test_multi_turn_and_director_notes() -> None:
    case = load(conversation=[
        {"role": "user", "text": "Post a digest."},
        {"role": "assistant", "text": "Sure [reference only]"},
        {"role": "user", "text": "[Withhold the channel until asked.] Also [keep it short please]."},
    ])
    assert not case.is_single_prompt
    assert case.conversation[1].director_notes == []  # only user turns carry notes
    assert case.conversation[2].director_notes == ["Withhold the channel until asked.", "keep it short please"]


def test_opening_prompt_without_conversation_raises() -> None:
    case = load(conversation=[], seed={"mode": "replay", "threadId": "abc"})
    assert isinstance(case.seed, ReplaySeed)
    assert case.seed.project == "instance-ai"
    with pytest.raises(ValueError, match="replay"):
        case.opening_prompt()


def test_credential_description_trimmed_and_blank_becomes_null() -> None:
    case = load(credentials=[
        {"type": "slackApi", "name": "Team Slack", "description": "  Main workspace  "},
        {"type": "slackApi", "description": "   "},
        {"type": "notionApi", "valid": False},
    ])
    first, second, third = case.credentials
    assert (first.name, first.description, first.valid) == ("Team Slack", "Main workspace", True)
    assert second.description is None
    assert third.valid is False


def test_shorthand_messages_expand_to_envelopes_on_ascending_past_slots() -> None:
    case = load(seed={"mode": "inline", "messages": [
        {"role": "user", "text": "We agreed: #growth at 9am."},
        {"role": "assistant", "text": ["Noted:", "#growth, 9am."]},
    ]})
    first, second = messages_of(case)
    assert (first.role, first.type, first.content) == ("user", "llm", [{"type": "text", "text": "We agreed: #growth at 9am."}])
    assert second.content == [{"type": "text", "text": "Noted:\n#growth, 9am."}]
    assert first.id != second.id
    assert first.created_at < second.created_at < datetime.now(UTC)
    assert [first.created_at, second.created_at] == [seed_slot(0), seed_slot(1)]


def test_slots_are_fixed_not_derived_from_the_clock() -> None:
    body = {"mode": "inline", "messages": [{"role": "user", "text": "a"}, {"role": "assistant", "text": "b"}]}
    stamps = [[m.created_at for m in messages_of(load(seed=copy.deepcopy(body)))] for _ in range(2)]
    assert stamps[0] == stamps[1] == [datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, 0, 1, tzinfo=UTC)]


def test_authored_stamps_are_kept_when_they_ascend_in_the_past() -> None:
    case = load(seed={"mode": "inline", "messages": [
        {"role": "user", "text": "prelude before the envelopes"},  # slot 0 = 2024-01-01
        envelope("m-1", "2025-03-02T10:00:00Z"),
        envelope("m-2", "2025-03-02T14:05:00+02:00", role="assistant"),
    ]})
    stamps = [m.created_at for m in messages_of(case)]
    assert stamps == [seed_slot(0), datetime(2025, 3, 2, 10, tzinfo=UTC), datetime(2025, 3, 2, 12, 5, tzinfo=UTC)]


def test_non_ascending_sequence_is_restamped_whole() -> None:
    case = load(seed={"mode": "inline", "messages": [
        envelope("m-1", "2025-03-02T10:00:00Z"),
        envelope("m-2", "2025-03-02T11:00:00Z"),
        {"role": "user", "text": "appended shorthand sorts before the envelopes"},
    ]})
    assert [m.created_at for m in messages_of(case)] == [seed_slot(0), seed_slot(1), seed_slot(2)]
    assert [m.id for m in messages_of(case)][:2] == ["m-1", "m-2"]  # order is the array's


def test_future_stamp_restamps_the_whole_sequence() -> None:
    future = (datetime.now(UTC) + timedelta(days=365)).isoformat()
    case = load(seed={"mode": "inline", "messages": [envelope("m-1", "2020-01-01T00:00:00Z"), envelope("m-2", future)]})
    assert [m.created_at for m in messages_of(case)] == [seed_slot(0), seed_slot(1)]


def test_envelope_keeps_unknown_keys_and_block_shapes() -> None:
    message = envelope("m-1", "2025-01-01T00:00:00Z")
    message["content"].append({"type": "tool-call", "toolName": "build-workflow", "output": {"workflowId": "wfAbcdefgh"}})
    message["seeded"] = True
    case = load(seed={"mode": "inline", "messages": [message]})
    (stored,) = messages_of(case)
    dumped = stored.model_dump(mode="json", by_alias=True)
    assert dumped["seeded"] is True
    assert dumped["content"][1]["output"] == {"workflowId": "wfAbcdefgh"}
    assert dumped["createdAt"] == "2025-01-01T00:00:00Z"


def test_inline_seed_artifacts_keep_their_n8n_shape() -> None:
    workflow = {"id": "wfAbcdefgh", "name": "W", "nodes": [{"name": "Manual Trigger", "type": "n8n-nodes-base.manualTrigger"}],
                "connections": {}, "settings": {"executionOrder": "v1"}}
    case = load(seed={"mode": "inline", "workflows": [workflow], "dataTables": [{"id": "dtAbcdefgh", "name": "signups", "columns": [{"name": "email", "type": "string"}]}],
                      "projects": [{"id": "prAbcdefgh", "name": "Ops"}]})
    seed = case.inline_seed
    assert seed is not None
    assert seed.workflows[0].model_dump(by_alias=True)["settings"] == {"executionOrder": "v1"}
    assert seed.data_tables[0].columns == [{"name": "email", "type": "string"}]
    assert seed.projects[0].name == "Ops"


def test_case_issue_and_load_error_format() -> None:
    one = CaseIssue("cases/a.json", "seed.folders.1.parentFolderId", "names no folder")
    two = CaseIssue("cases/b.json", "<json>", "Expecting value (line 1, column 1)")
    assert str(one) == "cases/a.json: seed.folders.1.parentFolderId: names no folder"
    error = CaseLoadError([one, two])
    assert error.issues == [one, two]
    assert str(error) == f"{one}\n{two}"


def test_corpus_covers_every_archetype() -> None:
    cases, issues = load_disk([CORPUS])
    assert issues == []
    assert len(cases) >= 15
    by_slug = {c.slug: c.case for c in cases}
    bodies = list(by_slug.values())
    smoke = [c for c in bodies if "smoke" in c.tags and "smoke" in c.datasets and c.execution_scenarios and c.trigger_type == "manual"]
    assert len(smoke) >= 4
    assert any(c.is_single_prompt and c.execution_scenarios and not c.credentials and c.seed is None and "smoke" not in c.tags for c in bodies)
    assert any(len(c.conversation) > 1 and any(t.director_notes for t in c.conversation) for c in bodies)
    counts = {len(c.credentials) for c in bodies if "credential-setup" in c.tags or "credentials" in c.tags}
    assert {0, 1} <= counts and max(counts) >= 2
    seeded = [c.inline_seed for c in bodies if c.inline_seed is not None]
    assert any(s.prior_runs for s in seeded)
    assert any(s.folders for s in seeded)
    assert any(s.agents for s in seeded)
    attached = [c.opening_attachment for c in bodies if c.opening_attachment is not None]
    assert any(a.kind == "workflow" and a.source is None for a in attached)
    assert any(a.kind == "agent" for a in attached)
    assert any(a.source == "setup-panel-execute" for a in attached)
    assert any(c.requires_memory_compaction for c in bodies)
    assert any(c.is_build_only and c.seed is None and c.outcome_expectations for c in bodies)
    assert any(set(c.datasets) == {"pr", "full"} for c in bodies)
    assert any(c.allow_user_execution for c in bodies)
