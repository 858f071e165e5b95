"""A scripted Anthropic-compatible model server on loopback, for tests and the offline demo run.

``ScriptedModelServer(script)`` serves the Messages API on ``127.0.0.1:<ephemeral>``:

- ``POST /v1/messages`` (any query, e.g. ``?beta=true``): the script decides the answer; streamed
  as SSE (``message_start`` … ``message_stop``) when the body says ``"stream": true``, else JSON.
- ``POST /v1/messages/count_tokens``: a deterministic estimate, never scripted.
- ``POST /v1/chat/completions`` (or ``/chat/completions``): the OpenAI-compatible face, for
  ``custom/…`` model arms (:mod:`orchestrator.scripted.openai_compat`); the same script answers.
- anything else: a harmless empty JSON object (the CLI's start-up probes must not fail a test).

Any path prefix before those endpoints is a *route tag*: a lane given
``N8N_INSTANCE_AI_MODEL_URL=<base>/route/<lane-id>`` sends ``/route/<lane-id>/v1/messages``, and the
recorded request says which route (lane, arm) it came from and which model it asked for
(:attr:`RecordedRequest.route`, :attr:`RecordedRequest.model`, :meth:`ScriptedModelServer.models_by_route`).

Every request is recorded (headers without credentials) so tests can assert what was sent.
The server refuses to bind anything but a loopback address.

Under a :class:`~orchestrator.scripted.pressure.Pressure` (off by default) it is a provider under
pressure: rate limits with their headers and 429s, latency, 529 bursts, an outage window, prompt-cache
usage fields (:mod:`orchestrator.scripted.pressure`); :meth:`ScriptedModelServer.provider_counts`
says what it served and refused either way.
"""

from __future__ import annotations

import ipaddress
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from orchestrator.scripted import openai_compat
from orchestrator.scripted.pressure import Pressure, ProviderState
from orchestrator.scripted.replies import (
    Action,
    Hang,
    HttpError,
    Malformed,
    Reply,
    Script,
    TextBlock,
    ToolUseBlock,
    _next_id,
    is_build_request,
    tool_names,
)

_CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "cookie", "proxy-authorization"})


_ENDPOINTS = ("/v1/messages/count_tokens", "/v1/messages", "/v1/chat/completions", "/chat/completions")


def split_route(path: str) -> tuple[str, str]:
    """``/route/lane-1/v1/messages`` → (``/route/lane-1``, ``/v1/messages``); no known endpoint → ("", path)."""
    for endpoint in _ENDPOINTS:
        if path.endswith(endpoint):
            return path[: -len(endpoint)].rstrip("/"), endpoint
    return "", path


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str  # the endpoint, route prefix removed
    query: str
    headers: dict[str, str]
    body: Any
    at: float
    route: str = ""  # the path prefix the caller's base URL carried ("" for none)

    @property
    def is_messages(self) -> bool:
        return self.method == "POST" and self.path == "/v1/messages"

    @property
    def is_chat_completions(self) -> bool:
        return self.method == "POST" and self.path in ("/v1/chat/completions", "/chat/completions")

    @property
    def is_model_call(self) -> bool:
        """Whether the request is a model call (Anthropic messages or OpenAI chat completions)."""
        return self.is_messages or self.is_chat_completions

    @property
    def model(self) -> str | None:
        """The model the request asked for (Anthropic or OpenAI body alike)."""
        return str(self.body["model"]) if isinstance(self.body, dict) and self.body.get("model") else None

    @property
    def tool_names(self) -> list[str]:
        return tool_names(self.body) if isinstance(self.body, dict) else []

    @property
    def is_build_call(self) -> bool:
        """An Instance AI agent step (it offers ``build-workflow``) or a claude build step (MCP tools)."""
        return isinstance(self.body, dict) and is_build_request(self.body)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _chunks(text: str, size: int = 40) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def stream_events(reply: Reply, request: dict[str, Any]) -> list[bytes]:
    """The SSE frames of one streamed assistant message."""
    usage = reply.resolved_usage(request)
    start_usage = usage.to_json() | {"output_tokens": 1}
    message = {
        "id": _next_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "scripted"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    frames = [_sse("message_start", {"type": "message_start", "message": message}), _sse("ping", {"type": "ping"})]
    for index, block in enumerate(reply.blocks):
        if isinstance(block, TextBlock):
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": part} for part in _chunks(block.text)]
        else:
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _chunks(json.dumps(block.input))]
        frames.append(_sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        for delta in deltas:
            frames.append(_sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        frames.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    frames.append(
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.resolved_stop_reason(), "stop_sequence": None},
                "usage": {"output_tokens": usage.output_tokens},
            },
        )
    )
    frames.append(_sse("message_stop", {"type": "message_stop"}))
    return frames


def message_json(reply: Reply, request: dict[str, Any]) -> dict[str, Any]:
    """The non-streaming JSON body of one assistant message."""
    return {
        "id": _next_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "scripted"),
        "content": [b.to_json() for b in reply.blocks],
        "stop_reason": reply.resolved_stop_reason(),
        "stop_sequence": None,
        "usage": reply.resolved_usage(request).to_json(),
    }


def _count_tokens(body: Any) -> int:
    return max(1, len(json.dumps(body)) // 4)


class _Handler(BaseHTTPRequestHandler):
    server: _LoopbackHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return  # recorded requests are the log; keep test output quiet

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def _record(self, body: Any) -> RecordedRequest:
        parts = urlsplit(self.path)
        route, path = split_route(parts.path)
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in _CREDENTIAL_HEADERS}
        rec = RecordedRequest(self.command, path, parts.query, headers, body, time.time(), route)
        self.server.owner._record(rec)
        return rec

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", _next_id("req"))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._record(None)
        self._send_json(200, {})

    def do_HEAD(self) -> None:
        self._record(None)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self._read_body()
        rec = self._record(body)
        if rec.path == "/v1/messages/count_tokens":
            self._send_json(200, {"input_tokens": _count_tokens(body)})
            return
        if rec.is_chat_completions:
            self._chat_completions(body)
            return
        if rec.path != "/v1/messages":
            self._send_json(200, {})
            return
        if not isinstance(body, dict):
            self._send_json(400, HttpError(400, message="request body is not a JSON object").body())
            return
        refusal, self._limits, self._charged = self.server.owner.provider.admit(body)
        if refusal is not None:
            self._send_json(refusal.status, refusal.body(), self._limits)
            return
        try:
            action = self.server.owner.script(body)
        except Exception as exc:  # a broken script must show up in the test, not hang the client
            self.server.owner._script_errors.append(exc)
            self._send_json(500, HttpError(500, message=f"scripted model error: {exc!r}").body())
            return
        self._answer(action, body)

    def _chat_completions(self, body: Any) -> None:
        if not isinstance(body, dict):
            self._send_json(400, openai_compat.error_json(HttpError(400, message="request body is not a JSON object")))
            return
        request = openai_compat.to_anthropic(body)
        model = str(body.get("model") or "scripted")
        refusal, self._limits, self._charged = self.server.owner.provider.admit(request)
        if refusal is not None:
            self._send_json(refusal.status, openai_compat.error_json(refusal), self._limits)
            return
        try:
            action = self.server.owner.script(request)
        except Exception as exc:
            self.server.owner._script_errors.append(exc)
            self._send_json(500, openai_compat.error_json(HttpError(500, message=f"scripted model error: {exc!r}")))
            return
        if isinstance(action, HttpError):
            self._send_json(action.status, openai_compat.error_json(action), action.headers)
        elif isinstance(action, Reply):
            action = self._priced(action, request)
            if body.get("stream"):
                self._write_stream(openai_compat.completion_chunks(action, request, model))
            else:
                self._send_json(200, openai_compat.completion_json(action, request, model), self._limits)
            self._served(action, request)
        else:
            self._answer(action, request)

    def _answer(self, action: Action, body: dict[str, Any]) -> None:
        if isinstance(action, HttpError):
            self._send_json(action.status, action.body(), action.headers)
        elif isinstance(action, Hang):
            self.server.owner._stopping.wait(action.seconds)
            self.close_connection = True
        elif isinstance(action, Malformed):
            ctype = "text/event-stream" if body.get("stream") else "application/json"
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(action.body)))
            self.end_headers()
            self.wfile.write(action.body)
        elif isinstance(action, Reply):
            action = self._priced(action, body)
            if body.get("stream"):
                self._stream(action, body)
            else:
                self._send_json(200, message_json(action, body), self._limits)
            self._served(action, body)
        else:
            raise TypeError(f"script returned {type(action).__name__}, expected Reply/HttpError/Hang/Malformed")

    # -- the provider's side of an answer (pressure): usage with the prompt cache, latency, counts
    _limits: dict[str, str]  # per request: set by the provider's admission before anything is sent
    _charged: int

    def _priced(self, reply: Reply, body: dict[str, Any]) -> Reply:
        owner = self.server.owner
        reply = replace(reply, usage=owner.provider.usage_for(body, reply.resolved_usage(body)))
        if owner.provider.pressure.latency_s:
            owner._stopping.wait(owner.provider.pressure.latency_s)
        return reply

    def _served(self, reply: Reply, body: dict[str, Any]) -> None:
        self.server.owner.provider.served(body, reply.resolved_usage(body), self._charged)

    def _stream(self, reply: Reply, body: dict[str, Any]) -> None:
        self._write_stream(stream_events(reply, body), reply.resolved_usage(body).output_tokens)

    def _write_stream(self, frames: list[bytes], output_tokens: int = 0) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.send_header("request-id", _next_id("req"))
        for key, value in self._limits.items():
            self.send_header(key, value)
        self.end_headers()
        self.close_connection = True
        tps = self.server.owner.provider.pressure.output_tps
        pause = output_tokens / tps / max(1, len(frames)) if tps and output_tokens else 0.0
        for frame in frames:
            self.wfile.write(frame)
            self.wfile.flush()
            if pause:
                self.server.owner._stopping.wait(pause)


def models_by_route(requests: Iterable[RecordedRequest], *, build_only: bool = True) -> dict[str, set[str]]:
    """Route tag → the models the (build) model calls among ``requests`` asked for."""
    out: dict[str, set[str]] = {}
    for r in requests:
        if r.is_model_call and (not build_only or r.is_build_call) and r.model:
            out.setdefault(r.route, set()).add(r.model)
    return out


class _LoopbackHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, owner: ScriptedModelServer) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"scripted model server binds loopback only, not {host!r}")
        self.owner = owner
        super().__init__((host, port), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a pooled keep-alive connection closed, a caller that hung up) is
        no error of the server's: anything else is printed, as the standard server does."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class ScriptedModelServer:
    """``with ScriptedModelServer(script) as srv: srv.base_url`` — see the module docstring."""

    def __init__(self, script: Script, host: str = "127.0.0.1", port: int = 0, *,
                 pressure: Pressure | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.script = script
        self.provider = ProviderState(pressure, clock=clock)
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._script_errors: list[BaseException] = []
        self._stopping = threading.Event()
        self._httpd: _LoopbackHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> ScriptedModelServer:
        """Start serving in a daemon thread; returns the server."""
        self._httpd = _LoopbackHTTPServer(self._host, self._port, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-model", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and wait (up to 5 s) for the thread."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests read ----------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def _record(self, rec: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(rec)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def message_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.is_messages]

    @property
    def model_requests(self) -> list[RecordedRequest]:
        """Every model call, Anthropic or OpenAI-compatible."""
        return [r for r in self.requests if r.is_model_call]

    def models_by_route(self, *, build_only: bool = True) -> dict[str, set[str]]:
        """Route tag → the models its (build) requests asked for: which arm's lanes asked for what."""
        return models_by_route(self.requests, build_only=build_only)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self._requests)

    def count(self, path: str) -> int:
        """How many requests went to ``path``."""
        return sum(1 for r in self.requests if r.path == path)

    @property
    def script_errors(self) -> list[BaseException]:
        """What the script raised while answering (the client got an error answer): a test should assert
        there is none."""
        return list(self._script_errors)

    def provider_counts(self) -> dict[str, Any]:
        """What the provider served (usage by model, the tokens its limit counts) and refused."""
        return self.provider.counts_json()


def main(argv: list[str] | None = None) -> int:
    """Serve a built-in script until interrupted (for the offline demo): prints the base URL."""
    import argparse

    from orchestrator.scripted import scripts

    named = {
        "demo": lambda a: scripts.demo_script(a.server_name),
        "mcp_builder": lambda a: scripts.mcp_builder(a.server_name),
        "no_trailer": lambda a: scripts.no_trailer(),
        "judge": lambda a: scripts.judge(),
        "overloaded": lambda a: scripts.status_storm(529),
    }
    parser = argparse.ArgumentParser(description="Scripted Anthropic-compatible model server on loopback")
    parser.add_argument("--script", choices=sorted(named), default="demo")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--server-name", default="n8n-local", help="MCP server name claude is given")
    parser.add_argument("--pressure", default=None, help="a JSON Pressure (rate limits, outage…); default: "
                        "$N8N_EVAL_SCRIPTED_PROVIDER, else none")
    args = parser.parse_args(argv)
    pressure = Pressure.from_json(args.pressure) if args.pressure else Pressure.from_env()
    with ScriptedModelServer(named[args.script](args), port=args.port, pressure=pressure) as srv:
        print(srv.base_url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "Hang",
    "HttpError",
    "Malformed",
    "RecordedRequest",
    "Reply",
    "ScriptedModelServer",
    "TextBlock",
    "ToolUseBlock",
    "message_json",
    "stream_events",
]
