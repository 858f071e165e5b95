"""What a build hands to verification: the records a builder gathers and the verifier judges.

A builder never verifies (``builders/builder.py``), yet some of what verification needs is only
there while the build runs: the Agents and config-evals its event stream announced
(:class:`ArtifactRef`), the execution-scenario data tables it created empty and how their rows are
seeded (:class:`ScenarioTables`, :func:`seed_scenario_rows`: the first scenario's rows before the
build, every scenario's before it runs), and a ``credentialFixture`` build's facts
(:class:`CredentialSetupFacts`). Those records and the steps both sides take live here, below
``builders/`` and ``verify/``, so neither imports the other.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.errors import HarnessError
from orchestrator.n8n.instance_ai import InstanceAiChat
from orchestrator.n8n.rest import N8nSession

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- artifacts (verify/artifacts.py)

ArtifactType = Literal["agent", "config-eval"]
EVAL_CONFIG_TOOL = "eval-config"

@dataclass(frozen=True)
class ArtifactRef:
    type: ArtifactType
    id: str  # the agent id, or the owning workflow id of a config-eval
    project_id: str | None = None


def add_ref(refs: list[ArtifactRef], ref: ArtifactRef) -> None:
    """Append ``ref`` unless ``refs`` already holds one of the same type and id."""
    if all((r.type, r.id) != (ref.type, ref.id) for r in refs):
        refs.append(ref)


def agent_ref(payload: dict[str, Any]) -> ArtifactRef | None:
    """The Agent an ``agent-spawned`` event announces (its ``targetResource``), if any."""
    target = payload.get("targetResource")
    if isinstance(target, dict) and target.get("type") == "agent" and isinstance(target.get("id"), str) and target["id"]:
        project = target.get("projectId")
        return ArtifactRef("agent", target["id"], project if isinstance(project, str) else None)
    return None


def config_eval_ref(tool: str, args: Any, result: Any) -> ArtifactRef | None:
    """A config-eval an ``eval-config`` ``create`` call made: the ref is the owning workflow id."""
    if tool != EVAL_CONFIG_TOOL or not isinstance(args, dict) or args.get("action") != "create":
        return None
    if not isinstance(result, dict) or not isinstance(result.get("config"), dict):
        return None
    workflow_id = args.get("workflowId")
    return ArtifactRef("config-eval", workflow_id) if isinstance(workflow_id, str) and workflow_id else None


# --------------------------------------------------------------------------- scenario tables (verify/scenarios.py)


@dataclass
class ScenarioTables:
    """The execution-scenario data tables one build created empty (``seedDataTables``; see
    :func:`orchestrator.builders.instance_ai.scenario_tables.create_scenario_tables`): the thread their rows are seeded
    through, and each table's lane id by its DECLARED name (what a scenario writes)."""

    thread_id: str
    ids_by_name: dict[str, str] = field(default_factory=dict)
    #: what the agent's opening message was told about them (never the recorded turn)
    note: str = ""


class ScenarioSeedFailed(HarnessError):
    """A scenario's rows could not be put in its tables (the scenario is the harness's failure)."""


async def seed_scenario_rows(owner: N8nSession, tables: ScenarioTables, scenario: Any) -> None:
    """Just before ``scenario`` runs: each table it declares holds exactly its declared rows (none
    declared: emptied), whatever an earlier scenario or the build left there. A declared name with
    no created table is the harness's fault (raised, never skipped)."""
    chat = InstanceAiChat(owner)
    for table in scenario.seed_data_tables:
        name = str(table.get("name") or "")
        table_id = tables.ids_by_name.get(name)
        if table_id is None:
            raise ScenarioSeedFailed(f'scenario "{scenario.name}" declares seed table "{name}", which was not '
                                     "created before the build")
        rows = [r for r in table.get("rows") or [] if isinstance(r, dict)]
        await chat.seed_data_table_rows(tables.thread_id, table_id, rows)
        log.debug("scenario %s: table %s holds its %d declared row(s)", scenario.name, name, len(rows))


# --------------------------------------------------------------------------- credential setup (verify/credential_setup.py)


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
