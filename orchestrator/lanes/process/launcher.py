"""A process lane's JavaScript task runner, started on demand (n8n's own launcher protocol).

By default n8n starts its JS task runner (the process that runs Code nodes) with every instance,
~1 CPU-s of a lane's ~7 at start-up, though many lanes run no Code node for a while, or at all.
n8n's answer for this is ``external`` runner mode with its task-runner launcher
(github.com/n8n-io/task-runner-launcher, "launch a runner on demand ... only when a task is ready
for pickup"); this is that launcher's handshake for a process lane, in Python:

1. fetch a grant token from the lane's task broker (``POST <broker>/runners/auth`` with the lane's
   auth token), connect to ``ws://<broker>/runners/_ws?id=<id>``;
2. answer ``broker:inforequest`` with ``runner:info`` (type ``javascript``), then, on
   ``broker:runnerregistered``, offer to run a task with a non-expiring ``runner:taskoffer``;
3. when the broker accepts the offer (a Code node is waiting), ask it to defer the task
   (``runner:taskdeferred``), disconnect, and start n8n's own runner
   (``@n8n/task-runner/dist/start.js``, with the environment and flags n8n's internal mode gives it)
   with a fresh grant token: the runner registers, offers, and gets the deferred task;
4. the runner then stays (no idle shut-down); if it exits, go back to 1.

The launcher runs as a small process of the lane's process group (started beside n8n, see
:mod:`orchestrator.lanes.process.backend`), so the runner is in that group too: tearing the lane down, or
``orchestrator cleanup``, ends both with n8n. When n8n goes, the launcher stops its runner and
exits. It only uses the standard library and ``websockets``, and is run as a script (``python -I
launcher.py``) so it starts in ~0.1 s without importing the orchestrator. It reads its
settings from the environment the lane was started with, and never prints a token.

A Python Code node cannot run on these lanes in either mode (n8n's Python runner needs a venv the
toolchain does not install): in internal mode it fails at once, here after the broker's task
request timeout (``N8N_RUNNERS_TASK_REQUEST_TIMEOUT``, 60 s).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

#: Names of the environment the backend gives the launcher (besides n8n's own runner settings).
LANE_PID_ENV = "N8N_EVAL_LANE_PID"  # n8n's pid: the launcher ends when its parent is no longer that
NODE_ENV = "N8N_EVAL_RUNNER_NODE"  # the Node binary for the runner
START_ENV = "N8N_EVAL_RUNNER_START"  # @n8n/task-runner/dist/start.js
NODE_OPTIONS_ENV = "N8N_EVAL_RUNNER_NODE_OPTIONS"  # Node options for the runner (the lane's tuning)
LABELS_ENV = "N8N_EVAL_RUNNER_LABELS"  # comma-separated names of lane variables the runner keeps

#: What n8n's internal mode passes from its own environment to the runner (task-runner-process-js).
PASSED_THROUGH = (
    "PATH", "HOME", "NODE_PATH", "GENERIC_TIMEZONE", "NODE_FUNCTION_ALLOW_BUILTIN", "NODE_FUNCTION_ALLOW_EXTERNAL",
    "N8N_SENTRY_DSN", "N8N_VERSION", "ENVIRONMENT", "DEPLOYMENT_NAME", "N8N_RUNNERS_INSECURE_MODE",
    "N8N_RUNNERS_GRACEFUL_SHUTDOWN_TIMEOUT", "N8N_RUNNERS_SHUTDOWN_FORCE_KILL_MARGIN",
    # the shared caches of the lane's Node tuning (orchestrator.toolchain.Toolchain.lane_node_env)
    "NODE_COMPILE_CACHE", "N8N_EVAL_RESOLVE_CACHE", "N8N_EVAL_RESOLVE_ROOT", "N8N_EVAL_RESOLVE_STAMP",
)
#: n8n's runner settings and its own defaults (n8n passes them explicitly in internal mode).
RUNNER_SETTINGS = {
    "N8N_RUNNERS_MAX_PAYLOAD": str(1024 * 1024 * 1024),
    "N8N_RUNNERS_MAX_CONCURRENCY": "10",
    "N8N_RUNNERS_TASK_TIMEOUT": "300",
    "N8N_RUNNERS_HEARTBEAT_INTERVAL": "30",
}
TASK_TYPE = "javascript"
POLL_S = 0.5


@dataclass(frozen=True)
class LauncherConfig:
    broker_uri: str  # http://127.0.0.1:<broker port>
    runners_path: str  # n8n's N8N_RUNNERS_PATH, "/runners"
    auth_token: str
    node: str
    start_js: str
    runner_env: dict[str, str]  # without the grant token and the runner id
    flags: tuple[str, ...]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LauncherConfig:
        """The launcher's settings from the lane's environment: the broker, and the env the runner is
        started with. Raises ``ValueError`` naming the variables that are missing."""
        missing = [k for k in ("N8N_RUNNERS_AUTH_TOKEN", "N8N_RUNNERS_BROKER_PORT", NODE_ENV, START_ENV) if not env.get(k)]
        if missing:
            raise ValueError(f"task launcher: {', '.join(missing)} not set")
        broker_uri = f"http://127.0.0.1:{env['N8N_RUNNERS_BROKER_PORT']}"
        runner_env = {k: env[k] for k in PASSED_THROUGH if env.get(k) is not None}
        runner_env.update({k: env.get(k) or default for k, default in RUNNER_SETTINGS.items()})
        runner_env["N8N_RUNNERS_TASK_BROKER_URI"] = broker_uri
        for name in filter(None, env.get(LABELS_ENV, "").split(",")):
            if name in env:
                runner_env[name] = env[name]
        old_space = env.get("N8N_RUNNERS_MAX_OLD_SPACE_SIZE")
        options = " ".join(filter(None, [env.get(NODE_OPTIONS_ENV), old_space and f"--max-old-space-size={old_space}"]))
        if options:
            runner_env["NODE_OPTIONS"] = options
        insecure = env.get("N8N_RUNNERS_INSECURE_MODE", "").lower() == "true"
        return cls(
            broker_uri=broker_uri,
            runners_path="/" + env.get("N8N_RUNNERS_PATH", "/runners").strip("/"),
            auth_token=env["N8N_RUNNERS_AUTH_TOKEN"],
            node=env[NODE_ENV],
            start_js=env[START_ENV],
            runner_env=runner_env,
            flags=() if insecure else ("--disallow-code-generation-from-strings", "--disable-proto=delete"),
        )

    @property
    def ws_url(self) -> str:
        """The broker's websocket URL the runner connects to."""
        return self.broker_uri.replace("http://", "ws://", 1) + f"{self.runners_path}/_ws"


class LaneGone(Exception):
    """n8n, the launcher's parent, has exited."""


def _say(text: str) -> None:
    print(f"[eval task launcher] {text}", file=sys.stderr, flush=True)


class Launcher:
    def __init__(self, cfg: LauncherConfig, parent: int) -> None:
        self.cfg = cfg
        self.parent = parent

    def check_parent(self) -> None:
        """Raise :class:`LaneGone` once the lane's n8n process is no longer this launcher's parent."""
        if os.getppid() != self.parent:
            raise LaneGone

    def grant_token(self) -> str:
        """A grant token from the broker, waiting for it to listen (n8n opens it during its start)."""
        body = json.dumps({"token": self.cfg.auth_token}).encode()
        while True:
            self.check_parent()
            request = urllib.request.Request(
                f"{self.cfg.broker_uri}{self.cfg.runners_path}/auth", data=body,
                headers={"Content-Type": "application/json"}, method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return str(json.load(response)["data"]["token"])
            except (OSError, ValueError, KeyError) as exc:  # not listening yet, or a 429 / 5xx
                if isinstance(exc, urllib.error.HTTPError) and exc.code in (400, 401, 403):
                    raise RuntimeError(f"the task broker refused the auth token (HTTP {exc.code})") from None
                time.sleep(POLL_S)

    def handshake(self) -> None:
        """Impersonate a runner until the broker hands us a task; defer it and disconnect."""
        from websockets.exceptions import ConnectionClosed
        from websockets.sync.client import connect

        grant = self.grant_token()
        url = f"{self.cfg.ws_url}?id={secrets.token_hex(8)}"
        with connect(url, additional_headers={"Authorization": f"Bearer {grant}"}, open_timeout=10) as ws:
            while True:
                self.check_parent()
                try:
                    raw = ws.recv(timeout=POLL_S)
                except TimeoutError:
                    continue
                except ConnectionClosed as exc:
                    raise RuntimeError(f"the task broker closed the connection ({exc})") from None
                msg = json.loads(raw)
                kind = msg.get("type")
                if kind == "broker:inforequest":
                    ws.send(json.dumps({"type": "runner:info", "types": [TASK_TYPE], "name": f"launcher-{TASK_TYPE}"}))
                elif kind == "broker:runnerregistered":
                    ws.send(json.dumps({"type": "runner:taskoffer", "taskType": TASK_TYPE,
                                        "offerId": secrets.token_hex(8), "validFor": -1}))
                elif kind == "broker:taskofferaccept":
                    ws.send(json.dumps({"type": "runner:taskdeferred", "taskId": msg.get("taskId")}))
                    return

    def run_runner(self) -> int:
        """Start n8n's JS runner for the deferred task; return its exit code when it ends."""
        env = {**self.cfg.runner_env, "N8N_RUNNERS_GRANT_TOKEN": self.grant_token(),
               "N8N_RUNNERS_ID": secrets.token_hex(8)}
        proc = subprocess.Popen([self.cfg.node, *self.cfg.flags, self.cfg.start_js], env=env, stdin=subprocess.DEVNULL)
        _say(f"a task is waiting: task runner started (pid {proc.pid})")
        try:
            while True:
                try:
                    return proc.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    self.check_parent()
        except LaneGone:
            _stop(proc)
            raise

    def serve(self) -> None:
        """Serve the lane until it is gone: handshake with the broker, run a task runner, again; a failed
        handshake is retried, never fatal."""
        failures = 0
        while True:
            try:
                self.handshake()
                failures = 0
                code = self.run_runner()
                _say(f"task runner exited ({code}); it starts again with the next task")
            except LaneGone:
                return
            except Exception as exc:  # a broken handshake is retried, never fatal
                failures += 1
                _say(f"handshake failed: {exc}")
                time.sleep(min(POLL_S * 2**failures, 10.0))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> int:
    """The launcher's entry point (n8n's external task-runner launcher): 2 when its settings are
    missing, 0 once the lane is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the lane's group is stopped with SIGTERM
    try:
        cfg = LauncherConfig.from_env(os.environ)
    except ValueError as exc:
        _say(str(exc))
        return 2
    Launcher(cfg, int(os.environ.get(LANE_PID_ENV) or os.getppid())).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
