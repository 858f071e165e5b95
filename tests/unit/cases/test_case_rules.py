"""Every load-time rule: one invalid fixture per rule (exact field path + message fragment), and
a valid twin per rule showing the rule does not over-reject."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cases import EvalCase, load_disk, parse_case
from orchestrator.cases.credential_types import from_install, known_types, unknown_type_message

INVALID_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "invalid"

#: fixture name -> every (field path, message fragment) it must produce, and nothing else.
EXPECTED: dict[str, list[tuple[str, str]]] = {
    "missing-conversation": [("conversation", "needs a conversation, or a seed with mode 'replay'")],
    "no-scenario-or-expectation": [("(case)", "at least one executionScenario")],
    "build-expectations-key": [("buildExpectations", "`buildExpectations` is no longer supported")],
    "pre-union-conversation-seed": [("conversationSeed", "`conversationSeed` is a pre-union seeding key")],
    "pre-union-prior-conversation": [("priorConversation", "`priorConversation` is a pre-union seeding key")],
    "pre-union-seed-thread": [("seedThread", "`seedThread` is a pre-union seeding key")],
    "pre-union-seed-file": [("seedFile", "`seedFile` is a pre-union seeding key")],
    "artifact-id-too-short": [("seed.workflows.0.id", "shorter than 8 characters")],
    "artifact-id-duplicate": [("seed.workflows.1.id", "duplicate id 'fixtureWf001'")],
    "attach-not-opening-turn": [("conversation.2.attach", "only the opening turn may carry attach")],
    "attach-unknown-workflow": [("conversation.0.attach.workflow", "names no workflow declared")],
    "attach-unknown-agent": [("conversation.0.attach.agent", "names no agent declared")],
    "attach-source-on-agent": [("conversation.0.attach.source", "only workflow attachments may set source")],
    "attach-workflow-and-agent": [("conversation.0.attach", "exactly one of workflow or agent")],
    "empty-text-without-attach": [("conversation.0.text", "an opening turn with empty text must carry attach")],
    "folder-parent-missing": [("seed.folders.1.parentFolderId", "'folderGhost1' names no folder")],
    "workflow-folder-missing": [("seed.workflows.0.parentFolderId", "'folderGhost1' names no folder")],
    "folder-cycle": [
        ("seed.folders.0.parentFolderId", "is its own ancestor"),
        ("seed.folders.1.parentFolderId", "is its own ancestor"),
    ],
    "folder-name-slash": [("seed.folders.0.name", "cannot contain '/'")],
    "folder-name-untrimmed": [("seed.folders.0.name", "must be trimmed")],
    "too-many-folders": [("seed.folders", "at most 20")],
    "prior-run-unknown-workflow": [("seed.priorRuns.0.workflow", "'ghostWorkflow1' is neither the id nor the name of a workflow in seed.workflows")],
    "agent-skill-missing": [("seed.agents.0.config.skills.1.id", "'skill_b' has no entry")],
    "agent-name-collision": [("seed.agents.1.config.name", "both address as 'support-bot'")],
    "credential-description-too-long": [("credentials.0.description", "longer than 512 characters")],
    "message-envelope-missing-role": [("seed.messages.0.role", "role is required unless")],
    "message-envelope-missing-created-at": [("seed.messages.0.createdAt", "required field is missing")],
    "message-block-missing-type": [("seed.messages.0.content.0.type", "needs a type")],
    # a near-miss is still never expanded, but it is named as the shorthand it almost is
    "message-shorthand-near-miss": [("seed.messages.0.text", "text is a number: the {role, text} shorthand")],
    "message-shorthand-bad-line": [("seed.messages.1.text.1", "line 1 is a number, not a string: the {role, text} shorthand")],
    "turn-type-words": [("tags", "expected a list (JSON array), got a string")],
    "attach-replay-seed": [("conversation.0.attach", "a replay seed's opening turn comes from its trace and the seed "
                                                     "declares no workflows")],
    "turn-text-not-string": [("conversation.0.text", "a string or a list of strings")],
    "seed-mode-missing": [("seed.mode", "needs a mode")],
    "seed-mode-unknown": [("seed.mode", "unknown seed mode 'snapshot'")],
    "replay-missing-thread-id": [("seed.threadId", "required field is missing")],
    "replay-endpoint-not-url": [("seed.endpoint", "must be an http(s) URL")],
    "unknown-top-level-key": [("outcomeExpectation", "unknown key")],
    "complexity-invalid": [("complexity", "'simple', 'medium' or 'complex'")],
    "trigger-type-invalid": [("triggerType", "'manual', 'webhook', 'schedule' or 'form'")],
    "message-budget-not-positive": [("messageBudget", "greater than 0")],
    "empty-datasets": [("datasets", "at least 1 item")],
    "empty-expectation-text": [("outcomeExpectations.0", "at least 1 character")],
    # n8n's first case shape: each retired key names its replacement, and the case-level rules
    # still run in the same pass
    "first-shape-prompt-scenarios": [
        ("prompt", "write it as the opening turn of `conversation`"),
        ("scenarios", "use `executionScenarios`"),
        ("conversation", "needs a conversation"),
        ("(case)", "at least one executionScenario"),
    ],
    "unbalanced-stage-direction": [("conversation.2.text", "unbalanced stage direction")],
    "inline-seed-carries-nothing": [("seed", "an inline seed must carry something")],
    "prior-run-hints-empty": [("seed.priorRuns.0.hints", "1 to 2000 characters")],
    "prior-run-ambiguous-name": [("seed.priorRuns.0.workflow", "names 2 seed workflows: give its id")],
    "context-assertion-unknown-key": [("contextAssertions.0.mustApear", "unknown key")],
    "context-assertion-bad-anchor": [("contextAssertions.0.anchor", "'probe' or 'turn-end'")],
    "intent-expectation-without-accepts": [("intentExpectation.accepts", "at least 1 item")],
    "credential-blank-not-boolean": [("credentials.0.blank", "true or false")],
    # a type the pinned n8n does not define is refused at load, naming the nearest known type
    "credential-type-unknown": [("credentials.1.type", "unknown credential type 'SlackApi': n8n defines no such "
                                                        "type (did you mean 'slackApi'?)")],
    # credential-setup fixtures (n8n harness/credential-setup-lane.ts resolveCredentialSetupFixture): an
    # unknown id names the ids there are; "local" needs the developer's own browser: refused offline
    "credential-fixture-unknown": [("credentialFixture", 'unknown provider fixture "openrouter": available '
                                                         'anthropic (or "local" for the real site)')],
    "credential-fixture-local": [("credentialFixture", '"local" drives the real provider site in the developer\'s '
                                                       "own browser, which an offline run cannot reach")],
    "not-an-object": [("(case)", "must be a JSON object, got an array")],
    "bad-json-syntax": [("<json>", "Expecting ',' delimiter (line 4, column 3)")],
    "duplicate-json-key": [("<json>", "duplicate key 'complexity'")],
}


def test_every_fixture_has_an_expectation_and_vice_versa() -> None:
    on_disk = {p.stem for p in INVALID_DIR.glob("*.json")}
    assert on_disk == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_invalid_fixture_reports_exact_field_and_message(name: str) -> None:
    path = INVALID_DIR / f"{name}.json"
    cases, issues = load_disk([path])
    assert cases == []
    assert all(issue.source == str(path) for issue in issues)
    got = [(issue.field, issue.message) for issue in issues]
    assert len(got) == len(EXPECTED[name]), got
    for (field, fragment), (got_field, got_message) in zip(EXPECTED[name], got, strict=True):
        assert got_field == field, got
        assert fragment in got_message, got


# --------------------------------------------------------------------------- valid twins

WF = {"id": "twinWorkflow", "name": "Twin", "nodes": [], "connections": {}}
BASE: dict[str, Any] = {
    "conversation": [{"role": "user", "text": "Build a workflow that returns 42."}],
    "complexity": "simple",
    "tags": [],
    "outcomeExpectations": ["It returns 42."],
}


def valid(**over: Any) -> EvalCase:
    body = copy.deepcopy(BASE)
    for key, value in over.items():
        if value is None:
            body.pop(key)
        else:
            body[key] = value
    case, issues = parse_case(body, "twin")
    assert issues == [], [str(i) for i in issues]
    assert case is not None
    return case


def inline(**parts: Any) -> dict[str, Any]:
    return {"mode": "inline", **parts}


def test_replay_seed_supplies_the_live_turn() -> None:
    case = valid(conversation=None, seed={"mode": "replay", "threadId": "thread-1"})
    assert case.conversation == []
    assert case.is_replay


def test_replay_continuation_may_open_with_the_assistant_reply() -> None:
    case = valid(
        conversation=[
            {"role": "assistant", "text": "Updated the schedule."},
            {"role": "user", "text": "Now also copy #ops. [Only if asked, say the channel is #ops.]"},
        ],
        seed={"mode": "replay", "threadId": "thread-1", "endpoint": "https://eu.example.com"},
    )
    assert case.conversation[0].role == "assistant"


def test_any_single_grading_unit_is_enough() -> None:
    valid(outcomeExpectations=None, processExpectations=["Asked first."])
    valid(
        outcomeExpectations=None,
        executionScenarios=[{"name": "p", "description": "", "dataSetup": "", "successCriteria": "ok"}],
    )


def test_id_of_exactly_eight_characters_is_accepted() -> None:
    valid(seed=inline(workflows=[{**WF, "id": "abcd1234"}]))


def test_twenty_nested_folders_are_accepted() -> None:
    folders = [{"id": "folderRoot00", "name": "Root"}] + [
        {"id": f"folderKid{i:03d}", "name": f"Kid {i}", "parentFolderId": "folderRoot00"} for i in range(19)
    ]
    case = valid(seed=inline(folders=folders, workflows=[{**WF, "parentFolderId": "folderKid000"}]))
    assert case.inline_seed is not None and len(case.inline_seed.folders) == 20


def test_empty_opening_text_is_valid_with_attach() -> None:
    case = valid(conversation=[{"role": "user", "text": "", "attach": {"workflow": WF["id"]}}], seed=inline(workflows=[WF]))
    assert case.opening_attachment is not None and case.opening_attachment.ref == WF["id"]


def test_director_note_after_the_opening_turn_is_fine() -> None:
    case = valid(
        conversation=[
            {"role": "user", "text": "Post a digest to Slack."},
            {"role": "user", "text": "[Only say the channel if asked: #growth.]"},
        ]
    )
    assert case.conversation[1].director_notes == ["Only say the channel if asked: #growth."]


def test_brackets_that_are_not_director_notes_are_allowed_in_the_opening_turn() -> None:
    valid(conversation=[{"role": "user", "text": 'Read $json["first name"], keep ids [1, 2] and the [placeholder] word.'}])


def test_setup_panel_execute_on_a_workflow_attachment() -> None:
    case = valid(
        conversation=[{"role": "user", "text": "Run it.", "attach": {"workflow": WF["id"], "source": "setup-panel-execute"}}],
        seed=inline(workflows=[WF]),
    )
    assert case.conversation[0].attach is not None and case.conversation[0].attach.source == "setup-panel-execute"


def test_agent_attachment_naming_a_seeded_agent() -> None:
    agent = {"id": "AgentTwin001", "config": {"name": "Twin Agent", "skills": [{"id": "s1"}]}, "skills": {"s1": {"name": "S"}}}
    case = valid(conversation=[{"role": "user", "text": "fix it", "attach": {"agent": "AgentTwin001"}}], seed=inline(agents=[agent]))
    assert case.opening_attachment is not None and case.opening_attachment.kind == "agent"


def test_agents_with_distinct_slugs_coexist() -> None:
    agents = [
        {"id": "AgentTwin001", "config": {"name": "Support Bot"}},
        {"id": "AgentTwin002", "config": {"name": "Support Bot 2"}},
    ]
    valid(seed=inline(agents=agents))


def test_prior_run_on_a_seeded_workflow() -> None:
    case = valid(seed=inline(workflows=[WF], priorRuns=[{"workflow": WF["id"], "hints": "HTTP 500"}]))
    assert case.inline_seed is not None and case.inline_seed.prior_runs[0].workflow == WF["id"]


def test_custom_message_may_omit_role_and_carry_any_content() -> None:
    message = {"id": "m-1", "type": "custom", "createdAt": "2025-01-01T00:00:00Z", "content": {"anything": 1}}
    case = valid(seed=inline(messages=[message]))
    assert case.inline_seed is not None and case.inline_seed.messages[0].role is None


def test_every_supported_credential_type_loads() -> None:
    from orchestrator.cases import SUPPORTED_CREDENTIAL_TYPES

    case = valid(credentials=[{"type": t} for t in sorted(SUPPORTED_CREDENTIAL_TYPES)])
    assert {c.type for c in case.credentials} == SUPPORTED_CREDENTIAL_TYPES


def test_any_type_the_pinned_n8n_defines_loads_and_a_stranger_is_named() -> None:
    """Our choice (``docs/n8n-corpus.md``): any credential type the pinned n8n defines, beyond
    n8n's seeder templates (``credentials/seeder.ts``), with the MCP registry's seeded types."""
    case = valid(credentials=[{"type": t} for t in ("anthropicApi", "postgres", "notionMcpOAuth2Api")])
    assert [c.type for c in case.credentials] == ["anthropicApi", "postgres", "notionMcpOAuth2Api"]
    assert unknown_type_message("postgresql") == ("unknown credential type 'postgresql': n8n defines no such type "
                                                   "(did you mean 'postgres'?)")
    assert unknown_type_message("qqqzzzxxx") == "unknown credential type 'qqqzzzxxx': n8n defines no such type"


def test_the_shipped_credential_type_list_is_the_installed_n8ns() -> None:
    """The list cases are checked against is generated from the pinned install (n8n-nodes-base and
    @n8n/n8n-nodes-langchain ``dist/known/credentials.json``, plus the MCP registry seed's types)."""
    from orchestrator.toolchain import N8N_VERSION, default_cache_dir

    modules = default_cache_dir() / f"n8n-{N8N_VERSION}" / "node_modules"
    if not (modules / "n8n-nodes-base").is_dir():
        pytest.skip("the pinned n8n is not installed")
    assert from_install(modules) == known_types()


def test_description_of_exactly_512_characters_after_trimming() -> None:
    case = valid(credentials=[{"type": "slackApi", "description": "  " + "d" * 512 + "  "}])
    assert case.credentials[0].description == "d" * 512
