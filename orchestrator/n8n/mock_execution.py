"""n8n's workflow run with every external call mocked by the lane's model
(``POST /rest/instance-ai/eval/execute-with-llm-mock/:id``): the request's limits and body, and the
answer's models. The request itself is :meth:`orchestrator.n8n.rest.N8nSession.execute_with_llm_mock`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

EVAL_TIMEOUT_MS_MIN = 30_000
EVAL_TIMEOUT_MS_MAX = 3_600_000
EVAL_SCENARIO_HINTS_MAX = 2000
EVAL_PIN_NODES_MAX = 50


class NodeResult(BaseModel):
    """One node of an ``execute-with-llm-mock`` run. ``execution_mode``: ``real``, ``mocked`` or ``pinned``."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    outputs: dict[str, Any] = Field(default_factory=dict)
    output_count: int = Field(0, alias="outputCount")
    iteration_count: int = Field(0, alias="iterationCount")
    intercepted_requests: list[dict[str, Any]] = Field(default_factory=list, alias="interceptedRequests")
    execution_mode: str | None = Field(None, alias="executionMode")
    first_error_iteration: int | None = Field(None, alias="firstErrorIteration")
    start_time: int | None = Field(None, alias="startTime")


class MockHints(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    global_context: str = Field("", alias="globalContext")
    node_hints: dict[str, Any] = Field(default_factory=dict, alias="nodeHints")
    trigger_content: Any = Field(default_factory=dict, alias="triggerContent")
    warnings: list[str] = Field(default_factory=list)
    bypass_pin_data: dict[str, Any] = Field(default_factory=dict, alias="bypassPinData")


class MockExecutionResult(BaseModel):
    """Answer of ``POST /rest/instance-ai/eval/execute-with-llm-mock/:id``.

    ``success`` is false when a node failed (``errors`` then holds ``Node "X": …`` and
    ``Workflow error: …``) or the run could not start (``errors`` = ``["Workflow … not found or not
    accessible"]``, empty ``nodeResults``). A mock the model failed to produce does not fail the run:
    the node's output item carries ``_evalMockError: true`` — see :attr:`mock_errors`.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    execution_id: str = Field(alias="executionId")
    success: bool
    node_results: dict[str, NodeResult] = Field(default_factory=dict, alias="nodeResults")
    errors: list[str] = Field(default_factory=list)
    hints: MockHints = Field(default_factory=lambda: MockHints.model_validate({}))
    mocked_credentials: list[Any] = Field(default_factory=list, alias="mockedCredentials")
    rewritten_credentials: list[Any] = Field(default_factory=list, alias="rewrittenCredentials")

    @property
    def mock_errors(self) -> list[str]:
        """``node: message`` for every output item the mock layer marked ``_evalMockError``."""
        found: list[str] = []
        for name, node in self.node_results.items():
            for branches in node.outputs.values():
                for branch in branches or []:
                    for item in branch or []:
                        payload = item.get("json") if isinstance(item, dict) else None
                        if isinstance(payload, dict) and payload.get("_evalMockError"):
                            found.append(f"{name}: {payload.get('message', '')}")
        return found

    @property
    def framework_issue(self) -> bool:
        """Whether the mocked execution failed through the eval framework (a ``FRAMEWORK ISSUE:`` error or a
        mock error) rather than through the workflow."""
        return any(e.startswith("FRAMEWORK ISSUE:") for e in self.errors) or bool(self.mock_errors)


def mock_execution_body(*, scenario_hints: str | None, pin_nodes: list[str] | None, timeout_ms: int) -> dict[str, Any]:
    """The request body; a value outside n8n's limits (timeout, hint length, pinned names) is a ValueError."""
    if not EVAL_TIMEOUT_MS_MIN <= timeout_ms <= EVAL_TIMEOUT_MS_MAX:
        raise ValueError(f"timeout_ms must be within {EVAL_TIMEOUT_MS_MIN}–{EVAL_TIMEOUT_MS_MAX} (got {timeout_ms})")
    if scenario_hints is not None and len(scenario_hints) > EVAL_SCENARIO_HINTS_MAX:
        raise ValueError(f"scenario_hints is longer than {EVAL_SCENARIO_HINTS_MAX} characters ({len(scenario_hints)})")
    if pin_nodes is not None and len(pin_nodes) > EVAL_PIN_NODES_MAX:
        raise ValueError(f"pin_nodes has more than {EVAL_PIN_NODES_MAX} names ({len(pin_nodes)})")
    body: dict[str, Any] = {"timeoutMs": timeout_ms}
    if scenario_hints:
        body["scenarioHints"] = scenario_hints
    if pin_nodes:
        body["pinNodes"] = pin_nodes
    return body
