"""The provider fixture of one ``credentialFixture`` build: a lookalike provider site and its API.

As n8n's ``harness/fixture-server.ts`` (facts, not code), on loopback with OS-assigned ports:

- the **page listener** serves the fixture's pages AS whatever host the request names (its
  ``Host`` header): the routed page, else the default route's; ``GET /favicon.ico`` is 204, and
  ``POST /__fixture__/create-key`` (the page's "Add" action) answers ``{"key": <secret>}`` and
  records that a key was issued. The secret is the manifest's prefix + base64url of 24 random
  bytes, minted once per server (two builds never share one) and registered for redaction the
  moment it exists;
- the **verify listener** (only with the manifest's ``verify``) stands in for the provider API:
  on ``verify.path`` it counts an attempt and answers 200 ``{"data":[{"id":"fixture-model"}]}``
  iff the presented key (header, ``<scheme> <key>``, or query parameter) is exactly the minted
  one, else 401 ``{"error":"invalid key"}``; any other path is 404 and no attempt.

Plain HTTP: the only browser is our gateway's (:mod:`.browser`), which maps every host to the page
listener and sends the real host name, so no certificate is needed for the same hermetic "served
as the host name" property. Every request is answered with ``Connection: close``, and ``close()``
drops any connection still open (n8n keeps sockets alive).

The ledger holds what the checks need (``secret_was_issued``, ``verify_attempts``,
``verified_ok``) and an event list without the secret.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from orchestrator.cases.provider_fixtures import MINT_PATH, HeaderVerify, ProviderFixture
from orchestrator.redact import register_secret

log = logging.getLogger(__name__)

#: request heads and bodies are tiny here; anything larger is refused
MAX_HEAD = 16_384
MAX_BODY = 65_536


def mint_secret(prefix: str) -> str:
    """A fresh key: ``prefix`` + base64url (unpadded) of 24 random bytes (32 characters)."""
    return prefix + base64.urlsafe_b64encode(secrets.token_bytes(24)).decode().rstrip("=")


@dataclass
class FixtureLedger:
    secret_was_issued: bool = False
    verify_attempts: int = 0
    verified_ok: bool = False
    #: ``{listener, method, host, path, …}`` per request (never the secret)
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path or "/"

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query)

    @property
    def host(self) -> str:
        """The ``Host`` header without its port."""
        host = self.headers.get("host", "")
        if host.startswith("["):
            return host.split("]", 1)[0] + "]"
        return host.rsplit(":", 1)[0] if ":" in host else host


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"


REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """One HTTP/1.1 request (Content-Length bodies only); None when the peer sent nothing usable."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    if len(head) > MAX_HEAD:
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    if length > MAX_BODY:
        return None
    body = await reader.readexactly(length) if length else b""
    return Request(parts[0].upper(), parts[1], headers, body)


class _Listener:
    """One loopback HTTP listener answering each request with ``handle`` and closing."""

    def __init__(self, name: str, handle: Any) -> None:
        self.name = name
        self._handle = handle
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self, host: str = "127.0.0.1") -> None:
        self._server = await asyncio.start_server(self._serve, host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            request = await read_request(reader)
            response = self._handle(request) if request is not None else Response(400, b"bad request")
            head = (f"HTTP/1.1 {response.status} {REASONS.get(response.status, 'OK')}\r\n"
                    f"Content-Type: {response.content_type}\r\nContent-Length: {len(response.body)}\r\n"
                    "Cache-Control: no-store\r\nConnection: close\r\n\r\n")
            writer.write(head.encode("latin-1") + response.body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), timeout=5.0)
        self._server = None


def _json(status: int, payload: Any) -> Response:
    return Response(status, json.dumps(payload).encode(), "application/json")


class FixtureServer:
    """The fixture's two listeners and its ledger (see the module doc). Use ``async with``."""

    def __init__(self, fixture: ProviderFixture) -> None:
        self.fixture = fixture
        self.ledger = FixtureLedger()
        self._secret = mint_secret(fixture.manifest.secret_prefix)
        register_secret(self._secret)  # before anything could print it
        self._pages = _Listener("page", self._page)
        self._verify = _Listener("verify", self._check) if fixture.manifest.verify is not None else None

    @property
    def minted_secret(self) -> str:
        """The key this server issues. Kept in memory only: never log, persist or return it."""
        return self._secret

    @property
    def page_port(self) -> int:
        """The port the provider's pages are served on."""
        return self._pages.port

    @property
    def verify_base_url(self) -> str | None:
        """The provider stand-in's base URL (None: the manifest has no ``verify``)."""
        return f"http://127.0.0.1:{self._verify.port}" if self._verify is not None else None

    async def start(self) -> FixtureServer:
        """Start the pages and, when the manifest has one, the provider stand-in; returns the server. A
        stand-in that fails to start closes the pages and raises."""
        await self._pages.start()
        if self._verify is not None:
            try:
                await self._verify.start()
            except BaseException:
                await self._pages.close()
                raise
        return self

    async def close(self) -> None:
        await self._pages.close()
        if self._verify is not None:
            await self._verify.close()

    async def __aenter__(self) -> FixtureServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the page listener ---------------------------------------------------------------------

    def _page(self, request: Request) -> Response:
        event: dict[str, Any] = {"listener": "page", "method": request.method, "host": request.host,
                                 "path": request.path}
        self.ledger.events.append(event)
        if request.method == "POST" and request.path == MINT_PATH:
            self.ledger.secret_was_issued = True
            event["minted"] = True
            return _json(200, {"key": self._secret})
        if request.path == "/favicon.ico":
            return Response(204)
        return Response(200, self.fixture.page_for(request.path).encode(), "text/html; charset=utf-8")

    # -- the provider-API stand-in -------------------------------------------------------------

    def _check(self, request: Request) -> Response:
        verify = self.fixture.manifest.verify
        assert verify is not None
        if request.path != verify.path:
            self.ledger.events.append({"listener": "verify", "method": request.method, "path": request.path})
            return _json(404, {"error": "not found"})
        self.ledger.verify_attempts += 1
        if isinstance(verify, HeaderVerify):
            presented = request.headers.get(verify.header.lower(), "")
            expected = f"{verify.scheme} {self._secret}" if verify.scheme else self._secret
        else:
            presented = (request.query.get(verify.query) or [""])[0]
            expected = self._secret
        ok = secrets.compare_digest(presented.encode(), expected.encode())
        self.ledger.verified_ok = self.ledger.verified_ok or ok
        self.ledger.events.append({"listener": "verify", "method": request.method, "path": request.path, "ok": ok})
        return _json(200, {"data": [{"id": "fixture-model"}]}) if ok else _json(401, {"error": "invalid key"})
