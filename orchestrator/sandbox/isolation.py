"""How one sandbox command is isolated: a bubblewrap jail, a per-sandbox cgroup and rlimits.

Every command runs as ``bwrap … -- /bin/bash -c <command>`` with:

- ``--cap-drop ALL``: the command runs as uid 0 without any capability, so it cannot remount the
  read-only binds, load modules, ptrace outside or override file permissions;
- ``--unshare-all`` (network, pid, ipc, uts, cgroup namespaces): only a private loopback exists, so
  nothing on the host — the lane's port, any 127.0.0.1 listener, any other address — is reachable;
- a read-only view of only what a toolchain needs (``/usr``, ``/etc``, Node 24, the npm shims, the
  template packages), a fresh ``/proc`` and ``/dev``; the sandbox's ``home`` bound at ``/home/user``
  and its ``tmp`` at ``/tmp`` are the only writable places (nothing of ``/root`` or ``/work`` is visible);
- ``--die-with-parent`` and a new pid namespace: when the outer ``bwrap`` dies, the namespace's init
  dies and the kernel kills every process in it, so SIGKILL to one pid ends the whole tree;
- limits: a cgroup (v1 or v2, nested under the service's own) per sandbox caps memory and the number
  of tasks (every command joins it before ``bwrap`` starts); ``prlimit`` sets ``RLIMIT_CPU`` (CPU
  seconds per process), ``RLIMIT_FSIZE`` (file size) and no core dumps; the wall clock is the
  execution's ``timeout_ms``, enforced by the server (SIGKILL of the tree).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import SandboxError

SANDBOX_HOME = "/home/user"
SANDBOX_WORKSPACE = f"{SANDBOX_HOME}/workspace"
SANDBOX_TMP = "/tmp"
SANDBOX_BIN = "/opt/n8n-sandbox/bin"
READ_ONLY_SYSTEM = ("/usr", "/etc")
#: Merged-/usr symlinks re-created inside the jail (only when they are symlinks on the host).
USR_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")


class IsolationError(SandboxError, RuntimeError):
    """bubblewrap is missing or cannot create namespaces here."""


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 2 * 1024**3
    max_tasks: int = 1024
    cpu_seconds: int = 600
    file_size_bytes: int = 1024**3
    default_timeout_ms: int = 300_000
    max_timeout_ms: int = 1_800_000
    max_output_bytes: int = 16 * 1024**2


@dataclass(frozen=True)
class Mount:
    """``src`` on the host seen at ``dest`` in the sandbox."""

    src: Path
    dest: str
    writable: bool = False


def bwrap_path() -> str:
    """The ``bwrap`` executable. Raises :class:`IsolationError` naming the package when it is missing."""
    found = shutil.which("bwrap")
    if not found:
        raise IsolationError("bubblewrap (bwrap) is not installed: apt-get install -y bubblewrap")
    return found


def system_args() -> list[str]:
    """The bwrap arguments that mount the host's system folders read-only (and its ``/usr`` links)."""
    args: list[str] = []
    for d in READ_ONLY_SYSTEM:
        if os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for link in USR_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    return args


def bwrap_argv(
    *,
    mounts: list[Mount],
    env: dict[str, str],
    workdir: str,
    command: str,
) -> list[str]:
    """The command line that runs ``command`` in a bubblewrap jail: the system read-only, ``mounts``
    bound, everything else read-only, ``env`` only, in ``workdir``."""
    argv = [bwrap_path(), *system_args(), "--dev", "/dev", "--proc", "/proc"]
    for m in mounts:
        argv += ["--bind" if m.writable else "--ro-bind", str(m.src), m.dest]
    argv += ["--remount-ro", "/"]  # bwrap's own root tmpfs: no writable scratch outside the binds
    argv += [
        "--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--hostname", "sandbox",
        "--clearenv",
    ]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    shell = "/bin/bash" if os.path.exists("/usr/bin/bash") or os.path.exists("/bin/bash") else "/bin/sh"
    argv += ["--chdir", workdir, "--", shell, "-c", command]
    return argv


_JOIN_AND_EXEC = 'while [ "$1" != "--" ]; do echo $$ > "$1/cgroup.procs" || exit 125; shift; done; shift; exec "$@"'


def launch_argv(bwrap: list[str], limits: Limits, cgroup_dirs: list[Path]) -> list[str]:
    """``sh`` joins the sandbox's cgroups, then execs ``prlimit`` (util-linux), which execs ``bwrap``.

    One pid all along (the leader of its own session), so SIGKILL to it reaches the jail; no Python
    runs between fork and exec (``preexec_fn`` is unsafe in a process with threads).
    """
    rlimits = [f"--cpu={limits.cpu_seconds}", f"--fsize={limits.file_size_bytes}", "--core=0"]
    return ["/bin/sh", "-c", _JOIN_AND_EXEC, "sandbox-launch", *map(str, cgroup_dirs), "--",
            "prlimit", *rlimits, "--", *bwrap]


def _own_cgroup_v1(controller: str) -> Path | None:
    base = Path("/sys/fs/cgroup") / controller
    if not (base / "cgroup.procs").exists():
        return None
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            if controller in ctrls.split(","):
                return base / path.lstrip("/")
    except OSError:
        return None
    return base


class SandboxCgroup:
    """One cgroup per sandbox: memory and task limits, and a list of every process it ever started.

    cgroup v2 (a unified ``cgroup.controllers``) gets ``memory.max``/``pids.max``; v1 gets one group
    in each of the ``memory`` and ``pids`` hierarchies. When no hierarchy is writable the sandbox
    runs without them (rlimits and the pid namespace still apply) and :attr:`active` says so.
    """

    def __init__(self, name: str, limits: Limits) -> None:
        self.name = name
        self.paths: list[Path] = []
        unified = Path("/sys/fs/cgroup")
        if (unified / "cgroup.controllers").exists():
            own = unified / Path("/proc/self/cgroup").read_text().strip().split("::", 1)[-1].lstrip("/")
            self._try(own / name, {"memory.max": str(limits.memory_bytes), "pids.max": str(limits.max_tasks)})
            return
        for controller, settings in (
            ("memory", {"memory.limit_in_bytes": str(limits.memory_bytes)}),
            ("pids", {"pids.max": str(limits.max_tasks)}),
        ):
            own_path = _own_cgroup_v1(controller)
            if own_path is not None:
                self._try(own_path / name, settings)

    def _try(self, path: Path, settings: dict[str, str]) -> None:
        try:
            path.mkdir(exist_ok=True)
            for key, value in settings.items():
                (path / key).write_text(value)
        except OSError:
            try:
                path.rmdir()
            except OSError:
                pass
            return
        self.paths.append(path)

    @property
    def active(self) -> bool:
        """Whether the sandbox got cgroups (its limits are enforced)."""
        return bool(self.paths)

    def pids(self) -> set[int]:
        """Every process in the sandbox's cgroups now."""
        found: set[int] = set()
        for path in self.paths:
            try:
                found |= {int(p) for p in (path / "cgroup.procs").read_text().split()}
            except OSError:
                continue
        return found

    def kill_all(self, timeout_s: float = 5.0) -> set[int]:
        """SIGKILL every process in the groups until none is left; returns survivors (normally empty)."""
        deadline = time.monotonic() + timeout_s
        while True:
            pids = self.pids()
            if not pids or time.monotonic() > deadline:
                return pids
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def remove(self) -> None:
        """Kill every process in the cgroups, then remove them (retrying briefly while the kernel lets go)."""
        self.kill_all()
        for path in self.paths:
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
        self.paths = [p for p in self.paths if p.exists()]


def remove_stale_cgroups(prefix: str) -> list[str]:
    """Kill and remove cgroups named ``prefix*`` under this process's groups (after a service crash)."""
    removed: list[str] = []
    roots: list[Path] = []
    unified = Path("/sys/fs/cgroup")
    if (unified / "cgroup.controllers").exists():
        roots.append(unified / Path("/proc/self/cgroup").read_text().strip().split("::", 1)[-1].lstrip("/"))
    else:
        roots += [p for p in (_own_cgroup_v1("memory"), _own_cgroup_v1("pids")) if p is not None]
    for root in roots:
        if not root.is_dir():
            continue
        for group in root.iterdir():
            if group.is_dir() and group.name.startswith(prefix):
                cg = SandboxCgroup.__new__(SandboxCgroup)
                cg.name, cg.paths = group.name, [group]
                cg.remove()
                removed.append(str(group))
    return removed
