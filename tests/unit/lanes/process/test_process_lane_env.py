"""How a process lane is started, without n8n: its environment (Node settings, caches, no editor)
and its staggered start priority."""

from __future__ import annotations

import contextlib
import http.server
import os
import shlex
import subprocess
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.tools import need

from orchestrator.lanes.backend import READINESS_PATH
from orchestrator.lanes.model import Lane, LaneSpec
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process import launcher as task_launcher
from orchestrator.lanes.process.backend import ProcessBackend
from orchestrator.lanes.process.options import ProcessOptions
from orchestrator.ledger import Ledger
from orchestrator.redact import redact
from orchestrator.toolchain import RESOLVE_CACHE_JS, Toolchain


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


@contextlib.asynccontextmanager
async def _sleeping_lanes(tmp_path: Path, run_id: str, count: int) -> AsyncIterator[tuple[ProcessBackend, list[Lane]]]:
    """``count`` stand-in lanes (``sleep`` in its own session each) that answer ready, on a backend."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ready)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    backend = ProcessBackend(run_id, Ledger.for_run(run_id, tmp_path), tmp_path, cache=tmp_path / "cache")
    procs = [subprocess.Popen(["sleep", "60"], start_new_session=True) for _ in range(count)]
    lanes = [Lane(lane_id=f"p{index}", index=index, base_url=f"http://127.0.0.1:{server.server_port}",
                  backend="process", run_id=run_id, handle=str(proc.pid)) for index, proc in enumerate(procs)]
    backend._procs.update({lane.lane_id: proc for lane, proc in zip(lanes, procs)})
    try:
        yield backend, lanes
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        server.shutdown()
        await backend.close()


async def test_lanes_after_the_first_start_at_a_lower_priority_until_they_answer_ready(tmp_path: Path) -> None:
    need(os.geteuid() == 0, "only root can give a lane its priority back")
    async with _sleeping_lanes(tmp_path, "nice-run", 3) as (backend, lanes):
        pids = [int(lane.handle) for lane in lanes]
        for lane in lanes:
            backend._stagger_start(lane.lane_id, lane.index, int(lane.handle))

        def nice(pid: int) -> tuple[int, str]:  # the process's own, and its session's (autogroup) share
            return os.getpriority(os.PRIO_PROCESS, pid), Path(f"/proc/{pid}/autogroup").read_text().split()[-1]

        assert [nice(pid) for pid in pids] == [(0, "0"), (4, "4"), (8, "8")]
        assert await backend.health(lanes[1])
        assert [nice(pid) for pid in pids] == [(0, "0"), (0, "0"), (8, "8")]
        assert await backend.health(lanes[2])
        assert [nice(pid) for pid in pids] == [(0, "0")] * 3


async def test_while_more_lanes_start_than_there_are_cpus_each_is_held_to_one_until_ready(tmp_path: Path) -> None:
    need(os.geteuid() == 0, "staggered starts are for root only")
    cpus = sorted(os.sched_getaffinity(0))
    async with _sleeping_lanes(tmp_path, "pin-run", len(cpus) + 1) as (backend, lanes):
        pids = [int(lane.handle) for lane in lanes]
        for lane in lanes:
            backend._stagger_start(lane.lane_id, lane.index, int(lane.handle))
            if lane.index < len(cpus):  # a CPU for each starting lane so far: none is held
                assert all(os.sched_getaffinity(pid) == set(cpus) for pid in pids[: lane.index + 1])
        assert [os.sched_getaffinity(pid) for pid in pids] == [{cpus[i % len(cpus)]} for i in range(len(pids))]
        assert await backend.health(lanes[1])
        assert os.sched_getaffinity(pids[1]) == set(cpus)  # ready: every CPU again
        assert os.sched_getaffinity(pids[0]) == {cpus[0]}
        await backend.teardown(lanes[0])  # gone before it was ready: no longer counted, nor held
        assert backend._starting.keys() == {lane.lane_id for lane in lanes[2:]}
        assert await backend.health(lanes[-1])
        assert os.sched_getaffinity(pids[-1]) == set(cpus)


def _with_runner(tmp_path: Path) -> Path:
    """A toolchain cache that has n8n's task runner where the backend looks for it."""
    start = Toolchain(tmp_path / "cache").task_runner_start
    start.parent.mkdir(parents=True)
    start.write_text("")
    return start


def test_lanes_start_their_task_runner_on_demand_unless_a_runner_mode_is_chosen(tmp_path: Path) -> None:
    start = _with_runner(tmp_path)
    backend = ProcessBackend("env-run", Ledger.for_run("env-run", tmp_path), tmp_path, cache=tmp_path / "cache")
    env = backend._lane_env(make_spec("eval"), 0, tmp_path / "lane", 5701, 5702)
    other = backend._lane_env(make_spec("eval"), 1, tmp_path / "lane1", 5703, 5704)
    assert env["N8N_RUNNERS_MODE"] == "external" and env[task_launcher.START_ENV] == str(start)
    token = env["N8N_RUNNERS_AUTH_TOKEN"]
    assert len(token) >= 32 and token != other["N8N_RUNNERS_AUTH_TOKEN"]  # one per lane
    assert token not in redact(f"token={token}")  # a secret like any other
    assert env[task_launcher.NODE_OPTIONS_ENV] == f'--max-semi-space-size=32 --require "{RESOLVE_CACHE_JS}"'
    cmd = backend._command(env)
    assert cmd[:2] == ["/bin/sh", "-c"] and cmd[-3:] == [str(backend.toolchain.node_bin), str(backend.toolchain.n8n_entry), "start"]
    assert 'process/launcher.py & exec "$@"' in cmd[2] and cmd[2].startswith(f"{task_launcher.LANE_PID_ENV}=$$ ")

    # n8n's own way (the runner starts with n8n) when asked for, or when this n8n has no runner file
    internal = backend._lane_env(make_spec("eval", ["N8N_RUNNERS_MODE=internal"]), 0, tmp_path / "lane", 5701, 5702)
    off = _env(tmp_path, make_spec("eval"), lazy_runner=False)
    for plain in (internal, off):
        assert "N8N_RUNNERS_AUTH_TOKEN" not in plain and task_launcher.START_ENV not in plain
        assert backend._command(plain) == [str(backend.toolchain.node_bin), str(backend.toolchain.n8n_entry), "start"]
    start.unlink()
    assert "N8N_RUNNERS_AUTH_TOKEN" not in _env(tmp_path, make_spec("eval"))


def test_the_runner_gets_what_n8ns_internal_mode_gives_it_and_never_the_auth_token(tmp_path: Path) -> None:
    _with_runner(tmp_path)
    env = _env(tmp_path, make_spec("eval", ["GENERIC_TIMEZONE=Europe/Berlin", "N8N_RUNNERS_MAX_CONCURRENCY=3",
                                            "N8N_RUNNERS_MAX_OLD_SPACE_SIZE=512"]))
    cfg = task_launcher.LauncherConfig.from_env(env)
    assert cfg.broker_uri == "http://127.0.0.1:5702" and cfg.ws_url == "ws://127.0.0.1:5702/runners/_ws"
    assert cfg.flags == ("--disallow-code-generation-from-strings", "--disable-proto=delete")
    runner = cfg.runner_env
    assert "N8N_RUNNERS_AUTH_TOKEN" not in runner and env["N8N_RUNNERS_AUTH_TOKEN"] not in str(runner)
    assert runner["N8N_RUNNERS_TASK_BROKER_URI"] == "http://127.0.0.1:5702"
    assert runner["GENERIC_TIMEZONE"] == "Europe/Berlin" and runner["N8N_RUNNERS_MAX_CONCURRENCY"] == "3"
    assert runner["N8N_RUNNERS_TASK_TIMEOUT"] == "300"  # n8n's default, as n8n passes it
    assert runner["NODE_OPTIONS"].endswith("--max-old-space-size=512")
    assert runner["NODE_COMPILE_CACHE"] == env["NODE_COMPILE_CACHE"]  # the lane's caches, for the runner too
    assert runner["N8N_EVAL_RUN_ID"] == "env-run"  # found by `orchestrator cleanup` like its lane
    assert not {"E2E_TESTS", "N8N_ENABLED_MODULES", "N8N_USER_FOLDER"} & set(runner)  # n8n's settings stay n8n's
    insecure = task_launcher.LauncherConfig.from_env({**env, "N8N_RUNNERS_INSECURE_MODE": "true"})
    assert insecure.flags == ()
    missing = {k: v for k, v in env.items() if k != "N8N_RUNNERS_AUTH_TOKEN"}
    with pytest.raises(ValueError, match="N8N_RUNNERS_AUTH_TOKEN"):
        task_launcher.LauncherConfig.from_env(missing)


def test_the_options_are_typed_a_typo_or_a_bad_value_is_one_line_naming_it(tmp_path: Path) -> None:
    """The process backend's options were read with ``options.get``: ``lazy_runer=False`` started
    lanes with the runner on, silently. Now each is a field of a frozen model."""
    from pydantic import ValidationError

    from orchestrator.errors import ConfigError

    ledger = Ledger.for_run("opt-run", tmp_path)
    with pytest.raises(ConfigError, match=r"^process backend: unknown option 'lazy_runer' \(its options: .*lazy_runner"):
        ProcessBackend("opt-run", ledger, tmp_path, lazy_runer=False)
    with pytest.raises(ConfigError, match=r"^process backend: option 'stagger': Input should be a valid boolean"):
        ProcessBackend("opt-run", ledger, tmp_path, stagger="sometimes")
    backend = ProcessBackend("opt-run", ledger, tmp_path, cache=str(tmp_path / "c"), lazy_runner=False, node_tuning=None)
    assert (backend.lazy_runner, backend.node_tuning, backend.toolchain.cache) == (False, True, tmp_path / "c")
    assert isinstance(backend.config, ProcessOptions)
    with pytest.raises(ValidationError):
        backend.config.lazy_runner = True


def test_every_backend_option_says_what_it_does() -> None:
    """Each backend's options model describes every field (the help of a flag made from it)."""
    from orchestrator.lanes.backend import BACKENDS

    undescribed = {f"{cls.name}.{name}" for cls in BACKENDS.load_all()
                   for name, field in cls.options_model.model_fields.items() if not field.description}
    assert undescribed == set()
    assert all(cls.options_model.model_config.get("frozen") and cls.options_model.model_config.get("extra") == "forbid"
               for cls in BACKENDS.load_all())
