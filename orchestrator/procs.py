"""Process groups on this host, read from /proc: who is alive, and one way to end a group.

Lanes, claude builds and sandbox services each start in their own session, so a process group id
is the leader's pid and the whole tree (n8n and its task runner, claude and its MCP children, a
sandbox service and its jails) can be signalled together — even once the leader itself has died.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def process_group(pid: int) -> int | None:
    """The process group of ``pid`` as /proc tells it (None once it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[2])


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of group ``pgid``."""
    return sorted(int(e.name) for e in Path("/proc").iterdir()
                  if e.name.isdigit() and process_group(int(e.name)) == pgid)


async def terminate_group(pid: int, grace_s: float, *, settle_s: float = 5.0) -> None:
    """SIGTERM the group led by ``pid`` (continued first if stopped), SIGKILL what is left after
    ``grace_s``, and return once none of it runs (or ``settle_s`` more has passed)."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        pgid = pid  # leader gone: its group may live on
    if not group_members(pgid) and not pid_alive(pid):
        return
    for sig in (signal.SIGTERM, signal.SIGCONT):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return
        await asyncio.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + settle_s
    while group_members(pgid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
