"""The n8n-sandbox's file operations (the ``/files``, ``/mkdir`` and ``/stat`` routes of
:mod:`orchestrator.sandbox.server`), on sandbox paths the server has already resolved to host paths
inside the sandbox's folder. Each refusal is an :class:`HttpError` with the status the route answers."""

from __future__ import annotations

import datetime as dt
import os
import posixpath
import shutil
import stat as stat_mod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import SandboxError
from orchestrator.sandbox.isolation import SANDBOX_HOME, SANDBOX_TMP


class HttpError(SandboxError):
    """A refused request: the route answers ``status`` with ``{"error": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Resolved:
    """A sandbox path and the host path it maps to; ``read_only``: inside the shared npm template."""

    host: Path
    sandbox_path: str
    read_only: bool


def _entry(path: Path, name: str) -> dict[str, Any]:
    st = path.lstat()  # a symlink is reported as itself: its target may be a host path
    is_dir = stat_mod.S_ISDIR(st.st_mode)
    return {
        "name": name, "size": 0 if is_dir else st.st_size, "is_dir": is_dir,
        "type": "directory" if is_dir else "file", "mod_time": _iso(st.st_mtime),
    }


def list_files(target: Path, recursive: bool, extension: str | None) -> list[dict[str, Any]]:
    """The entries of directory ``target`` (all below it with ``recursive``), optionally only those
    ending in ``extension``. Raises :class:`HttpError` 404 when it is missing, 400 when not a folder."""
    if not target.exists():
        raise HttpError(404, "path not found")
    if not target.is_dir():
        raise HttpError(400, "path is not a directory")
    ext = extension if not extension or extension.startswith(".") else f".{extension}"
    out: list[dict[str, Any]] = []
    if recursive:
        for dirpath, dirnames, filenames in os.walk(target):
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                full = Path(dirpath) / name
                rel = str(full.relative_to(target))
                if ext and (full.is_dir() or not name.endswith(ext)):
                    continue
                try:
                    out.append(_entry(full, rel))
                except OSError:
                    continue
    else:
        for child in sorted(target.iterdir(), key=lambda p: p.name):
            if ext and (child.is_dir() or not child.name.endswith(ext)):
                continue
            try:
                out.append(_entry(child, child.name))
            except OSError:
                continue
    return out


def _require_writable(r: Resolved) -> None:
    if r.read_only:
        raise HttpError(403, f"{r.sandbox_path} is read-only (shared npm template)")


def write_file(r: Resolved, data: bytes, overwrite: bool, append: bool) -> None:
    """Write (or ``append``) ``data`` to the file, its parents created. Raises :class:`HttpError`: 403
    for a read-only path, 400 for a folder, 409 for an existing file without ``overwrite``/``append``."""
    _require_writable(r)
    if r.host.is_dir():
        raise HttpError(400, "path is a directory")
    if r.host.exists() and not overwrite and not append:
        raise HttpError(409, "file already exists")
    r.host.parent.mkdir(parents=True, exist_ok=True)
    with r.host.open("ab" if append else "wb") as fh:
        fh.write(data)


def delete_path(r: Resolved, recursive: bool, force: bool) -> None:
    """Delete the file or (with ``recursive``) folder; ``force`` ignores a missing one. Raises
    :class:`HttpError` for a read-only path, a missing one, the sandbox root or a non-empty folder."""
    _require_writable(r)
    if not r.host.exists() and not r.host.is_symlink():
        if force:
            return
        raise HttpError(404, "path not found")
    if r.sandbox_path in (SANDBOX_HOME, SANDBOX_TMP):
        raise HttpError(400, "refusing to delete the sandbox root")
    if r.host.is_dir() and not r.host.is_symlink():
        if recursive:
            shutil.rmtree(r.host)
        else:
            try:
                r.host.rmdir()
            except OSError as exc:
                raise HttpError(409, "directory is not empty (use recursive)") from exc
    else:
        r.host.unlink()


def copy_path(src: Resolved, dest: Resolved, recursive: bool, overwrite: bool) -> None:
    """Copy ``src`` to ``dest`` (a folder only with ``recursive``). Raises :class:`HttpError` for a
    read-only ``dest``, a missing ``src`` or an existing ``dest`` without ``overwrite``."""
    _require_writable(dest)
    if not src.host.exists():
        raise HttpError(404, "source not found")
    if dest.host.exists() and not overwrite:
        raise HttpError(409, "destination already exists")
    dest.host.parent.mkdir(parents=True, exist_ok=True)
    if src.host.is_dir():
        if not recursive:
            raise HttpError(400, "source is a directory (use recursive)")
        shutil.copytree(src.host, dest.host, symlinks=True, dirs_exist_ok=overwrite)
    else:
        shutil.copy2(src.host, dest.host, follow_symlinks=False)


def move_path(src: Resolved, dest: Resolved, overwrite: bool) -> None:
    """Move ``src`` to ``dest`` (replacing it with ``overwrite``). Raises :class:`HttpError` for a
    read-only side, a missing ``src`` or an existing ``dest`` without ``overwrite``."""
    _require_writable(src)
    _require_writable(dest)
    if not src.host.exists() and not src.host.is_symlink():
        raise HttpError(404, "source not found")
    if dest.host.exists() and not overwrite:
        raise HttpError(409, "destination already exists")
    dest.host.parent.mkdir(parents=True, exist_ok=True)
    if dest.host.is_dir() and overwrite and not dest.host.is_symlink():
        shutil.rmtree(dest.host)
    os.replace(src.host, dest.host)


def make_dir(r: Resolved, recursive: bool) -> None:
    """Create the folder (with its parents when ``recursive``, which also accepts an existing one).
    Raises :class:`HttpError` 409 when the path exists, 404 for a missing parent."""
    _require_writable(r)
    if r.host.exists():
        if recursive and r.host.is_dir():
            return
        raise HttpError(409, "path already exists")
    try:
        r.host.mkdir(parents=recursive)
    except FileNotFoundError as exc:
        raise HttpError(404, "parent directory not found (use recursive)") from exc


def stat_path(r: Resolved) -> dict[str, Any]:
    """Name, sandbox path, type, size and times of the path. Raises :class:`HttpError` 404 if missing."""
    if not r.host.exists():
        raise HttpError(404, "path not found")
    st = r.host.stat()
    is_dir = stat_mod.S_ISDIR(st.st_mode)
    return {
        "name": posixpath.basename(r.sandbox_path) or "/", "path": r.sandbox_path,
        "type": "directory" if is_dir else "file", "size": 0 if is_dir else st.st_size,
        "created_at": _iso(st.st_ctime), "modified_at": _iso(st.st_mtime),
    }


# ---- HTTP ------------------------------------------------------------------------------------
