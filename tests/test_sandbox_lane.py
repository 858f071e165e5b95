"""A real n8n process lane started with its embedded sandbox (backend option ``sandbox=True``)."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

import httpx
import pytest

from orchestrator.lanes.bringup import wait_ready
from orchestrator.lanes.install import Toolchain, default_cache_dir
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process import ProcessBackend, labelled_processes, pid_alive
from orchestrator.ledger import Ledger
from tests._lanes import READY_TIMEOUT_S, _seed

TC = Toolchain(default_cache_dir())

pytestmark = [
    pytest.mark.n8n,
    pytest.mark.slow,
    pytest.mark.skipif(not TC.n8n_ready(), reason="n8n is not installed: run `orchestrator lanes install`"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


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
