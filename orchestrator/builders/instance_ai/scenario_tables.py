"""Execution-scenario data tables (``executionScenarios[].seedDataTables``): created empty before
the build, named in the opening message, each scenario's rows put in just before it runs.

The reference (``harness/seed-tables.ts``; used by ``harness/build-workflow.ts``): a case's
scenarios share ONE table per declared name, created empty (schema only) before the build under
this build's ``[seed <8 hex>]`` name; the opening message the agent receives names them (the
recorded turn does not); before each scenario its own rows replace the table's rows
(``POST /eval/seed-data-table-rows``, :meth:`InstanceAiChat.seed_data_table_rows`), which is why
such a case's scenarios run one at a time.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from orchestrator.builders.seeds import SeedDeleter
from orchestrator.cases import EvalCase
from orchestrator.deletion import delete_one
from orchestrator.errors import HarnessError
from orchestrator.handoff import ScenarioTables
from orchestrator.ledger import Ledger
from orchestrator.n8n.instance_ai import InstanceAiChat
from orchestrator.n8n.rest import N8nSession

log = logging.getLogger(__name__)

SCENARIO_TABLES_MAX = 20
#: n8n's data-table name limit (its restore slices names to it)
TABLE_NAME_MAX = 128
SCENARIO_TABLE_SOURCE = "scenario-tables"


class ScenarioTablesRefused(HarnessError):
    """The case's scenario tables cannot be created as declared (the unit is a framework fault)."""


def scenario_seed_tables(case: EvalCase) -> list[dict[str, Any]]:
    """The union of the tables the case's execution scenarios declare, one per name, the first
    declaration winning (a later one of another shape is logged and ignored). More than
    :data:`SCENARIO_TABLES_MAX` distinct names → :class:`ScenarioTablesRefused`."""
    by_name: dict[str, dict[str, Any]] = {}
    for scenario in case.execution_scenarios:
        for table in scenario.seed_data_tables:
            name = str(table.get("name") or "")
            first = by_name.get(name)
            if first is None:
                by_name[name] = table
            elif (first.get("columns"), first.get("rows")) != (table.get("columns"), table.get("rows")):
                log.warning('scenario seed table "%s" is declared again with other columns or rows: the first '
                            "declaration is kept", name)
    if len(by_name) > SCENARIO_TABLES_MAX:
        raise ScenarioTablesRefused(f"the case's execution scenarios declare {len(by_name)} distinct seed data tables; "
                                    f"at most {SCENARIO_TABLES_MAX} can be created")
    return list(by_name.values())


def scenarios_seed_rows(case: EvalCase) -> bool:
    """Any scenario declares seed tables: the case's scenarios share them, so they run one at a time."""
    return any(s.seed_data_tables for s in case.execution_scenarios)


def scenario_tables_body(tables: list[dict[str, Any]], thread_id: str, nonce: str) -> dict[str, Any]:
    """The restore body creating ``tables`` empty under this build's seed names (we name them, so
    ``uniquifyNames`` is off and the note can name what exists)."""
    schemas = []
    for i, table in enumerate(tables):
        table_id = str(table.get("id") or "")
        schemas.append({
            "id": table_id if len(table_id) >= 8 else f"scenario-table-{i:04d}",  # n8n remaps ids of ≥ 8 chars
            "name": _table_seed_name(str(table.get("name") or ""), nonce),
            "columns": [{"name": c.get("name"), "type": c.get("type")} for c in table.get("columns") or []
                        if isinstance(c, dict)],
        })
    return {"threadId": thread_id, "messages": [], "dataTables": schemas, "uniquifyNames": False}


def _table_seed_name(name: str, nonce: str) -> str:
    suffix = f" [seed {nonce}]"
    return name[: TABLE_NAME_MAX - len(suffix)] + suffix


def seeded_tables_note(body: dict[str, Any]) -> str:
    """What the agent is told (appended to its opening message, never to the recorded turn): the
    tables that already exist under their seed names, with their columns, to be used rather than
    recreated. Empty without tables."""
    tables = body.get("dataTables") or []
    if not tables:
        return ""
    lines = [f'- "{t["name"]}" (' + ", ".join(f"{c['name']}: {c['type']}" for c in t["columns"]) + ")" for t in tables]
    return ("\n\nThese data tables already exist in this project; use them (find them with the Data Table "
            "node) rather than creating new ones:\n" + "\n".join(lines))


async def create_scenario_tables(owner: N8nSession, case: EvalCase, thread_id: str, ledger: Ledger, *, lane: str,
                                 user: str, project_id: str, nonce: str | None = None) -> ScenarioTables | None:
    """Create the case's scenario tables empty in the thread's project (an earlier attempt's go
    first, so the agent finds one of each), ledgered as soon as n8n names their ids. None when no
    scenario declares one. Raises :class:`ScenarioTablesRefused` / :class:`N8nError`."""
    tables = scenario_seed_tables(case)
    if not tables:
        return None
    earlier = [e for e in ledger.open_entries("data_table")
               if e.lane == lane and e.meta.get("user") == user and e.meta.get("source") == SCENARIO_TABLE_SOURCE]
    deleter = SeedDeleter(owner, project_id)
    for entry in earlier:
        if failure := await delete_one(ledger, deleter, entry.kind, entry.id, lane):
            raise ScenarioTablesRefused(f"an earlier attempt's scenario table could not be removed: {failure}")
    body = scenario_tables_body(tables, thread_id, nonce or secrets.token_hex(4))
    answer = await InstanceAiChat(owner).restore_thread(body)
    ids = [str(x) for x in answer.get("dataTableIds") or []]
    for table_id in ids:
        ledger.created("data_table", table_id, lane=lane, user=user, project=project_id, source=SCENARIO_TABLE_SOURCE)
    if len(ids) != len(tables):
        raise ScenarioTablesRefused(f"the restore created {len(ids)} of {len(tables)} scenario data tables")
    return ScenarioTables(thread_id, {str(t.get("name") or ""): i for t, i in zip(tables, ids, strict=True)},
                          seeded_tables_note(body))
