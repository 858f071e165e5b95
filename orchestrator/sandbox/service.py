"""Start and stop one sandbox service for a lane, and the lane env that points n8n at it.

The service runs as a child process (``python -m orchestrator.sandbox serve``), not inside the
orchestrator's event loop, because:

- it is the same entry a docker/Kubernetes sandbox container runs, so every backend tests one thing;
- it starts in its own session and carries the run label (``N8N_EVAL_RUN_ID``), so teardown kills
  it as one process group and ``sweep`` finds it (and its bwrap jails, which inherit the label on
  the outside) after an orchestrator crash, like a lane's n8n;
- its stdin is a pipe the orchestrator holds (``--watch-stdin``): when the orchestrator dies, even by
  SIGKILL, the pipe closes and the service kills every sandbox and exits — and every jail runs with
  ``--die-with-parent``, so a SIGKILLed service takes its jails along;
- command output and file I/O never compete with the orchestrator's own loop.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from orchestrator.errors import SandboxError
from orchestrator.procs import group_members
from orchestrator.redact import register_secret
from orchestrator.sandbox.isolation import remove_stale_cgroups
from orchestrator.sandbox.template import SandboxTemplate, ensure_template
from orchestrator.toolchain import Toolchain

KEY_ENV = "N8N_SANDBOX_SERVICE_API_KEY"
START_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0


class SandboxServiceError(SandboxError, RuntimeError):
    """The sandbox service could not be started or stopped; the message says which and why."""


def lane_env(url: str, api_key: str | None = None) -> dict[str, str]:
    """The env a lane needs to build in the n8n-sandbox at ``url`` (the key goes in secret env)."""
    env = {
        "N8N_INSTANCE_AI_SANDBOX_ENABLED": "true",
        "N8N_INSTANCE_AI_SANDBOX_PROVIDER": "n8n-sandbox",
        "N8N_SANDBOX_SERVICE_URL": url.rstrip("/"),
    }
    if api_key:
        env[KEY_ENV] = api_key
    return env


class SandboxService:
    """One sandbox service process: ``url = await svc.start()`` … ``await svc.stop()``."""

    def __init__(
        self,
        root: Path,
        toolchain: Toolchain,
        *,
        api_key: str | None = None,
        label_env: dict[str, str] | None = None,
        template: SandboxTemplate | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.root = root.resolve()
        self.toolchain = toolchain
        self.api_key = api_key if api_key is not None else secrets.token_urlsafe(24)
        register_secret(self.api_key)
        self.label_env = dict(label_env or {})
        self.template = template
        self.extra_args = list(extra_args or [])
        self.cgroup_prefix = f"n8n-sandbox-{secrets.token_hex(4)}-"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def log_path(self) -> Path:
        """The service's log, beside its root folder."""
        return self.root.parent / f"{self.root.name}.log"

    def alive(self) -> bool:
        """False once the service process has exited (a crash mid-build is then a framework issue)."""
        return self.proc is not None and self.proc.poll() is None

    def env(self) -> dict[str, str]:
        """The lane env for this service (``lane_env`` with its URL and key)."""
        return lane_env(self.url, self.api_key)

    async def start(self) -> str:
        """Start the sandbox service as a child process and wait until it answers; returns its URL.
        Raises :class:`SandboxServiceError` with the log's tail when it exits or does not listen in time."""
        if self.template is None:
            self.template = await asyncio.to_thread(ensure_template, self.toolchain)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True, mode=0o700)
        port_file = self.root.parent / f"{self.root.name}.port"
        port_file.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH")}
        env.update(self.label_env)
        env[KEY_ENV] = self.api_key
        cmd = [
            sys.executable, "-m", "orchestrator.sandbox", "serve", "--port", "0", "--root", str(self.root),
            "--cache", str(self.toolchain.cache), "--template", str(self.template.root), "--port-file",
            str(port_file), "--watch-stdin", "--cgroup-prefix", self.cgroup_prefix, *self.extra_args,
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_file.exists():
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise SandboxServiceError(f"sandbox service exited with {self.proc.returncode}: {tail}")
            if time.monotonic() > deadline:
                await self.stop()
                raise SandboxServiceError(f"sandbox service did not listen within {START_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.05)
        port = int(port_file.read_text())
        port_file.unlink(missing_ok=True)
        self.url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(timeout=2.0) as http:
            while True:
                try:
                    if (await http.get(f"{self.url}/healthz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    await self.stop()
                    raise SandboxServiceError("sandbox service did not answer /healthz")
                await asyncio.sleep(0.05)
        return self.url

    async def stop(self) -> None:
        """Stop the service: SIGTERM (it kills every sandbox), SIGKILL its group after a grace, then
        kill whatever is left in its cgroups and remove every workspace. Raises if anything survives."""
        proc = self.proc
        if proc is not None:
            pgid = proc.pid
            if proc.poll() is None:
                try:
                    os.killpg(pgid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                deadline = time.monotonic() + STOP_GRACE_S
                while proc.poll() is None and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
            if group_members(pgid):
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for _ in range(100):
                if proc.poll() is not None and not group_members(pgid):
                    break
                await asyncio.sleep(0.05)
        await asyncio.to_thread(remove_stale_cgroups, self.cgroup_prefix)
        await asyncio.to_thread(shutil.rmtree, self.root, True)
        if proc is not None:
            survivors = group_members(proc.pid)
            if survivors:
                raise SandboxServiceError(f"sandbox service process(es) {survivors} survived SIGKILL")
        if self.root.exists():
            raise SandboxServiceError(f"could not remove sandbox folder {self.root}")
