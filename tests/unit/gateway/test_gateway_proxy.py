"""The model gateway between callers and a scripted provider on loopback (issue 37): answers streamed
back byte for byte with their usage counted to a unit and a stage; 429/529 retried once, centrally,
after ``retry-after``; calls paced to the provider's limit so none is refused; a provider that is
down is held, probed, and seen back; no key, header value or prompt text in the gateway's log, its
metrics or its ledger."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest
from support.polling import eventually_async

from orchestrator.gateway import CallLedger, CallRecord, GatewayConfig, GatewayEvents, ModelGateway, Upstream
from orchestrator.gateway.attribution import STAGE_HEADER, UNIT_HEADER
from orchestrator.gateway.prices import Usage as Tokens
from orchestrator.gateway.prices import cost_usd
from orchestrator.metrics import RunMetrics
from orchestrator.scripted.pressure import Pressure
from orchestrator.scripted.replies import Action, HttpError, Reply, TextBlock, Usage, text_reply
from orchestrator.scripted.server import ScriptedModelServer

MODEL = "claude-sonnet-4-6"


def body(text: str = "Build a workflow that sets status to ok", *, stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 64, "stream": stream, "messages": [{"role": "user", "content": text}],
            **extra}


class Heard(GatewayEvents):
    def __init__(self) -> None:
        self.calls: list[CallRecord] = []
        self.provider_news: list[bool] = []
        self.caps: list[int] = []

    def call(self, record: CallRecord) -> None:
        self.calls.append(record)

    def provider(self, up: bool, detail: str) -> None:
        self.provider_news.append(up)

    def cap(self, cap: int, why: str) -> None:
        self.caps.append(cap)


async def gateway_for(server: ScriptedModelServer, heard: Heard | None = None, path: Path | None = None,
                      **config: Any) -> ModelGateway:
    upstream = Upstream(server.base_url, "upstream-key-not-a-secret")
    return await ModelGateway(GatewayConfig(own=upstream, lanes=upstream, **config), CallLedger(path),
                              events=heard).start()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60) as client:
        yield client


async def settled(gw: ModelGateway, calls: int) -> None:
    await eventually_async(lambda: gw.ledger.calls >= calls, what=f"{calls} calls recorded")


async def test_a_streamed_answer_passes_unchanged_and_its_usage_is_the_lane_units(http: httpx.AsyncClient) -> None:
    with ScriptedModelServer(lambda _: text_reply("Built it. " * 30, usage=Usage(1200, 90, 300, 0))) as srv:
        gw = await gateway_for(srv)
        lease = gw.leases.open("case-a#0", "3")
        try:
            through = await http.post(gw.lane_url(gw.base_url, 3) + "/v1/messages", json=body())
            direct = await http.post(srv.base_url + "/v1/messages", json=body())
            await settled(gw, 1)
        finally:
            await gw.close()
    assert through.status_code == 200 and through.headers["content-type"] == "text/event-stream"
    strip = lambda text: "\n".join(l for l in text.splitlines() if '"id": "msg_' not in l)  # noqa: E731
    assert strip(through.text) == strip(direct.text)  # byte for byte, but for the message's own id
    tally = gw.ledger.unit("case-a#0")["build"]
    assert tally.calls == 1 and tally.usage == Tokens(input=1200, output=90, cache_write=300)
    assert tally.cost_usd == pytest.approx(cost_usd(MODEL, Tokens(1200, 90, 300)))
    assert [r.route for r in srv.message_requests] == ["", ""]  # upstream never sees the lane's route
    gw.leases.close(lease)


async def test_our_callers_name_their_unit_and_stage_in_headers_the_gateway_strips(http: httpx.AsyncClient) -> None:
    with ScriptedModelServer(lambda _: text_reply('{"verdicts": []}', usage=Usage(50, 5))) as srv:
        gw = await gateway_for(srv)
        try:
            answer = await http.post(gw.base_url + "/v1/messages", json=body(stream=False),
                                     headers={UNIT_HEADER: "case-b#1", STAGE_HEADER: "judge", "x-api-key": "caller"})
            await http.post(gw.base_url + "/v1/messages", json=body(stream=False))  # names nobody: the run's
            await settled(gw, 2)
        finally:
            await gw.close()
    assert answer.status_code == 200 and answer.json()["usage"]["input_tokens"] == 50
    assert gw.ledger.unit("case-b#1")["judge"].usage == Tokens(50, 5)
    assert gw.ledger.unit("(run)")["build"].calls == 1
    sent = srv.message_requests[0].headers
    assert UNIT_HEADER not in sent and STAGE_HEADER not in sent and sent.get("accept-encoding") == "identity"


async def test_a_429_is_retried_once_after_retry_after_and_pauses_every_call_meanwhile(http: httpx.AsyncClient) -> None:
    answers: list[Action] = [HttpError(429, headers={"retry-after": "1"}), text_reply("ok")]

    def script(_: dict[str, Any]) -> Action:
        return answers.pop(0) if answers else text_reply("ok")

    heard = Heard()
    with ScriptedModelServer(script) as srv:
        gw = await gateway_for(srv, heard)
        try:
            first = asyncio.create_task(http.post(gw.base_url + "/v1/messages", json=body()))
            await eventually_async(lambda: gw.pacer.paused_until, timeout=5, interval=0.01, what="the 429 back")
            assert gw.pacer.paused_until > gw.clock()  # the gateway waits out retry-after
            second = await http.post(gw.base_url + "/v1/messages", json=body())
            assert (await first).status_code == 200 and second.status_code == 200
            await settled(gw, 2)
        finally:
            await gw.close()
    assert len(srv.message_requests) == 3  # one refused, its retry, and the paused call
    retried = [r for r in heard.calls if r.retried]
    assert len(retried) == 1 and retried[0].outcome == "ok" and retried[0].queued_s >= 1.0
    assert heard.caps == [2]  # pushback: the build concurrency halved (start 4)


async def test_a_second_failure_reaches_the_caller_as_the_providers_own_answer_told_not_to_retry(
        http: httpx.AsyncClient) -> None:
    with ScriptedModelServer(lambda _: HttpError(529)) as srv:
        gw = await gateway_for(srv, retry_wait_s=0.05)
        try:
            answer = await http.post(gw.base_url + "/v1/messages", json=body(stream=False),
                                     headers={UNIT_HEADER: "u#0", STAGE_HEADER: "build"})
            await settled(gw, 1)
        finally:
            await gw.close()
    assert answer.status_code == 529 and answer.json()["error"]["type"] == "overloaded_error"
    assert answer.headers["x-should-retry"] == "false"
    assert len(srv.message_requests) == 2
    assert gw.ledger.unit("u#0")["build"].failed == 1


async def test_calls_paced_to_the_providers_token_limit_are_never_refused_to_their_caller(
        http: httpx.AsyncClient) -> None:
    """Twelve calls of ~260 input tokens at once against 30,000 tokens a minute in a two-second bucket
    (three calls' worth): the provider refuses the rest of the first burst (nothing is known of its
    limit yet); its 429s advertise the limit, so the gateway queues those calls again behind the
    pacer, each waiting for the room its input needs — none reaches its caller, none spends the
    one retry kept for failures."""
    heard = Heard()
    with ScriptedModelServer(lambda _: text_reply("ok", usage=Usage(250, 10)),
                             pressure=Pressure(tpm=30_000, burst_s=2)) as srv:
        gw = await gateway_for(srv, heard, retry_wait_s=0.2)
        try:
            answers = await asyncio.gather(*(http.post(gw.base_url + "/v1/messages", json=body("y" * 1000))
                                             for _ in range(12)))
            await settled(gw, 12)
        finally:
            await gw.close()
    assert [a.status_code for a in answers] == [200] * 12
    counts = srv.provider_counts()
    assert [r.outcome for r in heard.calls] == ["ok"] * 12
    # every 429 the provider sent went back in the gateway's queue and later through
    assert counts["answered"] == 12 and counts["rate_limited"] == gw.requeued >= 1
    assert not any(r.retried for r in heard.calls)
    assert heard.caps == []  # a 429 under advertised limits slows the pacer, not the builds


async def test_429s_under_advertised_limits_wait_in_the_gateway_until_its_rate_hold_runs_out(
        http: httpx.AsyncClient) -> None:
    """A provider that answers every call 429 while advertising its limits: the gateway queues the
    call again after each ``retry-after`` for ``rate_hold_s``, then spends its one retry, and only
    then does the caller see the provider's 429, told not to retry; the builds' cap is untouched."""
    limits = {"retry-after": "0", "anthropic-ratelimit-requests-limit": "6000",
              "anthropic-ratelimit-requests-remaining": "5999"}
    heard = Heard()
    with ScriptedModelServer(lambda _: HttpError(429, headers=limits)) as srv:
        gw = await gateway_for(srv, heard, rate_hold_s=0.5, retry_wait_s=0.01)
        try:
            started = gw.clock()
            answer = await http.post(gw.base_url + "/v1/messages", json=body(), headers={UNIT_HEADER: "u#0"})
            held = gw.clock() - started
            await settled(gw, 1)
        finally:
            await gw.close()
    assert answer.status_code == 429 and answer.headers["x-should-retry"] == "false"
    assert held >= 0.5 and gw.requeued >= 2 and len(srv.message_requests) == gw.requeued + 2
    assert [r.outcome for r in heard.calls] == ["rate_limited"] and heard.calls[0].retried
    assert heard.caps == []


async def test_a_call_still_held_at_the_provider_when_the_run_closes_its_gateway_ends_quietly(
        http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture) -> None:
    """A build held at the provider when the run ends (a signal mid-build): closing the gateway
    cancels the call after its grace; the call is recorded as having had no answer and nothing is
    logged as an error of the server (an interrupted run's output stays free of tracebacks)."""
    release = threading.Event()

    def held(_: dict[str, Any]) -> Action:
        release.wait(30)
        return text_reply("late")

    heard = Heard()
    caplog.set_level(logging.WARNING)
    with ScriptedModelServer(held) as srv:
        gw = await gateway_for(srv, heard, close_grace_s=0.2)
        call = asyncio.create_task(http.post(gw.base_url + "/v1/messages", json=body(stream=False)))
        await eventually_async(lambda: srv.message_requests, interval=0.01, what="the call reached the provider")
        await gw.close()
        await eventually_async(lambda: heard.calls, interval=0.01, what="the call heard of")
        release.set()
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
    assert [r.outcome for r in heard.calls] == ["connection"]
    assert "Exception in ASGI application" not in caplog.text and "Traceback" not in caplog.text


async def test_a_provider_that_is_down_is_held_probed_and_seen_back(http: httpx.AsyncClient) -> None:
    """An outage from the first call for 1.5 s: lane 0's call fails twice (its one retry included) and
    reaches its caller as the provider's 529; lane 1's call is the third failure in a row from every
    route — the provider is declared down — so its retry is held, not refused, until a probe finds the
    provider back, and goes through. A call held longer than ``hold_s`` is answered 529."""
    heard = Heard()
    with ScriptedModelServer(lambda _: text_reply("ok"), pressure=Pressure(outage_after_calls=0, outage_s=1.5)) as srv:
        gw = await gateway_for(srv, heard, hold_s=5.0, probe_s=0.2, retry_wait_s=0.05)
        try:
            failed = await http.post(gw.lane_url(gw.base_url, 0) + "/v1/messages", json=body())
            assert failed.status_code == 529 and gw.health.up
            held = await http.post(gw.lane_url(gw.base_url, 1) + "/v1/messages", json=body())
            assert held.status_code == 200 and gw.health.up
        finally:
            await gw.close()
    assert heard.provider_news == [False, True]
    assert gw.health.outages == 1 and srv.provider.counts.outage_refused >= 3
    with ScriptedModelServer(lambda _: text_reply("ok"), pressure=Pressure(outage_after_calls=0, outage_s=60)) as srv:
        gw = await gateway_for(srv, hold_s=0.3, probe_s=0.1, retry_wait_s=0.01)
        try:
            await asyncio.gather(*(http.post(gw.lane_url(gw.base_url, i) + "/v1/messages", json=body())
                                   for i in range(2)))
            refused = await http.post(gw.base_url + "/v1/messages", json=body(), headers={UNIT_HEADER: "u#2"})
            await settled(gw, 3)
        finally:
            await gw.close()
    assert refused.status_code == 529 and "model provider down" in refused.json()["error"]["message"]
    assert gw.ledger.unit("u#2")["build"].failed == 1 and gw.refused == 1


async def test_a_caller_that_hangs_up_mid_stream_still_has_its_whole_answer_counted(http: httpx.AsyncClient) -> None:
    reply = Reply([TextBlock("word " * 200)], usage=Usage(10, 400))
    with ScriptedModelServer(lambda _: reply, pressure=Pressure(output_tps=2000)) as srv:
        gw = await gateway_for(srv)
        try:
            async with http.stream("POST", gw.base_url + "/v1/messages", json=body(),
                                   headers={UNIT_HEADER: "u#3"}) as answer:
                async for _ in answer.aiter_bytes():
                    break  # one chunk, then the caller is gone
            await settled(gw, 1)
        finally:
            await gw.close()
    assert gw.ledger.unit("u#3")["build"].usage == Tokens(10, 400)


async def test_no_key_header_value_or_prompt_text_in_the_gateways_log_metrics_or_ledger(
        http: httpx.AsyncClient, caplog, tmp_path: Path) -> None:
    secret, header_value, prompt = "sk-ant-PLANTED-0123456789", "PLANTED-header-value-42", "PLANTED prompt: my cat's name"
    heard = Heard()
    metrics = RunMetrics()

    class Metered(Heard):
        def call(self, record: CallRecord) -> None:
            heard.call(record)
            metrics.model_call(record.stage, record.outcome, record.cost_usd, record.usage.to_json(), record.queued_s)

    answers: list[Action] = [HttpError(500), HttpError(500), text_reply("fine")]
    caplog.set_level(logging.DEBUG)
    with ScriptedModelServer(lambda _: answers.pop(0) if answers else text_reply("fine")) as srv:
        gw = await ModelGateway(GatewayConfig(own=Upstream(srv.base_url, secret), lanes=Upstream(srv.base_url, secret),
                                              retry_wait_s=0.01), CallLedger(tmp_path / "calls.jsonl"),
                                events=Metered()).start()
        try:
            for stream in (False, True):
                await http.post(gw.base_url + "/v1/messages", json=body(prompt, stream=stream),
                                headers={"x-api-key": secret, "authorization": f"Bearer {secret}",
                                         "x-custom": header_value, UNIT_HEADER: "u#4", STAGE_HEADER: "judge"})
            await settled(gw, 2)
        finally:
            await gw.close()
    seen = [caplog.text, generate_latest(metrics.registry).decode(), (tmp_path / "calls.jsonl").read_text(),
            json.dumps(gw.status())]
    assert "model call own judge" in caplog.text  # the log does speak of the calls
    for text in seen:
        for planted in (secret, header_value, prompt, "my cat"):
            assert planted not in text
    assert len(heard.calls) == 2


def test_a_cache_reads_input_is_estimated_from_its_messages_not_its_cached_tools() -> None:
    """Anthropic does not count cache reads against the input limit: once a prefix (system prompt and
    tools) went by and the call asks for caching, its estimate follows its messages, at the highest
    ratio the provider counted of recent cache reads; a first sighting, or a call that does not ask
    for caching, is estimated from its whole body, at the highest ratio counted of recent such calls
    once three were seen."""
    upstream = Upstream("http://127.0.0.1:9")
    gw = ModelGateway(GatewayConfig(own=upstream, lanes=upstream), CallLedger(None))
    tools = [{"name": f"tool{i}", "description": "d" * 2000, "input_schema": {"type": "object"}} for i in range(20)]

    def call(text: str, cache: bool = True) -> tuple[Any, bytes]:
        payload = body(text, tools=tools, system=[{"type": "text", "text": "s" * 400,
                                                   **({"cache_control": {"type": "ephemeral"}} if cache else {})}])
        raw = json.dumps(payload).encode()
        return gw._shape(raw, payload), raw

    first, raw = call("x" * 4000)
    assert not first.prefix_cached and gw._estimate(first) == len(raw) // 4  # a cache write: all of it
    for n in (4000, 8000, 2000):
        shape, _ = call("y" * n)
        assert shape.prefix_cached
        gw._learn(shape, Tokens(input=int(shape.message_chars / 4 * 1.1), cache_read=10_000))
    read, raw = call("z" * 40_000)
    assert gw._estimate(read) == int(read.message_chars / 4 * 1.1 * 1.05) < len(raw) // 4
    uncached, raw = call("z" * 40_000, cache=False)
    assert gw._estimate(uncached) == len(raw) // 4  # nothing learned of its kind yet: all of it
    for n in (1000, 3000, 5000):  # the provider counts half of what other calls carry
        shape, raw = call("w" * n, cache=False)
        gw._learn(shape, Tokens(input=len(raw) // 8))
    assert gw._estimate(uncached) == pytest.approx(uncached.body_bytes / 4 * 0.5 * 1.05, rel=0.01)
