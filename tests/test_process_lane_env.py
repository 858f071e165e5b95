"""How a process lane is started, without n8n: its environment (Node settings, caches, no editor)
and its staggered start priority."""

from __future__ import annotations

import http.server
import os
import shlex
import subprocess
import threading
from pathlib import Path

from _tools import need

from orchestrator.lanes.backend import READINESS_PATH
from orchestrator.lanes.install import RESOLVE_CACHE_JS
from orchestrator.lanes.model import Lane, LaneSpec
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process import ProcessBackend
from orchestrator.ledger import Ledger


def _env(tmp_path: Path, spec: LaneSpec, **options: object) -> dict[str, str]:
    backend = ProcessBackend("env-run", Ledger.for_run("env-run", tmp_path), tmp_path, cache=tmp_path / "cache", **options)
    return backend._lane_env(spec, 0, tmp_path / "lane", 5701, 5702)


def test_lanes_share_one_compile_cache_per_n8n_version_and_a_larger_young_generation(tmp_path: Path) -> None:
    spec = make_spec("eval")
    env = _env(tmp_path, spec)
    cache = tmp_path / "cache"
    assert Path(env["NODE_COMPILE_CACHE"]).parent.parent == cache  # <cache>/n8n-<version>/compile-cache
    assert Path(env["NODE_COMPILE_CACHE"]).parent.name.startswith("n8n-")
    assert shlex.split(env["NODE_OPTIONS"]) == ["--max-semi-space-size=32", "--require", str(RESOLVE_CACHE_JS)]
    assert env["E2E_TESTS"] == "true" and env["N8N_ENABLED_MODULES"] == spec.env["N8N_ENABLED_MODULES"]


def test_lanes_share_one_resolution_cache_per_install_stamped_with_it(tmp_path: Path) -> None:
    env = _env(tmp_path, make_spec("eval"))
    n8n = Path(env["NODE_COMPILE_CACHE"]).parent
    assert env["N8N_EVAL_RESOLVE_CACHE"] == str(n8n / "resolve-cache.json")
    assert env["N8N_EVAL_RESOLVE_ROOT"] == str(tmp_path / "cache")
    assert env["N8N_EVAL_RESOLVE_STAMP"] == f"{n8n.name.removeprefix('n8n-')}:0"  # not installed yet
    n8n.mkdir(parents=True)
    (n8n / ".installed").touch()
    stamp = _env(tmp_path, make_spec("eval"))["N8N_EVAL_RESOLVE_STAMP"]
    assert stamp != env["N8N_EVAL_RESOLVE_STAMP"]
    assert stamp == f"{n8n.name.removeprefix('n8n-')}:{(n8n / '.installed').stat().st_mtime_ns}"


def test_lanes_run_without_the_editor_unless_the_spec_asks_for_it(tmp_path: Path) -> None:
    assert _env(tmp_path, make_spec("eval"))["N8N_DISABLE_UI"] == "true"
    assert _env(tmp_path, make_spec("eval", ["N8N_DISABLE_UI=false"]))["N8N_DISABLE_UI"] == "false"


def test_the_profiles_own_node_options_come_last_and_tuning_can_be_turned_off(tmp_path: Path) -> None:
    spec = make_spec("eval", ["NODE_OPTIONS=--max-old-space-size=2048"])
    assert shlex.split(_env(tmp_path, spec)["NODE_OPTIONS"]) == [
        "--max-semi-space-size=32", "--require", str(RESOLVE_CACHE_JS), "--max-old-space-size=2048"]
    plain = _env(tmp_path, spec, node_tuning=False)
    assert "NODE_COMPILE_CACHE" not in plain and "N8N_EVAL_RESOLVE_CACHE" not in plain
    assert plain["NODE_OPTIONS"] == "--max-old-space-size=2048"


class _Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == READINESS_PATH else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def test_lanes_after_the_first_start_at_a_lower_priority_until_they_answer_ready(tmp_path: Path) -> None:
    need(os.geteuid() == 0, "only root can give a lane its priority back")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ready)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    backend = ProcessBackend("nice-run", Ledger.for_run("nice-run", tmp_path), tmp_path, cache=tmp_path / "cache")
    procs = [subprocess.Popen(["sleep", "60"], start_new_session=True) for _ in range(3)]
    try:
        lanes = []
        for index, proc in enumerate(procs):
            lane = Lane(lane_id=f"p{index}", index=index, base_url=f"http://127.0.0.1:{server.server_port}",
                        backend="process", run_id="nice-run", handle=str(proc.pid))
            backend._procs[lane.lane_id] = proc
            backend._stagger_start(lane.lane_id, index, proc.pid)
            lanes.append(lane)

        def nice(pid: int) -> tuple[int, str]:  # the process's own, and its session's (autogroup) share
            return os.getpriority(os.PRIO_PROCESS, pid), Path(f"/proc/{pid}/autogroup").read_text().split()[-1]

        assert [nice(p.pid) for p in procs] == [(0, "0"), (4, "4"), (8, "8")]
        assert await backend.health(lanes[1])
        assert [nice(p.pid) for p in procs] == [(0, "0"), (0, "0"), (8, "8")]
        assert await backend.health(lanes[2])
        assert [nice(p.pid) for p in procs] == [(0, "0")] * 3
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        server.shutdown()
        await backend.close()
