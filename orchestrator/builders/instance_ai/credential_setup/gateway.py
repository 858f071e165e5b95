"""A computer-use gateway client: how the agent's ``browser_*`` tools reach :class:`.browser.Browser`.

n8n 2.41.1 lets any client serve the agent's local tools through its gateway ("Custom Clients";
``modules/instance-ai/instance-ai.controller.js``, ``filesystem/local-gateway*.js``):

1. ``POST /rest/instance-ai/gateway/create-link`` as the user (cookie) → a pairing token
   (``gw_…``, five minutes);
2. ``POST /rest/instance-ai/gateway/init`` with ``X-Gateway-Key: <token>`` and the tools
   (``McpTool``s, ``annotations.category: browser``) and categories → ``{ok, sessionKey}``; the
   token is spent, the session key (``sess_…``) authenticates from then on;
3. ``GET /rest/instance-ai/gateway/events`` (``X-Gateway-Key`` header): SSE, one
   ``{"type":"filesystem-request","payload":{requestId, toolCall:{name, arguments}}}`` per tool
   call, ``: ping`` every 15 s, ``{"type":"gateway-disconnect"}`` at the end; a dropped stream
   disconnects the gateway after a 10 s grace;
4. each call is answered within 60 s with ``POST …/gateway/response/:requestId``
   ``{result: {content, structuredContent?, isError?}}``;
5. ``POST …/gateway/credentials`` ``{name, type, data, projectId?}`` creates a credential for the
   key's user (``createUnmanagedCredential``, as ``POST /rest/credentials``) → ``{credentialId}``;
   the secret goes from the browser to n8n's store and never through a tool result;
6. ``POST …/gateway/disconnect`` ends the session and revokes the key.

The gateway is per **user**: every build drives the chat as the lane owner, so one gateway serves
every build of a lane — hence one credential-setup build per lane at a time
(:func:`orchestrator.builders.instance_ai.credential_setup.lane_lock`). Every tool call and result passes
``on_payload`` (the leak watch) as the raw text n8n sent or will show the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

from orchestrator.builders.instance_ai.credential_setup.browser import TOOLS, Browser, ToolError
from orchestrator.errors import HarnessError
from orchestrator.n8n.errors import N8nError
from orchestrator.n8n.rest import N8nSession
from orchestrator.redact import redact, register_secret

log = logging.getLogger(__name__)

BASE = "/rest/instance-ai/gateway"
HOST_IDENTIFIER = "n8n-eval-orchestrator fake browser"


class GatewayError(HarnessError):
    """The gateway could not be connected (the harness's fault: the build's checks cannot run)."""


def _data(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise GatewayError(f"{response.request.method} {response.request.url.path}: HTTP {response.status_code} "
                           f"{redact(response.text[:200])}")
    body = response.json() if response.content else {}
    return body.get("data", body) if isinstance(body, dict) else body


async def ensure_free(owner: N8nSession) -> None:
    """Raise :class:`GatewayError` when some client already holds the owner's gateway (it would
    serve this build's browser calls, or be cut off by them)."""
    try:
        status = await owner.get(f"{BASE}/status")
    except N8nError as exc:
        raise GatewayError(f"the gateway status could not be read: {exc}") from None
    if isinstance(status, dict) and status.get("connected"):
        raise GatewayError("the lane owner's computer-use gateway is already connected (another client holds it): "
                           "one credential-setup build per lane at a time")


class Gateway:
    """The owner's computer-use gateway, serving ``browser``'s tools for one build."""

    def __init__(self, owner: N8nSession, browser: Browser, *, on_payload: Callable[[str], None]) -> None:
        self.owner = owner
        self.browser = browser
        self.on_payload = on_payload
        self._http = httpx.AsyncClient(base_url=owner.client.base_url, timeout=httpx.Timeout(30.0, read=None))
        self._key: str | None = None
        self._events: asyncio.Task[None] | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._serial = asyncio.Lock()
        self._stream_open = asyncio.Event()
        self._closing = False
        self.calls = 0

    async def status(self) -> dict[str, Any]:
        """The gateway's status as n8n reports it (empty when it answers something else)."""
        data = await self.owner.get(f"{BASE}/status")
        return data if isinstance(data, dict) else {}

    async def connect(self, timeout_s: float = 30.0) -> None:
        """Pair, advertise the browser tools, open the event stream and wait until n8n reports the
        gateway connected with its browser category. Raises :class:`GatewayError`."""
        try:
            link = await self.owner._send("POST", f"{BASE}/create-link")
        except N8nError as exc:
            raise GatewayError(f"gateway pairing failed: {exc}") from None
        token = str((link or {}).get("token") or "")
        register_secret(token)
        init = _data(await self._http.post(f"{BASE}/init", headers={"X-Gateway-Key": token}, json={
            "rootPath": "/nonexistent", "hostIdentifier": HOST_IDENTIFIER,
            "toolCategories": [{"name": "browser", "enabled": True}], "tools": TOOLS}))
        self._key = str((init or {}).get("sessionKey") or "")
        if not self._key:
            raise GatewayError("gateway init returned no session key")
        register_secret(self._key)
        self._events = asyncio.create_task(self._read_events(), name="credential-setup-gateway")
        deadline = time.monotonic() + timeout_s
        try:
            await asyncio.wait_for(self._stream_open.wait(), timeout=timeout_s)
            while time.monotonic() < deadline:
                status = await self.status()
                categories = [c.get("name") for c in status.get("toolCategories") or [] if isinstance(c, dict)]
                if status.get("connected") and "browser" in categories:
                    return
                await asyncio.sleep(0.2)
        except (TimeoutError, N8nError) as exc:
            raise GatewayError(f"the gateway did not connect: {exc or 'timed out'}") from None
        raise GatewayError(f"the gateway did not report the browser tools within {timeout_s:.0f} s")

    async def _read_events(self) -> None:
        """Read the call stream, reconnecting (within n8n's grace) when it drops."""
        failures = 0
        while not self._closing:
            try:
                async with self._http.stream("GET", f"{BASE}/events", headers={
                        "X-Gateway-Key": self._key or "", "Accept": "text/event-stream"}) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        log.warning("gateway events: HTTP %s %s", response.status_code, redact(response.text[:200]))
                        return
                    self._stream_open.set()
                    failures = 0
                    async for line in response.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        try:
                            event = json.loads(line[5:].strip())
                        except ValueError:
                            continue
                        if event.get("type") == "gateway-disconnect":
                            return
                        if event.get("type") == "filesystem-request":
                            task = asyncio.create_task(self._answer(event.get("payload") or {}))
                            self._handlers.add(task)
                            task.add_done_callback(self._handlers.discard)
            except httpx.HTTPError as exc:
                failures += 1
                if self._closing or failures > 3:
                    log.warning("gateway events lost: %s", type(exc).__name__)
                    return
                await asyncio.sleep(0.5 * failures)

    async def _answer(self, payload: dict[str, Any]) -> None:
        request_id = str(payload.get("requestId") or "")
        raw = payload.get("toolCall")
        call: dict[str, Any] = raw if isinstance(raw, dict) else {}
        name, args = str(call.get("name") or ""), call.get("arguments")
        self.on_payload(json.dumps(call))
        async with self._serial:  # one page model: calls run in the order they came
            self.calls += 1
            result, is_error = await self.browser.call(name, args if isinstance(args, dict) else {})
        body: dict[str, Any] = {"content": [{"type": "text", "text": json.dumps(result, indent=2)}],
                                "structuredContent": result}
        if is_error:
            body["isError"] = True
        self.on_payload(json.dumps(body))
        try:
            _data(await self._http.post(f"{BASE}/response/{request_id}", headers={"X-Gateway-Key": self._key or ""},
                                        json={"result": body}))
        except (GatewayError, httpx.HTTPError) as exc:
            log.warning("gateway response to %s (%s) failed: %s", request_id, name, exc)

    async def create_credential(self, name: str, ctype: str, data: dict[str, Any], project_id: str | None) -> str:
        """``POST /gateway/credentials`` as the key's user; the credential's id."""
        body: dict[str, Any] = {"name": name, "type": ctype, "data": data}
        if project_id:
            body["projectId"] = project_id
        response = await self._http.post(f"{BASE}/credentials", headers={"X-Gateway-Key": self._key or ""}, json=body)
        if response.status_code >= 400:
            raise ToolError(f"Credential creation failed: {response.status_code} {redact(response.text[:200])}")
        created = _data(response)
        return str((created or {}).get("credentialId") or "")

    async def close(self) -> None:
        """Disconnect (the session key is revoked), stop reading; never raises."""
        self._closing = True
        disconnected = False
        if self._key:
            with contextlib.suppress(httpx.HTTPError, GatewayError):
                _data(await self._http.post(f"{BASE}/disconnect", headers={"X-Gateway-Key": self._key}))
                disconnected = True
        if self._key and not disconnected:  # ours was connected: end it as its user
            with contextlib.suppress(N8nError):
                await self.owner._send("POST", f"{BASE}/disconnect-session", safe=True)
        for task in [self._events, *self._handlers]:
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self._http.aclose()
