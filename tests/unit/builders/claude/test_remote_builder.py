"""The ``remote`` builder against a build runner started as its own process next to a real n8n
process lane (what a lane pod's ``build-runner`` container is in a cluster), with the REAL claude
CLI and the scripted model server (the only stand-in allowed).

What it shows: the orchestrator side starts no claude — claude runs in the runner's process tree
and builds on the lane through its MCP server; the workflow exists on the lane; the unit's
transcript (claude's tool calls and text) streams back from the runner; the MCP key appears in no
URL, runner log or transcript; a runner that is gone is a lane fault (``N8nTransportError``), one
that does not answer by the deadline has its build cancelled, and claude's own timeout on the
runner is a timeout.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.model_switch import SharedModel, Switch
from support.polling import eventually, eventually_async
from support.static_lane import StaticLane, lane_turn
from support.tools import free_port

from orchestrator.builders.builder import BuilderSettings, BuildRequest, BuildResult, get_builder
from orchestrator.builders.claude.build_runner import BuildRunnerServer, RemoteBuildRunner, RunnerDeadline
from orchestrator.builders.claude.options import ClaudeOptions
from orchestrator.builders.claude.remote import ENDPOINT, RemoteBuilder
from orchestrator.builders.lane import BuildLane
from orchestrator.cases import load_disk
from orchestrator.domain import BuildStatus
from orchestrator.errors import ConfigError
from orchestrator.lanes.model import Lane
from orchestrator.ledger import Ledger
from orchestrator.n8n.errors import N8nTransportError
from orchestrator.run.config import RunConfig
from orchestrator.run.resolve import resolve
from orchestrator.scripted import scripts as ms
from orchestrator.scripted.replies import Hang
from orchestrator.scripted.scripts import demo_script
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.transcript import read_transcript

CASES = Path(__file__).resolve().parents[4] / "cases"
FAKE_KEY = "sk-ant-remote-builder-fake-0123456789"
TOKEN = "runner-token-remote-e2e-4567"
SLUG = "smoke-manual-set-static-fields"


SWITCH = Switch(ms.mcp_builder())


def test_remote_builder_needs_a_backend_with_runners() -> None:
    for backend in ("process", "docker", "static"):
        with pytest.raises(ConfigError, match="--builder remote.*--backend kubernetes"):
            resolve(RunConfig(builder="remote", backend=backend, base_url="http://127.0.0.1:9",
                      cases_paths=[CASES]))
    assert resolve(RunConfig(builder="remote", backend="kubernetes", cases_paths=[CASES])).builder is RemoteBuilder
    assert get_builder("remote") is RemoteBuilder and not RemoteBuilder.needs_claude
    assert RemoteBuilder.needs_build_runner and RemoteBuilder.needs_mcp_key


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    server = ScriptedModelServer(SWITCH).start()
    yield server
    server.stop()


@pytest.fixture
def script_override() -> Iterator[Switch]:
    yield SWITCH
    SWITCH.override = None


@pytest.fixture(scope="module")
def lane(shared_sandbox_lane: StaticLane, shared_model: SharedModel) -> Iterator[tuple[Lane, Ledger]]:
    """The session's seeded lane (``_static_lane``); the runner's claude talks to this module's own
    model server, so the lane's route keeps the demo script. Its build-runner endpoint is this module's."""
    with lane_turn(shared_sandbox_lane, shared_model, demo_script()) as turn:
        try:
            yield turn.lane, turn.ledger
        finally:
            turn.lane.endpoints.pop(ENDPOINT, None)


class RunnerProcess:
    """``python -m orchestrator.builders.claude.build_runner serve`` as its own process, next to the lane."""

    def __init__(self, lane_url: str, model_url: str, root: Path, log_path: Path) -> None:
        self.port = free_port()
        self.root, self.log_path = root, log_path
        env = {**os.environ, "ANTHROPIC_API_KEY": FAKE_KEY, "ANTHROPIC_BASE_URL": model_url,
               "N8N_EVAL_RUNNER_TOKEN": TOKEN, "CLAUDE_CODE_MAX_RETRIES": "0"}
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.builders.claude.build_runner", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--root", str(root), "--n8n-url", lane_url, "--slots", "2"],
            env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            eventually(self._healthy, timeout=30, interval=0.1, what="the build runner answers /healthz")
        except AssertionError:
            self.stop()
            raise RuntimeError(f"build runner did not start: {log_path.read_text(errors='replace')[-2000:]}") from None

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def claude_pids(self) -> set[int]:
        """claude processes descending from the runner (each in its own session, so by ancestry)."""
        parents: dict[int, int] = {}
        cmdlines: dict[int, str] = {}
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
                parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
                cmdlines[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, ValueError, IndexError):
                continue
        found = set()
        for pid, cmd in cmdlines.items():
            if "claude" not in cmd or " -p " not in cmd:
                continue
            p, seen = pid, 0
            while p > 1 and seen < 64:
                p, seen = parents.get(p, 0), seen + 1
                if p == self.proc.pid:
                    found.add(pid)
                    break
        return found

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


@pytest.fixture
def runner(lane: tuple[Lane, Ledger], model: ScriptedModelServer, tmp_path: Path) -> Iterator[RunnerProcess]:
    proc = RunnerProcess(lane[0].base_url, model.base_url, tmp_path / "runner-builds", tmp_path / "runner.log")
    try:
        yield proc
    finally:
        proc.stop()


def _case():
    loaded, problems = load_disk([CASES])
    assert not problems
    return next(c for c in loaded if c.slug == SLUG).case


async def _build(lane: Lane, ledger: Ledger, runner_url: str, tmp: Path, *, build_timeout_ms: int = 240_000,
                 during: Any = None) -> tuple[BuildResult, dict[str, Any] | None, Path, str]:
    lane.endpoints[ENDPOINT] = runner_url
    ctx = await BuildLane.open(lane, ledger)
    os.environ["N8N_EVAL_RUNNER_TOKEN"] = TOKEN
    try:
        # claude_bin deliberately absent: the orchestrator side never starts claude
        builder = RemoteBuilder(BuilderSettings(run_id=lane.run_id, run_dir=tmp, model="claude-opus-4-8",
                                                outage_waits_s=(0.1,),
                                                options=ClaudeOptions.model_validate({"build_max_retries": 0})))
    finally:
        del os.environ["N8N_EVAL_RUNNER_TOKEN"]
    await builder.prepare_lane(ctx)
    case = _case()
    user = await ctx.users.acquire(case.credentials, mcp_key=builder.needs_mcp_key)
    assert user.mcp_key
    transcript = tmp / "remote.0.jsonl"
    try:
        task = asyncio.ensure_future(builder.build(BuildRequest(case, 0, 0, build_timeout_ms, transcript), ctx, user))
        if during is not None:
            await during(task)
        result = await task
        workflow = await ctx.owner.get_workflow(result.workflow_id) if result.workflow_id else None
    finally:
        await ctx.users.release(user)
        await ctx.close()
        await builder.aclose()
    return result, workflow, transcript, user.mcp_key


@pytest.mark.n8n
@pytest.mark.claude
def test_a_remote_build_runs_claude_on_the_runner_and_streams_its_transcript_back(
        claude_bin, lane: tuple[Lane, Ledger], model, runner, tmp_path: Path) -> None:
    seen: set[int] = set()

    async def watch(task: asyncio.Future[Any]) -> None:
        while not task.done():
            seen.update(runner.claude_pids())
            await asyncio.sleep(0.1)

    before = len(model.requests)
    result, workflow, transcript, mcp_key = asyncio.run(_build(*lane, runner.url, tmp_path, during=watch))
    assert result.status == BuildStatus.ok, result.error
    assert workflow is not None and result.workflow_id == workflow["id"]
    assert result.attempts == 1 and result.turns >= 2
    assert seen, "claude ran as a descendant of the runner process"
    assert len(model.requests) > before
    # the transcript came back from the runner: the create call, its result and the final text
    entries = read_transcript(transcript)
    kinds = [e["kind"] for e in entries]
    assert kinds[0] == "meta" and "user" in kinds and kinds[-1] == "run"
    calls = [e for e in entries if e["kind"] == "tool_call"]
    assert any(e["tool"].endswith("create_workflow_from_code") for e in calls)
    assert any(e["kind"] == "tool_result" for e in entries)
    assert any(e["kind"] == "assistant" and f"WORKFLOW_ID={result.workflow_id}" in e["text"] for e in entries)
    # the key went in the body only: not in the runner's log, the transcript, or the staged dirs left
    runner.stop()
    log_text = runner.log_path.read_text(errors="replace")
    assert "build " in log_text and mcp_key not in log_text and FAKE_KEY not in log_text and TOKEN not in log_text
    assert mcp_key not in transcript.read_text()
    assert list(runner.root.iterdir()) == []


@pytest.mark.n8n
@pytest.mark.claude
def test_a_runner_lost_mid_build_is_a_lane_fault(claude_bin, lane: tuple[Lane, Ledger], model, runner, tmp_path: Path,
                                                 script_override: Switch) -> None:
    script_override.override = lambda request: Hang(120)
    orphans: set[int] = set()

    async def kill_runner(task: asyncio.Future[Any]) -> None:
        orphans.update(await eventually_async(runner.claude_pids, timeout=60, interval=0.1,
                                              what="claude started on the runner"))
        runner.stop(signal.SIGKILL)  # the lane pod is gone: the runner with it

    try:
        with pytest.raises(N8nTransportError) as caught:
            asyncio.run(_build(*lane, runner.url, tmp_path, during=kill_runner))
        assert caught.value.sent and "runner" in str(caught.value)
    finally:
        for pid in orphans:  # in a pod claude dies with it; here it is an orphan of the killed runner
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    # a runner that never answered: not sent, also a lane fault
    with pytest.raises(N8nTransportError) as never:
        asyncio.run(_build(*lane, f"http://127.0.0.1:{free_port()}", tmp_path))
    assert not never.value.sent


@pytest.mark.n8n
@pytest.mark.claude
def test_claudes_timeout_on_the_runner_is_a_timeout(claude_bin, lane: tuple[Lane, Ledger], model, runner, tmp_path: Path,
                                                    script_override: Switch) -> None:
    script_override.override = lambda request: Hang(120)
    result, workflow, _, _ = asyncio.run(_build(*lane, runner.url, tmp_path, build_timeout_ms=4_000))
    assert result.status == BuildStatus.timeout and workflow is None
    assert not result.retry_elsewhere
    eventually(lambda: not runner.claude_pids(), timeout=20, interval=0.2, what="claude gone from the runner")


@pytest.mark.claude
async def test_a_runner_past_the_deadline_gets_its_build_cancelled(claude_bin, tmp_path: Path) -> None:
    with ScriptedModelServer(lambda request: Hang(60)) as srv:
        env = {"ANTHROPIC_API_KEY": FAKE_KEY, "ANTHROPIC_BASE_URL": srv.base_url, "PATH": os.environ["PATH"]}
        server = BuildRunnerServer(n8n_url="http://127.0.0.1:9", claude_bin=claude_bin, root=tmp_path / "b",
                                   slots=1, host="127.0.0.1", port=0, env=env).start()
        remote = RemoteBuildRunner(f"http://127.0.0.1:{server.port}", poll_s=1)
        try:
            with pytest.raises(RunnerDeadline, match="cancelled"):
                await remote.run("deadline-1", "Build.", "mcp-key-deadline-0001", deadline_s=3, timeout_ms=120_000)
            await eventually_async(lambda: server.running() == 0 and list(server.root.iterdir()) == [], timeout=20,
                                   what="the cancelled build stopped and its staged dir removed")
            assert server.builds == {}
        finally:
            await remote.aclose()
            server.stop()
