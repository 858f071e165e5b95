"""n8n's external-edit checks: did a rename made behind the agent's back survive the build?

As ``harness/external-edit-checks.ts`` (bcc99b28; test ``__tests__/external-edit-checks.test.ts``
at 667e8725): one unit per recorded edit (:mod:`orchestrator.builders.instance_ai.external_edits`), labelled
by the name it set. Not applied (nothing saved yet, already so named, the rename failed) →
``incomplete``, charged to the framework: the premise is missing. Otherwise the workflow is read
at the end of the build: still named so → pass; renamed back → fail (the agent overwrote state it
never read). A read that fails → ``incomplete``, the framework's. Measurements, not judgements:
kind ``external_edit``, never re-attributed or stamped by a timeout.
"""

from __future__ import annotations

from typing import Any

from orchestrator.domain import Attribution, Verdict
from orchestrator.n8n.errors import N8nError
from orchestrator.n8n.rest import N8nSession
from orchestrator.redact import redact
from orchestrator.results.model import ExpectationResult


def label(to: str) -> str:
    """The expectation text of an external rename to ``to``: the rename must survive the agent's edits."""
    return (f'The external rename to "{to}" survived: the workflow is still named "{to}" at the end of the run, '
            "so the agent re-applied its change onto the current saved state instead of overwriting it.")


def _row(edit: dict[str, Any], verdict: Verdict, reason: str, attribution: Attribution | None = None) -> ExpectationResult:
    return ExpectationResult(kind="external_edit", text=label(str(edit.get("to"))), verdict=verdict,
                             attribution=attribution, reason=reason)


async def external_edit_rows(owner: N8nSession, edits: list[dict[str, Any]]) -> list[ExpectationResult]:
    """One verdict per edit (module doc)."""
    rows: list[ExpectationResult] = []
    for edit in edits:
        to = str(edit.get("to"))
        workflow_id = edit.get("workflow_id")
        if not edit.get("applied") or not isinstance(workflow_id, str):
            rows.append(_row(edit, Verdict.incomplete, f"The harness did not apply the external rename after turn "
                                                       f"{edit.get('turn')} ({edit.get('reason') or 'not applied'}), "
                                                       "so there was nothing to survive", Attribution.framework_issue))
            continue
        try:
            name = (await owner.get_workflow(workflow_id)).get("name")
        except N8nError as exc:
            rows.append(_row(edit, Verdict.incomplete, redact(f"the workflow could not be read at the end: {exc}")[:500],
                             Attribution.framework_issue))
            continue
        if name == to:
            rows.append(_row(edit, Verdict.passed, f'the workflow is still named "{to}"'))
        else:
            rows.append(_row(edit, Verdict.failed, f'the workflow is named "{name}" at the end, not "{to}": the agent '
                                                   "overwrote state it never read"))
    return rows
