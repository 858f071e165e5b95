"""The rules of execution-scenario data tables (``executionScenarios[].seedDataTables``), pure."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.builders import seeds
from orchestrator.builders.instance_ai import scenario_tables
from orchestrator.cases import EvalCase


def _table(name: str, rows: list[dict[str, Any]] | None = None, column: str = "application_id") -> dict[str, Any]:
    table: dict[str, Any] = {"id": f"tbl-{name.lower().replace(' ', '-')}-0000", "name": name,
                   "columns": [{"name": column, "type": "string"}]}
    if rows is not None:
        table["rows"] = rows
    return table


def _case(*scenario_tables: list[dict[str, Any]]) -> EvalCase:
    return EvalCase.model_validate({
        "conversation": [{"role": "user", "text": "do the thing"}], "complexity": "simple", "tags": [],
        "executionScenarios": [{"name": f"s{i}", "description": "", "dataSetup": "", "successCriteria": "ok",
                                "seedDataTables": tables} for i, tables in enumerate(scenario_tables)],
    })


def test_one_table_per_name_the_first_declaration_wins() -> None:
    """n8n ``harness/seed-tables.ts`` ``dedupeScenarioSeedTables``: the union over the case's
    scenarios keeps one table per name, the first declaration (a later one of another shape is
    logged and ignored)."""
    first = _table("Job Applications", [{"application_id": "row_001"}])
    later = _table("Job Applications", [{"application_id": "row_999"}], column="other")
    union = scenario_tables.scenario_seed_tables(_case([first], [later, _table("Offers")]))
    assert [t["name"] for t in union] == ["Job Applications", "Offers"]
    assert union[0] == first


def test_more_than_twenty_distinct_tables_are_refused_not_truncated() -> None:
    """n8n ``harness/seed-tables.ts`` ``dedupeScenarioSeedTables``: more than 20 distinct names in
    the union (the restore body's cap) throws; 20 is fine; repeated names do not count twice."""
    twenty = [_table(f"T{i}") for i in range(20)]
    assert len(scenario_tables.scenario_seed_tables(_case(twenty[:10], twenty[10:], twenty[:5]))) == 20
    with pytest.raises(scenario_tables.ScenarioTablesRefused, match="21"):
        scenario_tables.scenario_seed_tables(_case(twenty[:10], twenty[10:], [_table("T20")]))


def test_the_tables_are_created_empty_under_seed_names_and_the_note_names_those() -> None:
    """n8n ``harness/build-workflow.ts`` (pre-build block: ``uniquifyScenarioTableNames``, rows
    dropped, ``uniquifyNames: false``) and ``harness/seed-tables.ts`` ``buildSeededTablesNote``:
    the agent is told the names that exist, with each column and its type; no tables, no note."""
    case = _case([_table("Orders", [{"application_id": "secret-row"}])])
    body = scenario_tables.scenario_tables_body(scenario_tables.scenario_seed_tables(case), "thread-1", "0a1b2c3d")
    (created,) = body["dataTables"]
    assert created["name"] == "Orders [seed 0a1b2c3d]" and "rows" not in created
    assert body["uniquifyNames"] is False and body["threadId"] == "thread-1"
    note = scenario_tables.seeded_tables_note(body)
    assert '"Orders [seed 0a1b2c3d]"' in note and "application_id: string" in note
    assert "secret-row" not in note
    assert scenario_tables.seeded_tables_note(scenario_tables.scenario_tables_body([], "t", "0a1b2c3d")) == ""
    assert not scenario_tables.scenarios_seed_rows(_case([])) and scenario_tables.scenarios_seed_rows(case)


def test_a_long_table_name_keeps_its_seed_suffix_within_n8ns_limit() -> None:
    """n8n's restore (``thread-restore.service`` ``restoreDataTables``) caps a table name at 128
    characters with the suffix kept; ours names the table itself, under the same limit."""
    body = scenario_tables.scenario_tables_body([_table("x" * 300)], "t", "0a1b2c3d")
    name = body["dataTables"][0]["name"]
    assert len(name) == scenario_tables.TABLE_NAME_MAX and seeds.base_name(name) == "x" * (128 - len(" [seed 0a1b2c3d]"))
