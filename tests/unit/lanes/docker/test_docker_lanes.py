"""The docker backend against a real dockerd and real n8n containers (the fast-path lane image).

Each test asserts the daemon is back to nothing for its run: no container and no volume with our
labels, no open ledger entry. Lanes use ports 6000–6099.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import subprocess
import time
from pathlib import Path

import docker
import httpx
import pytest

from orchestrator.lanes.backend import LaneBackend, LaneError, get_backend
from orchestrator.lanes.docker.backend import INDEX_LABEL, DockerBackend
from orchestrator.lanes.labels import MANAGED_BY, MANAGED_BY_LABEL, RUN_LABEL
from orchestrator.lanes.model import Lane, LaneSpec, LaneState
from orchestrator.lanes.pool import make_spec
from orchestrator.ledger import Ledger

pytest.register_assert_rewrite("support.docker_fixtures")  # it is also a plugin (below)
from support.docker_fixtures import DOCKERD_SH, LANE_PORT_BASE, leftovers, remove_leftovers  # noqa: E402

pytest_plugins = ["support.docker_fixtures"]  # one session-wide dockerd and lane image for every docker test file
pytestmark = [pytest.mark.docker, pytest.mark.slow]
READY_TIMEOUT_S = 300.0


def run_id(tag: str) -> str:
    return f"t-{tag}-{secrets.token_hex(3)}"


def eval_spec(image: str, base_port: int, **secret_env: str) -> LaneSpec:
    spec = make_spec("eval", image=image, base_port=base_port)
    return dataclasses.replace(spec, secret_env={**spec.secret_env, **secret_env})


async def wait_ready(backend: LaneBackend, lane: Lane) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < READY_TIMEOUT_S:
        if await backend.health(lane):
            return time.monotonic() - t0
        if await backend.is_gone(lane):
            pytest.fail(f"{lane.describe()} exited:\n{await backend.logs(lane)}")
        await asyncio.sleep(1.0)
    pytest.fail(f"{lane.describe()} not ready after {READY_TIMEOUT_S:.0f} s:\n{await backend.logs(lane)}")


def user(kind: str, rid: str) -> dict[str, str]:
    return {"email": f"{kind}-{rid}@n8n-eval.invalid", "password": f"Pw{secrets.token_hex(8)}9", "firstName": "E", "lastName": kind}


async def reset_and_login(base_url: str, rid: str) -> str:
    """POST /rest/e2e/reset with a fresh owner, then log in as it; returns the auth cookie."""
    owner = user("owner", rid)
    body = {"owner": owner, "admin": user("admin", rid), "members": [], "chat": user("chat", rid)}
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
        reset = await http.post("/rest/e2e/reset", json=body)
        assert reset.status_code == 200, reset.text[:300]
        login = await http.post("/rest/login", json={"emailOrLdapLoginId": owner["email"], "password": owner["password"]})
        assert login.status_code == 200, login.text[:300]
        cookie = login.cookies.get("n8n-auth")
        assert cookie
        me = await http.get("/rest/login", headers={"Cookie": f"n8n-auth={cookie}"})
        assert me.status_code == 200 and me.json()["data"]["email"] == owner["email"]
        return cookie


async def test_two_lanes_come_up_serve_and_leave_nothing(
    tmp_path: Path, lane_image: str, docker_client: docker.DockerClient, docker_host: str
) -> None:
    rid = run_id("two")
    ledger = Ledger.for_run(rid, tmp_path)
    backend = get_backend("docker")(rid, ledger, tmp_path, docker_host=docker_host)
    secret = f"sk-ant-test-{secrets.token_hex(16)}"
    spec = eval_spec(lane_image, LANE_PORT_BASE, N8N_INSTANCE_AI_MODEL_API_KEY=secret)
    lanes: list[Lane] = []
    try:
        lanes = list(await asyncio.gather(backend.start_lane(0, spec), backend.start_lane(1, spec)))
        # recorded before anything else happens, one entry per lane, with distinct ports
        entries = {e.id: e for e in ledger.open_entries("lane")}
        assert set(entries) == {f"n8n-eval-{rid}-0", f"n8n-eval-{rid}-1"}
        http_ports = {e.meta["port"] for e in entries.values()}
        broker_ports = {e.meta["broker_port"] for e in entries.values()}
        assert len(http_ports | broker_ports) == 4
        assert all(6000 <= p < 6100 for p in http_ports | broker_ports)
        for lane in lanes:
            c = docker_client.containers.get(lane.handle)
            assert c.name == f"n8n-eval-{rid}-{lane.index}"
            assert c.labels[MANAGED_BY_LABEL] == MANAGED_BY and c.labels[RUN_LABEL] == rid
            assert c.labels[INDEX_LABEL] == str(lane.index)
            assert c.attrs["HostConfig"]["NetworkMode"] == "host"
            env = dict(item.split("=", 1) for item in c.attrs["Config"]["Env"])
            assert env["N8N_LISTEN_ADDRESS"] == "127.0.0.1"
            assert lane.base_url == f"http://127.0.0.1:{env['N8N_PORT']}"
            assert env["E2E_TESTS"] == "true" and env["N8N_INSTANCE_AI_MODEL_API_KEY"] == secret

        waited = await asyncio.gather(*(wait_ready(backend, lane) for lane in lanes))
        print(f"docker lanes ready after {', '.join(f'{w:.1f}' for w in waited)} s")
        cookies = [await reset_and_login(lane.base_url, f"{rid}-{lane.index}") for lane in lanes]
        # each lane is its own instance: a session of lane 0 means nothing to lane 1
        async with httpx.AsyncClient(base_url=lanes[1].base_url, timeout=30) as http:
            assert (await http.get("/rest/login", headers={"Cookie": f"n8n-auth={cookies[0]}"})).status_code == 401

        logs = await backend.logs(lanes[0], 200)
        assert "Editor is now accessible" in logs, logs[-2000:]
        assert secret not in logs
        assert secret not in ledger.path.read_text(), "a secret value reached the ledger"

        for lane in lanes:
            await backend.teardown(lane)
            assert lane.state == LaneState.stopped
            assert not await backend.health(lane)
            assert await backend.is_gone(lane)
        assert leftovers(docker_client, rid) == []
        assert ledger.open_entries() == []
    finally:
        for lane in lanes:
            if lane.state != LaneState.stopped:
                await backend.teardown(lane)
        await backend.sweep(rid)
        await backend.close()
        remove_leftovers(docker_client, rid)


async def test_sweep_removes_a_crashed_runs_lanes_and_only_those(
    tmp_path: Path, lane_image: str, docker_client: docker.DockerClient, docker_host: str
) -> None:
    crashed, bystander = run_id("crashed"), run_id("bystander")
    spec = eval_spec(lane_image, LANE_PORT_BASE + 40)
    try:
        # the "crashed" orchestrator: starts a lane (with a user-folder volume), then is gone
        first = DockerBackend(crashed, Ledger.for_run(crashed, tmp_path), tmp_path, docker_host=docker_host,
                              user_folder_volume=True)
        lane = await first.start_lane(0, spec)
        await wait_ready(first, lane)  # n8n can write its user folder on the named volume
        mounts = docker_client.containers.get(lane.handle).attrs["Mounts"]
        assert [(m["Type"], m["Name"], m["Destination"]) for m in mounts] == [("volume", lane.lane_id, "/home/n8n")]
        await first.close()
        del first
        other = DockerBackend(bystander, Ledger.for_run(bystander, tmp_path), tmp_path, docker_host=docker_host)
        await other.start_lane(0, dataclasses.replace(spec, base_port=LANE_PORT_BASE + 60))
        assert sorted(leftovers(docker_client, crashed)) == [f"container {lane.lane_id}", f"volume {lane.lane_id}"]

        # a later cleanup, by run id, from a new process with nothing but the state folder
        cleanup = DockerBackend("cleanup", Ledger.for_run("cleanup", tmp_path), tmp_path, docker_host=docker_host)
        removed = await cleanup.sweep(crashed)
        await cleanup.close()
        assert f"container {lane.lane_id}" in removed and f"volume {lane.lane_id}" in removed
        assert leftovers(docker_client, crashed) == []
        assert Ledger.for_run(crashed, tmp_path).open_entries() == []
        assert leftovers(docker_client, bystander) == [f"container n8n-eval-{bystander}-0"], "sweep went past its run"

        removed = await other.sweep(bystander)
        assert removed == [f"container n8n-eval-{bystander}-0"]
        assert leftovers(docker_client, bystander) == []
        await other.close()
    finally:
        remove_leftovers(docker_client, crashed)
        remove_leftovers(docker_client, bystander)


async def test_missing_image_is_a_clear_error_and_leaves_nothing(
    tmp_path: Path, docker_client: docker.DockerClient, docker_host: str
) -> None:
    rid = run_id("noimage")
    ledger = Ledger.for_run(rid, tmp_path)
    backend = DockerBackend(rid, ledger, tmp_path, docker_host=docker_host)
    try:
        with pytest.raises(LaneError, match=r"n8n-eval-lane:does-not-exist.*lanes/build-image.sh"):
            await backend.start_lane(0, LaneSpec(n8n_version="2.41.1", image="n8n-eval-lane:does-not-exist"))
        assert ledger.open_entries() == [] and leftovers(docker_client, rid) == []
    finally:
        await backend.close()


async def test_unreachable_dockerd_names_the_socket(tmp_path: Path) -> None:
    sock = tmp_path / "no-such-docker.sock"
    backend = DockerBackend("t-nodaemon", Ledger.for_run("t-nodaemon", tmp_path), tmp_path,
                            docker_host=f"unix://{sock}")
    with pytest.raises(LaneError, match=r"cannot reach dockerd at unix://.*no-such-docker\.sock.*scripts/dockerd\.sh"):
        await backend.sweep()
    await backend.close()


def test_dockerd_script_is_idempotent_and_reports_its_driver(docker_host: str) -> None:
    def sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(DOCKERD_SH), *args], capture_output=True, text=True, timeout=120, check=False)

    before = sh("status")
    again = sh("start")
    after = sh("status")
    assert again.returncode == 0 and again.stdout.strip() == f"DOCKER_HOST={docker_host}"
    assert before.returncode == after.returncode == 0
    assert before.stdout == after.stdout, "a second start must not restart dockerd"
    assert " driver=overlay2 " in after.stdout or " driver=vfs " in after.stdout
