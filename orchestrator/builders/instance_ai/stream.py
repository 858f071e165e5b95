"""Reading Instance AI's event stream for one build: :class:`RunReader` turns each
:class:`~orchestrator.n8n.instance_ai.StreamEvent` into transcript entries (assistant text segments,
tool calls and results, confirmations, agents, errors, run ends) and into :class:`RunState` — the
build facts the builder decides on (workflows built, the main one, agents and config-evals made,
errors, an outage or a sandbox fault). Reading only: answering confirmations and cancelling are the
builder's (:mod:`orchestrator.builders.instance_ai.builder`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.builders.instance_ai.run_errors import classify_run_error, sandbox_fault
from orchestrator.handoff import ArtifactRef, add_ref, agent_ref, config_eval_ref
from orchestrator.n8n.instance_ai import StreamEvent
from orchestrator.outage import OutageInfo
from orchestrator.transcript import Transcript

BUILD_TOOL = "build-workflow"


@dataclass
class RunState:
    """What the event stream told about the build so far (across turns of one attempt)."""

    tools: dict[str, str] = field(default_factory=dict)  # toolCallId → toolName
    workflow_ids: list[str] = field(default_factory=list)  # successful build-workflow results, in order
    main_workflow_id: str | None = None  # the last non-supporting one
    agent_ids: list[str] = field(default_factory=list)
    #: Agents and config-evals the build made (``orchestrator.verify.artifacts``), in order
    artifact_refs: list[ArtifactRef] = field(default_factory=list)
    call_args: dict[str, Any] = field(default_factory=dict)  # toolCallId → args
    errors: list[dict[str, Any]] = field(default_factory=list)
    outage: OutageInfo | None = None
    sandbox_fault: str | None = None
    last_status: str | None = None
    last_reason: str | None = None
    runs: int = 0
    confirmations: int = 0
    text_segments: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)


class RunReader:
    """Turns stream events into transcript entries and build facts; answers confirmations."""

    def __init__(self, transcript: Transcript, state: RunState, *, on_workflow: Callable[[str], object] | None = None,
                 on_agent: Callable[[str], object] | None = None) -> None:
        self.transcript = transcript
        self.state = state
        self.on_workflow = on_workflow
        self.on_agent = on_agent

    # text arrives as ephemeral deltas; a stored ``text-block`` (replayed after a reconnect) is the
    # whole segment. A segment closes when its agent does anything else.
    def _segment(self, event: StreamEvent) -> tuple[str, str, str]:
        return (event.run_id or "", event.agent_id or "", str(event.data.get("responseId") or ""))

    def _close_segments(self, run_id: str | None, agent_id: str | None = None) -> None:
        for key in [k for k in self.state.text_segments if k[0] == (run_id or "") and (agent_id is None or k[1] == agent_id)]:
            text = "".join(self.state.text_segments.pop(key))
            if text.strip():
                self.transcript.add("assistant", text=text, agent=key[1] or None)

    def forget_open_segments(self) -> None:
        """After a reconnect n8n resends each open segment whole: drop the partial copies."""
        self.state.text_segments.clear()

    def feed(self, event: StreamEvent) -> None:
        """Take one stream event: text goes to the transcript as it completes, tool calls and results,
        built workflows and agents, confirmations and errors into the :class:`RunState`."""
        kind, payload, s = event.kind, event.payload, self.state
        if kind == "text-delta":
            s.text_segments.setdefault(self._segment(event), []).append(str(payload.get("text", "")))
            return
        if kind == "text-block":
            s.text_segments[self._segment(event)] = [str(payload.get("text", ""))]
            key = self._segment(event)
            text = "".join(s.text_segments.pop(key))
            if text.strip():
                self.transcript.add("assistant", text=text, agent=key[1] or None)
            return
        if kind in ("reasoning-delta", "reasoning-block", "status", "tool-input-start", "run-sync", "tasks-update",
                    "preferences-applied", "filesystem-request"):
            return
        self._close_segments(event.run_id, None if kind == "run-finish" else event.agent_id)
        if kind == "run-start":
            s.runs += 1
        elif kind == "tool-call":
            call_id, tool = str(payload.get("toolCallId", "")), str(payload.get("toolName", ""))
            s.tools[call_id] = tool
            s.call_args[call_id] = payload.get("args")
            self.transcript.add("tool_call", tool=tool, call_id=call_id, args=payload.get("args") or {},
                                agent=event.agent_id)
        elif kind == "tool-result":
            call_id = str(payload.get("toolCallId", ""))
            tool = s.tools.get(call_id, "")
            result = payload.get("result")
            self.transcript.add("tool_result", tool=tool or None, call_id=call_id, result=result, agent=event.agent_id)
            made = config_eval_ref(tool, s.call_args.get(call_id), result)
            if made is not None:
                add_ref(s.artifact_refs, made)
            if isinstance(result, dict) and result.get("success") is False:
                errors = result.get("errors") or [result.get("error")]
                s.sandbox_fault = s.sandbox_fault or sandbox_fault(" ".join(str(e) for e in errors if e))
            if tool == BUILD_TOOL and isinstance(result, dict) and result.get("success") is True:
                wf = result.get("workflowId")
                if isinstance(wf, str) and wf:
                    if wf not in s.workflow_ids:
                        s.workflow_ids.append(wf)
                        if self.on_workflow:
                            self.on_workflow(wf)
                    supporting = (s.tools.get(call_id) == BUILD_TOOL and result.get("isSupportingWorkflow") is True)
                    if not supporting or s.main_workflow_id is None:
                        s.main_workflow_id = wf
        elif kind == "tool-error":
            call_id = str(payload.get("toolCallId", ""))
            self.transcript.add("tool_error", tool=s.tools.get(call_id) or None, call_id=call_id,
                                error=payload.get("error"), agent=event.agent_id)
            s.sandbox_fault = s.sandbox_fault or sandbox_fault(str(payload.get("error") or ""))
        elif kind == "confirmation-request":
            s.confirmations += 1
            self.transcript.add("confirmation", request_id=payload.get("requestId"), tool=payload.get("toolName"),
                                input_type=payload.get("inputType") or "approval", message=payload.get("message"),
                                questions=payload.get("questions"), args=payload.get("args"), agent=event.agent_id)
        elif kind == "agent-spawned":
            raw_target = payload.get("targetResource")
            target: dict[str, Any] = raw_target if isinstance(raw_target, dict) else {}
            self.transcript.add("agent", role=payload.get("role"), agent_kind=payload.get("kind"),
                                target=target or None, agent=event.agent_id)
            spawned = agent_ref(payload)
            if spawned is not None:
                add_ref(s.artifact_refs, spawned)
            if target.get("type") == "agent" and isinstance(target.get("id"), str) and target["id"] not in s.agent_ids:
                s.agent_ids.append(target["id"])
                if self.on_agent:
                    self.on_agent(target["id"])
        elif kind == "agent-completed":
            if payload.get("error"):
                self.transcript.add("tool_error", tool="agent", error=payload.get("error"), agent=event.agent_id)
        elif kind == "error":
            s.errors.append(payload)
            self.transcript.add("error", message=payload.get("content"), status=payload.get("statusCode"),
                                code=payload.get("code"), agent=event.agent_id)
            s.outage = s.outage or classify_run_error(payload)
        elif kind == "run-finish":
            s.last_status = str(payload.get("status") or "")
            s.last_reason = payload.get("reason") if isinstance(payload.get("reason"), str) else None
            self.transcript.add("run", status=s.last_status, reason=s.last_reason, run_id=event.run_id)
            if s.last_status == "error" and s.outage is None and s.last_reason:
                s.outage = classify_run_error(s.last_reason)
