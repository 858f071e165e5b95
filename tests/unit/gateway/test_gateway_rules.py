"""The model gateway's rules, on an injected clock (issue 37): the build concurrency (delay-based, with
a multiplicative decrease on the provider's pushback), the mirror of the provider's rate limits, when
the provider is down; the price table and usage fields; whose a lane's call is."""

from __future__ import annotations

import pytest

from orchestrator.gateway.attribution import Leases, lane_stage, text_markers
from orchestrator.gateway.control import Concurrency, ConcurrencyRule, ProviderHealth, RatePacer, retry_after_s
from orchestrator.gateway.prices import DEFAULT_PRICE, Usage, cost_usd, price_of, usage_of


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


RULE = ConcurrencyRule(minimum=2, maximum=12, start=8, epoch_s=10.0)


def epoch(c: Concurrency, clock: Clock, *, queued: float, served: float = 1.0, calls: int = 5,
          running: int = 0, waiting: int = 0) -> int | None:
    for _ in range(calls):
        c.observe(queued_s=queued, service_s=served)
    c.demand(running, waiting)
    clock.t += RULE.epoch_s
    return c.tick()


def test_a_short_queue_with_builds_waiting_raises_the_cap_a_step_each_epoch_up_to_the_maximum() -> None:
    clock = Clock()
    c = Concurrency(RULE, clock)
    caps = [epoch(c, clock, queued=0.0, running=c.cap, waiting=3) for _ in range(6)]
    assert caps == [9, 10, 11, 12, None, None]  # a step is 10 % of the cap, at least 1; the maximum holds


def test_the_step_is_a_tenth_of_the_cap_so_a_large_pool_converges_as_fast_as_a_small_one() -> None:
    clock = Clock()
    c = Concurrency(ConcurrencyRule(minimum=1, maximum=2000, start=1000, epoch_s=10.0), clock)
    assert epoch(c, clock, queued=3.0, running=1000, waiting=0) == 900
    assert epoch(c, clock, queued=0.0, running=900, waiting=50) == 990


def test_the_cap_is_not_raised_when_the_allocator_never_reached_it() -> None:
    clock = Clock()
    c = Concurrency(RULE, clock)
    assert epoch(c, clock, queued=0.0, running=5, waiting=0) is None and c.cap == 8


def test_calls_queued_longer_than_twice_their_service_time_lower_the_cap_a_step() -> None:
    clock = Clock()
    c = Concurrency(RULE, clock)
    assert epoch(c, clock, queued=2.4, running=8, waiting=4) == 7
    assert epoch(c, clock, queued=1.9, running=7, waiting=4) is None  # between the marks: it holds
    assert epoch(c, clock, queued=1.0, running=7, waiting=4) is None
    assert c.changes[-1][1:] == (7, "calls queued 2.40× their service time")


def test_a_queue_shorter_than_one_service_time_while_builds_wait_raises_the_cap() -> None:
    """The band is one to two service times queued (``gateway/control.py``): below one, the provider's
    queue runs dry whenever a few builds are between calls at once, so a build more is worth it."""
    clock = Clock()
    c = Concurrency(RULE, clock)
    assert epoch(c, clock, queued=0.9, running=8, waiting=2) == 9
    assert epoch(c, clock, queued=0.9, running=8, waiting=2) is None  # the allocator did not reach 9


def test_provider_pushback_halves_the_cap_at_once_but_only_once_an_epoch_and_never_below_the_minimum() -> None:
    clock = Clock()
    c = Concurrency(RULE, clock)
    assert c.observe(queued_s=0, service_s=1, pushback=True) == 4
    assert c.observe(queued_s=0, service_s=1, pushback=True) is None  # the same epoch: one decrease
    clock.t += RULE.epoch_s
    assert c.tick() is None  # the epoch that backed off is not also judged on its queue
    assert c.observe(queued_s=0, service_s=1, pushback=True) == 2
    clock.t += RULE.epoch_s
    c.tick()
    assert c.observe(queued_s=0, service_s=1, pushback=True) is None and c.cap == 2  # the minimum


def test_an_epoch_with_no_call_changes_nothing() -> None:
    clock = Clock()
    c = Concurrency(RULE, clock)
    c.demand(8, 10)
    clock.t += 30
    assert c.tick() is None and c.cap == 8


def headers(remaining: int, limit: int = 600, reset_in: int = 0) -> dict[str, str]:
    """Anthropic's rate-limit headers (``reset`` in RFC 3339, to the second), the wall clock at 1000.0."""
    from datetime import UTC, datetime
    return {"anthropic-ratelimit-tokens-limit": str(limit), "anthropic-ratelimit-tokens-remaining": str(remaining),
            "anthropic-ratelimit-tokens-reset": datetime.fromtimestamp(1000 + reset_in, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def pacer_after(report: dict[str, str], clock: Clock) -> RatePacer:
    pacer = RatePacer(clock, lambda: 1000.0)
    ticket = pacer.sent(0)
    pacer.update(report, ticket)
    pacer.done(ticket, input_tokens=0)
    return pacer


def test_the_pacer_lets_calls_go_at_the_advertised_rate_once_the_providers_bucket_is_spent() -> None:
    clock = Clock()
    assert RatePacer(clock, lambda: 1000.0).wait_for(10_000) == 0  # nothing known yet: go
    # 10 tokens a second; 90 left and full in 49 s: a 580-token bucket; reset is to the second, so it
    # is read as full in 50 s — 80 left
    pacer = pacer_after(headers(90, reset_in=49), clock)
    assert pacer.wait_for(81) > 0
    assert pacer.wait_for(80) == pytest.approx(0.0)
    pacer.sent(80)
    assert pacer.wait_for(50) == pytest.approx(5.0)  # the bucket is empty: 50 tokens take 5 s
    clock.t += 5
    ticket = pacer.sent(50)
    assert pacer.wait_for(50) == pytest.approx(5.0)
    pacer.done(ticket, input_tokens=20, output_tokens=10)  # 20 of the 50 estimated were counted, and 10 out
    assert pacer.wait_for(50) == pytest.approx(3.0)
    clock.t += 60
    assert pacer.wait_for(580) == pytest.approx(0.0)
    assert pacer.wait_for(1000) == pytest.approx(0.0)  # bigger than the bucket: it waits for a full one


def test_the_providers_own_count_only_ever_slows_the_pacer_and_a_pause_holds_every_call() -> None:
    clock = Clock()
    pacer = pacer_after(headers(600, reset_in=0), clock)
    assert pacer.wait_for(300) == pytest.approx(0.0)
    ticket = pacer.sent(0)
    pacer.update(headers(100, reset_in=50), ticket)  # someone else spends on the key: full in 51 s
    assert pacer.wait_for(300) == pytest.approx(21.0)
    pacer.update(headers(600, reset_in=0), ticket)  # a rosier report changes nothing
    assert pacer.wait_for(300) == pytest.approx(21.0)
    pacer.done(ticket, input_tokens=0)
    pacer.pause(30.0)
    assert pacer.wait_for(1) == pytest.approx(30.0)
    assert retry_after_s({"retry-after": "3"}) == 3.0 and retry_after_s({}) is None


def test_the_provider_is_down_after_three_failures_in_a_row_from_every_active_route_and_up_at_one_answer() -> None:
    clock = Clock()
    health = ProviderHealth(clock)
    health.success("lane/0")
    health.success("lane/1")
    assert not any(health.failure("lane/0") for _ in range(5))  # one route of two failing: not an outage
    assert health.up
    assert health.failure("lane/1") and not health.up and health.outages == 1
    clock.t += 3
    assert health.success("probe") and health.up


def test_a_lone_route_is_every_route() -> None:
    health = ProviderHealth(Clock())
    assert [health.failure("own") for _ in range(3)] == [False, False, True]


def test_prices_are_per_model_family_cache_aware_and_an_unknown_model_is_said_to_be_unpriced() -> None:
    assert price_of("anthropic/claude-sonnet-4-6").price.input == 3.0
    assert price_of("claude-opus-4-1-20250805").price.output == 75.0
    assert price_of("claude-opus-4-8").price.input == 5.0
    assert price_of("claude-haiku-4-5-20251001").price.input == 1.0
    unknown = price_of("custom/scripted-variant-1")
    assert not unknown.known and unknown.price == DEFAULT_PRICE
    usage = Usage(input=1_000_000, output=1_000_000, cache_write=1_000_000, cache_read=1_000_000,
                  cache_write_1h=1_000_000)
    assert cost_usd("claude-sonnet-4-6", usage) == pytest.approx(3 + 15 + 3.75 + 0.30 + 6)


def test_usage_fields_of_both_apis() -> None:
    anthropic = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 30,
                 "cache_read_input_tokens": 40, "cache_creation": {"ephemeral_1h_input_tokens": 12}}
    assert usage_of(anthropic) == Usage(input=10, output=5, cache_write=18, cache_read=40, cache_write_1h=12)
    openai = {"prompt_tokens": 100, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 60}}
    assert usage_of(openai) == Usage(input=40, output=9, cache_read=60)
    assert usage_of(None) == Usage()


@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_a_shared_calls_usage_splits_exactly(parts: int) -> None:
    usage = Usage(101, 7, 13, 1000, 1)
    shares = usage.split(parts)
    assert len(shares) == parts and sum(shares, Usage()) == usage
    assert max(s.input for s in shares) - min(s.input for s in shares) <= 1


def test_a_lane_call_goes_to_the_lease_whose_marker_it_carries_else_by_phase_else_shared() -> None:
    leases = Leases()
    a = leases.open("a#0", "0", ["Build me a form that collects equipment requests"])
    b = leases.open("b#0", "0")
    b.markers.add("eval-build-x-2@n8n-eval.invalid")
    other = leases.open("c#0", "1")
    agent_turn = b'{"messages":[{"role":"user","content":"hi <project-context>Eval Builder &lt;eval-build-x-2@n8n-eval.invalid&gt;"}]}'
    assert leases.attribute("0", agent_turn, "build") == (["b#0"], "build")
    title = b'{"messages":[{"content":"Build me a form that collects equipment requests \\"now\\""}]}'
    assert leases.attribute("0", title, "build") == (["a#0"], "build")
    a.phase = "verify"
    assert leases.attribute("0", b"{}", "mock") == (["a#0"], "mock")  # the one unit being verified
    assert leases.attribute("0", b"{}", "build") == (["b#0"], "build")  # the one unit still building
    b.phase = "verify"
    assert leases.attribute("0", b"{}", "mock") == (["a#0", "b#0"], "mock")  # shared
    assert leases.attribute("1", b"{}", "build") == (["c#0"], "build")
    leases.close(other)
    assert leases.attribute("1", b"{}", "build") == ([], "build")  # nobody's: the run's


def test_what_a_lane_call_is() -> None:
    assert lane_stage({"stream": True, "tools": [{"name": "build-workflow"}]}) == "build"
    assert lane_stage({"system": "Generate a short descriptive title for the conversation"}) == "build"
    assert lane_stage({"system": "You are a test data planner"}) == "mock"
    assert lane_stage({"tools": [{"name": "submit_response"}]}) == "mock"
    assert lane_stage(None) == "mock"


def test_text_markers_take_a_long_enough_first_line_cut_short() -> None:
    assert text_markers("short", None, "A first line long enough to tell cases apart\nsecond", "x" * 200) == [
        "A first line long enough to tell cases apart", "x" * 80]
    assert text_markers("y" * 20) == ["y" * 20]
