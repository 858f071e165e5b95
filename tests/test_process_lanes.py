"""The process backend against real n8n: bring-up, seeding, members, credentials, workflows, teardown.

Every test starts from nothing and asserts the host is back to nothing: no labelled process, no
lane folder, no open ledger entry.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from _process_lanes import alive, lane_pids, leftovers

from orchestrator.lanes.bringup import bring_up, make_owner, teardown_pool
from orchestrator.lanes.model import LaneState
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process import ProcessBackend
from orchestrator.ledger import Ledger
from orchestrator.n8n.rest import N8nClient

pytestmark = pytest.mark.n8n
ORCH = [sys.executable, "-m", "orchestrator"]  # the CLI of whatever venv runs the tests


async def test_two_lanes_seeded_used_and_torn_down_leave_nothing(tmp_path: Path) -> None:
    run_id = "lanes-two"
    ledger = Ledger.for_run(run_id, tmp_path)
    backend = ProcessBackend(run_id, ledger, tmp_path)
    owner = make_owner(run_id)
    result = await bring_up(backend, 2, make_spec("eval"), owner)
    try:
        assert [l.state for l in result.lanes] == [LaneState.ready, LaneState.ready]
        ports = {l.base_url for l in result.lanes}
        assert len(ports) == 2
        brokers = {e.meta["broker_port"] for e in ledger.open_entries("lane")}
        assert len(brokers) == 2, "each lane needs its own task-broker port"
        assert result.lanes[0].fingerprint == result.lanes[1].fingerprint
        # no editor (the default): what the lane still reports, and the node types Instance AI reads
        fp = result.lanes[0].fingerprint
        assert fp["editor"] == "off" and "n8n_version" not in fp
        assert fp["instance_ai.enabled"] == "true" and fp["instance_ai.sandboxEnvConfigured"] == "false"
        if os.geteuid() == 0:  # later lanes started at a lower priority: each has it back once ready
            assert [os.getpriority(os.PRIO_PROCESS, int(lane.handle)) for lane in result.lanes] == [0, 0]
        for entry in ledger.open_entries("lane"):
            assert (Path(entry.meta["folder"]) / ".cache/n8n/public/types/nodes.json").is_file()
            async with httpx.AsyncClient() as http:
                assert (await http.get(f"{entry.meta['base_url']}/")).status_code == 404
        for lane in result.lanes:
            async with N8nClient(lane.base_url) as client:
                session = await client.login(owner.email, owner.password)
                start_users = {u["id"] for u in await session.list_users()}
                [inv] = await session.invite([f"member-{lane.index}@n8n-eval.invalid"])
                member = await client.accept_invitation(inv.token, "M", "Ember", "Memb3rPassw0rd!")
                project = await member.personal_project()
                cred = await member.create_credential("Slack", "slackApi", {"accessToken": "xoxb-placeholder"}, project_id=project)
                wf = await member.create_workflow({"name": "t", "nodes": [], "connections": {}, "settings": {}})
                assert wf in {w["id"] for w in await member.list_workflows()}
                await member.delete_credential(cred)
                await member.delete_workflow(wf)
                assert await member.list_credentials() == []
                await member.aclose()
                await session.delete_user(inv.user_id)
                assert {u["id"] for u in await session.list_users()} == start_users
                await session.aclose()
    finally:
        failures = await teardown_pool(backend, result.lanes)
        await backend.close()
    assert failures == []
    assert leftovers(run_id, tmp_path) == []
    assert ledger.open_entries() == []


async def test_lanes_from_the_template_skip_migrations_and_share_no_keys(tmp_path: Path) -> None:
    """Two lanes start from the migrated template database: no migration runs in them, each is
    seeded with this run's fresh owner, and each has its own database file, encryption key
    (n8n's ``config``), instance id and signing keys (``deployment_key``)."""
    run_id = "lanes-template"
    ledger = Ledger.for_run(run_id, tmp_path)
    backend = ProcessBackend(run_id, ledger, tmp_path)
    owner = make_owner(run_id)
    result = await bring_up(backend, 2, make_spec("eval"), owner)
    try:
        assert backend.toolchain.lane_template.is_file()
        keys, instance_ids, signing, inodes, owners = set(), set(), set(), set(), set()
        for lane in result.lanes:
            data = backend.lanes_dir() / lane.lane_id / ".n8n"
            log_text = (data.parent / "n8n.log").read_text(errors="replace")
            assert "Starting migration" not in log_text, "the lane migrated its own database"
            keys.add(json.loads((data / "config").read_text())["encryptionKey"])
            inodes.add((data / "database.sqlite").stat().st_ino)
            with sqlite3.connect(data / "database.sqlite") as db:
                rows = dict(db.execute("SELECT type, value FROM deployment_key WHERE type IN ('instance.id', 'signing.jwt')"))
                owners.update(db.execute("SELECT id FROM user WHERE email = ?", (owner.email,)).fetchall())
            instance_ids.add(rows["instance.id"])
            signing.add(rows["signing.jwt"])
            async with N8nClient(lane.base_url) as client:  # the fresh owner of this run logs in
                session = await client.login(owner.email, owner.password)
                assert await session.list_users()
                await session.aclose()
        assert len(keys) == len(instance_ids) == len(signing) == len(inodes) == len(owners) == 2
        template_key = sqlite3.connect(backend.toolchain.lane_template).execute("SELECT count(*) FROM deployment_key").fetchone()
        assert template_key == (0,), "the template must carry no instance keys"
    finally:
        failures = await teardown_pool(backend, result.lanes)
        await backend.close()
    assert failures == []
    assert leftovers(run_id, tmp_path) == []


async def test_killed_lane_is_detected_by_health_within_10s(tmp_path: Path) -> None:
    run_id = "lanes-kill"
    ledger = Ledger.for_run(run_id, tmp_path)
    backend = ProcessBackend(run_id, ledger, tmp_path)
    result = await bring_up(backend, 1, make_spec("eval"), make_owner(run_id))
    [lane] = result.lanes
    try:
        assert await backend.health(lane)
        os.kill(int(lane.handle), signal.SIGKILL)
        t0 = time.monotonic()
        while await backend.health(lane):
            assert time.monotonic() - t0 < 10, "dead lane still reported healthy after 10 s"
            await asyncio.sleep(0.2)
        assert time.monotonic() - t0 < 10
        while not await backend.is_gone(lane):  # the exit itself may trail the closed port a little
            assert time.monotonic() - t0 < 10, "killed lane not reported gone within 10 s"
            await asyncio.sleep(0.1)
    finally:
        await teardown_pool(backend, [lane])
        await backend.sweep(run_id)
        await backend.close()
    assert leftovers(run_id, tmp_path) == []


def test_lanes_cli_up_status_down(tmp_path: Path) -> None:
    up = subprocess.run([*ORCH, "lanes", "up", "--count", "1", "--run-id", "cli-lanes", "--state-dir", str(tmp_path)],
                        capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stderr
    url = json.loads(up.stdout.strip().splitlines()[-1])["lanes"][0]
    try:
        status = subprocess.run([*ORCH, "lanes", "status", "--run-id", "cli-lanes", "--state-dir", str(tmp_path)],
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0
        assert url.split("//")[1] in status.stdout and "ready" in status.stdout
    finally:
        down = subprocess.run([*ORCH, "lanes", "down", "--run-id", "cli-lanes", "--state-dir", str(tmp_path)],
                              capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert leftovers("cli-lanes", tmp_path) == []
    assert Ledger.for_run("cli-lanes", tmp_path).open_entries() == []


def test_ctrl_c_during_up_tears_down_what_was_created(tmp_path: Path) -> None:
    ledger_path = tmp_path / "runs" / "cli-int" / "ledger.jsonl"
    proc = subprocess.Popen([*ORCH, "lanes", "up", "--count", "2", "--run-id", "cli-int", "--state-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (ledger_path.exists() and len(lane_pids(ledger_path)) >= 2):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    pids = lane_pids(ledger_path)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert not any(alive(p) for p in pids)
    assert leftovers("cli-int", tmp_path) == []
    assert Ledger.for_run("cli-int", tmp_path).open_entries() == []


def test_lanes_down_unknown_run_is_a_one_line_error(tmp_path: Path) -> None:
    res = subprocess.run([*ORCH, "lanes", "down", "--run-id", "nope", "--state-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().startswith("error: --run-id: no run 'nope'")
    assert "Traceback" not in res.stderr
