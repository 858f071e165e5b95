"""Shapes n8n's case corpus uses that the loader must accept, carry and normalise as n8n's loader
does (``evaluations/harness/schema.ts`` ``EvalTestCaseSchema``, ``utils/load-eval-cases.ts``
``parseTestCaseFile``)."""

from __future__ import annotations

from typing import Any

from orchestrator.cases import EvalCase, parse_case

BASE: dict[str, Any] = {
    "conversation": [{"role": "user", "text": "Build a manual workflow whose Code node returns answer = 42."}],
    "complexity": "simple",
    "tags": ["fixture"],
    "outcomeExpectations": ["A Code node returns answer = 42."],
}
WORKFLOW = {"id": "wfOrdersSync01", "name": "Orders Sync", "nodes": [], "connections": {}}


def ok(**overrides: Any) -> EvalCase:
    case, issues = parse_case({**BASE, **overrides}, "t.json")
    assert issues == [] and case is not None, issues
    return case


def test_a_director_note_in_the_opening_turn_is_accepted_and_sent_verbatim() -> None:
    """schema.ts: no rule on director notes in the opening turn (README: authoring advice only)."""
    text = "List my folders.\n\n[Director note: refuse to name any workflow.]"
    case = ok(conversation=[{"role": "user", "text": text}])
    assert case.opening_prompt() == text


def test_any_credential_type_loads_and_blank_is_carried() -> None:
    """schema.ts ``credentials[]``: type, name, valid, blank; the type is checked on the lane here,
    not against a hand-kept list (the one place we accept more than n8n)."""
    case = ok(credentials=[{"type": "openAiApi", "name": "My OpenAI"}, {"type": "gmailOAuth2Api"},
                           {"type": "httpHeaderAuth", "blank": True}, {"type": "slackApi", "valid": False}])
    assert [c.type for c in case.credentials] == ["openAiApi", "gmailOAuth2Api", "httpHeaderAuth", "slackApi"]
    assert [c.connected for c in case.credentials] == [True, True, False, False]


def test_plain_objects_drop_keys_they_do_not_know_as_zod_does() -> None:
    """schema.ts: turns, execution scenarios and credential entries are non-strict ``z.object``s
    (unknown keys stripped); only the case, the seed arms, ``attach`` and ``contextAssertions``
    entries are ``.strict()``."""
    case = ok(conversation=[{"role": "user", "text": "Build it.", "note": "x"}],
              executionScenarios=[{"name": "happy", "description": "d", "dataSetup": "none",
                                   "successCriteria": "works", "owner": "qa"}],
              credentials=[{"type": "slackApi", "comment": "seeded"}])
    assert case.execution_scenarios[0].name == "happy" and case.credentials[0].type == "slackApi"


def test_newer_keys_are_carried() -> None:
    """schema.ts ``contextAssertions`` / ``credentialFixture``; CONTEXT-EVALS.md ``memoryExpectations``
    (with ``anchor``); ``intentExpectation`` (agents-exam, graded by ``build-expectations/intent.ts``)."""
    case = ok(title="A display title", credentialFixture="anthropic",
              contextAssertions=[{"text": "#ops-alerts", "anchor": "turn-end", "mustAppear": False, "note": "n"}],
              memoryExpectations=["The context names the channel.", {"text": "Several runs.", "anchor": "turn-end"}],
              intentExpectation={"context": "standalone", "accepts": [{"anchor": "wf", "embedsOther": False}],
                                 "rationale": "fixed trigger"})
    assert case.credential_fixture == "anthropic" and case.context_assertions[0].must_appear is False
    assert [(m.text, m.anchor) for m in case.memory_expectations] == [
        ("The context names the channel.", None), ("Several runs.", "turn-end")]
    assert case.intent_expectation is not None and (case.intent_expectation.accepts or [])[0].anchor == "wf"
    body = case.to_json()
    assert body["intentExpectation"]["rationale"] == "fixed trigger"
    assert body["contextAssertions"][0] == {"text": "#ops-alerts", "mustAppear": False, "note": "n", "anchor": "turn-end"}


def test_prior_runs_may_name_a_workflow_and_load_as_its_id() -> None:
    """harness/prior-runs.ts: a prior run executes a seed workflow; the memory tier's cases give it
    by name, schema.ts's rule by id — both resolve to the seed workflow's id."""
    seed = {"mode": "inline", "workflows": [WORKFLOW],
            "priorRuns": [{"workflow": "Orders Sync", "hints": "HTTP 502"}, {"workflow": "wfOrdersSync01"}]}
    case = ok(seed=seed)
    assert case.inline_seed is not None
    assert [r.workflow for r in case.inline_seed.prior_runs] == ["wfOrdersSync01", "wfOrdersSync01"]


def test_session_boundary_is_carried_and_a_workflow_folder_name_becomes_a_seed_folder() -> None:
    """CONTEXT-EVALS.md: ``seed.sessionBoundary`` (history in a separate thread) and a seed
    workflow's ``folder``; the folder is declared so the restore creates it (nested by ``/``),
    and a folder the seed already declares under that name is reused."""
    seed = {"mode": "inline", "sessionBoundary": True,
            "folders": [{"id": "folderLogs001", "name": "logsearch"}],
            "workflows": [{**WORKFLOW, "folder": "logsearch"},
                          {**WORKFLOW, "id": "wfNested00001", "name": "Deep", "folder": "reports/weekly"}]}
    case = ok(seed=seed)
    inline = case.inline_seed
    assert inline is not None and inline.session_boundary is True
    folders = {f.id: f for f in inline.folders}
    first, nested = inline.workflows
    assert first.parent_folder_id == "folderLogs001"
    child = folders[nested.parent_folder_id or ""]
    assert child.name == "weekly" and folders[child.parent_folder_id or ""].name == "reports"
    again = ok(seed=seed).inline_seed
    assert again is not None and [f.id for f in again.folders] == [f.id for f in inline.folders]


def test_a_compound_intent_expectation_lists_one_classification_per_part() -> None:
    """agents-exam compound cases: ``intentExpectation.parts[]`` (each with ``accepts``) in place of
    a top-level ``accepts``; exactly one of the two."""
    case = ok(intentExpectation={"parts": [{"label": "digest", "accepts": [{"anchor": "wf", "embedsOther": False}]},
                                           {"label": "assistant", "accepts": [{"anchor": "agent"}]}]})
    assert case.intent_expectation is not None and case.intent_expectation.parts is not None
    assert [p.label for p in case.intent_expectation.parts] == ["digest", "assistant"]
    _, issues = parse_case({**BASE, "intentExpectation": {"context": "standalone"}}, "t.json")
    assert [(i.field, "exactly one of accepts" in i.message) for i in issues] == [("intentExpectation", True)]
