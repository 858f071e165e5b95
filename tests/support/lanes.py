"""Real n8n lanes for tests, started by the real process backend (the same code a run uses).

``process_lane(extra_env)`` gives one unseeded lane for the ``with`` block; ``seeded_lane()`` also
resets it with an owner, enables MCP and rotates an owner MCP key. Both tear the lane down (and
sweep its run label) however the block ends.

A lane start costs 15–20 s: a test that needs a default lane (no extra env) and resets it itself
takes the session's ``shared_plain_lane`` (conftest) instead, and :func:`seed` it for an owner and
an MCP key.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from orchestrator.lanes.bringup import wait_ready
from orchestrator.lanes.model import Lane
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process.backend import ProcessBackend
from orchestrator.ledger import Ledger
from orchestrator.redact import register_secret
from orchestrator.toolchain import Toolchain, default_cache_dir
from support.tools import free_port, require

READY_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class StartedLane:
    base_url: str
    port: int
    pid: int
    folder: Path
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _run(coro):
    """Run a coroutine to completion on a private loop (works inside async tests too)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def closed_port() -> int:
    """A loopback port nothing listens on (bound and released)."""
    return free_port()


@contextmanager
def process_lane(extra_env: dict[str, str] | None = None) -> Iterator[StartedLane]:
    require("n8n", Toolchain(default_cache_dir()).n8n_ready, "run `orchestrator lanes install`")
    run_id = f"test-{secrets.token_hex(4)}"
    with tempfile.TemporaryDirectory(prefix="lane-state-") as tmp:
        state = Path(tmp)
        ledger = Ledger.for_run(run_id, state)
        overrides = [f"{k}={v}" for k, v in (extra_env or {}).items()]

        async def up() -> Lane:
            backend = ProcessBackend(run_id, ledger, state)
            lane = await backend.start_lane(0, make_spec("eval", overrides))
            try:
                await wait_ready(backend, lane, READY_TIMEOUT_S)
            except BaseException:
                await backend.teardown(lane)
                raise
            finally:
                await backend.close()
            return lane

        async def down(lane: Lane) -> None:
            backend = ProcessBackend(run_id, ledger, state)  # a client on this event loop
            try:
                await backend.teardown(lane)
                await backend.sweep(run_id)
            finally:
                await backend.close()

        lane = _run(up())
        folder = state / "runs" / run_id / "lanes" / lane.lane_id
        port = int(lane.base_url.rsplit(":", 1)[1])
        try:
            yield StartedLane(lane.base_url, port, int(lane.handle), folder, folder / "n8n.log")
        finally:
            _run(down(lane))


@dataclass
class SeededLane:
    base_url: str
    owner_email: str
    owner_password: str = field(repr=False)
    cookie: str = field(repr=False)
    mcp_key: str = field(repr=False)
    started: StartedLane = field(repr=False)

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp-server/http"

    def owner_client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers={"cookie": f"n8n-auth={self.cookie}"}, timeout=30)

    def log_tail(self, lines: int = 40) -> str:
        return self.started.log_tail(lines)


def _seed(base_url: str) -> tuple[str, str, str, str]:
    """Reset the lane, log in as owner, enable MCP and rotate a key: (email, password, cookie, key)."""
    password = "Pw1-" + secrets.token_urlsafe(12)
    register_secret(password)

    def user(email: str, first: str) -> dict[str, str]:
        return {"email": email, "password": password, "firstName": first, "lastName": "Test"}

    email = "owner@lane-test.invalid"
    body = {"owner": user(email, "Owner"), "admin": user("admin@lane-test.invalid", "Admin"), "members": [],
            "chat": user("chat@lane-test.invalid", "Chat")}
    with httpx.Client(base_url=base_url, timeout=30) as client:
        client.post("/rest/e2e/reset", json=body).raise_for_status()
        login = client.post("/rest/login", json={"emailOrLdapLoginId": email, "password": password})
        login.raise_for_status()
        cookie = login.cookies.get("n8n-auth")
        if not cookie:
            raise RuntimeError("login set no n8n-auth cookie")
        register_secret(cookie)
        headers = {"cookie": f"n8n-auth={cookie}"}
        client.patch("/rest/mcp/settings", json={"mcpAccessEnabled": True}, headers=headers).raise_for_status()
        rotated = client.post("/rest/mcp/api-key/rotate", headers=headers)
        rotated.raise_for_status()
        key = rotated.json()["data"]["apiKey"]
        register_secret(key)
    return email, password, cookie, key


def seed(started: StartedLane) -> SeededLane:
    """Reset a running lane (``/rest/e2e/reset``: whatever an earlier user left is gone) and seed it
    as :func:`seeded_lane` does: how a module seeds the session's ``shared_plain_lane``."""
    email, password, cookie, key = _seed(started.base_url)
    return SeededLane(started.base_url, email, password, cookie, key, started)


@contextmanager
def seeded_lane(extra_env: dict[str, str] | None = None) -> Iterator[SeededLane]:
    with process_lane(extra_env) as started:
        yield seed(started)
