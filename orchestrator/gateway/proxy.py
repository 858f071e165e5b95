"""The model gateway: one loopback HTTP server every model call of a run goes through.

``ModelGateway`` serves the Messages API (and the OpenAI-compatible chat completions of ``custom/``
models) on ``host:port`` and forwards each call to an upstream — the real provider, or the embedded
scripted model offline — with the upstream's key (callers never hold it). Two kinds of route:

- ``/lane/<index>/…``: a lane's calls (``N8N_INSTANCE_AI_MODEL_URL`` of lane ``index``), to the lanes'
  upstream; whose they are is :meth:`Leases.attribute`'s to say;
- anything else: our own callers (judge, user proxy, claude), to the run's upstream; they name their
  unit and stage in headers (:mod:`orchestrator.gateway.attribution`), which are stripped.

For every model call, in order:

1. **wait**: while the provider is down the call is held, up to ``hold_s``, then answered ``529
   overloaded_error`` (``x-should-retry: false``); otherwise it waits its turn, first come first
   served, until the provider's limits have room for its input (:class:`RatePacer`);
2. **forward**, the answer streamed back byte for byte as it arrives (SSE unchanged), its usage
   read on the side (:class:`UsageReader`); a caller that hangs up does not stop the reading —
   the provider bills the whole answer;
3. **centrally**: a 429 while the provider advertises its limits is the pacer's estimate gone wrong,
   not a failure: the call goes back in the queue after ``retry-after`` (which pauses every call,
   not just this one) as often as it takes, for up to ``rate_hold_s`` after it arrived. A 529, 5xx,
   no answer, or a 429 from a provider that advertises no limits is retried once — after
   ``retry-after`` or ``retry_wait_s``. Only then does the caller see the provider's own answer,
   with ``x-should-retry: false`` so an SDK does not multiply the retries;
4. **account**: a :class:`CallRecord` in the ledger (unit(s), stage, model, outcome, usage, cost, time
   queued and served), the concurrency rule fed, the health updated.

What is logged: a call's route, stage, status, times and token counts; never a header, a key, a
path beyond the route, or a byte of a body.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from orchestrator.errors import ModelCallError
from orchestrator.gateway.attribution import STAGE_HEADER, STAGES, UNIT_HEADER, Leases, lane_stage, parse_body
from orchestrator.gateway.control import Concurrency, ConcurrencyRule, ProviderHealth, RatePacer, retry_after_s
from orchestrator.gateway.ledger import PROVIDER_FAILURES, CallLedger, CallRecord, outcome_of
from orchestrator.gateway.prices import Usage
from orchestrator.gateway.usage_reader import UsageReader, error_type

log = logging.getLogger(__name__)

MODEL_ENDPOINTS = ("/v1/messages", "/v1/chat/completions", "/chat/completions")
_HOP = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
                  "proxy-connection", "accept-encoding", "x-api-key", "authorization", UNIT_HEADER, STAGE_HEADER})
_HOP_BACK = frozenset({"content-length", "connection", "keep-alive", "transfer-encoding"})
PROBE_STAGE = "probe"
_RATIO_WINDOW = 30  # calls of a kind an input estimate learns from


@dataclass(frozen=True)
class Upstream:
    """Where calls go: a base URL (``/v1/messages`` is appended) and the key to send, never logged."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class GatewayConfig:
    own: Upstream
    lanes: Upstream
    host: str = "127.0.0.1"
    port: int = 0
    rule: ConcurrencyRule = field(default_factory=ConcurrencyRule)
    hold_s: float = 30.0
    probe_s: float = 5.0
    retry_wait_s: float = 2.0
    rate_hold_s: float = 120.0
    read_timeout_s: float = 600.0
    close_grace_s: float = 10.0  # what close() waits for calls in flight before it cancels them


class GatewayEvents:
    """What the run hears from its gateway (every method optional)."""

    def call(self, record: CallRecord) -> None: ...

    def cap(self, cap: int, why: str) -> None: ...

    def provider(self, up: bool, detail: str) -> None: ...


class _Refused(ModelCallError):
    """The call was held while the provider was down, longer than the gateway holds calls."""


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status_code=status,
                        headers={"x-should-retry": "false"})


def _credentials(sent: Mapping[str, str], key: str | None) -> dict[str, str]:
    """The upstream's key in the caller's own style (``x-api-key``, or ``Authorization: Bearer`` as
    OpenAI-compatible clients send it); without an upstream key, what the caller sent."""
    bearer = sent.get("authorization", "")
    if key is None:
        return {k: v for k, v in (("x-api-key", sent.get("x-api-key")), ("authorization", bearer)) if v}
    return {"authorization": f"Bearer {key}"} if bearer.lower().startswith("bearer") and "x-api-key" not in sent \
        else {"x-api-key": key}


def _route(path: str) -> tuple[str, str | None, str]:
    """``/lane/3/v1/messages`` → ("lane/3", "3", "/v1/messages"); ``/v1/messages`` → ("own", None, …)."""
    parts = path.split("/", 3)
    if len(parts) >= 3 and parts[1] == "lane" and parts[2]:
        return f"lane/{parts[2]}", parts[2], "/" + (parts[3] if len(parts) > 3 else "")
    return "own", None, path


@dataclass(frozen=True)
class _Shape:
    """What a call's input is made of, for its estimate (:meth:`ModelGateway._shape`)."""

    prefix_cached: bool  # asks for caching, and its system prompt and tools went by before
    message_chars: int
    body_bytes: int


@dataclass
class _Call:
    """One model call on its way through."""

    route: str
    stage: str
    units: tuple[str, ...]
    body: bytes
    streamed: bool
    arrived: float
    estimate: int
    first_arrived: float = field(init=False)  # when it reached the gateway (arrived moves on a re-queue)
    queued_s: float = 0.0
    retried: bool = False
    model: str | None = None
    shape: _Shape = field(default_factory=lambda: _Shape(False, 0, 0))

    def __post_init__(self) -> None:
        self.first_arrived = self.arrived


class _InLoopServer(uvicorn.Server):
    """uvicorn in the run's own event loop: the run keeps its signal handlers."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ModelGateway:
    def __init__(self, config: GatewayConfig, ledger: CallLedger, *, leases: Leases | None = None,
                 events: GatewayEvents | None = None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.config = config
        self.ledger = ledger
        self.leases = leases or Leases()
        self.events = events or GatewayEvents()
        self.clock = clock
        self.concurrency = Concurrency(config.rule, clock)
        self.pacer = RatePacer(clock, wall)
        #: what the provider counted ÷ (the characters an estimate reads ÷ 4), of the last calls, for
        #: cache reads (True) and the rest (False) (:meth:`_estimate`)
        self._ratios: dict[bool, deque[float]] = {True: deque(maxlen=_RATIO_WINDOW), False: deque(maxlen=_RATIO_WINDOW)}
        self._prefixes: set[bytes] = set()
        self.health = ProviderHealth(clock)
        self._turn = asyncio.Lock()  # first come, first served
        self._up = asyncio.Event()
        self._up.set()
        self._probe: asyncio.Task[None] | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self._client: httpx.AsyncClient | None = None
        self._server: _InLoopServer | None = None
        self._serving: asyncio.Task[None] | None = None
        self.port = config.port
        self.held = 0  # calls waiting right now
        self.refused = 0  # calls answered 529 after a hold
        self.requeued = 0  # 429s under advertised limits the gateway queued again
        self._closing = False
        self.last_model: str | None = None

    # ---------------------------------------------------------------- life cycle
    async def start(self) -> ModelGateway:
        """Start serving on the configured host and port (0: any free port, read back into :attr:`port`);
        returns the gateway. Raises the bind error when the server cannot start."""
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.config.read_timeout_s, connect=10.0, pool=None),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=200))
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["GET", "POST", "HEAD", "PUT", "DELETE"])])
        # keep-alive longer than a Node client's idle timeout: the server never closes a socket the
        # lane is about to reuse
        config = uvicorn.Config(app, host=self.config.host, port=self.config.port, log_config=None,
                                log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=75)
        self._server = _InLoopServer(config)
        self._serving = asyncio.create_task(self._server.serve(), name="model-gateway")
        while not self._server.started:
            if self._serving.done():
                self._serving.result()  # the bind failed: raise it
                raise RuntimeError("the model gateway stopped before it started")
            await asyncio.sleep(0.01)
        self.port = int(self._server.servers[0].sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        """Stop serving, giving calls in flight ``close_grace_s`` to finish, and close the upstream client."""
        self._closing = True
        if self._probe is not None:
            self._probe.cancel()
        if self._server is not None:
            self._server.should_exit = True
        if self._serving is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._serving, timeout=self.config.close_grace_s)
        if self._pumps:
            await asyncio.wait(list(self._pumps), timeout=self.config.close_grace_s)
        if self._client is not None:
            await self._client.aclose()
        self.ledger.close()

    @property
    def base_url(self) -> str:
        """The URL callers point their Anthropic base URL at."""
        return f"http://{self.config.host}:{self.port}"

    def lane_url(self, base: str, index: int | str) -> str:
        """A lane's model URL (the lane appends ``/v1``), on ``base`` (the URL lanes reach us at)."""
        return f"{base.rstrip('/')}/lane/{index}"

    # ---------------------------------------------------------------- one request
    async def _handle(self, request: Request) -> Response:
        route, lane, path = _route(request.url.path)
        upstream = self.config.lanes if lane is not None else self.config.own
        body = await request.body()
        target = upstream.base_url.rstrip("/") + path + (f"?{request.url.query}" if request.url.query else "")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        headers["accept-encoding"] = "identity"  # the usage is read from the bytes that go by
        headers.update(_credentials(request.headers, upstream.api_key))
        if request.method != "POST" or path not in MODEL_ENDPOINTS:
            return await self._passthrough(request.method, target, headers, body)
        parsed = parse_body(body)
        if lane is not None:
            units, stage = self.leases.attribute(lane, body, lane_stage(parsed))
        else:
            unit = request.headers.get(UNIT_HEADER)
            asked = request.headers.get(STAGE_HEADER, "build")
            units, stage = ([unit] if unit else []), (asked if asked in STAGES else "build")
        shape = self._shape(body, parsed)
        call = _Call(route, stage, tuple(units), body, bool(isinstance(parsed, dict) and parsed.get("stream")),
                     self.clock(), self._estimate(shape),
                     model=str(parsed.get("model")) if isinstance(parsed, dict) and parsed.get("model") else None,
                     shape=shape)
        try:
            return await self._forward(call, target, headers)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            return self._closed(call)

    def _closed(self, call: _Call) -> Response:
        """A call the run's end cut off (a build held at the provider when a signal stopped the run):
        recorded as unanswered, and ended as an answer rather than an error in the run's log."""
        self._record(call, None, "connection", Usage(), 0.0)
        return _error(503, "api_error", "the model gateway is closing")

    async def _passthrough(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Response:
        assert self._client is not None
        try:
            answer = await self._client.request(method, target, headers=headers, content=body)
        except httpx.HTTPError:
            return _error(503, "api_error", "model provider unreachable")
        return Response(answer.content, answer.status_code,
                        {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BACK})

    async def _forward(self, call: _Call, target: str, headers: dict[str, str]) -> Response:
        assert self._client is not None
        while True:
            if self._closing:
                return self._closed(call)
            try:
                ticket = await self._admit(call)
            except _Refused:
                self.refused += 1
                self._record(call, 529, "outage", Usage(), 0.0)
                return _error(529, "overloaded_error",
                              f"model provider down: the gateway held this call {self.config.hold_s:.0f} s")
            sent = self.clock()
            try:
                upstream = await self._client.send(
                    self._client.build_request("POST", target, headers=headers, content=call.body), stream=True)
            except httpx.HTTPError as exc:
                self.pacer.done(ticket)
                if self._closing:  # the run closed the gateway under this call: no provider failure
                    return self._closed(call)
                self._failed(call.route)
                if await self._retry(call, None):
                    continue
                self._record(call, None, "connection", Usage(), self.clock() - sent)
                log.warning("model call %s %s: no answer from the provider (%s)", call.route, call.stage,
                            type(exc).__name__)
                return _error(503, "api_error", "model provider unreachable")
            status = upstream.status_code
            self.pacer.update(upstream.headers, ticket)
            if status == 429 or status >= 500:
                raw = await upstream.aread()
                await upstream.aclose()
                self.pacer.done(ticket)
                # pushback for the concurrency rule: an overload, or a 429 the pacer could not have
                # prevented (the provider sends no limits); a 429 under known limits is the pacer's to fix
                known = self.pacer.tokens is not None or self.pacer.requests is not None
                self.concurrency_observe(call, self.clock() - sent, pushback=status == 529 or (status == 429 and not known))
                if status != 429:
                    self._failed(call.route)
                if status == 429 and known and self._requeue(call, retry_after_s(upstream.headers)):
                    continue
                if await self._retry(call, retry_after_s(upstream.headers), status == 429):
                    continue
                self._record(call, status, outcome_of(status), Usage(), self.clock() - sent)
                kind = error_type(raw) or "api_error"
                log.warning("model call %s %s: the provider answered %s %s, retried once", call.route, call.stage,
                            status, kind)
                back = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BACK}
                back["x-should-retry"] = "false"
                return Response(raw, status, back)
            self._succeeded(call.route)
            return self._relay(call, upstream, ticket, sent)

    def _requeue(self, call: _Call, retry_after: float | None) -> bool:
        """A 429 under advertised limits: pause every call for ``retry-after`` (or ``retry_wait_s``) and
        queue this one again, unless that would hold it past ``rate_hold_s`` since it arrived."""
        wait = retry_after if retry_after is not None else self.config.retry_wait_s
        if self.clock() + wait - call.first_arrived > self.config.rate_hold_s:
            return False
        self.requeued += 1
        self.pacer.pause(wait)
        call.arrived = self.clock()
        return True

    async def _retry(self, call: _Call, retry_after: float | None, rate_limited: bool = False) -> bool:
        """Retry a failed call once: after ``retry-after`` (every call waits: it pauses the gateway)
        or ``retry_wait_s``. False when it was retried already."""
        if call.retried:
            return False
        call.retried = True
        wait = retry_after if retry_after is not None else self.config.retry_wait_s
        if retry_after is not None and rate_limited:
            self.pacer.pause(wait)
        await asyncio.sleep(wait)
        return True

    # ---------------------------------------------------------------- admission
    async def _admit(self, call: _Call) -> int:
        """Wait for the call's turn; returns its ticket in the mirror. Raises :class:`_Refused`."""
        self.held += 1
        try:
            async with self._turn:
                while True:
                    if not self.health.up:
                        left = call.arrived + self.config.hold_s - self.clock()
                        if left <= 0:
                            raise _Refused
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._up.wait(), timeout=left)
                        call.arrived = self.clock() if self.health.up else call.arrived  # holds are no queueing
                        continue
                    wait = self.pacer.wait_for(call.estimate)
                    if wait <= 0:
                        call.queued_s = self.clock() - call.arrived
                        return self.pacer.sent(call.estimate)
                    await asyncio.sleep(min(wait, 0.5))
        finally:
            self.held -= 1

    # ---------------------------------------------------------------- answers
    def _relay(self, call: _Call, upstream: httpx.Response, ticket: int, sent: float) -> Response:
        reader = UsageReader(call.streamed or "text/event-stream" in upstream.headers.get("content-type", ""))
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        listening = [True]

        async def pump() -> None:
            try:
                async for chunk in upstream.aiter_raw():
                    reader.feed(chunk)
                    if listening[0]:
                        queue.put_nowait(chunk)
            except httpx.HTTPError:
                pass  # the answer broke off: what was read is what is counted
            finally:
                await upstream.aclose()
                queue.put_nowait(None)
                reader.finish()
                usage = reader.usage
                counted = usage.input + usage.cache_write + usage.cache_write_1h
                self.pacer.done(ticket, input_tokens=counted, output_tokens=usage.output)
                self._learn(call.shape, usage)
                self.concurrency_observe(call, self.clock() - sent)
                call.model = reader.model or call.model
                self._record(call, upstream.status_code, outcome_of(upstream.status_code), usage, self.clock() - sent)

        task = asyncio.get_running_loop().create_task(pump(), name=f"model-call {call.route}")
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)

        async def relay() -> AsyncIterator[bytes]:
            try:
                while (chunk := await queue.get()) is not None:
                    yield chunk
            finally:
                listening[0] = False

        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BACK}
        return StreamingResponse(relay(), upstream.status_code, headers)

    def _shape(self, body: bytes, parsed: Any) -> _Shape:
        """What of a call's input the provider is likely to count (:class:`_Shape`): a call that asks
        for caching and whose prefix (system prompt and tools) went by before reads that prefix from
        the cache, which Anthropic does not count against the input limit."""
        if not isinstance(parsed, dict):
            return _Shape(False, 0, len(body))
        prefix = hashlib.sha256(json.dumps([parsed.get("system"), parsed.get("tools")]).encode()).digest()
        seen = prefix in self._prefixes and b"cache_control" in body
        self._prefixes.add(prefix)
        return _Shape(seen, len(json.dumps(parsed.get("messages") or [])), len(body))

    def _estimate(self, shape: _Shape) -> int:
        """A call's input tokens before the provider says, at the highest ratio the provider counted of
        the last calls of its kind, plus 5 % — an estimate that errs high holds budget until the
        answer corrects it, one that errs low costs a 429 (which the gateway absorbs). A cache read
        (Anthropic does not count cached input against the limit): its messages' characters ÷ 4 at
        that ratio; anything else: its body's bytes ÷ 4 at that ratio. With fewer than three calls of
        its kind seen: its whole body's bytes ÷ 4."""
        ratios = self._ratios[shape.prefix_cached]
        if len(ratios) < 3:
            return max(1, shape.body_bytes // 4)
        base = shape.message_chars if shape.prefix_cached else shape.body_bytes
        return max(1, int(base / 4 * max(ratios) * 1.05))

    def _learn(self, shape: _Shape, usage: Usage) -> None:
        """What the provider counted of a call's input per character ÷ 4 of what its estimate reads: a
        cache read's uncached input per message character (a call that also wrote the cache says
        nothing of that), anything else's uncached input and cache writes per body byte."""
        writes = usage.cache_write + usage.cache_write_1h
        if shape.prefix_cached:
            if shape.message_chars >= 4 and not writes:
                self._ratios[True].append(usage.input / (shape.message_chars / 4))
        elif shape.body_bytes >= 4:
            self._ratios[False].append((usage.input + writes) / (shape.body_bytes / 4))

    def concurrency_observe(self, call: _Call, service_s: float, *, pushback: bool = False) -> None:
        """Tell the concurrency rule how a call went (its queue and service time, a provider pushback); a
        change of the cap is reported through ``events.cap``."""
        changed = self.concurrency.observe(queued_s=call.queued_s, service_s=service_s, pushback=pushback)
        if changed is not None:
            self.events.cap(changed, self.concurrency.changes[-1][2])

    def _record(self, call: _Call, status: int | None, outcome: str, usage: Usage, service_s: float) -> None:
        self.last_model = call.model or self.last_model
        record = CallRecord(time.time(), call.route, call.stage, call.units, call.model, status, outcome, usage,
                            call.queued_s, service_s, call.retried, call.streamed)
        self.ledger.record(record)
        log.debug("model call %s %s → %s in %.2fs (queued %.2fs): %d in / %d out tokens", call.route, call.stage,
                  status, service_s, call.queued_s, usage.input + usage.cache_write + usage.cache_read, usage.output)
        try:
            self.events.call(record)
        except Exception:  # an observer never breaks a call
            log.exception("gateway event hook failed")

    # ---------------------------------------------------------------- health
    def _succeeded(self, route: str) -> None:
        if self.health.success(route):
            self._up.set()
            self.events.provider(True, "the provider answers again")

    def _failed(self, route: str) -> None:
        if self.health.failure(route):
            self._up.clear()
            self.events.provider(False, f"{self.health.failures_to_declare} calls in a row failed")
            if self._probe is None or self._probe.done():
                self._probe = asyncio.get_running_loop().create_task(self._probe_until_up(), name="provider-probe")

    async def _probe_until_up(self) -> None:
        """While down, ask the provider for one token every ``probe_s``: the first answer ends the outage."""
        assert self._client is not None
        model = self.last_model or "claude-haiku-4-5"
        body = {"model": model, "max_tokens": 1,
                "messages": [{"role": "user", "content": "ping"}]}
        upstream = self.config.own
        headers = {"content-type": "application/json", "anthropic-version": "2023-06-01", "accept-encoding": "identity"}
        if upstream.api_key:
            headers["x-api-key"] = upstream.api_key
        while not self.health.up:
            await asyncio.sleep(self.config.probe_s)
            if self.health.up:
                return
            sent = self.clock()
            try:
                answer = await self._client.post(upstream.base_url.rstrip("/") + "/v1/messages", json=body,
                                                 headers=headers)
            except httpx.HTTPError:
                self._failed("probe")
                continue
            if answer.status_code >= 500:
                self._failed("probe")
                continue
            reader = UsageReader(False)
            reader.feed(answer.content)
            reader.finish()
            self.ledger.record(CallRecord(time.time(), "probe", PROBE_STAGE, (), reader.model or model,
                                          answer.status_code, outcome_of(answer.status_code), reader.usage, 0.0,
                                          self.clock() - sent))
            self._succeeded("probe")

    # ---------------------------------------------------------------- what the run reads
    def status(self) -> dict[str, Any]:
        """The gateway's figures for the results: calls, cost and tokens, failures, outages (wall-clock
        periods), concurrency changes and unpriced models."""
        usage, cost = self.ledger.total()
        to_wall = time.time() - self.clock()  # the periods in wall-clock seconds, as results are
        return {
            "calls": self.ledger.calls, "cost_usd": round(cost, 6), "tokens": usage.to_json(),
            "failed_to_caller": dict(self.ledger.failed_to_caller), "refused_while_down": self.refused,
            "rate_limited_requeued": self.requeued,
            "outages": self.health.outages,
            "outage_periods": [[round(down + to_wall, 3), round(up + to_wall, 3) if up is not None else None]
                               for down, up in self.health.periods],
            "concurrency": self.concurrency.cap,
            "concurrency_changes": [{"at": round(t, 3), "cap": c, "why": w} for t, c, w in self.concurrency.changes],
            "unpriced_models": sorted(self.ledger.unknown_models),
        }


def call_failed(record: CallRecord) -> bool:
    """A call whose caller saw the provider fail (after the gateway's retry, or held out)."""
    return record.outcome in PROVIDER_FAILURES


__all__ = ["GatewayConfig", "GatewayEvents", "ModelGateway", "Upstream", "call_failed"]
