"""The build runner (a lane pod's ``build-runner`` container) and its client, with the REAL claude CLI
against the scripted model server (the only stand-in allowed). The lane's n8n is not needed to show
the protocol: the scripted model answers with a workflow-id trailer without calling a tool, and the
MCP URL points at a closed loopback port (claude reports the server as failed and goes on).

What it shows: a build submitted over HTTP runs claude in the *runner's* process tree and its
AttemptResult comes back intact; the orchestrator side holds an HTTP request, nothing more; bad
tokens, unknown ids, full slots and cancellation are answered as the protocol says.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.polling import eventually_async

from orchestrator.builders.claude.build_runner import (
    BuildRunnerServer,
    RemoteBuildRunner,
    RunnerError,
    result_from_json,
    result_to_json,
)
from orchestrator.builders.claude.runner import AttemptResult
from orchestrator.outage import OutageInfo
from orchestrator.scripted import scripts as ms
from orchestrator.scripted.replies import Hang
from orchestrator.scripted.server import ScriptedModelServer

API_KEY = "sk-test-build-runner-key-0001"
MCP_KEY = "mcp-key-build-runner-test-0002"
TOKEN = "runner-token-0003-abcdef"


def test_attempt_results_survive_the_wire() -> None:
    result = AttemptResult("wf-1", 0.25, 3, 12.5, 0, False, False, None,
                           OutageInfo("overloaded", 529, "busy", "claude"), "WORKFLOW_ID=wf-1", "success")
    assert result_from_json(result_to_json(result)) == result
    bare = AttemptResult(None, 0.0, 0, 1.0, None, True, True, "timed out", None, None)
    assert result_from_json(result_to_json(bare)) == bare


@pytest.fixture
def runner(claude_bin: Path, tmp_path: Path) -> Iterator[tuple[BuildRunnerServer, ScriptedModelServer]]:
    with ScriptedModelServer(ms.text_only("Built it.\nWORKFLOW_ID=wf-remote-1")) as model:
        env = {"ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": model.base_url, "PATH": os.environ["PATH"]}
        server = BuildRunnerServer(n8n_url="http://127.0.0.1:9", claude_bin=claude_bin, root=tmp_path / "builds",
                                   slots=1, host="127.0.0.1", port=0, token=TOKEN, env=env).start()
        try:
            yield server, model
        finally:
            server.stop()


@pytest.mark.claude
async def test_a_build_runs_on_the_runner_and_its_result_comes_back(runner) -> None:
    server, model = runner
    url = f"http://127.0.0.1:{server.port}"
    remote = RemoteBuildRunner(url, TOKEN, poll_s=2)
    try:
        result = await remote.run("unit-0001", "Build a hello workflow.", MCP_KEY, timeout_ms=120_000)
    finally:
        await remote.aclose()
    assert result.workflow_id == "wf-remote-1" and result.exit_code == 0 and not result.is_error
    assert model.requests, "claude (started by the runner) called the model"
    # the staged build dir (HOME, MCP config with the key) is gone
    assert list((server.root).iterdir()) == []


@pytest.mark.claude
async def test_protocol_errors_slots_and_cancel(runner) -> None:
    server, model = runner
    url = f"http://127.0.0.1:{server.port}"
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        assert (await http.get(f"{url}/healthz")).json() == {"slots": 1, "running": 0}
        body = {"build_id": "unit-1", "prompt": "p", "mcp_api_key": MCP_KEY}
        assert (await http.post(f"{url}/builds", json=body)).status_code == 401  # no token
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert (await http.post(f"{url}/builds", json={"build_id": "x y"}, headers=auth)).status_code == 400
        assert (await http.get(f"{url}/builds/nope", headers=auth)).status_code == 404
        model.script = lambda request: Hang(30)  # claude waits on the model: a long build
        assert (await http.post(f"{url}/builds", json=body, headers=auth)).status_code == 202
        assert (await http.post(f"{url}/builds", json=body, headers=auth)).status_code == 200  # idempotent
        busy = await http.post(f"{url}/builds", json={**body, "build_id": "unit-2"}, headers=auth)
        assert busy.status_code == 429 and "slots" in busy.text
        await eventually_async(lambda: list(server.root.iterdir()), timeout=20, interval=0.1, what="claude staged")
        assert (await http.delete(f"{url}/builds/unit-1", headers=auth)).json()["cancelled"] is True
        # cancel terminates claude's process group, then removes its staged dir (HOME, MCP config)
        await eventually_async(lambda: not list(server.root.iterdir()), timeout=20, interval=0.1,
                               what="the staged dir removed")
        assert server.running() == 0
        assert (await http.post(f"{url}/builds", json={**body, "build_id": "unit-2"}, headers=auth)).status_code == 202
        await http.delete(f"{url}/builds/unit-2", headers=auth)
    with pytest.raises(RunnerError, match="HTTP 401"):
        bad = RemoteBuildRunner(url, "wrong-token")
        try:
            await bad.run("unit-3", "p", MCP_KEY)
        finally:
            await bad.aclose()
