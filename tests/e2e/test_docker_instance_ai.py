"""``orchestrator run --builder instance-ai --backend docker``: a smoke case built through chat on a
real n8n container (host networking), its agent building in the embedded sandbox service that runs
on the host at 127.0.0.1; scored; and nothing left afterwards — no container, volume, sandbox
service, jail or workspace, no open ledger entry."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import docker
import pytest
from support.tools import need

from orchestrator.lanes.docker.backend import LANE_IMAGE_ENV
from orchestrator.lanes.process.backend import labelled_processes
from orchestrator.ledger import Ledger
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import run

pytest.register_assert_rewrite("support.docker_fixtures")
from support.docker_fixtures import leftovers, remove_leftovers  # noqa: E402

pytest_plugins = ["support.docker_fixtures"]  # one session-wide dockerd and lane image for every docker test file
pytestmark = [pytest.mark.docker, pytest.mark.slow]
CASES = Path(__file__).resolve().parents[2] / "cases"
SMOKE_CASE = "smoke-manual-set-static-fields"


async def test_instance_ai_smoke_on_a_docker_lane_with_the_host_sandbox(
    tmp_path: Path, lane_image: str, docker_client: docker.DockerClient, docker_host: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    need(shutil.which("bwrap") is not None, "bubblewrap is not installed (the embedded sandbox jails commands with it)")
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    monkeypatch.setenv(LANE_IMAGE_ENV, lane_image)
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "N8N_INSTANCE_AI_MODEL_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    rid = f"t-dia-{int(time.time()) % 100000}"
    state, out = tmp_path / "state", tmp_path / "out"
    cfg = RunConfig(cases_paths=[CASES], filter=SMOKE_CASE, backend="docker", builder="instance-ai", lanes=1,
                    model_server="scripted", state_dir=state, output_dir=out, run_id=rid)
    t0 = time.monotonic()
    try:
        outcome = await run(cfg)
        print(f"docker instance-ai smoke: {time.monotonic() - t0:.1f} s")
        assert outcome.ok, outcome.errors
        assert outcome.cleanup_failures == []
        data = json.loads((out / "eval-results.json").read_text())["orchestrator"]
        assert data["config"]["builder"] == "instance-ai" and data["config"]["backend"] == "docker"
        assert [lane["backend"] for lane in data["lanes"]] == ["docker"]
        (unit,) = data["units"]
        assert unit["case"] == SMOKE_CASE
        assert unit["build"]["status"] == "ok" and unit["build"]["workflow_id"], unit["build"]
        assert unit["scenarios"] and all(s["verdict"] == "pass" for s in unit["scenarios"]), unit["scenarios"]
        # the lane built in the host's sandbox: recorded, started with the lane, stopped at its teardown
        records = [json.loads(line) for line in (state / "runs" / rid / "ledger.jsonl").read_text().splitlines()]
        sandbox_ops = [(r["op"], r["id"]) for r in records if r["kind"] == "sandbox"]
        lane_id = data["lanes"][0]["lane"]
        assert [r["meta"]["image"] for r in records if r["kind"] == "lane" and r["op"] == "create"] == [lane_image]
        assert sandbox_ops == [("create", lane_id), ("delete", lane_id)], sandbox_ops
        assert any(r["kind"] == "thread" and r["op"] == "delete" for r in records)
        # teardown left nothing: no container or volume, no sandbox service or jail, no workspace
        assert leftovers(docker_client, rid) == []
        assert labelled_processes(rid) == []
        assert Ledger.for_run(rid, state).open_entries() == []
        sandboxes = state / "runs" / rid / "sandboxes"
        assert not sandboxes.exists() or not [p for p in sandboxes.iterdir() if p.is_dir()]
    finally:
        remove_leftovers(docker_client, rid)
