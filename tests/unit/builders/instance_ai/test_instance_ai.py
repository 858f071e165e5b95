"""The instance-ai builder's parts that need no lane: the event-stream reader (frames, pings,
reconnect with Last-Event-ID, run-sync), event classification, outage classification and
confirmation answers.

The reconnect tests serve n8n's SSE framing (as ``instance-ai.controller.js`` writes it:
``id: N`` + ``data: {json}``, ``: ping``, ``event: run-sync``) from a loopback HTTP server that
drops the connection on purpose — a real n8n cannot be made to drop a stream mid-run on demand.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from orchestrator.builders.instance_ai.builder import answer_confirmation, unsupported_reason, user_turns
from orchestrator.builders.instance_ai.run_errors import classify_run_error, sandbox_fault
from orchestrator.builders.instance_ai.stream import RunReader, RunState
from orchestrator.cases import EvalCase
from orchestrator.n8n.errors import N8nHTTPError, N8nTransportError
from orchestrator.n8n.instance_ai import EventStream, FrameParser, StreamEvent
from orchestrator.n8n.rest import N8nClient, N8nSession
from orchestrator.transcript import Transcript

# ------------------------------------------------------------------------------------------------
# frames


def _feed(lines: list[str]) -> tuple[list[StreamEvent], FrameParser]:
    parser = FrameParser()
    out = [e for e in (parser.feed(line) for line in lines) if e is not None]
    return out, parser


def test_frames_carry_their_own_id_only_and_pings_are_counted() -> None:
    events, parser = _feed([
        "id: 7", 'data: {"type":"run-start","runId":"r1","agentId":"a","payload":{"messageId":"m"}}', "",
        ": ping", "",
        'data: {"type":"text-delta","runId":"r1","agentId":"a","payload":{"text":"Hel"}}', "",
        "event: run-sync", 'data: {"runId":"r1","agentTree":{},"status":"active"}', "",
        "id: 8", "data: not json", "",
        "id: 9", 'data: {"type":"tool-call",', 'data: "runId":"r1","agentId":"a","payload":{"toolCallId":"t","toolName":"x","args":{}}}', "",
    ])
    assert [(e.kind, e.id) for e in events] == [("run-start", 7), ("text-delta", None), ("run-sync", None), ("tool-call", 9)]
    assert parser.pings == 1 and parser.bad == 1
    assert events[3].payload["toolName"] == "x" and events[0].run_id == "r1"


# ------------------------------------------------------------------------------------------------
# the stream over HTTP: reconnect with Last-Event-ID


def _frame(seq: int | None, data: dict[str, Any], event: str | None = None) -> bytes:
    head = (f"id: {seq}\n" if seq is not None else "") + (f"event: {event}\n" if event else "")
    return f"{head}data: {json.dumps(data)}\n\n".encode()


class _SseServer:
    """Serves a list of "connections": each is the frames to send, then the connection is dropped."""

    def __init__(self, connections: list[list[bytes]], status: int = 200) -> None:
        self.connections = connections
        self.status = status
        self.seen_last_ids: list[str | None] = []
        self.seen_cookies: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                outer.seen_last_ids.append(self.headers.get("Last-Event-ID"))
                outer.seen_cookies.append(self.headers.get("cookie"))
                index = len(outer.seen_last_ids) - 1
                if outer.status != 200:
                    body = b'{"message":"Not authorized for this thread"}'
                    self.send_response(outer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=UTF-8")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                frames = outer.connections[index] if index < len(outer.connections) else []
                for frame in frames:
                    self.wfile.write(frame)
                    self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _ev(event_type: str, run: str = "r1", agent: str = "a", **payload: Any) -> dict[str, Any]:
    return {"type": event_type, "runId": run, "agentId": agent, "payload": payload}


async def _collect(url: str, count: int, **kwargs: Any) -> tuple[list[StreamEvent], EventStream]:
    client = N8nClient(url)
    stream = EventStream(N8nSession(client, "cookie-value-123", {}), "thread-1", **kwargs)
    got: list[StreamEvent] = []
    try:
        await stream.open(timeout_s=5)
        while len(got) < count:
            got.append(await stream.next(timeout_s=5))
    finally:
        await stream.aclose()
        await client.aclose()
    return got, stream


async def test_stream_reconnects_after_a_drop_with_last_event_id_and_skips_replayed_ids() -> None:
    server = _SseServer([
        [_frame(1, _ev("run-start", messageId="m")), b": ping\n\n", _frame(None, _ev("text-delta", text="Hi")),
         _frame(2, _ev("tool-call", toolCallId="t1", toolName="nodes", args={}))],
        # n8n replays from the cursor; a replayed id must not be delivered twice
        [_frame(2, _ev("tool-call", toolCallId="t1", toolName="nodes", args={})),
         _frame(3, _ev("tool-result", toolCallId="t1", result={"ok": True})),
         _frame(None, {"runId": "r1", "agentTree": {}, "status": "active"}, event="run-sync"),
         _frame(4, _ev("run-finish", status="completed"))],
    ])
    try:
        got, stream = await _collect(server.url, 5, reconnect_waits_s=(0.01, 0.01))
    finally:
        server.close()
    assert [(e.kind, e.id) for e in got] == [("run-start", 1), ("text-delta", None), ("tool-call", 2),
                                             ("tool-result", 3), ("run-sync", None)]
    assert server.seen_last_ids[:2] == [None, "2"]
    assert server.seen_cookies[0] == "n8n-auth=cookie-value-123"
    assert stream.stats.reconnects >= 1 and stream.stats.duplicates == 1 and stream.stats.pings == 1


async def test_stream_reports_a_refused_stream_at_once() -> None:
    server = _SseServer([], status=403)
    try:
        with pytest.raises(N8nHTTPError) as info:
            await _collect(server.url, 1, reconnect_waits_s=(0.01,))
    finally:
        server.close()
    assert info.value.status == 403 and len(server.seen_last_ids) == 1


async def test_stream_gives_up_after_its_reconnects_and_says_so() -> None:
    server = _SseServer([[_frame(1, _ev("run-start", messageId="m"))]])  # then empty connections
    try:
        with pytest.raises(N8nTransportError, match="reconnects failed"):
            await _collect(server.url, 2, reconnect_waits_s=(0.01, 0.01, 0.01))
    finally:
        server.close()
    assert server.seen_last_ids == [None, "1", "1", "1"]  # one connection per back-off step


# ------------------------------------------------------------------------------------------------
# what a run's events mean


def _reader() -> tuple[RunReader, RunState, Transcript, list[str]]:
    transcript = Transcript(None, builder="instance-ai")
    state = RunState()
    built: list[str] = []
    return RunReader(transcript, state, on_workflow=built.append), state, transcript, built


def _se(event_type: str, seq: int | None = None, **kw: Any) -> StreamEvent:
    data = _ev(event_type, **kw)
    return StreamEvent(event_type, data, seq)


def test_build_workflow_result_is_found_by_tool_name_only() -> None:
    reader, state, transcript, built = _reader()
    for event in [
        _se("run-start", messageId="m"),
        _se("tool-call", toolCallId="w1", toolName="workflows", args={"action": "get-as-code"}),
        _se("tool-result", toolCallId="w1", result={"success": True, "workflowId": "SEEDED1"}),
        _se("tool-call", toolCallId="b1", toolName="build-workflow", args={"filePath": "x.json"}),
        _se("tool-result", toolCallId="b1", result={"success": False, "errors": ["no"]}),
        _se("tool-call", toolCallId="b2", toolName="build-workflow", args={"filePath": "x.json"}),
        _se("tool-result", toolCallId="b2", result={"success": True, "workflowId": "NEW1", "workflowName": "n"}),
        _se("run-finish", status="completed"),
    ]:
        reader.feed(event)
    assert state.main_workflow_id == "NEW1" and built == ["NEW1"] and state.runs == 1
    assert state.last_status == "completed"


def test_text_deltas_become_one_assistant_entry_and_a_replayed_block_replaces_partials() -> None:
    reader, state, transcript, _ = _reader()
    reader.feed(_se("text-delta", text="I'll build "))
    reader.feed(_se("text-delta", text="it now."))
    reader.feed(_se("tool-call", toolCallId="t", toolName="nodes", args={}))
    reader.feed(_se("text-delta", agent="a", text="Do"))  # the stream drops here …
    reader.forget_open_segments()
    reader.feed(_se("text-block", seq=9, text="Done: workflow saved."))  # … and n8n replays the whole segment
    reader.feed(_se("run-finish", status="completed"))
    texts = [e["text"] for e in transcript.entries if e["kind"] == "assistant"]
    assert texts == ["I'll build it now.", "Done: workflow saved."]


def test_agent_spawned_with_an_agent_target_is_a_built_agent() -> None:
    transcript = Transcript(None, builder="instance-ai")
    state = RunState()
    agents: list[str] = []
    reader = RunReader(transcript, state, on_agent=agents.append)
    reader.feed(_se("agent-spawned", parentId="o", role="builder", tools=[], kind="agent-builder",
                    targetResource={"type": "agent", "id": "AG1", "name": "Support"}))
    reader.feed(_se("agent-spawned", parentId="o", role="builder", tools=[], kind="builder",
                    targetResource={"type": "workflow", "id": "WF"}))
    assert agents == ["AG1"] and state.agent_ids == ["AG1"]


def test_error_events_classify_outages_and_not_the_workflows_own_traffic() -> None:
    reader, state, transcript, _ = _reader()
    reader.feed(_se("error", content="Tool errors: HTTP Request returned 500 Internal Server Error"))
    assert state.outage is None
    reader.feed(_se("error", content="Overloaded", statusCode=529, provider="anthropic"))
    reader.feed(_se("run-finish", status="error"))
    assert state.outage is not None and state.outage.status == 529 and state.outage.kind == "overloaded"
    assert [e["kind"] for e in transcript.entries][-3:] == ["error", "error", "run"]


@pytest.mark.parametrize(("payload", "expected"), [
    ({"content": "x", "statusCode": 429}, 429),
    ({"content": "x", "statusCode": 503}, 503),
    ({"content": "x", "statusCode": 400}, None),
    ({"content": "x", "statusCode": 401}, None),
    ({"content": "boom", "code": "overloaded_error"}, 529),
    ("Agent error: 529 {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}", 529),
    ("Agent error: Internal server error (502)", 502),
    ("Agent error: Too many requests", 429),
    ("overloaded_error: Overloaded", 529),
    ("Failed after 3 attempts. Last error: AI_APICallError: Overloaded", 529),  # seen on 2.41.1 (scripted 529)
    ("Failed after 3 attempts. Last error: AI_APICallError: Internal server error", 500),
    ("Failed after 3 attempts. Last error: AI_APICallError: Number of request tokens has exceeded your per-minute rate limit", 429),
    ("AI_APICallError: Cannot connect to API: ECONNREFUSED", "connection"),
    ("AI_APICallError: prompt is too long", None),
    ("Tool errors: HTTP Request got 503 from api.example.com", None),
    ("Agent error: Tool errors: Slack returned 500", None),
    ("Agent error: invalid tool input", None),
    ("The workflow failed validation", None),
])
def test_classify_run_error(payload: Any, expected: int | str | None) -> None:
    info = classify_run_error(payload)
    assert ((info.status or info.kind) if info else None) == expected


@pytest.mark.parametrize(("text", "fault"), [
    ("Sandbox workspace setup failed during read-initialization-marker: connect ECONNREFUSED 127.0.0.1:45859", True),
    ("Runtime workspace is required for workflow source files.", True),
    ("Sandbox request failed: fetch failed", True),
    ("Workflow source file not found: src/workflows/a.workflow.json", False),
    ("HTTP Request returned ECONNREFUSED", False),
    (None, False),
])
def test_sandbox_faults_are_told_from_the_agents_own_errors(text: str | None, fault: bool) -> None:
    assert (sandbox_fault(text) is not None) == fault


def test_a_sandbox_fault_in_a_tool_error_is_remembered() -> None:
    reader, state, _, _ = _reader()
    reader.feed(_se("tool-call", toolCallId="w", toolName="workspace_write_file", args={}))
    reader.feed(_se("tool-error", toolCallId="w", error="Sandbox workspace setup failed: connect ECONNREFUSED 127.0.0.1:1"))
    assert state.sandbox_fault and "unreachable" in state.sandbox_fault


def test_single_prompt_confirmations_follow_n8ns_auto_approval() -> None:
    """n8n ``harness/chat-loop.ts`` ``buildAutoApprovePayload`` with ``utils/confirmation-payload.ts``
    ``tryInfrastructureResponse``: only confirmations are approved. A clarifying question gets no
    answer, a standalone credential card is deferred with an empty selection (the declared
    credential is NOT picked), a setup card is applied as it stands, network access is allowed
    for all, a gateway resource decision takes its allowing option (``utils/confirmation-payload.ts``
    at 028ab2b2)."""
    assert answer_confirmation({"requestId": "r", "toolName": "executions", "message": "Run it?"}) == \
        {"kind": "approval", "approved": True}
    questions = {"inputType": "questions", "questions": [
        {"id": "q1", "question": "Which channel?", "type": "single", "options": ["#general", "#random"]},
        {"id": "q2", "question": "Anything else?", "type": "text"}]}
    assert answer_confirmation(questions) == {"kind": "questions", "answers": []}
    assert answer_confirmation({"domainAccess": {"url": "https://x", "host": "x"}}) == \
        {"kind": "domainAccessApprove", "domainAccessAction": "allow_all"}
    assert answer_confirmation({"webSearch": {"query": "q"}}) == \
        {"kind": "domainAccessApprove", "domainAccessAction": "allow_all"}
    assert answer_confirmation({"credentialRequests": [{"credentialType": "slackApi",
                                                         "existingCredentials": [{"id": "C1", "name": "S"}]}]}) == \
        {"kind": "credentialSelection", "credentials": {}}
    setup = {"setupRequests": [{"node": {"name": "Slack"}, "credentialType": "slackApi"}],
             "credentialRequests": [{"credentialType": "slackApi"}]}
    assert answer_confirmation(setup) == {"kind": "setupWorkflowApply"}  # the wizard wins over the card
    assert answer_confirmation({"resourceDecision": {"options": ["denyOnce", "allowForSession"]}}) == \
        {"kind": "resourceDecision", "resourceDecision": "allowForSession"}
    # n8n's chat-loop test: options [denyOnce, allowOnce] → allowOnce; a value the schema
    # (instanceGatewayResourceDecisionSchema) does not know falls back to allowOnce
    assert answer_confirmation({"resourceDecision": {"options": ["denyOnce", "allowOnce"]}}) == \
        {"kind": "resourceDecision", "resourceDecision": "allowOnce"}
    for options in (["allowAlways", "denyOnce"], ["denyAlways"], []):
        assert answer_confirmation({"resourceDecision": {"options": options}}) == \
            {"kind": "resourceDecision", "resourceDecision": "allowOnce"}
    assert answer_confirmation({"credentialDestination": {"origin": "https://api.x"}}) == \
        {"kind": "credentialDestination", "origin": "https://api.x", "approved": True}
    assert answer_confirmation({"inputType": "plan-review", "planItems": [{}]}) == {"kind": "approval", "approved": True}


def test_an_attachment_only_opening_is_sent_as_the_editor_hand_off() -> None:
    case = EvalCase.model_validate({
        "conversation": [{"role": "user", "text": "", "attach": {"workflow": "wfSeed0001"}}, {"role": "user", "text": "Go on"}],
        "complexity": "simple", "tags": ["t"], "outcomeExpectations": ["x"],
        "seed": {"mode": "inline", "workflows": [{"id": "wfSeed0001", "name": "W", "nodes": [], "connections": {}}]},
    })
    assert unsupported_reason(case) is None  # sent with only its attachment (orchestrator.builders.seeds)
    ok = EvalCase.model_validate({"conversation": [{"role": "user", "text": "Build it"}], "complexity": "simple",
                                  "tags": ["t"], "outcomeExpectations": ["x"]})
    assert unsupported_reason(ok) is None


def test_user_turns_sends_the_opening_verbatim_and_later_turns_without_director_notes() -> None:
    case = EvalCase.model_validate({
        "conversation": [
            {"role": "user", "text": "Build a Slack digest"},
            {"role": "assistant", "text": "Which channel?"},
            {"role": "user", "text": "Use #ops [if asked about time, say 9am]"},
        ],
        "complexity": "simple", "tags": ["t"], "outcomeExpectations": ["x"],
    })
    assert user_turns(case) == ["Build a Slack digest", "Use #ops"]
