"""A loopback HTTP proxy in front of one real n8n lane that answers chosen requests with an error.

``FaultProxy(upstream).start()`` listens on ``127.0.0.1:<ephemeral>``. Every request is forwarded
byte for byte to the lane, one request per connection (the proxy asks both sides for
``Connection: close``, so it never has to find where a response ends: SSE streams from the MCP
server pass through untouched). A request that matches a rule added with :meth:`FaultProxy.fail`
is answered by the proxy itself with that status instead, while the rule has uses left.

It runs its own event loop on a thread, so one proxy can serve several tests and their loops.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_HOP_HEADERS = ("connection:", "keep-alive:", "proxy-connection:")
_MAX_HEAD = 1024 * 1024


@dataclass
class Rule:
    """Answer ``method`` requests whose path fully matches ``path`` with ``status``, ``times`` times
    (``None``: for ever)."""

    method: str
    path: re.Pattern[str]
    status: int
    times: int | None
    hits: int = 0

    def take(self, method: str, path: str) -> bool:
        if method != self.method or not self.path.fullmatch(path):
            return False
        if self.times is not None and self.hits >= self.times:
            return False
        self.hits += 1
        return True


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    injected: int | None  # the status the proxy answered with, None when forwarded


@dataclass
class FaultProxy:
    upstream: str
    rules: list[Rule] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream)
        if not parts.hostname or not ipaddress.ip_address(parts.hostname).is_loopback:
            raise ValueError(f"the fault proxy fronts loopback lanes only, not {self.upstream!r}")
        self._host, self._port = parts.hostname, int(parts.port or 80)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    # -- rules --------------------------------------------------------------------------------
    def fail(self, method: str, path_regex: str, status: int = 500, times: int | None = None) -> Rule:
        rule = Rule(method.upper(), re.compile(path_regex), status, times)
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()
            self.seen.clear()

    def requests(self, method: str, path_regex: str) -> list[Seen]:
        pattern = re.compile(path_regex)
        with self._lock:
            return [s for s in self.seen if s.method == method and pattern.fullmatch(s.path)]

    def _decide(self, method: str, path: str) -> int | None:
        with self._lock:
            status = next((r.status for r in self.rules if r.take(method, path)), None)
            self.seen.append(Seen(method, path, status))
        return status

    # -- life cycle ---------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0, limit=_MAX_HEAD))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=serve, name="fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):  # connections still open (an SSE stream, an idle client)
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._loop = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- one connection, one request ------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # asyncio keeps only weak references once the client hung up
        task.add_done_callback(self._tasks.discard)
        try:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, target, _version = request_line.split(" ", 2)
            status = self._decide(method, urlsplit(target).path)
            if status is not None:
                body = json.dumps({"code": status, "message": f"fault proxy: injected {status}"}).encode()
                writer.write(
                    f"HTTP/1.1 {status} Injected Fault\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
                )
                await writer.drain()
                return
            await self._forward(request_line, header_lines, reader, writer)
        except (ConnectionError, OSError):
            return
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass

    async def _forward(self, request_line: str, header_lines: list[str], reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        headers = [h for h in header_lines if h and not h.lower().startswith(_HOP_HEADERS)]
        up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
        up_writer.write("\r\n".join([request_line, *headers, "Connection: close", "", ""]).encode("latin-1"))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while chunk := await src.read(65536):
                dst.write(chunk)
                await dst.drain()

        upload = asyncio.create_task(pipe(reader, up_writer))
        try:
            await pipe(up_reader, writer)  # the lane closes after its answer (Connection: close)
        finally:
            upload.cancel()
            await asyncio.gather(upload, return_exceptions=True)
            up_writer.close()
