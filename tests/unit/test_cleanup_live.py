"""``orchestrator cleanup`` never touches live work: a run whose process still holds its run lock is
left alone, a crashed run beside it is cleaned, and a run of another state dir is not even looked at."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from orchestrator.cleanup import cleanup
from orchestrator.ledger import Ledger, RunLock
from orchestrator.procs import pid_alive


def _labelled_sleeper(run_id: str) -> subprocess.Popen[bytes]:
    """A stand-in lane process: its own session, the run's environment marker (what the sweep reads)."""
    env = dict(os.environ, N8N_EVAL_RUN_ID=run_id)
    return subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait(300)"], env=env, start_new_session=True)


def _record_lane(state: Path, run_id: str, proc: subprocess.Popen[bytes]) -> None:
    Ledger.for_run(run_id, state).created("lane", f"p0-{proc.pid}", lane=f"p0-{proc.pid}", backend="process",
                                          index=0, pid=proc.pid, base_url="http://127.0.0.1:9")


async def test_cleanup_leaves_a_live_run_alone_and_cleans_a_dead_one(tmp_path: Path) -> None:
    state, elsewhere = tmp_path / "state", tmp_path / "other-state"
    live_proc, dead_proc, other_proc = (_labelled_sleeper(r) for r in ("run-live", "run-dead", "run-other"))
    try:
        _record_lane(state, "run-live", live_proc)
        _record_lane(state, "run-dead", dead_proc)
        _record_lane(elsewhere, "run-other", other_proc)
        lock = RunLock(state / "runs" / "run-live")
        assert lock.acquire()  # this process is "running" run-live
        try:
            report = await cleanup(state)
        finally:
            lock.release()
        assert any("run-live" in s for s in report.skipped)
        assert pid_alive(live_proc.pid) and pid_alive(other_proc.pid)  # live work, and another state dir's
        dead_proc.wait(timeout=10)
        assert [e.id for e in Ledger.for_run("run-dead", state).open_entries()] == []
        assert [e.kind for e in Ledger.for_run("run-live", state).open_entries()] == ["lane"]

        report = await cleanup(state)  # run-live has ended (lock released): now it goes too
        live_proc.wait(timeout=10)
        assert pid_alive(other_proc.pid)
    finally:
        for proc in (live_proc, dead_proc, other_proc):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
