"""Shared helpers for tests that run real process lanes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from orchestrator.lanes.process.backend import labelled_processes
from orchestrator.procs import pid_alive

REPO = Path(__file__).resolve().parents[2]


def leftovers(run_id: str, state_dir: Path) -> list[str]:
    """Everything a run could leave on the host: live labelled processes, lane folders, build dirs."""
    found = [f"process {pid} ({_cmdline(pid)})" for pid in labelled_processes(run_id)]
    run_dir = state_dir / "runs" / run_id
    for sub in ("lanes", "builds"):
        d = run_dir / sub
        if d.is_dir():
            found += [f"{sub}/{p.name}" for p in d.iterdir()]
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160].strip()
    except OSError:
        return "gone"


def lane_pids(ledger_path: Path) -> list[int]:
    import json

    pids = []
    for line in ledger_path.read_text().splitlines():
        rec = json.loads(line)
        if rec["op"] == "create" and rec["kind"] == "lane" and rec["meta"].get("pid"):
            pids.append(int(rec["meta"]["pid"]))
    return pids


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper does not count)."""
    return pid_alive(pid)


def offline_env() -> dict[str, str]:
    """This process's environment without any model API key or Anthropic base URL: what an offline
    ``orchestrator`` subprocess on the scripted model gets."""
    return {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "ANTHROPIC_BASE_URL"}


def run_and_sweep(args: list[str], run_ids: Sequence[str], *, env: dict[str, str],
                  timeout: float) -> tuple[subprocess.CompletedProcess[str], dict[str, list[int]]]:
    """Run an ``orchestrator`` subprocess that starts its own lanes (an A/B: one run id per arm), then
    kill whatever process still carries one of ``run_ids`` — even when the run failed or timed out —
    and say what was found: ``{run_id: [pid, …]}``, all empty when the run cleaned up after itself."""
    try:
        done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        found = {rid: labelled_processes(rid) for rid in run_ids}
        for pids in found.values():  # never leave a lane behind, even when an assertion failed
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
    return done, found
