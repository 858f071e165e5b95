"""The ``remote`` builder: the ``mcp`` builder's builds, with claude running next to the lane.

Everything the orchestrator does for an MCP build stays here — seed restore, prompt, build user and
MCP key, outage retries, the transcript, the verdict — except the ``claude -p`` process itself: each
attempt is sent to the lane's build runner (``lane.endpoints["build-runner"]``, the lane pod's
``build-runner`` container, :mod:`orchestrator.builders.claude.build_runner`) and awaited by long-polling, so
the orchestrator holds one HTTP request per concurrent build instead of a ~204 MiB Node process.

What crosses the wire: the prompt, the build user's MCP key (in the JSON body, never in a URL;
registered for redaction on both sides), the model, the attempt timeout, MCP timeout, server name
and CLI retries. The model key stays in the lane pod (the runner reads it from the lane Secret).
What comes back: the attempt's result (the same ``AttemptResult`` a local attempt gives) and
claude's stream-json events, redacted by the runner, streamed with the polls into this unit's
transcript. An optional shared token (``N8N_EVAL_RUNNER_TOKEN`` in the orchestrator's env and the
lane Secret) is sent as ``Authorization: Bearer``.

Failures:

- runner unreachable (connection refused/reset, no answer): the lane pod is lost or going —
  raised as :class:`~orchestrator.n8n.errors.N8nTransportError`, so the unit counts a *lane* fault
  and runs again on another lane, as for any lost lane;
- the runner does not finish by the attempt's timeout + :data:`DEADLINE_MARGIN_S`: the build is
  cancelled there and reported as a timeout (never retried elsewhere, like a local timeout);
- the runner refuses the build (slots full, bad token, its own error): no workflow, another lane
  may do better (``retry_elsewhere``).

A backend with ``runs_build_runner`` (kubernetes) starts the runners: the run's stack passes it
``build_runner=True`` (``orchestrator.run.stack``).
"""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

from orchestrator.builders.builder import BuildRequest, register_builder
from orchestrator.builders.claude.build_runner import (
    TOKEN_ENV,
    RemoteBuildRunner,
    RunnerDeadline,
    RunnerError,
    RunnerUnreachable,
)
from orchestrator.builders.claude.mcp import McpBuilder
from orchestrator.builders.claude.runner import AttemptResult, ClaudeConfig, EventSink
from orchestrator.builders.lane import BuildLane
from orchestrator.n8n.errors import N8nTransportError
from orchestrator.redact import redact, register_secret

log = logging.getLogger(__name__)

#: The lane endpoint the kubernetes backend sets for a lane pod's build runner.
ENDPOINT = "build-runner"
#: How long past claude's own timeout the orchestrator waits for the runner's answer (its kill grace,
#: result and transcript) before it cancels the build itself.
DEADLINE_MARGIN_S = 120.0


@register_builder
class RemoteBuilder(McpBuilder):
    name = "remote"
    needs_claude = False  # claude is the runner's (the image's pinned CLI), never the orchestrator's
    needs_build_runner = True
    poll_s: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._runners: dict[str, RemoteBuildRunner] = {}
        self._token = os.environ.get(TOKEN_ENV) or None
        register_secret(self._token)

    def claude_config(self, request: BuildRequest) -> ClaudeConfig:
        """The options sent to the lane's runner for this request (the binary is the runner's own)."""
        # Only the options travel (model, timeouts, server name, retries): the binary is the runner's.
        s, o = self.settings, self.options
        return ClaudeConfig(
            claude_bin=s.claude_bin or Path("claude"), model=s.model, server_name=o.mcp_server,
            timeout_ms=request.timeout_ms, mcp_timeout_ms=o.build_mcp_timeout_ms, max_retries=o.build_max_retries,
        )

    def runner_for(self, lane: BuildLane) -> RemoteBuildRunner:
        """The client of ``lane``'s build runner (one per runner URL, kept for the run). Raises
        ``RuntimeError`` when the lane has no runner endpoint."""
        url = lane.lane.endpoints.get(ENDPOINT)
        if not url:
            raise RuntimeError(f"{lane.lane.describe()} has no build runner (lane endpoint {ENDPOINT!r})")
        runner = self._runners.get(url)
        if runner is None:
            runner = self._runners[url] = RemoteBuildRunner(url, self._token, poll_s=self.poll_s)
        return runner

    def _build_id(self) -> str:
        run = re.sub(r"[^A-Za-z0-9._-]+", "-", self.settings.run_id)[:60]
        return f"{run}.{uuid.uuid4().hex[:16]}"

    async def run_attempt(self, prompt: str, lane: BuildLane, mcp_key: str, claude: ClaudeConfig,
                          on_event: EventSink) -> AttemptResult:
        """One build attempt on the lane's runner, bounded by the build timeout plus a margin."""
        runner = self.runner_for(lane)
        deadline_s = claude.timeout_ms / 1000 + DEADLINE_MARGIN_S if claude.timeout_ms else None
        started = time.monotonic()
        build_id = self._build_id()
        try:
            return await runner.run(
                build_id, prompt, mcp_key, on_event=on_event, deadline_s=deadline_s, model=claude.model,
                timeout_ms=claude.timeout_ms, mcp_timeout_ms=claude.mcp_timeout_ms, server_name=claude.server_name,
                max_retries=claude.max_retries,
            )
        except RunnerUnreachable as exc:
            # the lane pod is gone or going: a lane fault, the unit goes to another lane
            raise N8nTransportError("POST", f"{runner.base_url}/builds", str(exc), sent=exc.sent) from None
        except RunnerDeadline as exc:
            return AttemptResult(None, 0.0, 0, time.monotonic() - started, None, True, True, redact(str(exc)),
                                 None, None)
        except RunnerError as exc:
            log.warning("%s: build %s: %s", lane.lane.describe(), build_id, exc)
            return AttemptResult(None, 0.0, 0, time.monotonic() - started, None, False, True, redact(str(exc)),
                                 None, None)

    async def aclose(self) -> None:
        runners, self._runners = list(self._runners.values()), {}
        for runner in runners:
            await runner.aclose()
        await super().aclose()
