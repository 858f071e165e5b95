"""The scripted Anthropic-compatible server, driven by the real ``anthropic`` SDK."""

from __future__ import annotations

import json
import socket
from typing import Any

import anthropic
import httpx
import pytest

from orchestrator.outage import classify_exception, retry_provider_outage
from orchestrator.scripted import scripts as ms
from orchestrator.scripted.replies import Reply, TextBlock, ToolUseBlock, Usage
from orchestrator.scripted.server import ScriptedModelServer

MODEL = "claude-opus-4-8"
MSG: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hello"}]


def text_of(block: object) -> str:
    """The text of a reply block the test expects to be text (fails naming the block otherwise)."""
    assert isinstance(block, anthropic.types.TextBlock), block
    return block.text


def client(srv: ScriptedModelServer, **kw) -> anthropic.Anthropic:
    kw.setdefault("max_retries", 0)
    return anthropic.Anthropic(base_url=srv.base_url, api_key="sk-test-scripted-key-123", **kw)


def test_non_streaming_text_reply_and_recording():
    with ScriptedModelServer(ms.text_only("hi there")) as srv:
        msg = client(srv).messages.create(model=MODEL, max_tokens=100, messages=MSG)
        assert [text_of(b) for b in msg.content] == ["hi there"]
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
        assert text_of(text) == "Let me call a tool. " * 5
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
        assert text_of(c.messages.create(model=MODEL, max_tokens=10, messages=MSG).content[0]) == "back"
        assert srv.count("/v1/messages") == 3


def test_client_errors_are_not_outages():
    with ScriptedModelServer(ms.status_storm(400)) as srv:
        with pytest.raises(anthropic.BadRequestError) as err:
            client(srv).messages.create(model=MODEL, max_tokens=10, messages=MSG)
        assert classify_exception(err.value) is None


def test_hang_times_out_as_connection_outage():
    with ScriptedModelServer(ms.hang(30)) as srv:
        with pytest.raises(anthropic.APITimeoutError) as err:  # the client's 0.5 s, not the 30 s hang
            client(srv, timeout=0.5).messages.create(model=MODEL, max_tokens=10, messages=MSG)
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
        got = [text_of(c.messages.create(model=MODEL, max_tokens=10, messages=MSG).content[0]) for _ in range(3)]
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
    verdicts = parse_verdicts(text_of(first.content[0]), 3)
    assert verdicts is not None
    assert [v.verdict for v in verdicts] == [Verdict.passed, Verdict.failed, Verdict.passed]
    assert verdicts[1].category == "builder_issue"
    assert parse_verdicts(text_of(second.content[0]), 3) is None  # the second scripted verdict is empty


def test_judge_with_custom_render():
    script = ms.judge({"score": 1}, render=lambda v: f"VERDICT: {v['score']}")
    with ScriptedModelServer(script) as srv:
        text = text_of(client(srv).messages.create(model=MODEL, max_tokens=10, messages=MSG).content[0])
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
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        reply = httpx.post(f"{base_url}/v1/messages", json={"model": MODEL, "max_tokens": 5, "messages": MSG}).json()
        assert json.loads(reply["content"][0]["text"])["verdicts"][0]["pass"] is True
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ------------------------------------------------------------------------------------------------
# the Instance AI path: the lane's agent, title generator, mock planners, chat completions

from orchestrator.scripted import instance_ai as ia  # noqa: E402

SMOKE_PROMPT = ('Build a workflow that starts with a Manual Trigger followed by a single Set node. The Set node '
                'outputs one item with two fields: status, the string "ok", and version, the number 3.')
IA_TOOLS: list[Any] = [{"name": n, "description": n, "input_schema": {"type": "object"}}
            for n in ("workflows", "nodes", "ask-user", "build-workflow", "load_skill", "workspace_write_file")]


def _agent_step(srv: ScriptedModelServer, messages: list[Any], tools: list[Any] = IA_TOOLS) -> anthropic.types.Message:
    with client(srv).messages.stream(model="claude-sonnet-4-6", max_tokens=1000, messages=messages, tools=tools,
                                     system="You are the n8n Assistant.") as stream:
        return stream.get_final_message()


def _tool_use(msg) -> tuple[str, str, dict]:
    (block,) = [b for b in msg.content if b.type == "tool_use"]
    return block.id, block.name, block.input


def test_instance_ai_agent_loads_the_skill_writes_the_file_builds_and_finishes():
    with ScriptedModelServer(ms.demo_script()) as srv:
        messages: list[dict] = [{"role": "user", "content": SMOKE_PROMPT}]
        names = []
        results = {
            "load_skill": {"success": True, "skillId": "workflow-builder"},
            "workspace_write_file": {"success": True},
            "build-workflow": {"success": True, "workflowId": "WF123", "workflowName": "Scripted"},
        }
        for _ in range(4):
            msg = _agent_step(srv, messages)
            if msg.stop_reason != "tool_use":
                break
            call_id, name, args = _tool_use(msg)
            names.append((name, args))
            messages.append({"role": "assistant", "content": [b.model_dump() for b in msg.content]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call_id, "content": json.dumps(results[name])}]})
        assert [n for n, _ in names] == ["load_skill", "workspace_write_file", "build-workflow"]
        assert names[0][1] == {"skillId": "workflow-builder"}
        path, content = names[1][1]["path"], names[1][1]["content"]
        assert path.startswith("src/workflows/") and path.endswith(".workflow.json")
        assert names[2][1]["filePath"] == path and "sourceCode" not in names[2][1]
        workflow = json.loads(content)
        assert [n["type"] for n in workflow["nodes"]] == ["n8n-nodes-base.manualTrigger", "n8n-nodes-base.set"]
        fields = {a["name"]: a["value"] for a in workflow["nodes"][1]["parameters"]["assignments"]["assignments"]}
        assert fields == {"status": "ok", "version": 3}
        assert workflow["connections"] == {"Start": {"main": [[{"node": "Set Fields", "type": "main", "index": 0}]]}}
        assert msg.stop_reason == "end_turn" and "WF123" in text_of(msg.content[0])
        assert all(r.body.get("stream") for r in srv.model_requests)


def test_instance_ai_agent_without_a_workspace_builds_inline_and_is_deterministic():
    tools = [t for t in IA_TOOLS if t["name"] != "workspace_write_file"]
    with ScriptedModelServer(ia.instance_ai_agent(load_skill=False)) as srv:
        first = _tool_use(_agent_step(srv, [{"role": "user", "content": SMOKE_PROMPT}], tools))
        again = _tool_use(_agent_step(srv, [{"role": "user", "content": SMOKE_PROMPT}], tools))
    assert first[1] == "build-workflow" and first[2] == again[2]
    assert json.loads(first[2]["sourceCode"])["name"] == first[2]["name"]


def test_instance_ai_agent_gives_up_with_text_after_two_failed_builds():
    failed = json.dumps({"success": False, "errors": ["Runtime workspace is required for workflow source files."]})
    history: list[dict] = [{"role": "user", "content": SMOKE_PROMPT}]
    for n in range(2):
        history += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"b{n}", "name": "build-workflow",
                                                       "input": {"filePath": "x.json"}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"b{n}", "content": failed}]}]
    tools = [t for t in IA_TOOLS if t["name"] != "load_skill"]
    with ScriptedModelServer(ia.instance_ai_agent()) as srv:
        msg = _agent_step(srv, history, tools)
    assert msg.stop_reason == "end_turn" and "Runtime workspace is required" in text_of(msg.content[0])


def test_a_second_user_turn_rebuilds_the_same_file():
    done = json.dumps({"success": True, "workflowId": "WF1"})
    history: list[dict] = [
        {"role": "user", "content": SMOKE_PROMPT},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "b0", "name": "build-workflow",
                                           "input": {"filePath": "src/workflows/a.workflow.json"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b0", "content": done}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Built it."}]},
        {"role": "user", "content": "Also add a field."},
    ]
    tools = [t for t in IA_TOOLS if t["name"] not in ("load_skill", "workspace_write_file")]
    with ScriptedModelServer(ia.instance_ai_agent()) as srv:
        _, name, args = _tool_use(_agent_step(srv, history, tools))
    assert name == "build-workflow" and json.loads(args["sourceCode"])["nodes"][1]["parameters"]["assignments"][
        "assignments"][-1] == {"id": "f2", "name": "turns", "value": 2, "type": "number"}


def test_title_generator_and_mock_planners_get_non_streamed_answers():
    with ScriptedModelServer(ms.demo_script()) as srv:
        c = client(srv)
        title = c.messages.create(model="claude-sonnet-4-6", max_tokens=100, messages=[{"role": "user", "content": SMOKE_PROMPT}],
                                  system="You generate a short descriptive title for a conversation based on its first user message.")
        assert 1 <= len(text_of(title.content[0]).split()) <= 5 and "{" not in text_of(title.content[0])
        plan = c.messages.create(model="claude-sonnet-4-6", max_tokens=100, messages=[{"role": "user", "content": "nodes…"}],
                                 system="You are a test data planner for n8n workflow automation. Return ONLY valid JSON.")
        assert set(json.loads(text_of(plan.content[0]))) == {"globalContext", "nodeHints", "triggerContent"}
        agent_plan = c.messages.create(model="claude-sonnet-4-6", max_tokens=100, messages=[{"role": "user", "content": "x"}],
                                       system='You are a test data planner for n8n AI agents. … "openingMessage" …')
        assert set(json.loads(text_of(agent_plan.content[0]))) == {"globalContext", "openingMessage", "toolHints"}


def _openai_tools() -> list[dict]:
    return [{"type": "function", "function": {"name": t["name"], "description": "", "parameters": {"type": "object"}}}
            for t in IA_TOOLS if t["name"] in ("build-workflow",)]


def test_chat_completions_non_streamed_tool_call_then_text():
    with ScriptedModelServer(ia.instance_ai_agent(load_skill=False)) as srv:
        body: dict[str, Any] = {"model": "my-model", "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": SMOKE_PROMPT}],
                "tools": _openai_tools()}
        answer = httpx.post(f"{srv.base_url}/v1/chat/completions", json=body).json()
        choice = answer["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and answer["object"] == "chat.completion"
        (call,) = choice["message"]["tool_calls"]
        assert call["function"]["name"] == "build-workflow" and json.loads(call["function"]["arguments"])["filePath"]
        body["messages"] += [choice["message"], {"role": "tool", "tool_call_id": call["id"],
                                                 "content": json.dumps({"success": True, "workflowId": "W9"})}]
        final = httpx.post(f"{srv.base_url}/chat/completions", json=body).json()["choices"][0]
        assert final["finish_reason"] == "stop" and "W9" in final["message"]["content"]
        assert [r.model for r in srv.model_requests] == ["my-model", "my-model"]
        assert all(r.is_chat_completions and r.is_build_call for r in srv.model_requests)


def test_chat_completions_streamed_chunks_reassemble():
    with ScriptedModelServer(ia.instance_ai_agent(load_skill=False)) as srv:
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": SMOKE_PROMPT}], "tools": _openai_tools()}
        with httpx.stream("POST", f"{srv.base_url}/v1/chat/completions", json=body) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "[DONE]"
        chunks = [json.loads(line) for line in lines[:-1]]
        args = "".join(tc["function"].get("arguments", "") for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", []))
        assert json.loads(args)["name"].startswith("Scripted")
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls" and chunks[-1]["usage"]["total_tokens"] > 0


def test_chat_completions_errors_use_openais_shape():
    with ScriptedModelServer(ms.status_storm(529)) as srv:
        response = httpx.post(f"{srv.base_url}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 529 and response.json()["error"]["type"] == "overloaded_error"


def test_route_prefixes_tell_which_lane_asked_for_which_model():
    with ScriptedModelServer(ms.demo_script()) as srv:
        for route, model in (("/route/control-0", "claude-sonnet-4-6"), ("/route/variant-0", "gpt-5.5")):
            a = anthropic.Anthropic(base_url=srv.base_url + route, api_key="k" * 12, max_retries=0)
            a.messages.create(model=model, max_tokens=10, messages=[{"role": "user", "content": SMOKE_PROMPT}], tools=IA_TOOLS)
        httpx.post(f"{srv.base_url}/route/variant-0/chat/completions",
                   json={"model": "custom-x", "messages": [{"role": "user", "content": SMOKE_PROMPT}], "tools": _openai_tools()})
        a.messages.create(model="judge-model", max_tokens=10, messages=[{"role": "user", "content": "x"}])  # not a build call
        assert srv.models_by_route() == {"/route/control-0": {"claude-sonnet-4-6"}, "/route/variant-0": {"gpt-5.5", "custom-x"}}
        assert srv.models_by_route(build_only=False)["/route/variant-0"] == {"gpt-5.5", "custom-x", "judge-model"}
        assert {r.path for r in srv.model_requests} == {"/v1/messages", "/chat/completions"}
