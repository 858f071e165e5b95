"""The process backend against real n8n: bring-up, seeding, members, credentials, workflows, teardown.

Every test starts from nothing and asserts the host is back to nothing: no labelled process, no
lane folder, no open ledger entry.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from support.polling import eventually, eventually_async
from support.process_lanes import alive, lane_pids, leftovers
from support.workflow_samples import main, node

from orchestrator.lanes.bringup import bring_up, make_owner, teardown_pool
from orchestrator.lanes.model import LaneState
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process.backend import ProcessBackend
from orchestrator.ledger import Ledger
from orchestrator.n8n.rest import N8nClient
from orchestrator.procs import group_members

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
        async def unhealthy() -> bool:
            return not await backend.health(lane)

        await eventually_async(unhealthy, timeout=10, interval=0.2, what="the dead lane reported unhealthy")
        # the exit itself may trail the closed port a little
        await eventually_async(lambda: backend.is_gone(lane), timeout=10, what="the killed lane reported gone")
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
    def both_lanes_started() -> bool:
        assert proc.poll() is None, "lanes up ended before its lanes started"
        return ledger_path.exists() and len(lane_pids(ledger_path)) >= 2

    eventually(both_lanes_started, timeout=120, interval=0.2, what="both lanes in the ledger")
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


#: Manual Trigger → Code: runs without a model (no external call for the mock to answer).
CODE_FLOW = {
    "name": "lazy runner",
    "nodes": [node("Manual Trigger", "n8n-nodes-base.manualTrigger", 1),
              node("Code", "n8n-nodes-base.code", 2, {"jsCode": "return [{json: {sum: 1 + 2}}];"}, 200)],
    "connections": {"Manual Trigger": main("Code")},
    "settings": {},
}


def _members_by_role(pgid: int) -> dict[str, list[int]]:
    roles: dict[str, list[int]] = {"n8n": [], "launcher": [], "runner": [], "other": []}
    for pid in group_members(pgid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = b" ".join(argv).decode(errors="replace")
        role = ("runner" if "task-runner/dist/start.js" in text else "launcher" if "process/launcher.py" in text
                else "n8n" if text.rstrip().endswith("n8n start") else "other")
        roles[role].append(pid)
    return roles


async def _wait_for(condition, what: str, within_s: float = 10.0) -> None:
    await eventually_async(condition, timeout=within_s, interval=0.1, what=what)


async def test_task_runner_starts_with_the_first_code_node_again_after_it_dies_and_ends_with_n8n(tmp_path: Path) -> None:
    run_id = "lanes-lazy-runner"
    backend = ProcessBackend(run_id, Ledger.for_run(run_id, tmp_path), tmp_path)
    owner = make_owner(run_id)
    result = await bring_up(backend, 1, make_spec("eval"), owner)
    [lane] = result.lanes
    pgid = int(lane.handle)
    try:
        roles = _members_by_role(pgid)
        assert roles["n8n"] == [pgid] and len(roles["launcher"]) == 1
        assert roles["runner"] == [] and roles["other"] == []  # ready and seeded, no runner yet
        async with N8nClient(lane.base_url) as client:
            session = await client.login(owner.email, owner.password)
            workflow_id = await session.create_workflow(CODE_FLOW)
            outputs = []
            runners = []
            for attempt in range(2):
                run = await session.execute_with_llm_mock(workflow_id, timeout_ms=60_000)
                assert run.success, run.errors
                outputs.append(run.node_results["Code"].outputs["main"][0][0]["json"])
                [runner] = _members_by_role(pgid)["runner"]
                runners.append(runner)
                if attempt == 0:  # the next Code node needs a new one
                    os.kill(runner, signal.SIGKILL)
                    await _wait_for(lambda pid=runner: not alive(pid), "the killed runner's exit")
            await session.aclose()
        assert outputs == [{"sum": 3}, {"sum": 3}]
        assert runners[0] != runners[1]
        # the lane's runner auth token is nowhere in what the lane wrote
        environ = dict(kv.split(b"=", 1) for kv in Path(f"/proc/{pgid}/environ").read_bytes().split(b"\0") if b"=" in kv)
        token = environ[b"N8N_RUNNERS_AUTH_TOKEN"].decode()
        raw_log = (backend.lanes_dir() / lane.lane_id / "n8n.log").read_text(errors="replace")
        assert token not in raw_log and "Bearer" not in raw_log
        # n8n killed alone: its launcher goes with it, and stops the runner it started
        [launcher] = _members_by_role(pgid)["launcher"]
        os.kill(pgid, signal.SIGKILL)
        await _wait_for(lambda: not alive(launcher) and not alive(runners[1]), "the launcher's and runner's exit")
    finally:
        await teardown_pool(backend, [lane])
        await backend.close()
    assert leftovers(run_id, tmp_path) == []
    log = (tmp_path / "runs" / run_id / "logs" / f"{lane.lane_id}.log").read_text()
    assert log.count("[eval task launcher] a task is waiting: task runner started") == 2
