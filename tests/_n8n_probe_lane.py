"""A throwaway n8n lane for the n8n client tests (private to these tests).

Starts the cached n8n 2.41.1 with Node 24 on loopback, waits for ``/healthz/readiness`` and always
stops the process (SIGTERM, then SIGKILL). The lead's process backend replaces this later.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from orchestrator.lanes.install import Toolchain, default_cache_dir

READY_TIMEOUT_S = 180.0
PORT_RANGE = range(5900, 6000)  # this suite's ports; each lane also takes port + 1000 (task broker)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(start: int) -> int:
    """First port from ``start`` in :data:`PORT_RANGE` whose broker port (+1000) is free too."""
    for port in range(start, PORT_RANGE.stop):
        if _bindable(port) and _bindable(port + 1000):
            return port
    raise RuntimeError(f"no free lane port in {start}..{PORT_RANGE.stop - 1}")


@dataclass(frozen=True)
class ProbeLane:
    base_url: str
    port: int
    folder: Path
    log_path: Path
    pid: int

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def lane_env(port: int, folder: Path, tc: Toolchain, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("N8N_", "ANTHROPIC_", "EVAL_", "OPENAI_")) and k != "NODE_ENV"
    }
    env.update(
        PATH=tc.node_path_env(),
        HOME=str(folder),
        N8N_USER_FOLDER=str(folder),
        N8N_PORT=str(port),
        N8N_LISTEN_ADDRESS="127.0.0.1",
        N8N_HOST="127.0.0.1",
        N8N_RUNNERS_BROKER_PORT=str(port + 1000),
        E2E_TESTS="true",
        N8N_ENABLED_MODULES="instance-ai,agents",
        N8N_AI_ENABLED="true",
        N8N_INSTANCE_AI_EVAL_INSTANCE="true",
        N8N_DIAGNOSTICS_ENABLED="false",
        N8N_PERSONALIZATION_ENABLED="false",
    )
    env.update(extra or {})
    return env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextmanager
def probe_lane(port: int, extra_env: dict[str, str] | None = None) -> Iterator[ProbeLane]:
    """Run one n8n on ``127.0.0.1:port`` for the duration of the ``with`` block."""
    tc = Toolchain(default_cache_dir())
    if not tc.n8n_ready():
        pytest.skip("n8n is not installed: run `python -m orchestrator.lanes.install`")
    with tempfile.TemporaryDirectory(prefix=f"n8n-probe-{port}-") as tmp:
        folder = Path(tmp)
        log_path = folder / "n8n.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [str(tc.node_bin), str(tc.n8n_entry), "start"],
                env=lane_env(port, folder, tc, extra_env),
                cwd=folder,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            lane = ProbeLane(f"http://127.0.0.1:{port}", port, folder, log_path, proc.pid)
            try:
                _wait_ready(lane, proc)
                yield lane
            finally:
                _stop(proc)


def _wait_ready(lane: ProbeLane, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"n8n on port {lane.port} exited with {proc.returncode}:\n{lane.log_tail()}")
        try:
            if httpx.get(f"{lane.base_url}/healthz/readiness", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"n8n on port {lane.port} not ready after {READY_TIMEOUT_S:.0f}s:\n{lane.log_tail()}")
