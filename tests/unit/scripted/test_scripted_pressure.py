"""The scripted model as a provider under pressure (issue 37): rate limits with Anthropic's headers and
429s, latency, 529 bursts, an outage window, prompt-cache usage fields — all off by default.

The buckets are checked on an injected clock; the HTTP face on a real loopback server."""

from __future__ import annotations

import httpx
import pytest

from orchestrator.scripted.pressure import Pressure, ProviderState, input_estimate
from orchestrator.scripted.replies import Reply, TextBlock, Usage, text_reply
from orchestrator.scripted.server import ScriptedModelServer


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def request(chars: int = 400, **extra: object) -> dict[str, object]:
    return {"model": "claude-sonnet-4-6", "max_tokens": 10, "messages": [{"role": "user", "content": "x" * chars}],
            **extra}


def test_off_by_default_nothing_is_refused_and_no_rate_limit_header_is_sent() -> None:
    state = ProviderState()
    for _ in range(50):
        refusal, headers, _ = state.admit(request())
        assert refusal is None and headers == {}
    assert not Pressure().active


def test_the_tokens_bucket_refuses_what_would_overdraw_it_with_retry_after_and_refills_with_time() -> None:
    clock = Clock()
    state = ProviderState(Pressure(tpm=600, burst_s=60), clock=clock, wall=lambda: 0.0)  # 10 tokens a second
    one = input_estimate(request())
    admitted = 0
    while (answer := state.admit(request()))[0] is None:
        admitted += 1
        assert answer[1]["anthropic-ratelimit-tokens-limit"] == "600"
    refusal, headers, charged = answer
    assert admitted == 600 // one and charged == 0
    assert refusal is not None and refusal.status == 429 and refusal.resolved_type() == "rate_limit_error"
    remaining = int(headers["anthropic-ratelimit-tokens-remaining"])
    assert remaining == 600 - admitted * one
    assert int(headers["retry-after"]) == -(-(one - remaining) // 10)  # whole seconds until it fits
    clock.t += int(headers["retry-after"])
    assert state.admit(request())[0] is None
    assert state.counts.rate_limited == 1


def test_output_is_charged_when_the_answer_is_sent_and_may_take_the_bucket_below_zero() -> None:
    clock = Clock()
    state = ProviderState(Pressure(tpm=600), clock=clock)
    refusal, _, charged = state.admit(request())
    assert refusal is None
    state.served(request(), Usage(charged, 1000), charged)
    assert int(state.headers()["anthropic-ratelimit-tokens-remaining"]) == 0
    assert state.admit(request())[0] is not None  # the bucket is below zero: nothing fits
    clock.t += 60 + 100 * 60 / 600  # a full minute more than the overdraft
    assert state.admit(request())[0] is None
    assert state.counts.counted_tokens == charged + 1000


def test_requests_per_minute_and_the_reset_header_name_when_the_bucket_is_full_again() -> None:
    clock = Clock()
    state = ProviderState(Pressure(rpm=60), clock=clock, wall=lambda: 1_800_000_000.0)
    for _ in range(60):
        assert state.admit(request())[0] is None
    refusal, headers, _ = state.admit(request())
    assert refusal is not None and refusal.status == 429 and headers["retry-after"] == "1"
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert headers["anthropic-ratelimit-requests-reset"] == "2027-01-15T08:01:00Z"  # 60 s after the wall time


def test_an_overload_burst_answers_529_inside_its_window_only() -> None:
    clock = Clock()
    state = ProviderState(Pressure(overload_bursts=((5.0, 2.0),)), clock=clock)
    assert state.admit(request())[0] is None  # the first model call starts the burst clock
    clock.t += 5.5
    refusal = state.admit(request())[0]
    assert refusal is not None and refusal.status == 529 and refusal.resolved_type() == "overloaded_error"
    clock.t += 2.0
    assert state.admit(request())[0] is None
    assert state.counts.overloaded == 1


def test_an_outage_starts_at_its_call_and_refuses_every_call_for_its_length() -> None:
    clock = Clock()
    state = ProviderState(Pressure(outage_after_calls=3, outage_s=60, outage_status=503), clock=clock)
    assert all(state.admit(request())[0] is None for _ in range(3))
    for _ in range(5):
        refusal = state.admit(request())[0]
        assert refusal is not None and refusal.status == 503
        clock.t += 10
    assert state.in_outage()
    clock.t += 10.1  # 60 s after the outage's first call
    assert not state.in_outage() and state.admit(request())[0] is None
    assert state.counts.outage_refused == 5


def test_an_outage_on_build_waits_past_its_call_for_the_first_build_step() -> None:
    clock = Clock()
    state = ProviderState(Pressure(outage_after_calls=2, outage_s=60, outage_on_build=True), clock=clock)
    judge = request(tools=[{"name": "submit_response"}])
    build = request(tools=[{"name": "build-workflow"}, {"name": "ask-user"}])
    claude = request(tools=[{"name": "mcp__n8n__create_workflow"}])
    assert state.admit(build)[0] is None and state.admit(build)[0] is None  # before its call: served
    assert all(state.admit(judge)[0] is None for _ in range(4))  # past it, but no build step yet
    assert not state.in_outage()
    refusal = state.admit(build)[0]
    assert refusal is not None and refusal.status == 529 and state.in_outage()
    assert state.admit(judge)[0] is not None  # from then on, every route alike
    clock.t += 60
    assert state.admit(claude)[0] is None and state.counts.outage_refused == 2
    claude_first = ProviderState(Pressure(outage_after_calls=0, outage_on_build=True), clock=clock)
    assert claude_first.admit(judge)[0] is None and claude_first.admit(claude)[0] is not None


def test_the_prompt_cache_writes_a_prefix_once_and_reads_it_afterwards() -> None:
    state = ProviderState(Pressure(prompt_cache=True))
    cached = request(system="s" * 4000, cache_control={"type": "ephemeral"})
    plain = request(system="s" * 4000)
    total = input_estimate(cached)
    first = state.usage_for(cached, Usage(total, 5))
    again = state.usage_for(cached, Usage(total, 5))
    assert first.cache_creation_input_tokens > 0 and first.cache_read_input_tokens == 0
    assert again.cache_read_input_tokens == first.cache_creation_input_tokens and again.cache_creation_input_tokens == 0
    assert first.input_tokens + first.cache_creation_input_tokens == total == again.input_tokens + again.cache_read_input_tokens
    assert state.usage_for(plain, Usage(total, 5)) == Usage(total, 5)  # no cache_control: no cache


def test_pressure_reads_its_json_and_refuses_an_unknown_field() -> None:
    p = Pressure.from_json('{"tpm": 1000, "overload_bursts": [[1, 2]], "prompt_cache": true}')
    assert p.tpm == 1000 and p.overload_bursts == ((1.0, 2.0),) and p.prompt_cache and p.active
    assert Pressure.from_json(p.to_json()) == p
    with pytest.raises(ValueError, match="unknown field"):
        Pressure.from_json('{"tmp": 1}')


def test_over_http_a_limited_server_sends_anthropics_headers_a_429_with_retry_after_and_counts_what_it_served() -> None:
    def script(_: dict[str, object]) -> Reply:
        return text_reply("ok", usage=Usage(100, 7))

    with ScriptedModelServer(script, pressure=Pressure(tpm=6000, burst_s=1, prompt_cache=True)) as srv:
        body = {**request(chars=40), "stream": True, "system": "p" * 400, "cache_control": {"type": "ephemeral"}}
        with httpx.Client() as http:
            ok = http.post(f"{srv.base_url}/v1/messages", json=body)
            refused = http.post(f"{srv.base_url}/v1/messages", json={**body, "stream": False})
        assert ok.status_code == 200 and ok.headers["anthropic-ratelimit-tokens-limit"] == "6000"
        assert '"cache_creation_input_tokens": 100' in ok.text  # the system prompt's 100 tokens, written
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["type"] == "rate_limit_error"
        counts = srv.provider_counts()
    assert counts["answered"] == 1 and counts["rate_limited"] == 1 and counts["model_calls"] == 2
    assert counts["usage"]["claude-sonnet-4-6"] == {"input_tokens": 0, "output_tokens": 7,
                                                    "cache_creation_input_tokens": 100, "cache_read_input_tokens": 0}
    assert counts["counted_tokens"] == 107


def test_over_http_a_streamed_answer_takes_the_latency_and_output_speed_asked_for() -> None:
    reply = Reply([TextBlock("word " * 40)], usage=Usage(10, 20))
    with ScriptedModelServer(lambda _: reply, pressure=Pressure(latency_s=0.3, output_tps=100)) as srv:
        with httpx.Client() as http:
            answer = http.post(f"{srv.base_url}/v1/messages", json={**request(), "stream": True})
    assert answer.status_code == 200
    assert answer.elapsed.total_seconds() >= 0.3 + 20 / 100 * 0.9  # latency, then 20 tokens at 100 a second
