"""The orchestrator itself interrupted mid-run: SIGINT/SIGTERM (graceful), SIGKILL, and SIGTERM
cut short by a SIGKILL two seconds later (a container runtime's short grace period).

The real ``orchestrator run`` runs as a subprocess on one process lane: three iterations of one
case, which the allocator runs one after the other on a lane (one build per case slug at a time).
The first build goes through; the second is held at the model, so the signal always lands after
one unit finished and while the next is building.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.scripted import scripts as ms

from .helpers import (
    CASES,
    ORCH,
    SMOKE,
    BuildGate,
    ModelDesk,
    assert_nothing_left,
    host_leftovers,
    jsonl,
    model_env,
    unique,
    wait_until,
)

pytestmark = [pytest.mark.n8n, pytest.mark.claude, pytest.mark.slow]
ITERATIONS = 3


class OrchestratorRun:
    def __init__(self, tmp_path: Path, desk: ModelDesk) -> None:
        self.run_id = unique("sig")
        self.state = tmp_path / "state"
        self.out = tmp_path / "out"
        self.log = tmp_path / "orchestrator.log"
        cmd = [*ORCH, "run", str(CASES), "--filter", SMOKE, "--iterations", str(ITERATIONS), "--lanes", "1",
               "--model-server", "real", "--state-dir", str(self.state), "--output-dir", str(self.out),
               "--run-id", self.run_id, "--outage-waits", "0.2,0.2", "--build-timeout-ms", "180000"]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(cmd, env=model_env(desk), stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    @property
    def units_path(self) -> Path:
        return self.state / "runs" / self.run_id / "units.jsonl"

    def wait(self, timeout_s: float) -> int:
        return self.proc.wait(timeout=timeout_s)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def mid_run(model: ModelDesk, tmp_path: Path) -> Iterator[tuple[OrchestratorRun, BuildGate]]:
    """An ``orchestrator run`` that has finished one unit and is building the next."""
    gate = BuildGate(pass_first=1)
    model.use(ms.demo_script(builder=gate))
    run = OrchestratorRun(tmp_path, model)
    try:
        yield run, gate
    finally:
        gate.open()
        run.kill()
        if host_leftovers(run.run_id, run.state):  # a failed test: never leave lanes behind
            subprocess.run([*ORCH, "cleanup", "--run-id", run.run_id, "--state-dir", str(run.state)],
                           capture_output=True, timeout=120)


async def _reach_mid_run(run: OrchestratorRun, gate: BuildGate) -> None:
    await wait_until(lambda: (len(jsonl(run.units_path)) >= 1 and gate.waiting >= 1) or run.proc.poll() is not None,
                     300, "one unit finished and the next one building")
    assert run.proc.poll() is None, run.output()


def _cleanup(run: OrchestratorRun) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ORCH, "cleanup", "--run-id", run.run_id, "--state-dir", str(run.state)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_signal_writes_results_so_far_and_tears_down(mid_run, sig: signal.Signals) -> None:
    run, gate = mid_run
    await _reach_mid_run(run, gate)
    run.proc.send_signal(sig)
    rc = run.wait(120)
    output = run.output()
    assert "Traceback" not in output
    assert f"{sig.name}: stopping" in output
    assert rc == 0, output  # an interrupted run is not a failed one: its results are complete so far

    units = jsonl(run.units_path)
    statuses = sorted(u["build"]["status"] for u in units)
    assert statuses == ["ok", "skipped", "skipped"]  # one built, the one in flight and the queued one stopped
    results = json.loads((run.out / "eval-results.json").read_text())["orchestrator"]
    assert len(results["units"]) == ITERATIONS
    assert results["summary"]["stopped_reason"] == f"interrupted by {sig.name}"
    summary = results["summary"]
    assert (summary["units_total"], summary["units_finished"], summary["units_skipped"]) == (ITERATIONS, 1, 2)
    assert (run.out / "report.html").exists()
    assert_nothing_left(run.run_id, run.state)


async def test_sigkill_leaves_only_what_cleanup_removes(mid_run) -> None:
    run, gate = mid_run
    await _reach_mid_run(run, gate)
    os.kill(run.proc.pid, signal.SIGKILL)
    run.wait(30)
    left = host_leftovers(run.run_id, run.state)
    assert any(item.startswith("process") for item in left)  # the lane and the claude build live on
    assert any(item.startswith("builds/") for item in left)  # the build in flight had its staged dir
    assert [u["build"]["status"] for u in jsonl(run.units_path)] == ["ok"]  # what finished is on disk

    done = _cleanup(run)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert_nothing_left(run.run_id, run.state)


async def test_short_grace_period_still_leaves_nothing_cleanup_misses(mid_run) -> None:
    """SIGTERM, then SIGKILL two seconds later (mid-teardown): `cleanup` finishes the job."""
    run, gate = mid_run
    await _reach_mid_run(run, gate)
    run.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 2.0
    while run.proc.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    run.kill()

    done = _cleanup(run)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert_nothing_left(run.run_id, run.state)
