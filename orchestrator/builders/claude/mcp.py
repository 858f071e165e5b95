"""The ``mcp`` builder: the real ``claude -p`` CLI driving the lane's MCP server as the build user.

Per build: the inline seed's workflows are created in the build user's project (ids remapped into
the prompt), the prompt is rendered from the case, and claude runs with a staged MCP config holding
the member's own MCP key. Provider outages are retried after 30 s, then 90 s; a build that printed
no ``WORKFLOW_ID=`` trailer asks the allocator for another lane.
"""

from __future__ import annotations

import logging

from orchestrator.builders.builder import Builder, BuilderOptions, BuildRequest, BuildResult, register_builder
from orchestrator.builders.claude.options import ClaudeOptions
from orchestrator.builders.claude.prompt import build_prompt
from orchestrator.builders.claude.runner import (
    AttemptResult,
    ClaudeConfig,
    EventSink,
    run_build_attempt,
    should_retry_attempt,
)
from orchestrator.builders.claude.trailer import TRAILER_PATTERN
from orchestrator.builders.lane import BuildLane
from orchestrator.builders.users import BuildUser
from orchestrator.cases import EvalCase
from orchestrator.domain import PROVIDER_OUTAGE_ROOT_CAUSE, BuildStatus
from orchestrator.errors import ConfigError
from orchestrator.n8n.errors import N8nError, N8nTransportError
from orchestrator.outage import retry_provider_outage
from orchestrator.redact import redact
from orchestrator.transcript import (
    ClaudeStreamTranscript,
    Transcript,
    transcript_path_for,
)

log = logging.getLogger(__name__)


def narration_of(result: AttemptResult) -> str | None:
    """claude's final ``result`` text (already redacted) without its ``WORKFLOW_ID=`` trailer line."""
    text = TRAILER_PATTERN.sub("", result.raw_result_text or "").strip()
    return text or None


@register_builder
class McpBuilder(Builder):
    name = "mcp"
    process_gradable = False  # n8n never judges process expectations for MCP builds
    needs_mcp_key = True
    needs_claude = True
    options_model = ClaudeOptions

    @classmethod
    def check_config(cls, options: BuilderOptions | None) -> None:
        """``--build-cwd``, when given, is a directory; else ``ConfigError`` naming the flag."""
        if isinstance(options, ClaudeOptions) and options.build_cwd is not None and not options.build_cwd.is_dir():
            raise ConfigError(f"--build-cwd: {options.build_cwd} is not a directory")

    @property
    def options(self) -> ClaudeOptions:
        """This builder's options (the run's, else the defaults)."""
        given = self.settings.options
        return given if isinstance(given, ClaudeOptions) else ClaudeOptions.model_validate({})

    def claude_config(self, request: BuildRequest) -> ClaudeConfig:
        """How claude runs for ``request``: each attempt bounded by the request's budget (complex
        cases already scaled), never by a run-wide one."""
        s, o = self.settings, self.options
        if s.claude_bin is None:
            raise RuntimeError("the mcp builder needs the claude CLI (BuilderSettings.claude_bin)")
        return ClaudeConfig(
            claude_bin=s.claude_bin, model=s.model, api_key=s.api_key, base_url=s.base_url,
            server_name=o.mcp_server, timeout_ms=request.timeout_ms, mcp_timeout_ms=o.build_mcp_timeout_ms,
            max_retries=o.build_max_retries, work_root=s.run_dir / "builds", extra_env=s.extra_env,
        )

    async def prepare_lane(self, lane: BuildLane) -> None:
        """Enable MCP access as the owner (the e2e reset wipes it, and members may not)."""
        # The e2e reset wipes MCP settings, and only an owner may enable MCP access (members get 403).
        await lane.owner.enable_mcp()

    async def _restore_seed(self, user: BuildUser, case: EvalCase) -> dict[str, str]:
        """Create the inline seed's workflows in the build user's project; map seed id → real id."""
        seed = case.inline_seed
        id_map: dict[str, str] = {}
        if seed is None:
            return id_map
        for wf in seed.workflows:
            body = {
                "name": wf.name,
                "nodes": [{k: v for k, v in n.items() if k != "credentials"} for n in wf.nodes],
                "connections": wf.connections,
                "settings": {},
                "projectId": user.project_id,
            }
            id_map[wf.id] = await user.session.create_workflow(body)
        return id_map

    async def run_attempt(self, prompt: str, lane: BuildLane, mcp_key: str, claude: ClaudeConfig,
                          on_event: EventSink) -> AttemptResult:
        """One claude attempt, here in this process (the ``remote`` builder runs it next to the lane)."""
        return await run_build_attempt(prompt, lane.lane.base_url, mcp_key, claude, cwd=self.options.build_cwd,
                                       on_event=on_event)

    async def build(self, request: BuildRequest, lane: BuildLane, user: BuildUser) -> BuildResult:
        """Restore the case's seed for ``user``, then let ``claude -p`` build through the lane's MCP server
        with the user's MCP key, retrying provider outages; the transcript is written as it streams. A
        seed that cannot be restored is a framework fault; ``N8nTransportError`` (the lane) propagates."""
        case = request.case
        claude = self.claude_config(request)
        try:
            id_map = await self._restore_seed(user, case)
        except N8nTransportError:
            raise
        except N8nError as exc:
            return BuildResult(BuildStatus.failed, error=redact(f"seed restore failed: {exc}"), framework_fault=True)
        prompt = build_prompt(case, id_map=id_map)
        transcript_path = transcript_path_for(request, self.settings.run_dir)
        total = BuildResult(BuildStatus.failed, transcript_path=transcript_path)
        if user.mcp_key is None:
            raise RuntimeError("the mcp builder needs a build user with an MCP key")
        mcp_key = user.mcp_key
        # claude's stream-json (assistant text, tool_use, tool_result), redacted, as the unit's transcript
        transcript = Transcript(transcript_path, builder=self.name, iteration=request.iteration,
                                attempt=request.attempt, model=claude.model)
        on_event = ClaudeStreamTranscript(transcript)

        async def one_attempt() -> AttemptResult:
            if total.attempts:
                self.events.outage_retry()
                transcript.add("attempt", number=total.attempts + 1)
            transcript.user(prompt, 0)
            result = await self.run_attempt(prompt, lane, mcp_key, claude, on_event)
            total.attempts += 1
            total.cost_usd += result.cost_usd
            total.turns += result.turns
            total.duration_s += result.duration_s
            self.events.cost(result.cost_usd)
            return result

        try:
            result: AttemptResult = await retry_provider_outage(one_attempt, self.settings.outage_waits_s)
        finally:
            transcript.close()
        total.narration = narration_of(result)
        if result.outage is not None:
            total.status = BuildStatus.provider_outage
            total.error = total.root_cause = redact(f"{PROVIDER_OUTAGE_ROOT_CAUSE}: {result.outage.describe()}")
        elif result.timed_out:
            total.status = BuildStatus.timeout
            total.error = redact(f"build timed out after {claude.timeout_ms / 1000:.0f} s")
        elif result.workflow_id is None:
            total.error = redact(result.error_text or "claude printed no WORKFLOW_ID trailer")
            total.retry_elsewhere = should_retry_attempt(result)
        else:
            total.status = BuildStatus.ok
            total.workflow_id = result.workflow_id
        return total
