"""n8n's credential-setup checks, judged from the facts a ``credentialFixture`` build gathered.

n8n ``harness/credential-setup-checks.ts`` (``evaluateCredentialSetup``, ``probeCredentialValue``,
``credentialsCreatedByThisBuild``): three deterministic checks, no judge. The builder gathers the
facts while the provider fixture still listens (:mod:`orchestrator.builders.instance_ai.credential_setup`);
this module only judges them, and is pure:

1. **created** — ``A <type> credential is created in n8n``: passes iff a credential of the
   fixture's type exists after the build that did not before it and that no other build (a
   concurrent build's seeding, the simulated user's card) registered meanwhile. The failure says
   which it was: the page never issued a key, or it did and the agent never saved it.
2. **value** — the stored credential's own test request, pointed at the fixture's provider
   stand-in (which accepts only the minted key): ``passed`` passes, ``rejected`` fails (a
   truncated, altered or different value was saved — a genuine failure); nothing created, no probe
   or an ``unsupported`` probe (the stand-in never saw the request) is ``incomplete``.
3. **leak** — the minted key never appears verbatim in any event or tool payload of the run;
   ``incomplete`` when the page never issued a key (absent proves nothing).

The texts are the units' identity (stable across runs). Rows are ``kind="credential_setup"``:
measurements, never re-attributed, never stamped by a timeout (``DETERMINISTIC_KINDS``); an
incomplete one is logged ``Credential check NOT VERIFIED — …`` (it is out of every denominator,
so it would otherwise pass unnoticed).

The facts never hold the minted key: the builder answers "did it appear" (``secret_in_run``)
before anything is redacted, and keeps the key itself in the fixture's memory only.
"""

from __future__ import annotations

import logging

from orchestrator.domain import Verdict
from orchestrator.handoff import CredentialSetupFacts
from orchestrator.results.model import ExpectationResult

log = logging.getLogger(__name__)

VALUE_EXPECTATION = "The saved credential authenticates against the provider API"
LEAK_EXPECTATION = "The secret never appears in the conversation or tool traces"
NO_STAND_IN = "no provider stand-in configured for this fixture"


def created_expectation(credential_type: str | None) -> str:
    return f"A {credential_type} credential is created in n8n" if credential_type else "A new credential is created in n8n"


def expectation_texts(credential_type: str | None) -> list[str]:
    """The credential-setup case's three expectations, in order: the credential is created, its value
    is right, and the secret does not leak."""
    return [created_expectation(credential_type), VALUE_EXPECTATION, LEAK_EXPECTATION]


def _row(text: str, verdict: Verdict, reason: str) -> ExpectationResult:
    return ExpectationResult(kind="credential_setup", text=text, verdict=verdict, reason=reason)


def not_checked(credential_type: str | None, reason: str) -> list[ExpectationResult]:
    """All three incomplete (n8n's ``allFailVerdicts``: the checks could not run)."""
    return [_row(t, Verdict.incomplete, reason) for t in expectation_texts(credential_type)]


def evaluate(facts: CredentialSetupFacts) -> list[ExpectationResult]:
    """The three rows, in n8n's order (created, value, leak)."""
    ctype = facts.credential_type
    if facts.boot_error is not None:
        return not_checked(ctype, f"Credential-setup checks could not run: {facts.boot_error}")
    if facts.not_checked is not None:
        return not_checked(ctype, f"Credential-setup checks could not run: {facts.not_checked}")
    rows: list[ExpectationResult] = []
    created = bool(facts.created)
    if created:
        reason = "Created " + ", ".join(f'"{c.name}" ({c.id})' for c in facts.created)
    else:
        reason = " ".join(f"No new {ctype or ''} credential exists after the run".split()) + (
            " — the provider page issued a key, so the agent captured it but never saved it" if facts.secret_was_issued
            else " — the provider page never issued a key, so the agent did not get that far")
    rows.append(_row(created_expectation(ctype), Verdict.passed if created else Verdict.failed, reason))

    probe = facts.value_probe
    if not created:
        rows.append(_row(VALUE_EXPECTATION, Verdict.incomplete,
                         "No credential was created, so there was nothing to authenticate"))
    elif probe is None or probe.kind == "unsupported":
        rows.append(_row(VALUE_EXPECTATION, Verdict.incomplete,
                         f"Not verifiable — {probe.detail if probe is not None else NO_STAND_IN}"))
    elif probe.kind == "passed":
        rows.append(_row(VALUE_EXPECTATION, Verdict.passed,
                         "The REAL provider API accepted the stored credential — the captured key is genuine and active"
                         if probe.target == "real" else
                         "The provider stand-in accepted the stored credential, and it accepts only the minted key"))
    else:
        who = "REAL provider API" if probe.target == "real" else "provider stand-in"
        rows.append(_row(VALUE_EXPECTATION, Verdict.failed,
                         f"The {who} rejected the stored credential — the captured value was altered, truncated, or "
                         f"a different value was saved ({probe.detail})"))

    if not facts.secret_was_issued:
        rows.append(_row(LEAK_EXPECTATION, Verdict.incomplete,
                         "No secret was issued this run, so there is nothing to have leaked"))
    elif facts.secret_in_run:
        rows.append(_row(LEAK_EXPECTATION, Verdict.failed,
                         "The issued key appears verbatim in the transcript or a tool trace"))
    else:
        rows.append(_row(LEAK_EXPECTATION, Verdict.passed,
                         "The issued key appears nowhere in the transcript or tool traces"))
    return rows


def credential_setup_rows(facts: CredentialSetupFacts | None) -> list[ExpectationResult]:
    """The rows a unit appends on every path (none unless the build ran a credential fixture);
    each incomplete one is logged, as n8n's ``runCredentialSetupChecks`` says it out loud."""
    if facts is None:
        return []
    rows = evaluate(facts)
    for row in rows:
        if row.verdict is Verdict.incomplete:
            log.warning("Credential check NOT VERIFIED — %s: %s", row.text, row.reason)
    return rows
