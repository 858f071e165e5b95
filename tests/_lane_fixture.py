"""A private, minimal n8n lane for the claude-runner tests (to be swapped for the real process
backend later). Starts ``node <n8n> start`` on loopback, seeds the owner, enables MCP and rotates
an MCP key. Ports 5800–5899 (and broker ports +1000) belong to these tests.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import httpx

from orchestrator.lanes.install import Toolchain, default_cache_dir
from orchestrator.redact import register_secret

PORT_RANGE = range(5800, 5900)
READY_TIMEOUT_S = 120.0


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port() -> int:
    for port in PORT_RANGE:
        if _port_free(port) and _port_free(port + 1000):
            return port
    raise RuntimeError("no free port in 5800-5899 for a test lane")


@dataclass
class LaneUnderTest:
    base_url: str
    owner_email: str
    owner_password: str = field(repr=False)
    cookie: str = field(repr=False)
    mcp_key: str = field(repr=False)
    proc: subprocess.Popen[bytes] = field(repr=False)
    folder: Path = field(repr=False)
    log_path: Path = field(repr=False)

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp-server/http"

    def owner_client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, cookies={"n8n-auth": self.cookie}, timeout=30)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _lane_env(tc: Toolchain, folder: Path, port: int) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TZ", "TMPDIR")}
    return keep | {
        "PATH": tc.node_path_env(),
        "HOME": str(folder),
        "N8N_USER_FOLDER": str(folder),
        "N8N_PORT": str(port),
        "N8N_LISTEN_ADDRESS": "127.0.0.1",
        "N8N_HOST": "127.0.0.1",
        "N8N_RUNNERS_BROKER_PORT": str(port + 1000),
        "E2E_TESTS": "true",
        "N8N_ENABLED_MODULES": "instance-ai,agents",
        "N8N_AI_ENABLED": "true",
        "N8N_DIAGNOSTICS_ENABLED": "false",
        "N8N_SECURE_COOKIE": "false",
        "N8N_PERSONALIZATION_ENABLED": "false",
        "N8N_VERSION_NOTIFICATIONS_ENABLED": "false",
        "N8N_TEMPLATES_ENABLED": "false",
    }


def _wait_ready(base_url: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"test lane exited with {proc.returncode}:\n{tail}")
            try:
                if client.get(f"{base_url}/healthz/readiness").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
    raise RuntimeError(f"test lane at {base_url} not ready after {READY_TIMEOUT_S:.0f}s")


def _seed(base_url: str) -> tuple[str, str, str, str]:
    """Reset the lane, log in as owner, enable MCP and rotate a key: (email, password, cookie, key)."""
    password = "Pw1-" + secrets.token_urlsafe(12)
    register_secret(password)

    def user(email: str, first: str) -> dict[str, str]:
        return {"email": email, "password": password, "firstName": first, "lastName": "Test"}

    email = "owner@lane-test.invalid"
    body = {
        "owner": user(email, "Owner"),
        "admin": user("admin@lane-test.invalid", "Admin"),
        "members": [],
        "chat": user("chat@lane-test.invalid", "Chat"),
    }
    with httpx.Client(base_url=base_url, timeout=30) as client:
        client.post("/rest/e2e/reset", json=body).raise_for_status()
        login = client.post("/rest/login", json={"emailOrLdapLoginId": email, "password": password})
        login.raise_for_status()
        cookie = login.cookies.get("n8n-auth")
        if not cookie:
            raise RuntimeError("login set no n8n-auth cookie")
        register_secret(cookie)
        client.cookies.set("n8n-auth", cookie)
        client.patch("/rest/mcp/settings", json={"mcpAccessEnabled": True}).raise_for_status()
        rotated = client.post("/rest/mcp/api-key/rotate")
        rotated.raise_for_status()
        key = rotated.json()["data"]["apiKey"]
        register_secret(key)
    return email, password, cookie, key


def stop_lane(lane: LaneUnderTest) -> None:
    proc = lane.proc
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    # the JS task runner is a child in the same group; make sure nothing of the group survives
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start_lane(folder: Path | None = None) -> LaneUnderTest:
    tc = Toolchain(default_cache_dir())
    if not tc.n8n_ready():
        raise RuntimeError("n8n is not installed: run `python -m orchestrator.lanes.install`")
    folder = folder or Path(tempfile.mkdtemp(prefix="lane-test-"))
    port = pick_port()
    base_url = f"http://127.0.0.1:{port}"
    log_path = folder / "n8n.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [str(tc.node_bin), str(tc.n8n_entry), "start"],
        env=_lane_env(tc, folder, port),
        cwd=folder,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    lane = LaneUnderTest(base_url, "", "", "", "", proc, folder, log_path)
    try:
        _wait_ready(base_url, proc, log_path)
        lane.owner_email, lane.owner_password, lane.cookie, lane.mcp_key = _seed(base_url)
    except BaseException:
        stop_lane(lane)
        raise
    return lane


def lane_fixture() -> Iterator[LaneUnderTest]:
    """Body of a pytest fixture: ``yield from lane_fixture()``."""
    folder = Path(tempfile.mkdtemp(prefix="lane-test-"))
    try:
        lane = start_lane(folder)
        try:
            yield lane
        finally:
            stop_lane(lane)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
