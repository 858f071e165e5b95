"""The build runner: MCP builds run next to their lane, not in the orchestrator.

In a cluster each lane pod can carry a ``build-runner`` container (``lanes.pod.buildRunner``). It runs
``claude -p`` for the builds of *its* lane against n8n's MCP server on 127.0.0.1, so the memory of
concurrent builds (~204 MiB each) is spread over the lane pods and the orchestrator only holds one
HTTP request per build. The protocol (JSON over HTTP, port 8790, reached over the pod network; the
lane NetworkPolicy admits only orchestrator pods, and ``N8N_EVAL_RUNNER_TOKEN``, when set, must come
as ``Authorization: Bearer …``):

=======================  =======================================================================
``POST /builds``         ``{"build_id", "prompt", "mcp_api_key", "model"?, "timeout_ms"?,
                         "mcp_timeout_ms"?, "server_name"?, "max_retries"?}`` (the MCP key is in
                         the body, never in a URL or a log line) → 202 ``{"build_id"}``; 200 if that id
                         already runs or ran (an idempotent retry); 429 when every slot is busy
``GET /builds/{id}``     ``?wait=S&events=N`` long-polls up to S s (or until claude printed more
                         than N events): ``{"state": "running"|"done", "events": [...from N],
                         "next": M}``, ``"result": <AttemptResult>`` once done — the transcript
                         streams back in pieces, redacted on the runner
``DELETE /builds/{id}``  cancels (claude's process group gets SIGTERM, then SIGKILL) and forgets it
``GET /healthz``         ``{"slots": n, "running": k}``
=======================  =======================================================================

The build itself is :func:`orchestrator.builders.claude.runner.run_build_attempt` — the same code the
orchestrator runs locally — with the model key and base URL from the container's env
(``ANTHROPIC_API_KEY`` from the lane Secret). :class:`RemoteBuildRunner` is the orchestrator's side.
Run it with ``python -m orchestrator.builders.claude.build_runner serve --port 8790 --root /builds``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hmac
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from orchestrator.builders.builder import Builder
from orchestrator.builders.claude.runner import (
    AttemptResult,
    ClaudeConfig,
    run_build_attempt,
)
from orchestrator.errors import BuildError
from orchestrator.outage import OutageInfo
from orchestrator.redact import redact, redact_obj, register_secret

log = logging.getLogger(__name__)

DEFAULT_PORT = 8790
TOKEN_ENV = "N8N_EVAL_RUNNER_TOKEN"
_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def result_to_json(result: AttemptResult) -> dict[str, Any]:
    """An attempt's result as JSON for the runner's answer (:func:`result_from_json` reads it back)."""
    return dataclasses.asdict(result)


def result_from_json(data: dict[str, Any]) -> AttemptResult:
    """The :class:`AttemptResult` a runner answered (:func:`result_to_json`'s inverse)."""
    outage = data.get("outage")
    return AttemptResult(**{**data, "outage": OutageInfo(**outage) if outage else None})


#: Transcript events one build keeps for the orchestrator (claude's stream-json, redacted); past this
#: many characters further events are dropped and one marker says so.
MAX_EVENT_CHARS = 16 * 1024 * 1024


@dataclass
class _Build:
    future: Future[AttemptResult] | None = None
    started: float = field(default_factory=time.monotonic)
    events: list[dict[str, Any]] = field(default_factory=list)
    chars: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    def add_event(self, event: dict[str, Any]) -> None:
        """``on_event`` of the build (already redacted by ``run_build_attempt``): keep it, wake pollers."""
        with self.changed:
            if self.chars <= MAX_EVENT_CHARS:
                self.chars += len(json.dumps(event, default=str))
                self.events.append(event if self.chars <= MAX_EVENT_CHARS else
                                   {"type": "system", "subtype": "transcript_truncated"})
            self.changed.notify_all()

    def wake(self, _: object = None) -> None:
        with self.changed:
            self.changed.notify_all()


class BuildRunnerServer:
    """The runner: a threaded HTTP server in front of an asyncio loop that runs the builds."""

    def __init__(self, *, n8n_url: str, claude_bin: Path, root: Path, slots: int = 4, host: str = "0.0.0.0",
                 port: int = DEFAULT_PORT, token: str | None = None, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ if env is None else env)
        self.n8n_url, self.root, self.slots = n8n_url, root, slots
        self.token = token if token is not None else env.get(TOKEN_ENV) or None
        register_secret(self.token)
        # a request that names no budget gets the claude builders' default (the remote builder always names one)
        self.base_config = ClaudeConfig.from_env(claude_bin, env, work_root=root,
                                                 timeout_ms=Builder.default_build_timeout_ms)
        self.builds: dict[str, _Build] = {}
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self.loop.run_forever, name="build-runner-loop", daemon=True)
        handler = type("Handler", (_Handler,), {"runner": self})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self._http_thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                             name="build-runner-http", daemon=True)

    def start(self) -> BuildRunnerServer:
        """Start the build loop and the HTTP server, each in its own thread; returns the server."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._loop_thread.start()
        self._http_thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cancel every build still running (their claude processes end) and stop the loop."""
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.lock:
            for build in self.builds.values():
                if build.future is not None:
                    build.future.cancel()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._loop_thread.join(timeout=10)

    def running(self) -> int:
        """Builds running now (each holds one of the ``slots``)."""
        with self.lock:
            return sum(1 for b in self.builds.values() if b.future is not None and not b.future.done())

    def submit(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``POST /builds``: start a build (an existing ``build_id`` is not started twice). Answers
        (status, body): 400 for a bad body, 429 when every slot is busy, else 200/202 with the id."""
        build_id = str(body.get("build_id") or "")
        if not _ID.match(build_id) or not isinstance(body.get("prompt"), str) or not body.get("mcp_api_key"):
            return 400, {"error": "build_id (A-Za-z0-9._-), prompt and mcp_api_key are required"}
        mcp_key = str(body["mcp_api_key"])
        register_secret(mcp_key)
        with self.lock:
            if build_id in self.builds:
                return 200, {"build_id": build_id}
            if sum(1 for b in self.builds.values() if b.future is not None and not b.future.done()) >= self.slots:
                return 429, {"error": f"all {self.slots} build slots are busy"}
            overrides = {k: body[k] for k in ("model", "timeout_ms", "mcp_timeout_ms", "server_name") if body.get(k)}
            if isinstance(body.get("max_retries"), int):
                overrides["max_retries"] = body["max_retries"]
            config = dataclasses.replace(self.base_config, **overrides)
            build = self.builds[build_id] = _Build()
            coro = run_build_attempt(body["prompt"], self.n8n_url, mcp_key, config, on_event=build.add_event)
            build.future = asyncio.run_coroutine_threadsafe(coro, self.loop)
            build.future.add_done_callback(build.wake)
        log.info("build %s started", build_id)
        return 202, {"build_id": build_id}

    def status(self, build_id: str, wait_s: float, since: int = 0) -> tuple[int, dict[str, Any]]:
        """Long-poll: return when the build is done, claude printed events past ``since``, or ``wait_s``."""
        with self.lock:
            build = self.builds.get(build_id)
        if build is None or build.future is None:
            return 404, {"error": f"no build {build_id!r}"}
        future = build.future
        with build.changed:
            build.changed.wait_for(lambda: future.done() or len(build.events) > since,
                                   timeout=max(0.0, min(wait_s, 60.0)))
            events = build.events[since:]
        answer: dict[str, Any] = {"events": events, "next": since + len(events)}
        try:
            result = future.result(timeout=0)
        except FutureTimeout:
            return 200, {"state": "running", "seconds": round(time.monotonic() - build.started, 1), **answer}
        except Exception as exc:
            return 200, {"state": "failed", "error": redact(f"{type(exc).__name__}: {exc}"), **answer}
        return 200, {"state": "done", "result": result_to_json(result), **answer}

    def cancel(self, build_id: str) -> tuple[int, dict[str, Any]]:
        """``DELETE /builds/<id>``: forget the build, cancelling it if it still runs (its claude process
        group is terminated); 404 for an unknown id."""
        with self.lock:
            build = self.builds.pop(build_id, None)
        if build is None:
            return 404, {"error": f"no build {build_id!r}"}
        if build.future is not None:  # done: just forgotten; running: run_build_attempt's finally
            build.future.cancel()     # terminates claude's process group
        build.wake()
        return 200, {"build_id": build_id, "cancelled": True}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    runner: BuildRunnerServer

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        token = self.runner.token
        if not token:
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())

    def _handle(self) -> None:
        split = urlsplit(self.path)
        parts = [p for p in split.path.split("/") if p]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if parts == ["healthz"] and self.command == "GET":
            return self._send(200, {"slots": self.runner.slots, "running": self.runner.running()})
        if not self._authorized():
            return self._send(401, {"error": "unauthorized"})
        if parts == ["builds"] and self.command == "POST":
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                return self._send(400, {"error": "body is not JSON"})
            return self._send(*self.runner.submit(body if isinstance(body, dict) else {}))
        if len(parts) == 2 and parts[0] == "builds" and self.command == "GET":
            query = parse_qs(split.query)
            try:
                wait_s = float(query.get("wait", ["0"])[0])
                since = max(0, int(query.get("events", ["0"])[0]))
            except ValueError:
                return self._send(400, {"error": "wait must be seconds, events a count"})
            return self._send(*self.runner.status(parts[1], wait_s, since))
        if len(parts) == 2 and parts[0] == "builds" and self.command == "DELETE":
            return self._send(*self.runner.cancel(parts[1]))
        return self._send(404, {"error": "unknown path"})

    do_GET = do_POST = do_DELETE = _handle


class RunnerError(BuildError, RuntimeError):
    """The runner refused or lost a build (HTTP error, bad answer); the unit may retry elsewhere."""


class RunnerUnreachable(RunnerError):
    """No HTTP answer from the runner (connection refused/reset, timeout): its lane pod is gone or
    going. ``sent`` is False when the build provably never reached the runner."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class RunnerDeadline(RunnerError):
    """The runner did not finish the build by the client's deadline (the build was cancelled there)."""


class RemoteBuildRunner:
    """The orchestrator's side: one build attempt on a lane's runner, awaited by long-polling.

    The transcript streams back with the polls (``on_event`` gets claude's redacted stream-json events
    in order, as the local builder's does); once the result is in, the build is forgotten on the
    runner (``DELETE``). ``deadline_s`` bounds the whole wait: a runner that neither finishes nor
    dies (a wedged claude its own timeout missed) is cancelled and :class:`RunnerDeadline` raised.
    """

    def __init__(self, base_url: str, token: str | None = None, *, poll_s: float = 30.0,
                 client: httpx.AsyncClient | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.poll_s = poll_s
        register_secret(token)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # Lane pods are reached on the pod network (or loopback): never through an env proxy.
        self._client = client or httpx.AsyncClient(timeout=httpx.Timeout(poll_s + 30, connect=10.0),
                                                   trust_env=False, headers=headers)

    async def run(self, build_id: str, prompt: str, mcp_api_key: str, *,
                  on_event: Callable[[dict[str, Any]], None] | None = None, deadline_s: float | None = None,
                  **options: Any) -> AttemptResult:
        """Run one build attempt on the runner and return its result (see the class docstring). Raises
        :class:`RunnerUnreachable` when the runner cannot be reached (``sent`` says whether the build was
        submitted), :class:`RunnerDeadline` past ``deadline_s`` and :class:`RunnerError` for any other
        failure; messages are redacted."""
        register_secret(mcp_api_key)
        body = {"build_id": build_id, "prompt": prompt, "mcp_api_key": mcp_api_key,
                **{k: v for k, v in options.items() if v is not None}}
        deadline = time.monotonic() + deadline_s if deadline_s else None
        sent = False
        try:
            resp = await self._client.post(f"{self.base_url}/builds", json=body)
            sent = True
            if resp.status_code not in (200, 202):
                raise RunnerError(redact(f"runner {self.base_url}: POST /builds: HTTP {resp.status_code} {resp.text[:200]}"))
            seen = 0
            while True:
                wait = self.poll_s if deadline is None else max(0.0, min(self.poll_s, deadline - time.monotonic()))
                resp = await self._client.get(f"{self.base_url}/builds/{build_id}",
                                              params={"wait": round(wait, 1), "events": seen})
                if resp.status_code != 200:
                    raise RunnerError(redact(f"runner {self.base_url}: build {build_id}: HTTP {resp.status_code}"))
                data = resp.json()
                for event in data.get("events") or []:
                    seen += 1
                    if on_event is not None:
                        try:
                            on_event(redact_obj(event))
                        except Exception:  # a broken observer must not break the build
                            log.exception("on_event callback failed")
                seen = max(seen, int(data.get("next") or 0))
                if data["state"] == "done":
                    await self._forget(build_id)
                    return result_from_json(data["result"])
                if data["state"] == "failed":
                    await self._forget(build_id)
                    raise RunnerError(redact(f"runner {self.base_url}: build {build_id}: {data.get('error')}"))
                if deadline is not None and time.monotonic() >= deadline:
                    await self._forget(build_id)  # stops claude on the lane
                    raise RunnerDeadline(f"runner {self.base_url}: build {build_id} still running after "
                                         f"{deadline_s:.0f} s: cancelled")
        except httpx.TransportError as exc:
            raise RunnerUnreachable(redact(f"runner {self.base_url}: {type(exc).__name__}: {exc}"), sent=sent) from None
        except httpx.HTTPError as exc:
            raise RunnerError(redact(f"runner {self.base_url}: {type(exc).__name__}: {exc}")) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise RunnerError(redact(f"runner {self.base_url}: bad answer: {type(exc).__name__}: {exc}")) from None
        except asyncio.CancelledError:
            # the unit was cancelled: stop claude on the lane too
            await asyncio.shield(self._forget(build_id))
            raise

    async def _forget(self, build_id: str) -> None:
        """``DELETE`` the build: cancels it if it still runs, frees its transcript on the runner."""
        try:
            await self._client.delete(f"{self.base_url}/builds/{build_id}", timeout=10.0)
        except httpx.HTTPError:
            pass

    async def aclose(self) -> None:
        await self._client.aclose()


def _claude_bin() -> Path:
    from orchestrator.toolchain import Toolchain, default_cache_dir

    tc = Toolchain(default_cache_dir())
    if tc.claude_ready():
        return tc.claude_bin
    found = shutil.which("claude")
    if not found:
        raise SystemExit("build-runner: no claude CLI (N8N_EVAL_CACHE toolchain or PATH); it is never installed at run time")
    return Path(found)


def main(argv: list[str] | None = None) -> int:
    """``python -m orchestrator.builders.claude.build_runner serve``: run the build runner next to a
    lane until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m orchestrator.builders.claude.build_runner",
                                     description="Run MCP builds next to their lane.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--root", type=Path, default=Path("/builds"))
    serve.add_argument("--n8n-url", default="http://127.0.0.1:5678")
    serve.add_argument("--slots", type=int, default=int(os.environ.get("N8N_EVAL_RUNNER_SLOTS", "4")))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    runner = BuildRunnerServer(n8n_url=args.n8n_url, claude_bin=_claude_bin(), root=args.root, slots=args.slots,
                               host=args.host, port=args.port).start()
    log.info("build runner on %s:%d, %d slots, n8n %s", args.host, runner.port, args.slots, args.n8n_url)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        runner.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
