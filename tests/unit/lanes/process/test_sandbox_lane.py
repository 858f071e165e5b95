"""A real n8n process lane started with its embedded sandbox (backend option ``sandbox=True``)."""

from __future__ import annotations

import secrets
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.lanes import READY_TIMEOUT_S, _seed
from support.polling import eventually_async
from support.tools import need, require

from orchestrator.lanes.bringup import wait_ready
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process.backend import ProcessBackend, labelled_processes
from orchestrator.ledger import Ledger
from orchestrator.procs import pid_alive
from orchestrator.scripted.replies import Reply, TextBlock, ToolUseBlock
from orchestrator.scripted.scripts import tool_calls, tool_names, tool_result_text
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.toolchain import Toolchain, default_cache_dir

TC = Toolchain(default_cache_dir())

pytestmark = [pytest.mark.n8n, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _tools() -> None:
    """n8n and bubblewrap, through ``_tools``: skipped here when missing, a failure in CI."""
    require("n8n", TC.n8n_ready, "run `orchestrator lanes install`")
    need(shutil.which("bwrap") is not None, "bubblewrap is not installed (apt-get install bubblewrap)")


async def test_lane_with_embedded_sandbox(tmp_path: Path) -> None:
    run_id = f"test-{secrets.token_hex(4)}"
    ledger = Ledger.for_run(run_id, tmp_path)
    backend = ProcessBackend(run_id, ledger, tmp_path, sandbox=True)
    lane = await backend.start_lane(0, make_spec("eval"))
    try:
        # recorded before n8n used it, with what a cleanup needs to stop it
        [entry] = ledger.open_entries("sandbox")
        assert entry.id == lane.lane_id and entry.lane == lane.lane_id
        svc_pid, url = int(entry.meta["pid"]), str(entry.meta["url"])
        assert url.startswith("http://127.0.0.1:") and pid_alive(svc_pid)
        assert svc_pid in labelled_processes(run_id)  # found by sweep after a crash
        await wait_ready(backend, lane, READY_TIMEOUT_S)
        env = Path(f"/proc/{lane.handle}/environ").read_bytes().split(b"\0")
        assert f"N8N_SANDBOX_SERVICE_URL={url}".encode() in env
        assert b"N8N_INSTANCE_AI_SANDBOX_PROVIDER=n8n-sandbox" in env
        assert any(e.startswith(b"N8N_SANDBOX_SERVICE_API_KEY=") for e in env)
        _, _, cookie, _ = _seed(lane.base_url)
        async with httpx.AsyncClient(base_url=lane.base_url, headers={"cookie": f"n8n-auth={cookie}"}) as http:
            resp = await http.get("/rest/instance-ai/settings")
            assert resp.status_code == 200, resp.text
            settings = resp.json()["data"]
            assert settings["sandboxEnabled"] is True and settings["sandboxProvider"] == "n8n-sandbox"
        async with httpx.AsyncClient(base_url=url) as http:  # the key n8n got is the one the service wants
            assert (await http.post("/sandboxes", json={})).status_code == 401
    finally:
        await backend.teardown(lane)
        await backend.close()
    assert ledger.open_entries("sandbox") == []
    assert not pid_alive(svc_pid)
    assert labelled_processes(run_id) == []
    sandboxes = tmp_path / "runs" / run_id / "sandboxes"
    assert not sandboxes.exists() or list(sandboxes.iterdir()) == []
    log = tmp_path / "runs" / run_id / "logs" / f"{lane.lane_id}-sandbox.log"
    assert log.exists()  # a redacted copy of the service's log is kept beside the lane logs


async def test_lane_with_external_sandbox_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sandbox_url``: only the lane env points at it; nothing is started nor recorded."""
    run_id = f"test-{secrets.token_hex(4)}"
    ledger = Ledger.for_run(run_id, tmp_path)
    monkeypatch.setenv("N8N_SANDBOX_SERVICE_API_KEY", "external-key-123456")
    backend = ProcessBackend(run_id, ledger, tmp_path, sandbox_url="http://127.0.0.1:9")
    lane = await backend.start_lane(0, make_spec("eval"))
    try:
        env = Path(f"/proc/{lane.handle}/environ").read_bytes().split(b"\0")
        assert b"N8N_SANDBOX_SERVICE_URL=http://127.0.0.1:9" in env
        assert b"N8N_SANDBOX_SERVICE_API_KEY=external-key-123456" in env
        assert ledger.open_entries("sandbox") == []
    finally:
        await backend.teardown(lane)
        await backend.close()


def _agent_script(seen: dict[str, object]):
    """The lane's agent: run one command in its workspace, then finish; side callers get a title."""

    def script(request: dict[str, Any]) -> Reply:
        names = tool_names(request)
        if not names:
            return Reply([TextBlock("Sandbox probe")])
        seen.setdefault("tools", names)
        if "workspace_execute_command" not in names:
            return Reply([TextBlock("no workspace tool offered")])
        seen["schema"] = next(t for t in request["tools"] if t.get("name") == "workspace_execute_command")
        calls = tool_calls(request, "workspace_execute_command")
        if not calls:
            return Reply([ToolUseBlock("workspace_execute_command", {"command": PROBE})])
        seen["result"] = tool_result_text(calls[0][1]) if calls[0][1] else None
        return Reply([TextBlock("done")])

    return script


PROBE = "echo from-agent > /home/user/workspace/probe.txt && node --version && npm --version"


async def test_agent_creates_its_sandbox_on_the_lanes_service(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    run_id = f"test-{secrets.token_hex(4)}"
    ledger = Ledger.for_run(run_id, tmp_path)
    with ScriptedModelServer(_agent_script(seen)) as model:
        overrides = [
            "N8N_INSTANCE_AI_MODEL=anthropic/claude-sonnet-4-6",
            f"N8N_INSTANCE_AI_MODEL_URL={model.base_url}",
            "N8N_INSTANCE_AI_MODEL_API_KEY=scripted-model-key",
        ]
        backend = ProcessBackend(run_id, ledger, tmp_path, sandbox=True)
        lane = await backend.start_lane(0, make_spec("eval", overrides))
        try:
            [entry] = ledger.open_entries("sandbox")
            root, url = Path(str(entry.meta["root"])), str(entry.meta["url"])
            await wait_ready(backend, lane, READY_TIMEOUT_S)
            _, _, cookie, _ = _seed(lane.base_url)
            async with httpx.AsyncClient(base_url=f"{lane.base_url}/rest", timeout=60,
                                         headers={"cookie": f"n8n-auth={cookie}"}) as http:
                project = (await http.get("/projects/personal")).json()["data"]["id"]
                thread_id = str(uuid.uuid4())
                created = await http.post("/instance-ai/threads",
                                           json={"projectId": project, "source": "evals", "threadId": thread_id})
                assert created.status_code == 200, created.text
                thread_id = created.json()["data"]["thread"]["id"]
                started = time.monotonic()
                sent = await http.post(f"/instance-ai/chat/{thread_id}", json={"message": "probe", "timeZone": "UTC"})
                assert sent.status_code == 200, sent.text

                async def run_over() -> bool:
                    status = (await http.get(f"/instance-ai/threads/{thread_id}/status")).json()
                    return not status.get("data", status).get("hasActiveRun")

                await eventually_async(run_over, timeout=120, interval=0.5, what="the thread's run over")
                sandbox_id = str(uuid.uuid5(N8N_THREAD_NS, f"instance-ai-thread-{thread_id}"))
                assert "result" in seen, {k: v for k, v in seen.items() if k != "schema"}
                assert (root / sandbox_id / "home" / "workspace" / "probe.txt").read_text() == "from-agent\n"
                assert f"v{TC.node_version}" in str(seen["result"])
                # the builder's own workspace set-up ran first: the marker it writes only after its
                # `npm install` succeeded (offline, against the template)
                ws = root / sandbox_id / "home" / "workspace"
                assert (ws / ".sandbox-initialized").exists() and (ws / "package-lock.json").exists()
                print(f"chat to run end with sandbox set-up: {time.monotonic() - started:.1f} s")
                async with httpx.AsyncClient(base_url=url, headers={"X-Api-Key": _lane_key(lane)}) as sbx:
                    assert (await sbx.get(f"/sandboxes/{sandbox_id}")).status_code == 200
                    assert (await http.delete(f"/instance-ai/threads/{thread_id}")).status_code == 200
                    assert (await sbx.get(f"/sandboxes/{sandbox_id}")).status_code == 404
                assert not (root / sandbox_id).exists()
        finally:
            await backend.teardown(lane)
            await backend.close()
    assert labelled_processes(run_id) == []


N8N_THREAD_NS = uuid.UUID("5e6c2f7a-93a1-4b0e-8f27-c1d6a3b9e514")  # n8n 2.41.1 instance-ai-sandbox.service


def _lane_key(lane) -> str:
    for item in Path(f"/proc/{lane.handle}/environ").read_bytes().split(b"\0"):
        if item.startswith(b"N8N_SANDBOX_SERVICE_API_KEY="):
            return item.split(b"=", 1)[1].decode()
    raise AssertionError("the lane has no sandbox key")
