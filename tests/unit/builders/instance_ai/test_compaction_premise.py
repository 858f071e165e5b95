"""``requiresMemoryCompaction`` (issue 16, item 4): the premise check, the override detection, and
the verdicts: never judged (``incomplete``) unless the thread really compacted."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from orchestrator.builders.instance_ai.compaction import (
    NO_CURSOR,
    NO_ROWS,
    NOT_CHECKABLE,
    OBSERVER_THRESHOLD_OVERRIDE,
    CompactionCheck,
    premise,
)
from orchestrator.cases import load_disk
from orchestrator.domain import Verdict
from orchestrator.n8n.instance_ai import InstanceAiChat
from orchestrator.n8n.rest import N8nClient, N8nSession
from orchestrator.verify.judge import Judge, JudgeConfig, expectation_prompt, process_prompt
from orchestrator.verify.verifier import verify_workflow

REPO = Path(__file__).resolve().parents[4]
CURSOR = {"lastObservedMessageId": "m-12", "updatedAt": "2026-12-01T10:00:00Z"}
ROWS = [{"marker": "critical", "text": "Disk alert threshold: above 83 percent"},
        {"marker": "info", "text": "Alerts go via HTTP Request POST to the ops-alerts hook, not Slack"}]


def test_premise_needs_both_a_cursor_and_rows() -> None:
    assert premise(None) == (NOT_CHECKABLE, None)
    assert premise({"observations": ROWS, "cursor": None}) == (NO_CURSOR, None)
    assert premise({"observations": [], "cursor": CURSOR}) == (NO_ROWS, None)
    reason, context = premise({"observations": ROWS, "cursor": CURSOR})
    assert reason is None and context is not None
    assert "- [CRITICAL] Disk alert threshold: above 83 percent" in context
    assert "- [INFO] Alerts go via HTTP Request POST" in context


def test_the_judges_see_the_rows_as_ground_truth() -> None:
    _, context = premise({"observations": ROWS, "cursor": CURSOR})
    for prompt in (expectation_prompt(None, ["keeps 83"], context), process_prompt("(chat)", None, ["keeps 83"], context)):
        assert "## Ground truth" in prompt and "above 83 percent" in prompt
        assert prompt.index("## Ground truth") < prompt.index("## Expectations")
    assert "Ground truth" not in expectation_prompt(None, ["keeps 83"])


def _compaction_case():
    loaded, issues = load_disk([REPO / "cases" / "context-compaction-keeps-disk-threshold.json"])
    assert not issues and loaded[0].case.requires_memory_compaction
    return loaded[0].case


async def test_an_unchecked_premise_leaves_every_expectation_incomplete_without_judging() -> None:
    case = _compaction_case()
    async with N8nClient("http://127.0.0.1:9") as client:  # never called: nothing to fetch or judge
        owner = N8nSession(client, "cookie", {"id": "owner"})
        v = await verify_workflow(case, None, owner, Judge(JudgeConfig(api_key=None)), timeout_ms=60_000,
                                  not_judged_reason=NOT_CHECKABLE)
    texts = [*case.process_expectations, *case.outcome_expectations]  # n8n's collectExpectations order
    judged = [e for e in v.expectations if e.kind != "context"]
    assert [e.text for e in judged] == texts and len(texts) == 4
    assert {(e.verdict, e.reason) for e in judged} == {(Verdict.incomplete, NOT_CHECKABLE)}
    assert all(e.judge_input is None for e in v.expectations)
    # a context assertion is a measurement (n8n's branch appends them outside the premise): checked on
    # the run debug there is — here none, so it cannot be checked either
    [measured] = [e for e in v.expectations if e.kind == "context"]
    assert measured.verdict is Verdict.incomplete and measured.reason.startswith("not checked")


class _Memory(BaseHTTPRequestHandler):
    """A loopback stand-in for a newer n8n's memory route (2.41.1 has none; see the n8n test)."""

    answer: ClassVar[dict[str, Any]] = {}
    seen: ClassVar[list[str]] = []
    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.path)
        body = json.dumps({"data": self.answer}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # the chat request: record its body, answer a run id
        n = int(self.headers.get("content-length") or 0)
        type(self).bodies.append(json.loads(self.rfile.read(n)) if n else {})
        body = json.dumps({"data": {"runId": f"run-{len(self.bodies)}"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def memory_server(answer: dict[str, Any]) -> Iterator[tuple[str, type[_Memory]]]:
    handler = type("Handler", (_Memory,), {"answer": answer, "seen": [], "bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


async def test_a_server_with_the_memory_route_gets_the_override_and_its_rows_checked() -> None:
    with memory_server({"observations": ROWS, "cursor": CURSOR}) as (url, handler):
        async with N8nClient(url) as client:
            chat = InstanceAiChat(N8nSession(client, "cookie", {"id": "owner"}))
            check = CompactionCheck()
            await check.prepare(chat, "9b1f6c1e-0000-4000-8000-000000000001")
            assert check.supported is True
            assert chat.request_options == {"observerThresholdTokens": OBSERVER_THRESHOLD_OVERRIDE}
            for text in ("first turn", "second turn"):  # every turn of the thread carries the override
                await chat.send("9b1f6c1e-0000-4000-8000-000000000001", text)
            assert [(b["message"], b.get("observerThresholdTokens")) for b in handler.bodies] == [
                ("first turn", OBSERVER_THRESHOLD_OVERRIDE), ("second turn", OBSERVER_THRESHOLD_OVERRIDE)]
            reason, context = await check.check(chat, "9b1f6c1e-0000-4000-8000-000000000001")
            assert handler.seen == ["/rest/instance-ai/eval/threads/9b1f6c1e-0000-4000-8000-000000000001/memory"] * 2
    assert reason is None and context is not None and "83 percent" in context


def test_the_override_is_n8ns_observer_threshold() -> None:
    """n8n ``harness/build-workflow.ts`` ``COMPACTION_OBSERVER_THRESHOLD_TOKENS``: the override sent
    with every turn of a ``requiresMemoryCompaction`` thread is 1,000 tokens (the field's floor)."""
    assert OBSERVER_THRESHOLD_OVERRIDE == 1_000


def test_without_the_memory_route_the_premise_is_read_from_the_run_debug() -> None:
    """n8n 2.41.1 has no ``/eval/threads/:id/memory``; the Observer's rows are rendered into the
    agent's prompt as ``<observations>`` (``@n8n/agents`` ``observation-log-renderer``): a step that
    carried them means the thread was compacted, and its rows are the ground truth; no block:
    the premise did not hold; no run debug: not checkable."""
    from orchestrator.builders.instance_ai.compaction import NO_CURSOR, premise_from_run_debug

    def step(prompt: str) -> dict[str, Any]:
        return {"stepNumber": 0, "input": {"instructions": {"role": "system", "content": prompt}, "messages": []}}

    memory = ("Rules.\n<observations>\nThe following is your memory of this conversation.\n"
              "* CRITICAL (09:00) Alert fires above 83 percent disk usage\n  * INFO (09:01) via the HTTP hook\n"
              "</observations>")
    assert premise_from_run_debug(None) == (NOT_CHECKABLE, None)
    assert premise_from_run_debug([{"steps": [step("Rules only.")]}]) == (NO_CURSOR, None)
    reason, block = premise_from_run_debug([{"steps": [step("Rules only."), step(memory)]}])
    assert reason is None and block is not None
    assert "- [CRITICAL] Alert fires above 83 percent disk usage" in block and "- [INFO] via the HTTP hook" in block
