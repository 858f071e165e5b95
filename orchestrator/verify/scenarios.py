"""Run one execution scenario on the lane that built the workflow, with every external call mocked.

Uses the lane's eval endpoint ``POST /rest/instance-ai/eval/execute-with-llm-mock/:id``. A lane
whose n8n has no such endpoint gets a ``verification_gap`` — never a pass nobody measured. Network
errors are retried (5 attempts), timeouts twice, like the reference harness.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from orchestrator.n8n.errors import N8nHTTPError, N8nTransportError
from orchestrator.n8n.mock_execution import (
    EVAL_SCENARIO_HINTS_MAX,
    EVAL_TIMEOUT_MS_MAX,
    EVAL_TIMEOUT_MS_MIN,
    MockExecutionResult,
)
from orchestrator.n8n.rest import N8nSession
from orchestrator.redact import redact

NETWORK_ATTEMPTS = 5
TIMEOUT_ATTEMPTS = 2


@dataclass
class ScenarioRun:
    result: MockExecutionResult | None
    gap: str | None = None  # why it could not be measured
    framework_error: str | None = None


def _clamp_timeout(timeout_ms: int) -> int:
    return max(EVAL_TIMEOUT_MS_MIN, min(EVAL_TIMEOUT_MS_MAX, timeout_ms))


async def execute_scenario(owner: N8nSession, workflow_id: str, data_setup: str, timeout_ms: int) -> ScenarioRun:
    """Run ``workflow_id`` once through the lane's eval endpoint with mocked LLM calls, hinted by
    ``data_setup``. Retries 5xx and network failures (5 tries, backing off) and a timeout once;
    never raises for the lane: a missing endpoint comes back as a ``gap``, any other failure as a
    ``framework_error`` (redacted)."""
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
