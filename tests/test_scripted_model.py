"""The scripted Anthropic-compatible server, driven by the real ``anthropic`` SDK."""

from __future__ import annotations

import json
import socket
import time

import anthropic
import httpx
import pytest

from orchestrator.outage import classify_exception, retry_provider_outage
from orchestrator.scripted import scripts as ms
from orchestrator.scripted.replies import Reply, TextBlock, ToolUseBlock, Usage
from orchestrator.scripted.server import ScriptedModelServer

MODEL = "claude-opus-4-8"
MSG = [{"role": "user", "content": "hello"}]


def client(srv: ScriptedModelServer, **kw) -> anthropic.Anthropic:
    kw.setdefault("max_retries", 0)
    return anthropic.Anthropic(base_url=srv.base_url, api_key="sk-test-scripted-key-123", **kw)


def test_non_streaming_text_reply_and_recording():
    with ScriptedModelServer(ms.text_only("hi there")) as srv:
        msg = client(srv).messages.create(model=MODEL, max_tokens=100, messages=MSG)
        assert [b.text for b in msg.content] == ["hi there"]
        assert msg.stop_reason == "end_turn"
        assert msg.model == MODEL
        assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0
        (rec,) = srv.requests
        assert rec.path == "/v1/messages" and rec.is_messages
        assert rec.body["messages"] == MSG and rec.body.get("stream") in (None, False)
        assert "x-api-key" not in rec.headers and "authorization" not in rec.headers
        assert "sk-test-scripted-key-123" not in repr(srv.requests)
        assert srv.request_count == 1 and srv.count("/v1/messages") == 1


def test_streaming_text_and_tool_use_with_explicit_usage():
    reply = Reply(
        [TextBlock("Let me call a tool. " * 5), ToolUseBlock("lookup", {"q": "n8n", "nested": {"n": [1, 2, 3]}})],
        usage=Usage(input_tokens=123, output_tokens=45),
    )
    with ScriptedModelServer(lambda req: reply) as srv:
        with client(srv).messages.stream(model=MODEL, max_tokens=100, messages=MSG) as stream:
            final = stream.get_final_message()
        assert final.stop_reason == "tool_use"
        text, tool = final.content
        assert text.text == "Let me call a tool. " * 5
        assert tool.type == "tool_use" and tool.name == "lookup"
        assert tool.input == {"q": "n8n", "nested": {"n": [1, 2, 3]}}
        assert final.usage.output_tokens == 45 and final.usage.input_tokens == 123
        assert srv.message_requests[0].body["stream"] is True


def test_beta_query_count_tokens_and_other_paths():
    with ScriptedModelServer(ms.text_only("x")) as srv:
        c = client(srv)
        beta = httpx.post(f"{srv.base_url}/v1/messages?beta=true",
                          json={"model": MODEL, "max_tokens": 10, "messages": MSG}).json()
        assert beta["content"] == [{"type": "text", "text": "x"}]
        counted = c.messages.count_tokens(model=MODEL, messages=MSG)
        assert counted.input_tokens > 0
        assert httpx.head(f"{srv.base_url}/api/hello").status_code == 200
        assert httpx.get(f"{srv.base_url}/v1/models").json() == {}
        paths = [(r.method, r.path, r.query) for r in srv.requests]
        assert ("POST", "/v1/messages", "beta=true") in paths
        assert ("POST", "/v1/messages/count_tokens", "") in paths
        assert srv.count("/v1/messages") == 1  # count_tokens is not a scripted turn


@pytest.mark.parametrize(
    "status,exc_type,error_type,kind",
    [
        (529, anthropic.APIStatusError, "overloaded_error", "overloaded"),
        (429, anthropic.RateLimitError, "rate_limit_error", "rate_limited"),
        (500, anthropic.InternalServerError, "api_error", "server_error"),
    ],
)
def test_status_storm_then_recovers(status, exc_type, error_type, kind):
    with ScriptedModelServer(ms.status_storm(status, count=2, then=ms.text_only("back"))) as srv:
        c = client(srv)
        for _ in range(2):
            with pytest.raises(exc_type) as err:
                c.messages.create(model=MODEL, max_tokens=10, messages=MSG)
            assert err.value.status_code == status
            assert err.value.body["error"]["type"] == error_type
            info = classify_exception(err.value)
            assert info is not None and info.kind == kind and info.status == status and info.source == "sdk"
        assert c.messages.create(model=MODEL, max_tokens=10, messages=MSG).content[0].text == "back"
        assert srv.count("/v1/messages") == 3


def test_client_errors_are_not_outages():
    with ScriptedModelServer(ms.status_storm(400)) as srv:
        with pytest.raises(anthropic.BadRequestError) as err:
            client(srv).messages.create(model=MODEL, max_tokens=10, messages=MSG)
        assert classify_exception(err.value) is None


def test_hang_times_out_as_connection_outage():
    with ScriptedModelServer(ms.hang(30)) as srv:
        started = time.monotonic()
        with pytest.raises(anthropic.APITimeoutError) as err:
            client(srv, timeout=0.5).messages.create(model=MODEL, max_tokens=10, messages=MSG)
        assert time.monotonic() - started < 5
        info = classify_exception(err.value)
        assert info is not None and info.kind == "connection"
    # stop() did not wait 30 s for the hung handler


def test_malformed_body_fails_the_sdk():
    with ScriptedModelServer(ms.malformed()) as srv:
        with pytest.raises(Exception) as err:
            client(srv).messages.create(model=MODEL, max_tokens=10, messages=MSG)
        assert not isinstance(err.value, anthropic.APIStatusError)
        assert srv.count("/v1/messages") == 1


def test_script_exception_becomes_500_and_is_kept():
    def broken(request):
        raise RuntimeError("script bug")

    with ScriptedModelServer(broken) as srv:
        with pytest.raises(anthropic.InternalServerError):
            client(srv).messages.create(model=MODEL, max_tokens=10, messages=MSG)
        assert [str(e) for e in srv.script_errors] == ["script bug"]


def test_binds_loopback_only():
    with pytest.raises(ValueError, match="loopback"):
        ScriptedModelServer(ms.text_only("x"), host="0.0.0.0").start()
    with ScriptedModelServer(ms.text_only("x")) as srv:
        assert srv.base_url.startswith("http://127.0.0.1:")
        with socket.create_connection(("127.0.0.1", srv.port), timeout=2):
            pass


def test_sequence_repeats_last_action():
    script = ms.sequence(ms.text_only("one"), Reply([TextBlock("two")]))
    with ScriptedModelServer(script) as srv:
        c = client(srv)
        got = [c.messages.create(model=MODEL, max_tokens=10, messages=MSG).content[0].text for _ in range(3)]
    assert got == ["one", "two", "two"]


def test_judge_script_speaks_the_judge_format():
    from orchestrator.verify.judge import EXPECTATION_SYSTEM, Verdict, expectation_prompt, parse_verdicts

    prompt = expectation_prompt({"nodes": []}, ["has a trigger", "sends a mail", "logs"])
    script = ms.judge(ms.verdict_list([True, False, True], reason="scripted"), {"verdicts": []})
    with ScriptedModelServer(script) as srv:
        c = client(srv)
        first = c.messages.create(model=MODEL, max_tokens=100, system=EXPECTATION_SYSTEM,
                                  messages=[{"role": "user", "content": prompt}])
        second = c.messages.create(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": prompt}])
    verdicts = parse_verdicts(first.content[0].text, 3)
    assert verdicts is not None
    assert [v.verdict for v in verdicts] == [Verdict.passed, Verdict.failed, Verdict.passed]
    assert verdicts[1].category == "builder_issue"
    assert parse_verdicts(second.content[0].text, 3) is None  # the second scripted verdict is empty


def test_judge_with_custom_render():
    script = ms.judge({"score": 1}, render=lambda v: f"VERDICT: {v['score']}")
    with ScriptedModelServer(script) as srv:
        text = client(srv).messages.create(model=MODEL, max_tokens=10, messages=MSG).content[0].text
    assert text == "VERDICT: 1"


async def test_retry_provider_outage_retries_sdk_outages_with_the_waits():
    naps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        naps.append(seconds)

    with ScriptedModelServer(ms.status_storm(529, count=2, then=ms.text_only("recovered"))) as srv:
        c = anthropic.AsyncAnthropic(base_url=srv.base_url, api_key="sk-test-key-0000", max_retries=0)
        msg = await retry_provider_outage(
            lambda: c.messages.create(model=MODEL, max_tokens=10, messages=MSG), waits=(30, 90), sleep=fake_sleep
        )
        await c.close()
    assert msg.content[0].text == "recovered"
    assert naps == [30, 90]


async def test_retry_provider_outage_gives_up_with_the_last_exception():
    naps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        naps.append(seconds)

    with ScriptedModelServer(ms.status_storm(503)) as srv:
        c = anthropic.AsyncAnthropic(base_url=srv.base_url, api_key="sk-test-key-0000", max_retries=0)
        with pytest.raises(anthropic.InternalServerError):
            await retry_provider_outage(
                lambda: c.messages.create(model=MODEL, max_tokens=10, messages=MSG), waits=(1, 2), sleep=fake_sleep
            )
        await c.close()
        assert srv.count("/v1/messages") == 3
    assert naps == [1, 2]


async def test_retry_provider_outage_does_not_retry_other_errors():
    with ScriptedModelServer(ms.status_storm(401)) as srv:
        c = anthropic.AsyncAnthropic(base_url=srv.base_url, api_key="sk-test-key-0000", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError):
            await retry_provider_outage(lambda: c.messages.create(model=MODEL, max_tokens=10, messages=MSG),
                                        waits=(0.01,))
        await c.close()
        assert srv.count("/v1/messages") == 1


# ------------------------------------------------------------------------------------------------
# the builder script's decisions, on conversations shaped as the claude CLI sends them

CREATE = "mcp__n8n-local__create_workflow_from_code"


def _tool(name: str) -> dict:
    return {"name": name, "input_schema": {"type": "object"}}


def _turns(*results: tuple[str, bool]) -> list[dict]:
    """A conversation with one create call per ``(result text, is_error)``."""
    messages: list[dict] = [{"role": "user", "content": "build it"}]
    for i, (text, is_error) in enumerate(results):
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"t{i}", "name": CREATE, "input": {"code": "..."}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{i}", "content": text, "is_error": is_error}]})
    return messages


def test_mcp_builder_decisions():
    script = ms.mcp_builder()
    tools = [_tool("ToolSearch"), _tool(CREATE)]
    # side requests without tools get harmless text
    assert script({"messages": [{"role": "user", "content": "title?"}]}).blocks[0].text == "OK"
    # deferred tool: load it through ToolSearch first
    deferred = {"tools": [_tool("ToolSearch")],
                "messages": [{"role": "user", "content": f"deferred tools:\n{CREATE}\n"}, {"role": "user", "content": "go"}]}
    (search,) = script(deferred).blocks
    assert search.name == "ToolSearch" and search.input["query"] == f"select:{CREATE}"
    # tool offered, nothing called yet → create with the hello workflow
    first = script({"tools": tools, "messages": _turns()})
    call = first.blocks[-1]
    assert first.resolved_stop_reason() == "tool_use"
    assert call.name == CREATE and call.input["code"] == ms.HELLO_WORKFLOW_CODE
    # success → trailer
    ok = script({"tools": tools, "messages": _turns(('{"workflowId": "wf_1-A", "name": "x"}', False))})
    assert ok.blocks[0].text.splitlines()[-1] == "WORKFLOW_ID=wf_1-A"
    # an error → retry once with the minimal workflow
    err = '{"error": "Failed to parse", "errorCode": "UNKNOWN_ERROR"}'
    retry = script({"tools": tools, "messages": _turns((err, True))})
    assert retry.blocks[-1].input["code"] == ms.MINIMAL_WORKFLOW_CODE
    # two errors → give up without a trailer
    done = script({"tools": tools, "messages": _turns((err, True), (err, False))})
    assert "WORKFLOW_ID=" not in done.blocks[0].text and done.resolved_stop_reason() == "end_turn"
    # tools offered but not ours, and no ToolSearch → say so, no trailer
    other = script({"tools": [_tool("Bash")], "messages": _turns()})
    assert "not available" in other.blocks[0].text


def test_tool_result_with_list_content():
    block = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": '{"workflowId": "abc"}'}]}
    assert ms.created_workflow_id(block) == "abc"
    assert ms.created_workflow_id({**block, "is_error": True}) is None


def test_demo_script_routes_judge_builder_and_lane_mock():
    from orchestrator.verify.judge import EXPECTATION_SYSTEM

    script = ms.demo_script()
    judged = script({"system": EXPECTATION_SYSTEM,
                     "messages": [{"role": "user", "content": "## Expectations\n0. a\n1. b\n"}]})
    assert json.loads(judged.blocks[0].text) == {"verdicts": [
        {"index": 0, "pass": True, "reason": "scripted judge"}, {"index": 1, "pass": True, "reason": "scripted judge"}]}
    built = script({"tools": [_tool(CREATE)], "messages": [{"role": "user", "content": "build"}]})
    assert built.blocks[-1].name == CREATE
    # the lane's eval mock: hint planning (no tools, not our judge) gets a JSON plan …
    plan = json.loads(script({"system": "plan mock data", "messages": [{"role": "user", "content": "x"}]}).blocks[0].text)
    assert set(plan) == {"globalContext", "nodeHints", "triggerContent"}
    # … and an intercepted request gets one submit_response call
    mocked = script({"tools": [_tool("get_endpoint_quirks"), _tool("submit_response")],
                     "messages": [{"role": "user", "content": "GET /users"}]})
    assert mocked.blocks[-1].name == "submit_response"


def test_module_main_serves_until_interrupted():
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.scripted.server", "--script", "judge"],
                            stdout=subprocess.PIPE, text=True)
    try:
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        reply = httpx.post(f"{base_url}/v1/messages", json={"model": MODEL, "max_tokens": 5, "messages": MSG}).json()
        assert json.loads(reply["content"][0]["text"])["verdicts"][0]["pass"] is True
    finally:
        proc.terminate()
        proc.wait(timeout=10)
