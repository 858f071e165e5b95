"""What the lane pod's ``sandbox`` container needs for bubblewrap, measured here.

The sandbox service's own bwrap command line (:func:`orchestrator.sandbox.isolation.bwrap_argv`) is
run the way the container runs it — a non-root uid, ``no_new_privs`` (``allowPrivilegeEscalation:
false``), no capability at all (``capabilities: drop: [ALL]``) — and works: unprivileged user
namespaces are all bwrap needs from the kernel. Run again under a /proc masked the way container
runtimes mask it (files bound over ``/proc/keys``, ``/proc/sys`` read-only), the same command fails
to mount the jail's /proc: hence ``procMount: Unmasked`` (docs/cluster.md).

Not measurable here: the container runtime's default seccomp profile (it denies namespace-creating
``unshare``/``clone`` without CAP_SYS_ADMIN) and AppArmor — they need a real node.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.tools import need

from orchestrator.sandbox.isolation import SANDBOX_HOME, SANDBOX_TMP, Mount, bwrap_argv

NOBODY = 65534
#: The container's securityContext as a process: non-root uid/gid, no_new_privs, no capability.
AS_CONTAINER = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--no-new-privs",
                "--inh-caps=-all", "--bounding-set=-all"]
#: What runc/containerd do to a non-privileged container's /proc (a subset of their masked/read-only paths).
MASK_PROC = "mount --bind /dev/null /proc/keys && mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys"
JAIL_SCRIPT = ("id -u; echo written > $HOME/probe; cat $HOME/probe; grep -E '^(NoNewPrivs|CapEff)' /proc/self/status; "
               "ls /proc | grep -cE '^[0-9]+$'")


@pytest.fixture
def sandbox_dirs() -> Iterator[tuple[Path, Path]]:
    need(os.geteuid() == 0 and all(shutil.which(t) for t in ("setpriv", "unshare", "bwrap")),
         "needs root (to become a non-root uid and mask /proc), setpriv, unshare and bwrap")
    root = Path(tempfile.mkdtemp(prefix="sandbox-privs-", dir="/tmp"))
    os.chmod(root, 0o755)
    home, tmp = root / "home", root / "tmp"
    for d in (home, tmp):
        d.mkdir()
        os.chown(d, NOBODY, NOBODY)
    try:
        yield home, tmp
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _argv(home: Path, tmp: Path) -> list[str]:
    return bwrap_argv(mounts=[Mount(home, SANDBOX_HOME, writable=True), Mount(tmp, SANDBOX_TMP, writable=True)],
                      env={"HOME": SANDBOX_HOME, "PATH": "/usr/bin:/bin"}, workdir=SANDBOX_HOME, command=JAIL_SCRIPT)


def test_the_sandbox_services_bwrap_runs_as_a_non_root_uid_without_capabilities(sandbox_dirs) -> None:
    home, tmp = sandbox_dirs
    done = subprocess.run([*AS_CONTAINER, *_argv(home, tmp)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert lines[0] == str(NOBODY)  # the jail runs as the container's uid (no setuid bwrap involved)
    assert "written" in lines
    assert re.search(r"^NoNewPrivs:\s+1$", done.stdout, re.M)
    assert re.search(r"^CapEff:\s+0{16}$", done.stdout, re.M)
    assert int(lines[-1]) <= 5  # a fresh pid namespace: its /proc shows only the jail (init, bash, ls, grep)
    assert (home / "probe").read_text() == "written\n"


def test_a_runtime_masked_proc_stops_bwrap_hence_proc_mount_unmasked(sandbox_dirs) -> None:
    home, tmp = sandbox_dirs
    inner = shlex.join([*AS_CONTAINER, *_argv(home, tmp)])
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", f"{MASK_PROC} && exec {inner}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "Can't mount proc" in done.stderr and "Operation not permitted" in done.stderr
    assert not (home / "probe").exists()
