"""Run ONE build attempt: the real ``claude -p`` CLI against a lane's MCP server.

Per attempt we stage a private temp dir (0700) holding ``mcp-config.json`` (0600, the lane's MCP
key inside) and a fresh ``HOME`` so no user config leaks in; both are removed afterwards, also on
timeout or error. claude runs in its own process group; on timeout the group gets SIGTERM, then
SIGKILL after ``kill_grace_s``, and we return only once the process is dead.

The NDJSON ``--output-format stream-json`` stream is parsed as it comes; the final ``result``
event gives ``result``, ``num_turns``, ``total_cost_usd``, ``is_error``, ``subtype`` (and, when the
turn died on an API error, ``api_error_status``). The workflow id is the LAST
``WORKFLOW_ID=<id>`` in the result text (or in the last assistant text when no result came).

Environment (nothing else is inherited from the caller but PATH and locale):

- ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY`` from the config, ``ANTHROPIC_MODEL`` = the model;
- ``MCP_TIMEOUT`` (ms, MCP server start-up), ``HOME`` per attempt;
- ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``: with it the CLI sends no ``HEAD /api/hello``
  probe, no telemetry, error reports, auto-update or plugin/catalog fetches (seen with 2.1.328:
  without it the probe goes out and failed telemetry events are spooled under ``~/.claude``);
  ``DISABLE_AUTOUPDATER``, ``DISABLE_TELEMETRY``, ``DISABLE_ERROR_REPORTING``, ``DO_NOT_TRACK``
  spell the same out for versions that read only those;
- ``CLAUDE_CODE_MAX_RETRIES`` when configured: the CLI retries API errors itself (2.1.328: a 500
  storm → 11 requests over ~176 s by default; 529 → 3 requests then "Repeated 529 Overloaded
  errors"); tests set it low so an outage surfaces in about a second.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.builders.claude.trailer import last_workflow_id
from orchestrator.gateway.attribution import claude_headers_env
from orchestrator.outage import OutageInfo, classify_cli_text, classify_result_event
from orchestrator.procs import terminate_group
from orchestrator.redact import redact, redact_obj, register_secret

log = logging.getLogger(__name__)

DEFAULT_MODEL = "claude-opus-4-8"
DEFAULT_SERVER_NAME = "n8n-local"
#: One NDJSON line can hold a whole tool result (the SDK reference is ~100 kB); allow big lines.
_LINE_LIMIT = 64 * 1024 * 1024
_STDERR_TAIL_LINES = 40
_INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")

QUIET_ENV: dict[str, str] = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DO_NOT_TRACK": "1",
}

EventSink = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class ClaudeConfig:
    """How to run the CLI. ``api_key`` is a secret (registered for redaction on use)."""

    claude_bin: Path
    model: str = DEFAULT_MODEL
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = None
    server_name: str = DEFAULT_SERVER_NAME
    mcp_timeout_ms: int = 60_000
    max_retries: int | None = None  # CLAUDE_CODE_MAX_RETRIES; None keeps the CLI's default
    kill_grace_s: float = 5.0
    work_root: Path | None = None  # where per-build temp dirs go (default: the system temp dir)
    extra_env: Mapping[str, str] = field(default_factory=dict)
    #: the attempt's wall clock (ms; 0: none): the build request's budget, resolved by the run —
    #: there is no default here (``Builder.default_build_timeout_ms`` is the claude builders')
    timeout_ms: int = field(kw_only=True)

    @classmethod
    def from_env(cls, claude_bin: Path, env: Mapping[str, str] | None = None, **overrides: Any) -> ClaudeConfig:
        """Model, key and base URL from ``ANTHROPIC_MODEL`` / ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {
            "model": env.get("ANTHROPIC_MODEL") or DEFAULT_MODEL,
            "api_key": env.get("ANTHROPIC_API_KEY") or None,
            "base_url": env.get("ANTHROPIC_BASE_URL") or None,
        }
        values.update(overrides)
        return cls(claude_bin=claude_bin, **values)


@dataclass(frozen=True)
class AttemptResult:
    workflow_id: str | None
    cost_usd: float
    turns: int
    duration_s: float
    exit_code: int | None
    timed_out: bool
    is_error: bool
    error_text: str | None
    outage: OutageInfo | None
    raw_result_text: str | None
    subtype: str | None = None
    spawn_failed: bool = False

    @property
    def ok(self) -> bool:
        """Whether the attempt named a built workflow."""
        return self.workflow_id is not None


# ----------------------------------------------------------------------------------------------
# staging


@dataclass(frozen=True)
class StagedBuild:
    root: Path
    home: Path
    mcp_config: Path
    cwd: Path


def mcp_config_json(lane_url: str, mcp_key: str, server_name: str = DEFAULT_SERVER_NAME) -> dict[str, Any]:
    """The ``--mcp-config`` document: one HTTP MCP server, the lane's, with the user's key as bearer."""
    return {
        "mcpServers": {
            server_name: {
                "type": "http",
                "url": f"{lane_url.rstrip('/')}/mcp-server/http",
                "headers": {"Authorization": f"Bearer {mcp_key}"},
            }
        }
    }


def _write_private(path: Path, payload: Any) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(payload, fh, indent=2)


def stage_build(lane_url: str, mcp_key: str, config: ClaudeConfig, cwd: Path | None = None) -> StagedBuild:
    """Create the 0700 temp dir with the 0600 MCP config and a fresh HOME.

    Every path is absolute: claude runs in another working directory, so a relative
    ``work_root`` (the default state dir is ``.orchestrator``) would point it at nothing.
    """
    work_root = config.work_root.resolve() if config.work_root is not None else None
    root = Path(tempfile.mkdtemp(prefix="claude-build-", dir=work_root)).resolve()  # mkdtemp → 0700
    try:
        os.chmod(root, 0o700)
        home = root / "home"
        (home / ".claude").mkdir(parents=True, mode=0o700)
        _write_private(home / ".claude" / "settings.json", {"enableAllProjectMcpServers": True})
        mcp_config = root / "mcp-config.json"
        _write_private(mcp_config, mcp_config_json(lane_url, mcp_key, config.server_name))
        work = cwd.resolve() if cwd is not None else root / "work"
        work.mkdir(exist_ok=True, mode=0o700)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return StagedBuild(root, home, mcp_config, work)


def claude_command(prompt: str, config: ClaudeConfig, mcp_config: Path) -> list[str]:
    """The ``claude -p`` command line: the lane's MCP server only (``--strict-mcp-config``), its tools
    only, stream-json output."""
    return [
        str(config.claude_bin),
        "-p", prompt,
        "--model", config.model,
        "--mcp-config", str(mcp_config),
        "--strict-mcp-config",
        "--allowedTools", f"mcp__{config.server_name}",
        "--output-format", "stream-json",
        "--verbose",
    ]


def claude_env(config: ClaudeConfig, home: Path) -> dict[str, str]:
    """The environment of a ``claude`` process: a few inherited variables, a private ``HOME``, the
    model, endpoint and key, MCP timeout and retries, and the model gateway's unit headers."""
    env = {k: v for k in _INHERITED_ENV if (v := os.environ.get(k))}
    env |= QUIET_ENV
    env |= {"HOME": str(home), "ANTHROPIC_MODEL": config.model, "MCP_TIMEOUT": str(config.mcp_timeout_ms)}
    if config.api_key:
        env["ANTHROPIC_API_KEY"] = config.api_key
    if config.base_url:
        env["ANTHROPIC_BASE_URL"] = config.base_url
    if config.max_retries is not None:
        env["CLAUDE_CODE_MAX_RETRIES"] = str(config.max_retries)
    env |= claude_headers_env("build")  # the model gateway counts the build's calls to its unit (issue 37)
    env |= dict(config.extra_env)
    return env


# ----------------------------------------------------------------------------------------------
# stream parsing


@dataclass
class StreamState:
    """What the NDJSON stream told so far."""

    result: dict[str, Any] | None = None
    last_assistant_text: str = ""
    last_api_error_event: dict[str, Any] | None = None
    assistant_ids: set[str] = field(default_factory=set)
    bad_lines: int = 0

    @property
    def assistant_messages(self) -> int:
        """Distinct assistant messages (the CLI emits one event per content block of a message)."""
        return len(self.assistant_ids)

    def feed(self, line: bytes) -> dict[str, Any] | None:
        """Read one stdout line of stream-json: remember the result, the last assistant text and API error;
        returns the event, or None for a blank or non-JSON line (counted in ``bad_lines``)."""
        text = line.decode(errors="replace").strip()
        if not text:
            return None
        try:
            event = json.loads(text)
        except ValueError:
            self.bad_lines += 1
            return None
        if not isinstance(event, dict):
            return None
        kind = event.get("type")
        if kind == "result":
            self.result = event
        elif kind == "assistant" and isinstance(event.get("message"), dict):
            self.assistant_ids.add(str(event["message"].get("id") or event.get("uuid") or len(self.assistant_ids)))
            texts = [str(b.get("text", "")) for b in event["message"].get("content") or []
                     if isinstance(b, dict) and b.get("type") == "text"]
            if texts:
                self.last_assistant_text = "\n".join(texts)
            if event.get("is_api_error_message") or event.get("api_error_status"):
                self.last_api_error_event = event
        return event


async def _pump_stdout(stream: asyncio.StreamReader, state: StreamState, on_event: EventSink | None) -> None:
    while True:
        try:
            line = await stream.readline()
        except ValueError:  # a line over the limit: skip it, keep reading
            state.bad_lines += 1
            continue
        if not line:
            return
        event = state.feed(line)
        if event is not None and on_event is not None:
            try:
                on_event(redact_obj(event))
            except Exception:  # a broken observer must not break the build
                log.exception("on_event callback failed")


async def _pump_stderr(stream: asyncio.StreamReader, tail: deque[str]) -> None:
    while True:
        try:
            line = await stream.readline()
        except ValueError:
            continue
        if not line:
            return
        tail.append(line.decode(errors="replace").rstrip())


async def _terminate(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM claude's process group (start_new_session: the leader's pid is the group id), SIGKILL
    whatever is left of it after ``grace_s`` (MCP children too); return once the leader is reaped."""
    await terminate_group(proc.pid, grace_s)
    await proc.wait()


# ----------------------------------------------------------------------------------------------
# one attempt


def _result_from(state: StreamState, exit_code: int | None, duration_s: float, timed_out: bool,
                 stderr_tail: deque[str], timeout_s: float) -> AttemptResult:
    result = state.result
    if result is not None:
        text = result.get("result")
        text = text if isinstance(text, str) else None
        workflow_id = last_workflow_id(text)
        cost = float(result.get("total_cost_usd") or 0.0)
        turns = int(result.get("num_turns") or 0)
        is_error = bool(result.get("is_error"))
        subtype = result.get("subtype") if isinstance(result.get("subtype"), str) else None
        outage = classify_result_event(result)
    else:
        text = state.last_assistant_text or None
        workflow_id = last_workflow_id(text)
        cost, turns, subtype = 0.0, state.assistant_messages, None
        is_error = True
        outage = classify_result_event(state.last_api_error_event) or classify_cli_text(text)
    if timed_out:
        is_error = True
        error_text: str | None = f"claude timed out after {timeout_s:.0f}s and was killed"
    elif is_error:
        error_text = text or ("\n".join(stderr_tail) or None)
        if result is None:
            error_text = f"claude exited {exit_code} without a result event" + (f": {error_text}" if error_text else "")
    elif workflow_id is None:
        error_text = "no WORKFLOW_ID= trailer in claude's answer"
    else:
        error_text = None
    if timed_out:
        outage = None  # a hang is reported as a timeout, never retried as an outage
    return AttemptResult(
        workflow_id=workflow_id,
        cost_usd=cost,
        turns=turns,
        duration_s=duration_s,
        exit_code=exit_code,
        timed_out=timed_out,
        is_error=is_error,
        error_text=redact(error_text)[:2000] if error_text else None,
        outage=outage,
        raw_result_text=redact(text) if text is not None else None,
        subtype=subtype,
    )


async def run_build_attempt(
    prompt: str,
    lane_url: str,
    mcp_key: str,
    config: ClaudeConfig,
    *,
    cwd: Path | None = None,
    on_event: EventSink | None = None,
) -> AttemptResult:
    """Run claude once for ``prompt`` against the lane's MCP server; never raises for claude's faults."""
    register_secret(mcp_key)
    register_secret(config.api_key)
    started = time.monotonic()
    staged = stage_build(lane_url, mcp_key, config, cwd)
    timeout_s = config.timeout_ms / 1000 if config.timeout_ms else 0.0
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                *claude_command(prompt, config, staged.mcp_config),
                cwd=staged.cwd,
                env=claude_env(config, staged.home),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                limit=_LINE_LIMIT,
            )
        except OSError as exc:
            return AttemptResult(None, 0.0, 0, time.monotonic() - started, None, False, True,
                                 redact(f"could not start claude ({config.claude_bin}): {exc}"), None, None,
                                 spawn_failed=True)
        state = StreamState()
        stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        assert proc.stdout is not None and proc.stderr is not None
        pumps = asyncio.gather(_pump_stdout(proc.stdout, state, on_event), _pump_stderr(proc.stderr, stderr_tail))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(pumps), timeout=timeout_s or None)
            await proc.wait()
        except TimeoutError:
            timed_out = True
        finally:
            await _terminate(proc, config.kill_grace_s)
            if not pumps.done():
                try:
                    await asyncio.wait_for(pumps, timeout=5)
                except (TimeoutError, asyncio.CancelledError):
                    pumps.cancel()
        result = _result_from(state, proc.returncode, time.monotonic() - started, timed_out, stderr_tail, timeout_s)
        log.info("claude attempt: workflow=%s exit=%s turns=%d cost=$%.4f %.1fs%s%s", result.workflow_id,
                 result.exit_code, result.turns, result.cost_usd, result.duration_s,
                 " TIMED OUT" if result.timed_out else "",
                 f" ({result.outage.describe()})" if result.outage else
                 (f" ({result.error_text[:200]})" if result.error_text else ""))
        return result
    finally:
        shutil.rmtree(staged.root, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# which failed attempts are worth another lane


def should_retry_attempt(result: AttemptResult) -> bool:
    """Retry only a build that ran to its end without a trailer id.

    Not after a timeout (a hung build would hang again and doubles the wall time), a spawn error
    (the next spawn fails the same way) or a provider outage (that is :func:`retry_provider_outage`'s
    job, with its waits).
    """
    return result.workflow_id is None and not result.timed_out and not result.spawn_failed and result.outage is None
