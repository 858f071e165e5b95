"""The lane's Instance AI chat API (``/rest/instance-ai``), as the user who drives the chat.

Endpoints read from n8n 2.41.1's dist (``modules/instance-ai/instance-ai.controller.js`` and
``@n8n/api-types`` ``schemas/instance-ai.schema.js``) and seen on a process lane:

  POST /threads {projectId, source: "evals", threadId?: uuid}   → {thread: {id, …}}; the caller needs
                                          ``project:read`` on the project (the owner has it globally, so
                                          the owner may open a thread in a member's personal project)
  DELETE /threads/:id                     → {ok: true}; also deletes the thread's sandbox
  GET  /threads/:id/status                → {hasActiveRun, isSuspended, backgroundTasks: […]}
  POST /eval/thread-credential-allowlist  {threadId (uuid), credentialIds: [≤50], bypassCredentialTest?: [≤50]}
                                          → {ok: true}
  POST /chat/:threadId {message, timeZone, attachments?, context?} → {runId}; 409 while a run is active
  POST /eval/restore-thread {threadId, messages, folders?, dataTables?, workflows?, agents?,
                                          uniquifyNames?} → {ok, restored, workflowIds, dataTableIds,
                                          agentIds, folderIds}
  POST /eval/seed-data-table-rows {threadId, tableId, rows} → {ok, tableId, rowCount}: the table (in
                                          the thread's project) holds exactly ``rows`` afterwards
  POST /chat/:threadId/cancel             → {ok: true}
  POST /confirm/:requestId {kind, …}      → resolved; 404 when unknown (or already answered)
  GET  /events/:threadId                  SSE: ``id: N`` + ``data: {json}`` per stored event (no ``event:``
                                          line; the type is ``data.type``); ephemeral events
                                          (``text-delta``, ``reasoning-delta``, ``status``) carry no id;
                                          ``: ping`` every 15 s; on (re)connect with ``Last-Event-ID``
                                          (or ``?lastEventId=``) the stored events after that id are
                                          replayed, then ``event: run-sync`` (an agent-tree snapshot) per
                                          live run, then the open text segment as one ``text-delta``.

:class:`EventStream` opens the stream *before* the chat request is sent, reads it on a task into a
queue, and reconnects with ``Last-Event-ID`` when it drops; events with an id are never delivered
twice. Everything here runs with the driving user's cookie (sent explicitly: it is ``Secure``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from orchestrator.n8n.errors import N8nError, N8nHTTPError, N8nTransportError
from orchestrator.n8n.rest import AUTH_COOKIE, N8nSession

log = logging.getLogger(__name__)

BASE = "/rest/instance-ai"
#: n8n pings every 15 s; three missed pings mean the stream is dead (reconnect).
STREAM_READ_TIMEOUT_S = 45.0
RECONNECT_WAITS_S = (0.2, 0.5, 1.0, 2.0, 4.0)


@dataclass(frozen=True)
class StreamEvent:
    """One frame of the event stream. ``kind`` is ``data.type`` (or the SSE ``event:`` name, e.g.
    ``run-sync``); ``id`` is the stored event's sequence number (None for ephemeral frames)."""

    kind: str
    data: dict[str, Any]
    id: int | None = None

    @property
    def payload(self) -> dict[str, Any]:
        """The event's ``payload`` object (empty when it has none)."""
        payload = self.data.get("payload")
        return payload if isinstance(payload, dict) else {}

    @property
    def run_id(self) -> str | None:
        value = self.data.get("runId")
        return str(value) if value is not None else None

    @property
    def agent_id(self) -> str | None:
        value = self.data.get("agentId")
        return str(value) if value is not None else None


@dataclass
class StreamStats:
    connects: int = 0
    reconnects: int = 0
    frames: int = 0
    pings: int = 0
    duplicates: int = 0
    bad_frames: int = 0


class FrameParser:
    """Server-sent-event lines → frames, keeping what a generic SSE client hides: whether *this*
    frame carried its own ``id:`` (n8n's ephemeral ``text-delta`` frames have none, and must not
    inherit the previous frame's id) and the ``: ping`` comments."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self.pings = 0
        self.bad = 0

    def feed(self, line: str) -> StreamEvent | None:
        """Take one SSE line; returns the event a blank line completes, else None (``: ping`` comments are
        counted in ``pings``)."""
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            if line[1:].strip() == "ping":
                self.pings += 1
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> StreamEvent | None:
        event, data, frame_id = self._event, "\n".join(self._data), self._id
        self._event, self._data, self._id = "", [], None
        if not data:
            return None
        frame = parse_frame(event, data, frame_id)
        if frame is None:
            self.bad += 1
        return frame


def parse_frame(event: str, data: str, frame_id: str | None) -> StreamEvent | None:
    """One SSE frame as a :class:`StreamEvent` (None for a non-JSON frame)."""
    try:
        body = json.loads(data)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    kind = event if event and event != "message" else str(body.get("type") or "")
    seq = int(frame_id) if frame_id is not None and frame_id.strip().isdigit() else None
    return StreamEvent(kind, body, seq)


class EventStream:
    """The thread's event stream, read on a background task into a queue, reconnecting on drops."""

    def __init__(self, session: N8nSession, thread_id: str, *, read_timeout_s: float = STREAM_READ_TIMEOUT_S,
                 reconnect_waits_s: tuple[float, ...] = RECONNECT_WAITS_S,
                 on_event: Callable[[StreamEvent], None] | None = None) -> None:
        self.session = session
        #: sees every frame as it arrived, before anyone reads (or redacts) it
        self.on_event = on_event
        self.thread_id = thread_id
        self.read_timeout_s = read_timeout_s
        self.reconnect_waits_s = reconnect_waits_s
        self.last_id: int | None = None
        self.stats = StreamStats()
        self._queue: asyncio.Queue[StreamEvent | BaseException] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._http = httpx.AsyncClient(
            base_url=session.client.base_url,
            timeout=httpx.Timeout(10.0, read=read_timeout_s),
            follow_redirects=False,
        )

    @property
    def path(self) -> str:
        """The thread's event-stream endpoint."""
        return f"{BASE}/events/{self.thread_id}"

    async def open(self, timeout_s: float = 30.0) -> EventStream:
        """Start reading; return once the first connection answered (headers received)."""
        self._task = asyncio.create_task(self._run(), name=f"instance-ai-events-{self.thread_id[:8]}")
        waiter = asyncio.create_task(self._connected.wait())
        done, _ = await asyncio.wait({waiter, self._task}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            if self._task.done():
                exc = self._task.exception()
                while exc is None and not self._queue.empty():
                    item = self._queue.get_nowait()
                    exc = item if isinstance(item, BaseException) else None
                await self.aclose()
                raise exc or N8nTransportError("GET", self.path, "event stream ended before it connected")
            await self.aclose()
            raise N8nTransportError("GET", self.path, f"event stream did not connect within {timeout_s:.0f} s")
        return self

    async def __aenter__(self) -> EventStream:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop reading the stream and close its connection."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._http.aclose()

    async def _connect_once(self) -> None:
        headers = {"cookie": f"{AUTH_COOKIE}={self.session.cookie}", "accept": "text/event-stream",
                   "cache-control": "no-store"}
        if self.last_id is not None:
            headers["Last-Event-ID"] = str(self.last_id)
        async with self._http.stream("GET", self.path, headers=headers) as response:
            if response.status_code >= 400:
                await response.aread()
                raise N8nHTTPError("GET", self.path, response.status_code, response.text[:300])
            self.stats.connects += 1
            self._connected.set()
            parser = FrameParser()
            pings, bad = self.stats.pings, self.stats.bad_frames
            async for line in response.aiter_lines():
                event = parser.feed(line)
                self.stats.pings, self.stats.bad_frames = pings + parser.pings, bad + parser.bad
                if event is None:
                    continue
                if event.id is not None:
                    if self.last_id is not None and event.id <= self.last_id:
                        self.stats.duplicates += 1
                        continue
                    self.last_id = event.id
                self.stats.frames += 1
                if self.on_event is not None:
                    self.on_event(event)
                await self._queue.put(event)

    async def _run(self) -> None:
        """Connect, read, and reconnect after a drop (``Last-Event-ID`` = the last id seen). A
        connection that delivered frames resets the back-off; giving up is reported in the queue."""
        failures = 0
        while True:
            frames_before = self.stats.frames
            try:
                await self._connect_once()
                reason = "stream ended"
            except asyncio.CancelledError:
                raise
            except N8nHTTPError as exc:
                if exc.status is not None and exc.status < 500:
                    await self._queue.put(exc)  # 401/403/404: reconnecting cannot help
                    return
                reason = f"HTTP {exc.status}"
            except httpx.HTTPError as exc:
                reason = type(exc).__name__
            failures = 1 if self.stats.frames > frames_before else failures + 1
            if failures > len(self.reconnect_waits_s):
                await self._queue.put(N8nTransportError("GET", self.path, f"event stream lost ({reason}); reconnects failed"))
                return
            log.info("instance-ai event stream %s dropped (%s); reconnecting after id %s",
                     self.thread_id[:8], reason, self.last_id)
            self.stats.reconnects += 1
            await asyncio.sleep(self.reconnect_waits_s[failures - 1])

    async def next(self, timeout_s: float | None = None) -> StreamEvent:
        """The next event; raises ``asyncio.TimeoutError`` after ``timeout_s`` and the stream's own
        error (:class:`N8nError`) when it could not be kept open."""
        item = await asyncio.wait_for(self._queue.get(), timeout=timeout_s)
        if isinstance(item, BaseException):
            raise item
        return item

    async def events(self) -> AsyncIterator[StreamEvent]:
        """The events as an async iterator, without end (see :meth:`next` for what it raises)."""
        while True:
            yield await self.next()


@dataclass
class InstanceAiChat:
    """The chat endpoints as one user (the lane owner drives eval builds)."""

    session: N8nSession
    time_zone: str = "UTC"
    _sent_at: dict[str, float] = field(default_factory=dict)
    #: extra fields sent with every chat turn (e.g. a per-thread ``observerThresholdTokens`` override)
    request_options: dict[str, Any] = field(default_factory=dict)

    async def create_thread(self, project_id: str, thread_id: str | None = None, source: str = "evals") -> str:
        """Create a chat thread in ``project_id`` (with ``thread_id``, else a new uuid); returns the id n8n
        gave it."""
        thread_id = thread_id or str(uuid.uuid4())
        body = {"projectId": project_id, "source": source, "threadId": thread_id}
        data = await self.session._send("POST", f"{BASE}/threads", body)
        thread = data.get("thread") if isinstance(data, dict) else None
        created = (thread or {}).get("id") if isinstance(thread, dict) else None
        return str(created or thread_id)

    async def delete_thread(self, thread_id: str) -> bool:
        """Delete the thread (and its sandbox). False if it was already gone."""
        return await self.session.delete_thread(thread_id)

    async def thread_status(self, thread_id: str) -> dict[str, Any]:
        """The thread's status as n8n reports it (empty when it answers something else)."""
        data = await self.session.get(f"{BASE}/threads/{thread_id}/status")
        return data if isinstance(data, dict) else {}

    async def pin_credentials(self, thread_id: str, credential_ids: list[str],
                              bypass_test: list[str] | None = None) -> None:
        """The thread sees exactly ``credential_ids``; those in ``bypass_test`` pass their connection
        test without calling the service (``bypassCredentialTest``, ignored unless pinned too)."""
        body: dict[str, Any] = {"threadId": thread_id, "credentialIds": list(credential_ids)}
        if bypass_test:
            body["bypassCredentialTest"] = [cid for cid in bypass_test if cid in credential_ids]
        await self.session._send("POST", f"{BASE}/eval/thread-credential-allowlist", body, safe=True)

    async def send(self, thread_id: str, message: str, *, attachments: list[dict[str, Any]] | None = None,
                   context: dict[str, Any] | None = None,
                   busy_waits_s: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)) -> str:
        """Start a run; a 409 (the previous run is still winding down) is retried a few times.

        ``attachments`` are sent as the editor sends an open resource (``{type: "workflow", id,
        name?}`` / ``{type: "agent", id, projectId, name?}``, at most 10); ``context`` is a hand-off
        (``{source: "setup-panel-execute", workflowId}``). The message may then be empty."""
        body: dict[str, Any] = {**self.request_options, "message": message, "timeZone": self.time_zone}
        if attachments:
            body["attachments"] = attachments
        if context:
            body["context"] = context
        for wait in (*busy_waits_s, None):
            try:
                data = await self.session._send("POST", f"{BASE}/chat/{thread_id}", body)
                break
            except N8nHTTPError as exc:
                if exc.status != 409 or wait is None:
                    raise
                await asyncio.sleep(wait)
        run_id = data.get("runId") if isinstance(data, dict) else None
        if not run_id:
            raise N8nError("POST", f"{BASE}/chat/{thread_id}", 200, "answer has no runId")
        self._sent_at[str(run_id)] = time.monotonic()
        return str(run_id)

    async def restore_thread(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /eval/restore-thread`` (``InstanceAiEvalRestoreThreadRequest``: threadId, messages,
        folders?, dataTables?, workflows?, agents?, uniquifyNames?) → ``{ok, restored, workflowIds,
        dataTableIds, agentIds, folderIds}``. n8n creates workflows and agents at the ids given and
        generates folder and data-table ids; a failure rolls the whole restore back. Not retried."""
        data = await self.session._send("POST", f"{BASE}/eval/restore-thread", body, timeout=120)
        return data if isinstance(data, dict) else {}

    async def seed_data_table_rows(self, thread_id: str, table_id: str, rows: list[dict[str, Any]]) -> int:
        """``POST /eval/seed-data-table-rows``: clear the table, then insert ``rows`` (the table must be
        in the thread's project, so the thread must still exist). Returns n8n's row count. Not retried."""
        body = {"threadId": thread_id, "tableId": table_id, "rows": rows}
        data = await self.session._send("POST", f"{BASE}/eval/seed-data-table-rows", body, timeout=60)
        return int(data.get("rowCount") or 0) if isinstance(data, dict) else 0

    async def cancel(self, thread_id: str) -> None:
        """Cancel the thread's running run."""
        await self.session._send("POST", f"{BASE}/chat/{thread_id}/cancel", safe=True)

    async def confirm(self, request_id: str, answer: dict[str, Any]) -> Any:
        """Answer confirmation ``request_id`` with ``answer``."""
        return await self.session._send("POST", f"{BASE}/confirm/{request_id}", answer)

    async def messages(self, thread_id: str, *, raw: bool = False) -> Any:
        """The thread's stored messages (``raw``: as stored, not rendered for the UI)."""
        params = {"raw": "true"} if raw else None
        return await self.session.get(f"{BASE}/threads/{thread_id}/messages", params=params)

    def open_events(self, thread_id: str, **kwargs: Any) -> EventStream:
        """A stream of the thread's events (see :class:`EventStream` for ``kwargs``); open it before the
        first chat request so no event is missed."""
        return EventStream(self.session, thread_id, **kwargs)


async def delete_agent(session: N8nSession, project_id: str, agent_id: str) -> bool:
    """``DELETE /rest/projects/:projectId/agents/v2/:agentId`` (agents module). False if gone."""
    done = await session._gone_ok(
        lambda: session.call("DELETE", f"/rest/projects/{project_id}/agents/v2/{agent_id}", safe=True))
    return done is not None
