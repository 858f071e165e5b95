"""Shared helpers for tests that run real process lanes."""

from __future__ import annotations

from pathlib import Path

from orchestrator.lanes.process import labelled_processes, pid_alive


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
