"""An Agent's execution scenarios: run on the lane, judged against each scenario's success criteria.

As n8n's harness does for a build whose artifact is an Agent (``run/case-pipeline.ts`` ``agentRunnable``,
``harness/agent-execution.ts``):

- **draft Agents are not run**: an Agent with no model, or still on its seed's model with no declared
  credential of that provider, fails the scenario without running it — ``builder_issue`` when the
  case declared a model-provider credential the builder should have used, else ``framework_issue``
  (the case gave it nothing to run on);
- **the run**: ``POST /rest/instance-ai/eval/execute-agent-with-llm-mock/:agentId``
  ``{projectId, scenarioHints: dataSetup, timeoutMs}``; the Agent runs its real model (here the run's
  model route, through its credential) with every outbound HTTP call mocked. Network errors are
  retried 5 times, timeouts twice, an in-band transient abort (a ``success: false`` run whose error
  reads as a database race) 5 times; what still fails is the framework's (``Agent scenario execution
  error: …``), and it counts;
- **the verdict**: one judge call over one item, the success criteria, with the Agent's config and
  skills and the run (pre-analysis flags for seed warnings, disabled features and mock errors; the
  opening message, status, errors; at most 30 tool calls — the first 22 and the last 8 — inputs and
  outputs capped at 2,000 characters, 5 intercepted requests each; the final reply; turns and
  usage). No verdict: ``incomplete`` (``verification_failure``).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.cases import EvalCase
from orchestrator.domain import FAILURE_BUCKETS, Attribution, Verdict
from orchestrator.handoff import ArtifactRef
from orchestrator.n8n.errors import N8nError, N8nHTTPError, N8nTransportError
from orchestrator.n8n.mock_execution import EVAL_SCENARIO_HINTS_MAX
from orchestrator.n8n.rest import N8nSession
from orchestrator.redact import redact
from orchestrator.results.model import ScenarioResult
from orchestrator.verify.judge import Judge

EXECUTE_PATH = "/rest/instance-ai/eval/execute-agent-with-llm-mock/{agent_id}"
NETWORK_ATTEMPTS = 5
TIMEOUT_ATTEMPTS = 2
TRANSIENT_ABORT_ATTEMPTS = 5
#: An in-band abort n8n retries (``isTransientExecutionAbort``): a database race, not the Agent.
TRANSIENT_ABORT = re.compile(r"SQLITE_CONSTRAINT|not found or not accessible", re.I)
#: the eval endpoints' ``timeoutMs`` bounds
MIN_TIMEOUT_MS, MAX_TIMEOUT_MS = 30_000, 3_600_000
MAX_TOOL_CALLS, HEAD_TOOL_CALLS, TAIL_TOOL_CALLS = 30, 22, 8
MAX_PAYLOAD, MAX_REQUESTS, MAX_REQUEST_BODY, MAX_MOCK_RESPONSE = 2_000, 5, 1_000, 1_500
#: Model providers (an Agent model's prefix) and the credential types that serve them: a declared one
#: is what the builder should have used for the Agent's model.
PROVIDER_CREDENTIALS: dict[str, frozenset[str]] = {
    "anthropic": frozenset({"anthropicApi"}),
    "openai": frozenset({"openAiApi"}),
    "google": frozenset({"googlePalmApi"}),
}
LLM_CREDENTIAL_TYPES = frozenset().union(*PROVIDER_CREDENTIALS.values())
NO_MODEL = "Agent has no model configured"
SEED_MODEL_WITHOUT_CREDENTIAL = "Seeded Agent model has no declared credential"

AGENT_SCENARIO_SYSTEM = (
    "You verify one run of an n8n Agent against a scenario's success criteria. The Agent ran its real "
    "model; every outbound HTTP call of its tools was answered by an LLM mock. You get the Agent under "
    "test (its configuration and skills), the scenario, automated pre-analysis flags, and the run (the "
    "opening message, its status, the tool calls with what the mock answered, the final reply). A "
    "feature the harness disabled is not the Agent's fault. Decide pass/fail; on fail give the root cause "
    "category: builder_issue (the Agent is built wrong), mock_issue (the mock returned data the scenario "
    "did not describe), framework_issue (the eval framework failed), verification_gap (not enough "
    'information). Answer ONLY with JSON: {"verdicts": [{"index": 0, "pass": false, "reason": "one line", '
    '"category": "builder_issue"}]}.'
)


@dataclass(frozen=True)
class AgentRun:
    """What the endpoint answered (``InstanceAiEvalAgentExecutionResult``), or why there is nothing."""

    result: dict[str, Any] | None = None
    framework_error: str | None = None
    gap: str | None = None


def draft_reason(case: EvalCase, config: dict[str, Any]) -> str | None:
    """Why the Agent cannot run (n8n's ``draftAgentVerdict``), or None."""
    model = str(config.get("model") or "")
    if not model:
        return NO_MODEL
    seeded = {str(getattr(a.config, "model", "") or "") for a in (case.inline_seed.agents if case.inline_seed else [])}
    provider = model.split("/", 1)[0]
    declared = {c.type for c in case.credentials}
    if model in seeded and not (PROVIDER_CREDENTIALS.get(provider, frozenset()) & declared):
        return SEED_MODEL_WITHOUT_CREDENTIAL
    return None


def _clamp(timeout_ms: int) -> int:
    return max(MIN_TIMEOUT_MS, min(MAX_TIMEOUT_MS, timeout_ms))


async def execute_agent(owner: N8nSession, agent_id: str, project_id: str, data_setup: str,
                        timeout_ms: int) -> AgentRun:
    """Run the Agent once on the scenario, with n8n's retries (module doc)."""
    body: dict[str, Any] = {"projectId": project_id, "timeoutMs": _clamp(timeout_ms)}
    if data_setup:
        body["scenarioHints"] = data_setup[:EVAL_SCENARIO_HINTS_MAX]
    path = EXECUTE_PATH.format(agent_id=agent_id)
    network = timeouts = aborts = 0
    while True:
        try:
            answer = await owner._send("POST", path, body, timeout=_clamp(timeout_ms) / 1000 + 60)
        except N8nHTTPError as exc:
            if exc.status in (404, 405) and "agent" not in exc.message.lower():
                return AgentRun(gap=f"lane has no Agent eval execution endpoint ({exc.status})")
            if exc.status is not None and exc.status >= 500 and network + 1 < NETWORK_ATTEMPTS:
                network += 1
                await asyncio.sleep(0.5 * network)
                continue
            return AgentRun(framework_error=redact(f"Agent scenario execution error: {exc}"))
        except N8nTransportError as exc:
            timed_out = "timeout" in str(exc).lower() or "timed out" in str(exc).lower()
            if timed_out and timeouts + 1 < TIMEOUT_ATTEMPTS:
                timeouts += 1
                continue
            if not timed_out and network + 1 < NETWORK_ATTEMPTS:
                network += 1
                await asyncio.sleep(0.5 * network)
                continue
            return AgentRun(framework_error=redact(f"Agent scenario execution error: {exc}"))
        result = answer if isinstance(answer, dict) else {}
        errors = [str(e) for e in result.get("errors") or []]
        if not result.get("success") and any(TRANSIENT_ABORT.search(e) for e in errors) \
                and aborts + 1 < TRANSIENT_ABORT_ATTEMPTS:
            aborts += 1
            await asyncio.sleep(0.5 * aborts)
            continue
        return AgentRun(result=result)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _cap(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + "…[truncated]"


def _tool_call_lines(calls: list[dict[str, Any]]) -> list[str]:
    shown = calls if len(calls) <= MAX_TOOL_CALLS else [*calls[:HEAD_TOOL_CALLS], *calls[-TAIL_TOOL_CALLS:]]
    lines: list[str] = []
    for i, call in enumerate(shown):
        if len(calls) > MAX_TOOL_CALLS and i == HEAD_TOOL_CALLS:
            lines.append(f"… {len(calls) - MAX_TOOL_CALLS} tool call(s) omitted …")
        lines.append(f"### {call.get('tool')} ({call.get('kind') or 'tool'}){' — mocked' if call.get('mocked') else ''}")
        lines.append(f"Input: {_cap(call.get('input'), MAX_PAYLOAD)}")
        if call.get("error"):
            lines.append(f"Error: {_cap(call.get('error'), MAX_PAYLOAD)}")
        else:
            lines.append(f"Output: {_cap(call.get('output'), MAX_PAYLOAD)}")
        for req in (call.get("interceptedRequests") or [])[:MAX_REQUESTS]:
            if isinstance(req, dict):
                lines.append(f"- {req.get('method')} {req.get('url')} ({req.get('nodeType')}): request "
                             f"{_cap(req.get('requestBody'), MAX_REQUEST_BODY)}; mock answered "
                             f"{_cap(req.get('mockResponse'), MAX_MOCK_RESPONSE)}")
    return lines


def _flags(result: dict[str, Any]) -> list[str]:
    seed = _dict(result.get("seed"))
    flags = [f"⚠ FRAMEWORK ISSUE: {w}" for w in seed.get("warnings") or []]
    flags += [f"⚠ HARNESS LIMITATION: agent feature \"{s.get('feature')}\" was disabled for the eval "
              f"({s.get('reason')}); do not fail the Agent for it"
              for s in result.get("skippedFeatures") or [] if isinstance(s, dict)]
    for call in result.get("toolCalls") or []:
        for req in (call.get("interceptedRequests") or []) if isinstance(call, dict) else []:
            if isinstance(req, dict) and "_evalMockError" in json.dumps(req.get("mockResponse"), default=str):
                flags.append(f"⚠ MOCK ISSUE: the mock could not answer {req.get('method')} {req.get('url')}")
    return flags


def agent_scenario_prompt(agent_context: str, scenario: Any, result: dict[str, Any]) -> str:
    """The judge's input: the Agent under test, then the scenario and the run (n8n's
    ``buildAgentVerificationArtifact`` layout)."""
    seed = _dict(result.get("seed"))
    calls = [c for c in result.get("toolCalls") or [] if isinstance(c, dict)]
    usage = _dict(result.get("usage"))
    flags = _flags(result)
    parts = [
        "## Agent under test",
        "The Agent ran with its real model; every outbound HTTP call of its tools was mocked.",
        agent_context,
        f"## Scenario: {scenario.name}\n{scenario.description or ''}\nData setup: {scenario.data_setup or '(none)'}",
        "## Pre-analysis (automated flags)\n" + ("\n".join(flags) if flags else "(none)"),
        "## Agent run\n"
        f"Opening message: {seed.get('openingMessage') or '(none)'}\n"
        f"Status: {'success' if result.get('success') else 'failed'}; finish reason: {result.get('finishReason')}; "
        f"model: {result.get('model')}\n"
        "Errors: " + ("; ".join(str(e) for e in result.get("errors") or []) or "(none)"),
        f"## Tool calls ({len(calls)})\n" + ("\n".join(_tool_call_lines(calls)) or "(no tool calls)"),
        f"## Agent final reply\n{result.get('finalText') or '(empty)'}",
        f"Model turns: {len(result.get('modelTurns') or [])}; tokens in {usage.get('inputTokens')}, "
        f"out {usage.get('outputTokens')}",
        f"## Success criteria (item 0)\n{scenario.success_criteria}\n\n"
        "Decide whether the run meets the success criteria.",
    ]
    return "\n\n".join(parts)


async def agent_scenario(owner: N8nSession, judge: Judge, case: EvalCase, ref: ArtifactRef, project_id: str,
                         scenario: Any, timeout_ms: int, agent_context: str) -> ScenarioResult:
    """One execution scenario of the case, run against the build's Agent and judged (module doc)."""
    project = ref.project_id or project_id
    if scenario.seed_data_tables:
        return _framework(scenario.name, "the scenario declares seed data tables, which an Agent's scenario "
                                         "run here does not seed")
    try:
        raw = await owner.get(f"/rest/projects/{project}/agents/v2/{ref.id}/config")
    except N8nError as exc:
        return _framework(scenario.name, f"Agent scenario execution error: could not read the Agent: {exc}")
    config = raw.get("config") if isinstance(raw, dict) and isinstance(raw.get("config"), dict) else raw
    draft = draft_reason(case, config if isinstance(config, dict) else {})
    if draft is not None:
        declared_llm = any(c.type in LLM_CREDENTIAL_TYPES for c in case.credentials)
        charged = Attribution.builder_issue if declared_llm else Attribution.framework_issue
        return ScenarioResult(name=scenario.name, verdict=Verdict.failed, failure_category=charged.value,
                              attribution=charged, reason=f"not run: {draft}")
    run = await execute_agent(owner, ref.id, project, scenario.data_setup or "", timeout_ms)
    if run.gap:
        return ScenarioResult(name=scenario.name, verdict=Verdict.incomplete, failure_category="verification_gap",
                              attribution=Attribution.verification_gap, reason=run.gap)
    if run.result is None:
        return _framework(scenario.name, run.framework_error or "Agent scenario execution error: no result")
    prompt = agent_scenario_prompt(agent_context, scenario, run.result)
    [judgement] = await judge.judge(AGENT_SCENARIO_SYSTEM, prompt, 1)
    if judgement.verdict is Verdict.incomplete:
        return ScenarioResult(name=scenario.name, verdict=Verdict.incomplete, failure_category="verification_failure",
                              attribution=Attribution.verification_gap, reason=judgement.reason,
                              execution_id=str(run.result.get("runId") or "") or None)
    category = judgement.category
    attribution = Attribution(category) if category in {a.value for a in FAILURE_BUCKETS} else judgement.attribution
    return ScenarioResult(
        name=scenario.name, verdict=judgement.verdict, failure_category=category, attribution=attribution,
        reason=judgement.reason, execution_id=str(run.result.get("runId") or "") or None,
        execution={"agentRun": _record(run.result)},
        judge_input={"system": AGENT_SCENARIO_SYSTEM, "prompt": prompt, "count": 1})


def _framework(name: str, reason: str) -> ScenarioResult:
    return ScenarioResult(name=name, verdict=Verdict.failed, failure_category="framework_issue",
                          attribution=Attribution.framework_issue, reason=redact(reason)[:1000])


def _record(result: dict[str, Any]) -> dict[str, Any]:
    """What the report keeps of the run (the model turns' raw bodies are left out: they repeat the prompt)."""
    return {k: result.get(k) for k in ("runId", "success", "errors", "finalText", "model", "finishReason",
                                       "toolCalls", "usage", "seed", "skippedFeatures", "mockedCredentials")}
