"""The run ledger: every resource a run creates is appended here *before* anything else happens.

``.orchestrator/runs/<run-id>/ledger.jsonl`` holds one JSON object a line:

- ``{"op": "create", "kind": "lane", "id": "...", "lane": "...", "meta": {...}}``
- ``{"op": "delete", "kind": "lane", "id": "..."}``
- ``{"op": "delete_failed", "kind": "user", "id": "...", "error": "..."}``

A resource is *open* while it has a ``create`` and no ``delete``. A failed delete stays open, so a
later ``orchestrator cleanup`` finds it. Lines are flushed and fsynced as they are written: a
SIGKILL loses at most the line being written, never one already returned.

Open entries are kept in an in-memory index fed from the file itself: each query parses only the
bytes appended since the last one (by this process or another), so a health probe or a teardown
never re-reads the whole ledger, and a ``cleanup`` beside a live run still sees what it appended.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from orchestrator.redact import redact_obj


def _kind(kind: object) -> str:
    """A resource kind as stored: the enum's value (``ResourceKind.workflow`` → ``workflow``) or the string."""
    return str(getattr(kind, "value", kind))


def default_state_dir() -> Path:
    """Where runs keep their state: ``$ORCHESTRATOR_STATE_DIR``, else ``./.orchestrator``."""
    return Path(os.environ.get("ORCHESTRATOR_STATE_DIR", ".orchestrator"))


@dataclass
class Entry:
    kind: str
    id: str
    lane: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    last_error: str = ""
    created_at: float = 0.0

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.lane, self.id)


def runs_root(state_dir: Path) -> Path:
    """The folder of every run's folder under ``state_dir``."""
    return state_dir / "runs"


def run_dir(state_dir: Path, run_id: str) -> Path:
    """Where a run's ledger, lock, ``run.json`` and unit logs live: ``<state dir>/runs/<run id>``."""
    return runs_root(state_dir) / run_id


class Ledger:
    """Append-only record of what one run created and deleted."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / "ledger.jsonl"
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str, str], Entry] = {}
        self._offset = 0  # bytes of the file already folded into ``_open``

    @classmethod
    def for_run(cls, run_id: str, state_dir: Path | None = None) -> Ledger:
        """The ledger of ``run_id`` under ``state_dir`` (its folder created if need be)."""
        folder = run_dir(state_dir or default_state_dir(), run_id)
        folder.mkdir(parents=True, exist_ok=True)
        return cls(folder)

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    def _append(self, record: dict[str, Any]) -> None:
        record["ts"] = round(time.time(), 3)
        line = json.dumps(redact_obj(record), sort_keys=True) + "\n"
        with self._lock:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())

    def created(self, kind: str, id: str, *, lane: str = "", **meta: Any) -> None:
        """Record that ``kind`` ``id`` was created (before it is used, so a crash cannot lose it)."""
        self._append({"op": "create", "kind": _kind(kind), "id": id, "lane": lane, "meta": meta})

    def deleted(self, kind: str, id: str, *, lane: str = "") -> None:
        """Record that ``kind`` ``id`` is gone: it is no longer open."""
        self._append({"op": "delete", "kind": _kind(kind), "id": id, "lane": lane})

    def delete_failed(self, kind: str, id: str, error: str, *, lane: str = "") -> None:
        """Record a failed delete of ``kind`` ``id`` and why; it stays open for ``orchestrator cleanup``."""
        self._append({"op": "delete_failed", "kind": _kind(kind), "id": id, "lane": lane, "error": error})

    def records(self) -> Iterator[dict[str, Any]]:
        """Every record of the ledger in order; a line torn by a crash mid-write is skipped."""
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line torn by a SIGKILL mid-write

    def _apply(self, rec: dict[str, Any]) -> None:
        key = (rec.get("kind", ""), rec.get("lane", ""), rec.get("id", ""))
        op = rec.get("op")
        if op == "create":
            self._open[key] = Entry(kind=key[0], id=key[2], lane=key[1], meta=rec.get("meta") or {},
                                    created_at=rec.get("ts", 0.0))
        elif op == "delete":
            self._open.pop(key, None)
        elif op == "delete_failed" and key in self._open:
            self._open[key].last_error = rec.get("error", "")

    def _catch_up(self) -> None:
        """Fold the complete lines appended since the last call into the index."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                tail = fh.read()
        except FileNotFoundError:
            return
        end = tail.rfind(b"\n") + 1  # a torn last line (a SIGKILL mid-write) waits for its newline
        for raw in tail[:end].splitlines():
            line = raw.strip()
            if not line:
                continue
            try:
                self._apply(json.loads(line))
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
                continue  # a line torn by a SIGKILL mid-write
        self._offset += end

    def open_entries(self, kind: str | None = None) -> list[Entry]:
        """Resources created and not (successfully) deleted, in creation order."""
        with self._lock:
            self._catch_up()
            return [e for e in self._open.values() if kind is None or e.kind == _kind(kind)]


LOCK_FILE = "run.lock"


class RunLock:
    """Held (an exclusive ``flock`` on ``runs/<id>/run.lock``) for as long as a run's process lives:
    the kernel releases it when that process dies, however it dies. ``cleanup`` leaves a run whose
    lock is held alone — it is live work."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_FILE
        self._fh: IO[str] | None = None

    def acquire(self) -> bool:
        """Take the lock; False when another process holds it (the run is live elsewhere)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = self.path.open("a")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            return False
        self._fh = fh
        return True

    def release(self) -> None:
        """Release the run lock (a no-op when not held): the run no longer counts as live."""
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def run_is_live(run_dir: Path) -> bool:
    """True while some process holds the run's lock (that run is still going)."""
    if not (run_dir / LOCK_FILE).exists():
        return False
    probe = RunLock(run_dir)
    if probe.acquire():
        probe.release()
        return False
    return True


def all_runs(state_dir: Path | None = None) -> list[Ledger]:
    """The ledger of every run under ``state_dir`` that has one, by run id."""
    root = runs_root(state_dir or default_state_dir())
    if not root.is_dir():
        return []
    return [Ledger(p) for p in sorted(root.iterdir()) if (p / "ledger.jsonl").exists()]
