"""n8n's three credential-setup checks, judged from a build's facts (``orchestrator.verify.credential_setup``),
and appended by the unit runner on every path.

Each rule follows n8n ``packages/@n8n/instance-ai/evaluations/harness/credential-setup-checks.ts``
(``evaluateCredentialSetup``, ``probeCredentialValue``, ``credentialsCreatedByThisBuild``; the
commit followed is in ``docs/fidelity.md``) and ``run/build-orchestrator.ts`` (the checks are
appended to every build's verdicts, never through ``attribute()``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

import pytest
from support.stand_ins import build_lane, build_user

from orchestrator.allocator import WorkUnit
from orchestrator.builders.builder import BuildResult
from orchestrator.domain import Attribution, BuildStatus, Verdict
from orchestrator.handoff import (
    CredentialRecord,
    CredentialSetupFacts,
    ValueProbe,
    aggregate_probes,
    credentials_created_by_build,
)
from orchestrator.results.model import DETERMINISTIC_KINDS, ExpectationResult, UnitResult
from orchestrator.run import unit as unit_module
from orchestrator.run.unit import Attempts
from orchestrator.verify.credential_setup import (
    LEAK_EXPECTATION,
    VALUE_EXPECTATION,
    created_expectation,
    credential_setup_rows,
    evaluate,
)
from orchestrator.verify.verifier import Verification, charged_to_framework, stamp_timeout
from unit.run.test_fidelity_counts import CASE_E, _runner, _ScriptedBuilder

MINE = CredentialRecord("c9", "Anthropic", "anthropicApi")
#: a good run: a key was issued, saved, accepted by the stand-in, and never seen in the run
GOOD = CredentialSetupFacts(fixture="anthropic", credential_type="anthropicApi", secret_was_issued=True,
                            created=[MINE], value_probe=ValueProbe("passed"))


def _verdicts(facts: CredentialSetupFacts) -> list[tuple[str, Verdict]]:
    return [(r.text, r.verdict) for r in evaluate(facts)]


def test_the_texts_are_the_units_identity() -> None:
    """``createdExpectationText``, ``VALUE_EXPECTATION``, ``LEAK_EXPECTATION``: stable strings, the
    type named when known; every row is a ``credential_setup`` measurement."""
    assert created_expectation("anthropicApi") == "A anthropicApi credential is created in n8n"
    assert created_expectation(None) == "A new credential is created in n8n"
    assert VALUE_EXPECTATION == "The saved credential authenticates against the provider API"
    assert LEAK_EXPECTATION == "The secret never appears in the conversation or tool traces"
    rows = evaluate(GOOD)
    assert [r.text for r in rows] == [created_expectation("anthropicApi"), VALUE_EXPECTATION, LEAK_EXPECTATION]
    assert {r.kind for r in rows} == {"credential_setup"} and "credential_setup" in DETERMINISTIC_KINDS
    assert all(r.verdict is Verdict.passed and r.attribution is None for r in rows)
    assert rows[0].reason == 'Created "Anthropic" (c9)'
    assert rows[1].reason == "The provider stand-in accepted the stored credential, and it accepts only the minted key"
    assert rows[2].reason == "The issued key appears nowhere in the transcript or tool traces"


def test_created_fails_and_says_whether_a_key_was_ever_issued() -> None:
    """Rule 1: pass iff a credential was created; the failure names which step was missed. The
    value check then has nothing to test (incomplete)."""
    issued = replace(GOOD, created=[], value_probe=None)
    rows = evaluate(issued)
    assert [r.verdict for r in rows] == [Verdict.failed, Verdict.incomplete, Verdict.passed]
    assert rows[0].reason == ("No new anthropicApi credential exists after the run — the provider page issued a key, "
                              "so the agent captured it but never saved it")
    assert rows[1].reason == "No credential was created, so there was nothing to authenticate"
    never = replace(issued, secret_was_issued=False)
    rows = evaluate(never)
    assert [r.verdict for r in rows] == [Verdict.failed, Verdict.incomplete, Verdict.incomplete]
    assert rows[0].reason.endswith("— the provider page never issued a key, so the agent did not get that far")
    assert rows[2].reason == "No secret was issued this run, so there is nothing to have leaked"


def test_the_value_check_fails_only_on_a_rejection_the_stand_in_saw() -> None:
    """Rule 2: ``passed`` passes; ``rejected`` is a genuine failure (a truncated or altered value);
    no probe or ``unsupported`` is incomplete ("Not verifiable — …")."""
    rejected = evaluate(replace(GOOD, value_probe=ValueProbe("rejected", "Authorization failed")))[1]
    assert rejected.verdict is Verdict.failed
    assert rejected.reason == ("The provider stand-in rejected the stored credential — the captured value was altered, "
                               "truncated, or a different value was saved (Authorization failed)")
    unsupported = evaluate(replace(GOOD, value_probe=ValueProbe("unsupported", "no stand-in reached")))[1]
    assert (unsupported.verdict, unsupported.reason) == (Verdict.incomplete, "Not verifiable — no stand-in reached")
    missing = evaluate(replace(GOOD, value_probe=None))[1]
    assert (missing.verdict, missing.reason) == (
        Verdict.incomplete, "Not verifiable — no provider stand-in configured for this fixture")


def test_the_leak_check_is_an_exact_sighting_and_vacuous_without_a_key() -> None:
    """Rule 3 (fixture mode): fails iff the minted key was seen verbatim in the run; incomplete when
    no key was issued (absent proves nothing), whatever else happened."""
    leaked = evaluate(replace(GOOD, secret_in_run=True))[2]
    assert (leaked.verdict, leaked.reason) == (
        Verdict.failed, "The issued key appears verbatim in the transcript or a tool trace")
    vacuous = evaluate(replace(GOOD, secret_was_issued=False, secret_in_run=True))[2]
    assert vacuous.verdict is Verdict.incomplete


def test_a_lane_that_never_started_leaves_all_three_unverified(caplog: pytest.LogCaptureFixture) -> None:
    """n8n's ``allFailVerdicts``: checks that could not run are incomplete, never failures; each
    incomplete verdict is said out loud (``Credential check NOT VERIFIED — …``)."""
    facts = CredentialSetupFacts(fixture="anthropic", credential_type="anthropicApi", boot_error="gateway refused")
    with caplog.at_level(logging.WARNING, logger="orchestrator.verify.credential_setup"):
        rows = credential_setup_rows(facts)
    assert [r.verdict for r in rows] == [Verdict.incomplete] * 3
    assert all(r.reason == "Credential-setup checks could not run: gateway refused" for r in rows)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3 and all(m.startswith("Credential check NOT VERIFIED — ") for m in said)
    assert credential_setup_rows(None) == []


def test_created_means_new_not_foreign_and_of_the_type() -> None:
    """``credentialsCreatedByThisBuild``: absent before the build, not registered by another build
    meanwhile (lanes share one login), and of the fixture's type when one is known."""
    listed: list[dict[str, Any]] = [
        {"id": "old", "name": "Anthropic", "type": "anthropicApi"},    # there before
        {"id": "seeded", "name": "[eval] Slack", "type": "anthropicApi"},  # a concurrent build's seeding
        {"id": "other", "name": "Notion", "type": "notionApi"},        # new, another type
        {"id": "c9", "name": "Anthropic", "type": "anthropicApi"},
    ]
    mine = credentials_created_by_build(listed, before={"old"}, foreign={"seeded"}, credential_type="anthropicApi")
    assert mine == [MINE]
    anything = credentials_created_by_build(listed, before={"old"}, foreign={"seeded"})
    assert [c.id for c in anything] == ["other", "c9"]


def test_probes_aggregate_first_pass_then_discard_before_rejection() -> None:
    """``probeCredentialValue``: every candidate is tried, the first pass wins; with no pass an
    ``unsupported`` outranks a ``rejected`` (it may belong to a credential not this agent's); no
    candidate is unsupported."""
    passed, rejected, discarded = ValueProbe("passed"), ValueProbe("rejected", "401"), ValueProbe("unsupported", "x")
    assert aggregate_probes([rejected, passed, discarded]) is passed
    assert aggregate_probes([rejected, discarded]) is discarded
    assert aggregate_probes([discarded, rejected]) is discarded
    assert aggregate_probes([rejected]) is rejected
    assert aggregate_probes([]) == ValueProbe("unsupported", "no credential was created, so there was nothing to test")


def test_the_rows_are_measurements_a_timeout_or_the_framework_never_restamps() -> None:
    """``run/build-orchestrator.ts``: the checks are appended after attribution; a timed-out
    iteration keeps their verdicts (``DETERMINISTIC_KINDS``), and an infrastructure failure does
    not charge them to the framework."""
    rows = evaluate(replace(GOOD, value_probe=ValueProbe("rejected", "401")))
    v = Verification(expectations=list(rows))
    stamp_timeout(v)
    assert [(e.verdict, e.attribution) for e in v.expectations] == [
        (Verdict.passed, None), (Verdict.failed, None), (Verdict.passed, None)]
    assert [e.attribution for e in charged_to_framework(list(rows))] == [None, None, None]


# ---------------------------------------------------------------------------------- the unit runner


def _record(monkeypatch: pytest.MonkeyPatch, result: BuildResult) -> UnitResult:
    async def verify(*args: Any, **kwargs: Any) -> Verification:
        return Verification(expectations=[ExpectationResult(kind="outcome", text=t, verdict=Verdict.passed)
                                          for t in CASE_E.outcome_expectations])

    async def judge_failed(case: Any, *args: Any, **kwargs: Any) -> list[ExpectationResult]:
        return [ExpectationResult(kind="outcome", text=t, verdict=Verdict.failed) for t in case.outcome_expectations]

    monkeypatch.setattr(unit_module, "verify_workflow", verify)
    monkeypatch.setattr(unit_module, "judge_failed_build", judge_failed)
    runner = _runner(_ScriptedBuilder({0: result}), CASE_E)
    _, record = asyncio.run(runner._build_and_verify(build_lane(), WorkUnit(case="c", iteration=0), CASE_E, build_user(),
                                                     Attempts(), 0))
    assert isinstance(record, UnitResult)
    return record


FACTS_REJECTED = replace(GOOD, value_probe=ValueProbe("rejected", "401"))


@pytest.mark.parametrize("path", ["ok", "failed", "framework", "timeout", "saved-then-timeout"])
def test_the_checks_are_appended_on_every_path(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """``run/build-orchestrator.ts``: the credential-setup verdicts join the case's verdicts on every
    path — judged, a failed build, an infrastructure failure, a timeout with or without a saved
    workflow — as they are: a timeout stamps the judged rows, never these."""
    breach = {"kind": "turn", "turn": 1, "elapsedMs": 900_100}
    result = {
        "ok": BuildResult(BuildStatus.ok, workflow_id="wf-0", attempts=1),
        "failed": BuildResult(BuildStatus.failed, error="no workflow built", attempts=1),
        "framework": BuildResult(BuildStatus.failed, error="the lane did not start", framework_fault=True, attempts=1),
        "timeout": BuildResult(BuildStatus.timeout, error="Run timed out", attempts=1, budget_breach=breach),
        "saved-then-timeout": BuildResult(BuildStatus.ok, workflow_id="wf-0", attempts=1, budget_breach=breach),
    }[path]
    result.credential_setup = FACTS_REJECTED
    record = _record(monkeypatch, result)
    checks = [(e.text, e.verdict, e.attribution) for e in record.expectations if e.kind == "credential_setup"]
    assert checks == [(created_expectation("anthropicApi"), Verdict.passed, None),
                      (VALUE_EXPECTATION, Verdict.failed, None),
                      (LEAK_EXPECTATION, Verdict.passed, None)]
    authored = [e for e in record.expectations if e.kind == "outcome"]
    assert len(authored) == 1  # the case's own expectation is still there, next to the checks
    if path in ("timeout", "saved-then-timeout"):
        assert authored[0].attribution is Attribution.timeout
    if path == "ok":  # a failing measurement fails the unit as an expectation would
        assert (record.failure_category, record.attribution) == ("expectations_failed", Attribution.builder_issue)


def test_a_build_without_a_fixture_gets_no_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    record = _record(monkeypatch, BuildResult(BuildStatus.ok, workflow_id="wf-0", attempts=1))
    assert [e.kind for e in record.expectations] == ["outcome"]
