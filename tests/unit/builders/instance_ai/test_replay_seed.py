"""Replay seeds (issue 16, item 2): a thread fetched from a loopback stand-in of LangSmith's REST
endpoints (workspaces, sessions, runs/query with ``x-tenant-id``), rebuilt, split, scrubbed."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from support.tools import require

from orchestrator.builders.builder import BuilderSettings, BuildRequest
from orchestrator.builders.instance_ai.builder import InstanceAiBuilder
from orchestrator.builders.instance_ai.replay_seed import (
    ReplayUnavailable,
    compile_sdk_code,
    materialize_replay,
    resolve_replay_seed,
)
from orchestrator.builders.lane import BuildLane
from orchestrator.builders.users import BuildUser, BuildUserPool
from orchestrator.cases import EvalCase
from orchestrator.cases.seed import InlineSeed, ReplaySeed
from orchestrator.domain import BuildStatus
from orchestrator.lanes.model import Lane
from orchestrator.ledger import Ledger
from orchestrator.n8n.rest import N8nClient, N8nSession
from orchestrator.redact import MASK, redact
from orchestrator.scripted.scripts import HELLO_WORKFLOW_CODE
from orchestrator.toolchain import Toolchain, default_cache_dir

THREAD = "5a1f3e2c-7d41-4c57-9a0e-1b2c3d4e5f60"
KEY = "lsv2_pt_replaytest_0123456789abcdef"
WORKFLOW_ID = "wfVatCalc0000001"
TABLE_ID = "dtRates000000001"
WORKFLOW_FILE = "/home/user/workspace/src/vat.workflow.json"
WORKFLOW_JSON = {"sourceCode": {"name": "VAT calculator", "nodes": [
    {"id": "n1", "name": "Start", "type": "n8n-nodes-base.manualTrigger", "typeVersion": 1, "position": [0, 0],
     "parameters": {}},
    {"id": "n2", "name": "Rates", "type": "n8n-nodes-base.dataTable", "typeVersion": 1, "position": [200, 0],
     "parameters": {"dataTableId": {"__rl": True, "value": TABLE_ID, "mode": "id"}},
     "credentials": {"someApi": {"id": "cred-in-prod", "name": "Prod secret"}}}],
    "connections": {"Start": {"main": [[{"node": "Rates", "type": "main", "index": 0}]]}}}}


def run(rid: str, trace: str, name: str, start: str, *, parent: str | None = None, inputs: Any = None,
        outputs: Any = None, meta: dict[str, Any] | None = None, run_type: str = "chain") -> dict[str, Any]:
    return {"id": rid, "trace_id": trace, "parent_run_id": parent, "name": name, "run_type": run_type,
            "start_time": start, "end_time": start.replace(":00.", ":30."), "dotted_order": f"{start}{rid}",
            "inputs": inputs or {}, "outputs": outputs, "extra": {"metadata": {"thread_id": THREAD, **(meta or {})}}}


def tool(rid: str, trace: str, name: str, start: str, args: dict[str, Any], result: Any, call_id: str) -> dict[str, Any]:
    return run(rid, trace, f"tool: {name}", start, parent=trace, inputs=args, outputs=result,
               meta={"tool_call_id": call_id}, run_type="tool")


THREAD_RUNS = [
    # turn 1: writes the workflow file, builds it, creates a table and inserts (sensitive) rows
    run("t1", "t1", "turn", "2026-11-30T10:00:00.000Z", inputs={"message": "Build a VAT calculator"}),
    tool("t1-w", "t1", "workspace_write_file", "2026-11-30T10:00:01.000Z",
         {"path": WORKFLOW_FILE, "content": json.dumps(WORKFLOW_JSON)}, {"success": True}, "c1"),
    tool("t1-b", "t1", "build-workflow", "2026-11-30T10:00:02.000Z", {"filePath": WORKFLOW_FILE},
         {"success": True, "workflowId": WORKFLOW_ID, "workflowName": "VAT calculator"}, "c2"),
    tool("t1-d", "t1", "data-tables", "2026-11-30T10:00:03.000Z",
         {"action": "create", "name": "rates", "columns": [{"name": "country", "type": "string"}]},
         {"id": TABLE_ID, "name": "rates", "columns": [{"name": "country", "type": "string"}]}, "c3"),
    tool("t1-r", "t1", "data-tables", "2026-11-30T10:00:04.000Z",
         {"action": "insert-rows", "dataTableId": TABLE_ID, "rows": [{"country": "Liechtenstein-Secret"}]},
         {"success": True, "insertedCount": 1}, "c4"),
    run("t1-a", "t1", "agent: orchestrator", "2026-11-30T10:00:05.000Z", parent="t1",
        outputs={"text": "Built it; Liechtenstein-Secret is in the rates table."}),
    # turn 2 suspends on a question; its resume answers it (the same call, now resolved)
    run("t2", "t2", "turn", "2026-11-30T10:01:00.000Z", inputs={"message": "Add Austria too"}),
    run("t2-l", "t2", "tool: nodes", "2026-11-30T10:01:00.500Z", parent="t2", inputs={"action": "search"},
        outputs={"nodes": ["Set"]}, run_type="tool"),
    tool("t2-q", "t2", "ask-user", "2026-11-30T10:01:01.000Z", {"questions": [{"id": "q1"}]}, None, "c5"),
    run("t3", "t3", "resume: user answered", "2026-11-30T10:02:00.000Z", inputs={"message": "Add Austria too"}),
    tool("t3-q", "t3", "ask-user", "2026-11-30T10:02:01.000Z", {"questions": [{"id": "q1"}]},
         {"answers": [{"questionId": "q1", "selectedOptions": ["20%"]}]}, "c5"),
    # the resume re-records turn 2's earlier resolved lookup under a new run id and no call id
    run("t3-l", "t3", "tool: nodes", "2026-11-30T10:02:02.000Z", parent="t3", inputs={"action": "search"},
        outputs={"nodes": ["Set"]}, run_type="tool"),
    run("t3-a", "t3", "agent: orchestrator", "2026-11-30T10:02:05.000Z", parent="t3", outputs={"text": "Austria added."}),
    # turn 3: the live turn
    run("t4", "t4", "turn", "2026-11-30T10:03:00.000Z", inputs={"message": "Now round every amount to two decimals"}),
    run("t4-a", "t4", "agent: orchestrator", "2026-11-30T10:03:05.000Z", parent="t4", outputs={"text": "(live answer)"}),
]


class FakeLangSmith:
    """Workspaces ``ws-staging`` (has the project, not the thread) and ``ws-prod`` (has both)."""

    def __init__(self, runs: list[dict[str, Any]], *, list_workspaces: bool = True) -> None:
        self.runs = runs
        self.list_workspaces = list_workspaces
        self.seen: list[tuple[str, str, str | None]] = []
        self.projects = {"ws-staging": "proj-staging", "ws-prod": "proj-prod"}

    def handle(self, method: str, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        tenant = headers.get("x-tenant-id")
        self.seen.append((method, urlsplit(path).path, tenant))
        if headers.get("x-api-key") != KEY:
            return 401, {"detail": "bad key"}
        url = urlsplit(path)
        if url.path == "/api/v1/workspaces":
            if not self.list_workspaces:
                return 403, {"detail": "org-scoped key required"}
            return 200, [{"id": "ws-staging", "display_name": "Staging"}, {"id": "ws-prod", "display_name": "Prod"}]
        if url.path == "/api/v1/sessions":
            name = parse_qs(url.query).get("name", [""])[0]
            pid = self.projects.get(tenant or "ws-prod")
            return 200, [{"id": pid, "name": "instance-ai"}] if name == "instance-ai" and pid else []
        if url.path == "/api/v1/runs/query":
            if body.get("session") != ["proj-prod"] or (tenant or "ws-prod") != "ws-prod":
                return 200, {"runs": [], "cursors": {}}
            rows = self.runs
            if body.get("is_root"):
                assert "thread_id" in body["filter"]
                rows = [r for r in rows if not r["parent_run_id"]
                        and json.dumps(r["extra"]["metadata"]["thread_id"]) in body["filter"]]
            if body.get("trace"):
                rows = [r for r in rows if r["trace_id"] == body["trace"]]
            start = int(body.get("cursor") or 0)  # two runs a page: pagination is exercised
            page = rows[start:start + 2]
            more = start + 2 < len(rows)
            return 200, {"runs": page, "cursors": {"next": str(start + 2) if more else None}}
        return 404, {"detail": "not found"}


@pytest.fixture
def langsmith() -> Iterator[tuple[FakeLangSmith, str]]:
    fake = FakeLangSmith(THREAD_RUNS)

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            n = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(n)) if n else {}
            status, payload = fake.handle(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = _any

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield fake, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def replay(url: str, thread: str = THREAD, **kw: Any) -> ReplaySeed:
    return ReplaySeed.model_validate({"mode": "replay", "threadId": thread, "endpoint": url, **kw})


def no_compile(code: str) -> dict[str, Any]:
    raise AssertionError("JSON sources need no SDK compile")


async def test_the_thread_is_found_in_the_second_workspace_and_rebuilt(langsmith) -> None:
    fake, url = langsmith
    resolved = await resolve_replay_seed(replay(url), env={"LANGSMITH_API_KEY": KEY}, compile_code=no_compile)
    assert resolved.workspace == "Prod" and resolved.live_turn == "Now round every amount to two decimals"
    # staging was asked first (project found, no thread), then prod; every read carried its tenant
    tenants = [t for m, p, t in fake.seen if p == "/api/v1/sessions"]
    assert tenants == ["ws-staging", "ws-prod"]
    assert all(t is not None for m, p, t in fake.seen if p != "/api/v1/workspaces")

    seed = resolved.seed
    assert isinstance(seed, InlineSeed)
    roles = [(m.role, [b.get("type") for b in m.content]) for m in seed.messages]
    assert roles == [("user", ["text"]), ("assistant", ["tool-call"] * 4 + ["text"]),
                     ("user", ["text"]), ("assistant", ["tool-call", "tool-call", "text"])]
    # the ask-user call suspended in the turn and resolved in the resume: kept once, resolved
    [ask] = [b for m in seed.messages for b in m.content if b.get("toolName") == "ask-user"]
    assert ask["state"] == "resolved" and ask["output"]["answers"][0]["selectedOptions"] == ["20%"]
    stamps = [m.created_at for m in seed.messages]
    assert stamps == sorted(stamps)
    # the live turn's own output never enters the seed
    assert "(live answer)" not in json.dumps([m.model_dump(mode="json") for m in seed.messages])

    # the seed workflow: compiled from the file the build call built, credentials stripped, pinned id
    [wf] = seed.workflows
    assert (wf.id, wf.name) == (WORKFLOW_ID, "VAT calculator")
    assert [n["name"] for n in wf.nodes] == ["Start", "Rates"] and all("credentials" not in n for n in wf.nodes)
    build = next(b for m in seed.messages for b in m.content if b.get("toolName") == "build-workflow")
    assert build["output"]["workflowId"] == wf.id
    # the referenced table schema-only; rows and their values gone from the whole history
    [table] = seed.data_tables
    assert (table.id, table.name, table.columns) == (TABLE_ID, "rates", [{"name": "country", "type": "string"}])
    history = json.dumps([m.model_dump(mode="json") for m in seed.messages])
    assert "Liechtenstein-Secret" not in history and "[redacted]" in history
    assert redact(f"key {KEY}") == f"key {MASK}"


async def test_a_key_that_cannot_list_workspaces_uses_its_own(langsmith) -> None:
    fake, url = langsmith
    fake.list_workspaces = False
    resolved = await resolve_replay_seed(replay(url), env={"LANGSMITH_API_KEY": KEY}, compile_code=no_compile)
    assert resolved.workspace == "default" and len(resolved.seed.messages) == 4


async def test_a_pinned_live_turn_splits_there(langsmith) -> None:
    _, url = langsmith
    resolved = await resolve_replay_seed(replay(url, liveTurnRunId="t2"), env={"LANGSMITH_API_KEY": KEY},
                                         compile_code=no_compile)
    assert resolved.live_turn == "Add Austria too" and len(resolved.seed.messages) == 2


async def test_an_aged_out_trace_fails_loudly_in_one_line(langsmith) -> None:
    fake, url = langsmith
    with pytest.raises(ReplayUnavailable) as caught:
        await resolve_replay_seed(replay(url, thread="00000000-dead-4bee-8000-000000000000"),
                                  env={"LANGSMITH_API_KEY": KEY}, compile_code=no_compile)
    message = str(caught.value)
    assert "\n" not in message and "not found" in message and "age out" in message
    assert "00000000-dead-4bee-8000-000000000000" in message
    # both workspaces were searched before giving up
    assert [t for m, p, t in fake.seen if p == "/api/v1/runs/query"] == ["ws-staging", "ws-prod"]


async def test_no_key_and_a_refused_key_are_one_line_failures(langsmith) -> None:
    _, url = langsmith
    with pytest.raises(ReplayUnavailable, match="LANGSMITH_API_KEY is not set"):
        await resolve_replay_seed(replay(url), env={})
    with pytest.raises(ReplayUnavailable, match="refused"):
        await resolve_replay_seed(replay(url), env={"LANGSMITH_API_KEY": "lsv2_pt_wrong_key_000000"})


async def test_a_replay_case_becomes_an_inline_seeded_case_with_the_live_turn_first(langsmith) -> None:
    _, url = langsmith
    case = EvalCase.model_validate({
        "complexity": "simple", "tags": ["seeded"], "datasets": ["seeded"],
        "seed": {"mode": "replay", "threadId": THREAD, "endpoint": url},
        "conversation": [{"role": "assistant", "text": "Rounded."}, {"role": "user", "text": "Now also send it to #ops."}],
        "outcomeExpectations": ["Amounts are rounded to two decimals."],
    })
    driven = await materialize_replay(case, env={"LANGSMITH_API_KEY": KEY}, compile_code=no_compile)
    assert driven.inline_seed is not None and not driven.is_replay
    assert [(t.role, t.text) for t in driven.conversation] == [
        ("user", "Now round every amount to two decimals"), ("assistant", "Rounded."), ("user", "Now also send it to #ops.")]
    assert driven.opening_prompt() == "Now round every amount to two decimals"
    assert case.is_replay  # the loaded case itself is left as it was


@pytest.mark.n8n
def test_captured_sdk_code_compiles_with_the_toolchains_workflow_sdk() -> None:
    chain = Toolchain(default_cache_dir())
    require("n8n", chain.node_bin.is_file() and chain.n8n_entry.is_file(), "run `orchestrator lanes install`")
    workflow = compile_sdk_code(HELLO_WORKFLOW_CODE)
    assert [n["type"] for n in workflow["nodes"]] == ["n8n-nodes-base.manualTrigger", "n8n-nodes-base.set"]
    assert "Start" in workflow["connections"]
    with pytest.raises(ReplayUnavailable, match="does not compile"):
        compile_sdk_code("this is not workflow code (")


async def test_the_instance_ai_builder_reports_an_unresolvable_replay_as_a_framework_fault(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)
    case = EvalCase.model_validate({"complexity": "simple", "tags": ["seeded"],
                                    "seed": {"mode": "replay", "threadId": THREAD, "endpoint": "http://127.0.0.1:9"},
                                    "outcomeExpectations": ["Anything."]})
    builder = InstanceAiBuilder(BuilderSettings(run_id="replay-test", run_dir=tmp_path, model="scripted"))
    request = BuildRequest(case=case, iteration=0, attempt=0, timeout_ms=60_000, transcript_path=tmp_path / "t.jsonl")
    lane = Lane("replay-0", 0, "http://127.0.0.1:9", "process", "replay-test")  # never called
    async with N8nClient(lane.base_url) as client:
        owner = N8nSession(client, "cookie", {"id": "owner"})
        ctx = BuildLane(lane, client, owner, BuildUserPool(lane, owner, client, Ledger(tmp_path)))
        result = await builder.build(request, ctx, BuildUser("member", "m@x.invalid", owner, None, "project"))
    assert result.status == BuildStatus.failed and result.framework_fault
    assert result.error is not None and "LANGSMITH_API_KEY is not set" in result.error and "\n" not in result.error
    assert "LANGSMITH_API_KEY is not set" in (tmp_path / "t.jsonl").read_text()
