"""Run one execution scenario on the lane that built the workflow, with every external call mocked.

Uses the lane's eval endpoint ``POST /rest/instance-ai/eval/execute-with-llm-mock/:id``. A lane
whose n8n has no such endpoint gets a ``verification_gap`` — never a pass nobody measured. Network
errors are retried (5 attempts), timeouts twice, like the reference harness.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from orchestrator.n8n.errors import N8nHTTPError, N8nTransportError
from orchestrator.n8n.instance_ai import InstanceAiChat
from orchestrator.n8n.mock_execution import (
    EVAL_SCENARIO_HINTS_MAX,
    EVAL_TIMEOUT_MS_MAX,
    EVAL_TIMEOUT_MS_MIN,
    MockExecutionResult,
)
from orchestrator.n8n.rest import N8nSession
from orchestrator.redact import redact

log = logging.getLogger(__name__)

NETWORK_ATTEMPTS = 5
TIMEOUT_ATTEMPTS = 2


@dataclass
class ScenarioRun:
    result: MockExecutionResult | None
    gap: str | None = None  # why it could not be measured
    framework_error: str | None = None


@dataclass
class ScenarioTables:
    """The execution-scenario data tables one build created empty (``seedDataTables``; see
    :func:`orchestrator.builders.instance_ai.scenario_tables.create_scenario_tables`): the thread their rows are seeded
    through, and each table's lane id by its DECLARED name (what a scenario writes)."""

    thread_id: str
    ids_by_name: dict[str, str] = field(default_factory=dict)
    #: what the agent's opening message was told about them (never the recorded turn)
    note: str = ""


class ScenarioSeedFailed(Exception):
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


def _clamp_timeout(timeout_ms: int) -> int:
    return max(EVAL_TIMEOUT_MS_MIN, min(EVAL_TIMEOUT_MS_MAX, timeout_ms))


async def execute_scenario(owner: N8nSession, workflow_id: str, data_setup: str, timeout_ms: int) -> ScenarioRun:
    hints = (data_setup or "")[:EVAL_SCENARIO_HINTS_MAX] or None
    network_failures = timeouts = 0
    while True:
        try:
            result = await owner.execute_with_llm_mock(workflow_id, scenario_hints=hints, timeout_ms=_clamp_timeout(timeout_ms))
        except N8nHTTPError as exc:
            if exc.status in (404, 405):
                return ScenarioRun(None, gap=f"lane has no eval execution endpoint ({exc.status})")
            if exc.status is not None and exc.status >= 500 and network_failures + 1 < NETWORK_ATTEMPTS:
                network_failures += 1
                await asyncio.sleep(min(2.0 * network_failures, 10.0))
                continue
            return ScenarioRun(None, framework_error=redact(f"eval execution failed: {exc}"))
        except N8nTransportError as exc:
            timed_out = "timeout" in str(exc).lower() or "timed out" in str(exc).lower()
            if timed_out:
                timeouts += 1
                if timeouts < TIMEOUT_ATTEMPTS:
                    continue
            else:
                network_failures += 1
                if network_failures < NETWORK_ATTEMPTS:
                    await asyncio.sleep(min(2.0 * network_failures, 10.0))
                    continue
            return ScenarioRun(None, framework_error=redact(f"eval execution unreachable: {exc}"))
        return ScenarioRun(result)
