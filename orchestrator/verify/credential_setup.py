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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.domain import Verdict
from orchestrator.results.model import ExpectationResult

log = logging.getLogger(__name__)

VALUE_EXPECTATION = "The saved credential authenticates against the provider API"
LEAK_EXPECTATION = "The secret never appears in the conversation or tool traces"
NO_STAND_IN = "no provider stand-in configured for this fixture"


def created_expectation(credential_type: str | None) -> str:
    return f"A {credential_type} credential is created in n8n" if credential_type else "A new credential is created in n8n"


def expectation_texts(credential_type: str | None) -> list[str]:
    return [created_expectation(credential_type), VALUE_EXPECTATION, LEAK_EXPECTATION]


@dataclass(frozen=True)
class CredentialRecord:
    id: str
    name: str
    type: str


@dataclass(frozen=True)
class ValueProbe:
    """How the value check was resolved (n8n's ``CredentialValueProbe``): ``passed``,
    ``rejected`` (``detail``: n8n's test message) or ``unsupported`` (``detail``: why not)."""

    kind: Literal["passed", "rejected", "unsupported"]
    detail: str = ""
    target: Literal["stand-in", "real"] = "stand-in"


@dataclass
class CredentialSetupFacts:
    """What one ``credentialFixture`` build established (data only; never the minted key)."""

    fixture: str
    credential_type: str | None
    #: the fixture's create-key action ran (its ledger), so a key was issued to the page
    secret_was_issued: bool = False
    #: the minted key appeared verbatim in an event, tool call or tool result of the run
    secret_in_run: bool = False
    #: credentials of the type created by this build (not before it, not another build's)
    created: list[CredentialRecord] = field(default_factory=list)
    value_probe: ValueProbe | None = None
    #: the fixture or browser gateway could not start (n8n's ``laneBootFailed``): nothing was checked
    boot_error: str | None = None
    #: the checks could not be judged (a listing failed after the build): all three incomplete
    not_checked: str | None = None


def credentials_created_by_build(listed: Iterable[dict[str, object]], *, before: Iterable[str],
                                 foreign: Iterable[str] = (), credential_type: str | None = None
                                 ) -> list[CredentialRecord]:
    """The credentials this build's agent created (n8n ``credentialsCreatedByThisBuild``):
    listed now, absent from the snapshot taken before the build, not registered by another build
    meanwhile (``foreign``: the lanes share one owner, so a concurrent build's seeding lands in
    the same listing), and of ``credential_type`` when one is given."""
    seen, others = set(before), set(foreign)
    out = []
    for row in listed:
        cid, ctype = str(row.get("id")), str(row.get("type"))
        if cid in seen or cid in others or (credential_type and ctype != credential_type):
            continue
        out.append(CredentialRecord(cid, str(row.get("name") or ""), ctype))
    return out


def aggregate_probes(outcomes: Iterable[ValueProbe]) -> ValueProbe:
    """One verdict over every candidate's probe (n8n ``probeCredentialValue``): the first pass
    wins; otherwise a discarded probe beats a rejection (a rejection may belong to a credential
    that is not this agent's), and no candidate at all is unsupported."""
    last_rejected: ValueProbe | None = None
    last_unsupported: ValueProbe | None = None
    for outcome in outcomes:
        if outcome.kind == "passed":
            return outcome
        if outcome.kind == "rejected":
            last_rejected = outcome
        else:
            last_unsupported = outcome
    return last_unsupported or last_rejected or ValueProbe(
        "unsupported", "no credential was created, so there was nothing to test")


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
