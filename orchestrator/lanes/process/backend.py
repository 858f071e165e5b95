"""The ``process`` backend, the embedded default: one real n8n process per lane on loopback.

Each lane gets its own user folder (SQLite database), its own ``N8N_PORT`` and its own
``N8N_RUNNERS_BROKER_PORT`` (the task broker's default 5679 collides between lanes: with only the
HTTP port distinct, three of four lanes died). Lanes run in their own session so a Ctrl-C to the
orchestrator reaches us, not them, and we stop them in order. Every lane process carries
``N8N_EVAL_RUN_ID`` in its environment: that is the process backend's *label*, which
``sweep`` uses to find lanes a crashed orchestrator left, even without a ledger.

A lane starts from a copy of a migrated template database (built once per n8n version next to the
n8n install, :func:`~orchestrator.toolchain.ensure_lane_template`), so it skips the ~270
migrations a fresh folder runs. Only the database is copied: each lane's n8n writes its own
``config`` (a fresh encryption key) and its own instance id and signing keys, and bring-up seeds
a fresh owner with the e2e reset as before. ``lane_template=False`` (backend option) starts
from an empty folder; a template that cannot be built is logged and the lane starts fresh.

Node itself is tuned for the start (:meth:`~orchestrator.toolchain.Toolchain.lane_node_env`):
a compile cache shared by every lane of this n8n version (written when a lane exits cleanly, and
by the template build) and a larger young generation; measured in ``bench/lanes_up.py``
(``node_tuning=False`` starts without them). A lane also shares the module-resolution cache of
its n8n install (``resolve_cache.cjs``).

Process lanes run without n8n's editor (``N8N_DISABLE_UI=true``) unless the profile or
``--env N8N_DISABLE_UI=false`` asks for it: n8n rewrites its whole editor bundle (~1,000 files) into
the user folder at every start, ~2.5 CPU-s of a lane's ~8; nothing a build or a verification
does needs it, but a person who wants to watch a lane in a browser does. Such a lane answers 404
on ``/rest/settings`` and ``/rest/module-settings``, so its fingerprint is narrower
(:mod:`orchestrator.lanes.fingerprint`).

A lane's JS task runner (Code nodes) starts with its first Code node, not with n8n: n8n runs in
``external`` runner mode with a per-lane auth token, and :mod:`.launcher`, started beside n8n
in the lane's process group, does n8n's launcher handshake and starts n8n's own runner when the
broker has a task for it. Measured in ``bench/lanes_up.py`` (4 lanes on 2 CPUs, ``headless`` →
``lazy-runner``): CPU per lane until ready 7.1 → 5.8 s, all ready 14.9 → 12.2 s; the first Code
node on a lane then takes ~1 s (the runner starts), later ones ~0.1 s. ``N8N_RUNNERS_MODE=internal``
(profile or ``--env``) or ``lazy_runner=False`` starts it with n8n, as n8n does by default.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from orchestrator import toolchain
from orchestrator.lanes.backend import LaneBackend, LaneError, answers_ready, register_backend
from orchestrator.lanes.labels import LANE_INDEX_ENV, RUN_ENV
from orchestrator.lanes.model import Lane, LaneSpec, LaneState
from orchestrator.lanes.ports import release_ports, reserve_ports
from orchestrator.lanes.process import launcher as task_launcher
from orchestrator.lanes.process.options import ProcessOptions
from orchestrator.ledger import Ledger, run_dir, runs_root
from orchestrator.procs import group_members, pid_alive, terminate_group
from orchestrator.redact import redact, register_secret
from orchestrator.sandbox.lanes import LaneSandboxes, sweep_recorded

log = logging.getLogger(__name__)

RUN_LABEL = RUN_ENV  # an environment marker, not an object label (see lanes.labels)
INDEX_LABEL = LANE_INDEX_ENV
_KEEP_ENV = ("LANG", "LC_ALL", "TZ", "TMPDIR")
STOP_GRACE_S = 10.0


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def labelled_processes(run_id: str | None = None) -> list[int]:
    """PIDs of lane processes (and their children) carrying our run label."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        label = _environ(pid).get(RUN_LABEL)
        if label and (run_id is None or label == run_id):
            pids.append(pid)
    return sorted(pids)


async def _kill_group(pid: int, grace_s: float = STOP_GRACE_S) -> None:
    """The lane's process group (n8n and its task runner) ended: see :func:`orchestrator.procs.terminate_group`."""
    await terminate_group(pid, grace_s)


#: Staggered starts: lane k (k ≥ 1) starts at nice min(k, STAGGER_STEPS) × STAGGER_NICE.
STAGGER_NICE = 4
STAGGER_STEPS = 3


def _set_nice(pgid: int, nice: int) -> None:
    """The CPU priority of a lane's process group. A lane runs in its own session, and with the
    kernel's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) a session's share
    against other sessions is its autogroup's nice, not its processes': both are set."""
    os.setpriority(os.PRIO_PGRP, pgid, nice)
    autogroup = Path(f"/proc/{pgid}/autogroup")
    if autogroup.exists():
        autogroup.write_text(str(nice))


def _set_affinity(pgid: int, cpus: set[int]) -> None:
    """The CPUs every thread of a lane's process group may run on (a thread keeps its own mask, so
    each one is set; threads started later inherit their creator's)."""
    for pid in group_members(pgid):
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                os.sched_setaffinity(int(tid), cpus)
            except OSError:  # gone meanwhile
                pass


@dataclass
class _StartHold:
    """A lane in its staggered start: what was changed for it, to undo once it answers ready."""

    index: int
    pid: int
    niced: bool = False
    pinned: bool = False


@register_backend
class ProcessBackend(LaneBackend):
    name = "process"
    needs_local_n8n = True
    supports_sandbox = True
    co_located = True
    options_model = ProcessOptions

    def __init__(self, run_id: str, ledger: Ledger, state_dir: Path, **options: object) -> None:
        super().__init__(run_id, ledger, state_dir, **options)
        opts = self.config
        assert isinstance(opts, ProcessOptions)
        self.toolchain = toolchain.Toolchain(opts.cache or toolchain.default_cache_dir())
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._ports: dict[str, list[int]] = {}  # lane id → (HTTP port, broker port) reserved for it
        self._http = httpx.AsyncClient(timeout=5.0)
        # options sandbox=True / sandbox_url=...: one Instance AI sandbox per lane (None: as before)
        self._sandboxes = LaneSandboxes.from_options(opts.model_dump(), ledger, self.toolchain, self.sandboxes_dir())
        self.use_template = opts.lane_template
        # node_tuning=False: no shared compile cache, Node's default young generation (bench: the "before")
        self.node_tuning = opts.node_tuning
        # stagger=True (root only: only root can give a lane its priority back): see start_lane
        self.stagger = opts.stagger and os.geteuid() == 0
        self._starting: dict[str, _StartHold] = {}  # lane id → what its staggered start changed, until ready
        # lazy_runner=True: the JS task runner starts with a lane's first Code node (task_launcher)
        self.lazy_runner = opts.lazy_runner

    def lanes_dir(self) -> Path:
        """Where this run's lanes keep their folders (``n8n.log``, user folder)."""
        return run_dir(self.state_dir, self.run_id) / "lanes"

    def sandboxes_dir(self) -> Path:
        """Where this run's lane sandboxes keep their state."""
        return run_dir(self.state_dir, self.run_id) / "sandboxes"

    def _lane_env(self, spec: LaneSpec, index: int, folder: Path, port: int, broker: int) -> dict[str, str]:
        env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
        env.update(spec.env)
        env.setdefault("N8N_DISABLE_UI", "true")  # headless unless the spec asks for the editor (see above)
        tuned = self.toolchain.lane_node_env() if self.node_tuning else {}
        if self._runs_launcher(env):
            token = secrets.token_urlsafe(24)
            register_secret(token)
            env.update({
                "N8N_RUNNERS_MODE": "external",
                "N8N_RUNNERS_AUTH_TOKEN": token,
                task_launcher.NODE_ENV: str(self.toolchain.node_bin),
                task_launcher.START_ENV: str(self.toolchain.task_runner_start),
                task_launcher.NODE_OPTIONS_ENV: tuned.get("NODE_OPTIONS", ""),
                task_launcher.LABELS_ENV: f"{RUN_LABEL},{INDEX_LABEL}",
            })
        if tuned:
            if env.get("NODE_OPTIONS"):  # the profile's own Node options come after ours: they win
                tuned["NODE_OPTIONS"] += f" {env['NODE_OPTIONS']}"
            env.update(tuned)
        env.update(spec.secret_env)
        env.update(
            PATH=self.toolchain.node_path_env(),
            HOME=str(folder),
            N8N_USER_FOLDER=str(folder),
            N8N_PORT=str(port),
            N8N_LISTEN_ADDRESS="127.0.0.1",
            N8N_HOST="127.0.0.1",
            N8N_RUNNERS_BROKER_PORT=str(broker),
            N8N_RUNNERS_BROKER_LISTEN_ADDRESS="127.0.0.1",
            **{RUN_LABEL: self.run_id, INDEX_LABEL: str(index)},
        )
        return env

    def _runs_launcher(self, env: dict[str, str]) -> bool:
        """Whether this lane's JS task runner starts on demand (see :mod:`.launcher`): the
        default, unless the profile or ``--env`` chose a runner mode (``N8N_RUNNERS_MODE=internal``
        starts it with n8n, as n8n does by default), or this n8n has no runner where we look."""
        if not self.lazy_runner or "N8N_RUNNERS_MODE" in env:
            return False
        if not self.toolchain.task_runner_start.is_file():
            log.warning("no %s: task runners start with n8n", self.toolchain.task_runner_start)
            return False
        return True

    def _command(self, env: dict[str, str]) -> list[str]:
        """n8n's start, and beside it in the lane's process group (when runners start on demand) the
        task launcher: ``sh`` starts it, then becomes n8n (``exec``), the launcher's parent."""
        n8n = [str(self.toolchain.node_bin), str(self.toolchain.n8n_entry), "start"]
        if task_launcher.NODE_ENV not in env:  # set by _lane_env only when the launcher runs
            return n8n
        launcher = f"{shlex.quote(sys.executable)} -I {shlex.quote(str(Path(task_launcher.__file__)))}"
        return ["/bin/sh", "-c", f'{task_launcher.LANE_PID_ENV}=$$ {launcher} & exec "$@"', "sh", *n8n]

    async def start_lane(self, index: int, spec: LaneSpec) -> Lane:
        """Start lane ``index`` as an n8n process group on loopback, in its own folder, with a sandbox when
        asked; recorded in the ledger. Raises :class:`LaneError` when n8n is not installed or the sandbox
        cannot start."""
        if not self.toolchain.n8n_ready():
            raise LaneError(
                f"n8n {self.toolchain.n8n_version} is not installed in {self.toolchain.cache}: "
                "run `orchestrator lanes install`"
            )
        port, broker = reserve_ports(2)
        lane_id = f"p{index}-{port}"
        self._ports[lane_id] = [port, broker]
        folder = self.lanes_dir() / lane_id
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True, mode=0o700)
        log_path = folder / "n8n.log"
        if self.use_template:
            await self._copy_template(spec, folder)
        lane = Lane(
            lane_id=lane_id,
            index=index,
            base_url=f"http://127.0.0.1:{port}",
            backend=self.name,
            run_id=self.run_id,
            state=LaneState.starting,
        )
        env = self._lane_env(spec, index, folder, port, broker)
        if self._sandboxes is not None:
            try:
                env.update(await self._sandboxes.start(lane_id, {RUN_LABEL: self.run_id, INDEX_LABEL: str(index)}))
            except RuntimeError as exc:
                release_ports(self._ports.pop(lane_id))
                raise LaneError(f"lane {lane_id}: sandbox service: {exc}") from exc
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                self._command(env),
                cwd=folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        lane.handle = str(proc.pid)
        self._procs[lane_id] = proc
        self._stagger_start(lane_id, index, proc.pid)
        self.ledger.created(
            "lane", lane_id, lane=lane_id, backend=self.name, index=index, pid=proc.pid, port=port,
            broker_port=broker, folder=str(folder), base_url=lane.base_url,
        )
        return lane

    async def _copy_template(self, spec: LaneSpec, folder: Path) -> None:
        """Put the migrated template database into the lane's user folder (and nothing else)."""
        try:
            template = await asyncio.to_thread(toolchain.ensure_lane_template, self.toolchain, dict(spec.env), log.info)
            data = folder / ".n8n"
            data.mkdir(mode=0o700)
            await asyncio.to_thread(shutil.copyfile, template, data / "database.sqlite")
        except (toolchain.InstallError, OSError, subprocess.SubprocessError) as exc:
            log.warning("lane template not used, the lane migrates its own database: %s", redact(str(exc)))
            shutil.rmtree(folder / ".n8n", ignore_errors=True)

    def _stagger_start(self, lane_id: str, index: int, pid: int) -> None:
        """Start lanes after the first at a lower CPU priority (nice 4, 8, 12): a lane's start is
        CPU-bound, so on a small machine equal shares bring every lane up at about the same late
        moment, while staggered shares bring the first one up early (the first build starts then;
        there is no barrier) and the rest at about the same moment as before. A lane gets its
        priority back (its whole process group, the task runner too) once it answers ready.

        While more lanes start than there are CPUs, each starting lane is also held to one CPU
        (lane k to the k-th CPU, round robin) until it is ready: lanes sharing a CPU then take turns
        by priority there instead of all of them moving across every CPU. Measured with 4 lanes on
        2 CPUs (an A/B of 5 pools each): all ready after 10.8–12.3 s instead of 11.4–15.0 s, ~7 %
        less CPU; the first lane ~0.6 s later."""
        if not self.stagger:
            return
        hold = self._starting[lane_id] = _StartHold(index, pid)
        self._pin_starting()
        if index == 0:
            return
        try:
            _set_nice(pid, min(index, STAGGER_STEPS) * STAGGER_NICE)
            hold.niced = True
        except OSError as exc:
            log.debug("lane %s: no staggered start: %s", lane_id, exc)

    def _pin_starting(self) -> None:
        cpus = sorted(os.sched_getaffinity(0))
        if len(self._starting) <= len(cpus):
            return  # a CPU for each
        for hold in self._starting.values():
            if not hold.pinned:
                _set_affinity(hold.pid, {cpus[hold.index % len(cpus)]})
                hold.pinned = True

    def _started(self, lane_id: str) -> None:
        """The lane answers ready: its priority and all CPUs back."""
        hold = self._starting.pop(lane_id)
        if hold.pinned:
            _set_affinity(hold.pid, os.sched_getaffinity(0))
        if hold.niced:
            try:
                _set_nice(hold.pid, 0)
            except OSError as exc:
                log.warning("lane %s keeps its lower start priority: %s", lane_id, exc)

    def _pid(self, lane: Lane) -> int:
        return int(lane.handle)

    async def health(self, lane: Lane) -> bool:
        proc = self._procs.get(lane.lane_id)
        if proc is not None and proc.poll() is not None:
            return False
        if proc is None and not pid_alive(self._pid(lane)):
            return False
        ready = await answers_ready(self._http, lane.base_url)
        if ready and lane.lane_id in self._starting:
            self._started(lane.lane_id)
        return ready

    async def is_gone(self, lane: Lane) -> bool:
        proc = self._procs.get(lane.lane_id)
        if proc is not None:
            return proc.poll() is not None
        return not pid_alive(self._pid(lane))

    async def logs(self, lane: Lane, lines: int = 40) -> str:
        path = self.lanes_dir() / lane.lane_id / "n8n.log"
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return ""
        return redact("\n".join(text.splitlines()[-lines:]))

    async def teardown(self, lane: Lane) -> None:
        """Kill the lane's process group and stop its sandbox, keep a redacted copy of its log, remove its
        folder and mark it deleted in the ledger. Raises :class:`LaneError` naming the processes that
        survived SIGKILL, or the folder that could not be removed."""
        pid = self._pid(lane)
        self._starting.pop(lane.lane_id, None)  # a lane that never got ready starts no one's count
        await _kill_group(pid)
        proc = self._procs.pop(lane.lane_id, None)
        if proc is not None:
            proc.poll()
        survivors = group_members(pid) or ([pid] if pid_alive(pid) else [])
        # the lane's sandbox, if it had one (also one recorded by a crashed run): no-op otherwise
        await (self._sandboxes or LaneSandboxes(self.ledger, self.toolchain, self.sandboxes_dir())).stop(lane.lane_id)
        if survivors:
            raise LaneError(f"{lane.describe()}: process(es) {', '.join(map(str, survivors))} survived SIGKILL")
        folder = self.lanes_dir() / lane.lane_id
        self._keep_log(folder, lane.lane_id)
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            raise LaneError(f"{lane.describe()}: could not remove {folder}")
        release_ports(self._ports.pop(lane.lane_id, [int(lane.base_url.rsplit(":", 1)[1])]))
        lane.state = LaneState.stopped
        self.ledger.deleted("lane", lane.lane_id, lane=lane.lane_id)

    def _keep_log(self, folder: Path, lane_id: str) -> None:
        """Keep a redacted copy of the lane's log beside the ledger; the user folder itself goes."""
        log = folder / "n8n.log"
        if not log.exists():
            return
        dest = run_dir(self.state_dir, self.run_id) / "logs"
        dest.mkdir(parents=True, exist_ok=True)
        (dest / f"{lane_id}.log").write_text(redact(log.read_text(errors="replace")))

    async def sweep(self, run_id: str | None = None) -> list[str]:
        """Kill the processes labelled with ``run_id`` (every run's when None) and remove the sandboxes and
        lane folders such runs left; returns what went."""
        removed: list[str] = []
        for pid in labelled_processes(run_id):
            if pid_alive(pid):
                await _kill_group(pid, grace_s=3.0)
                removed.append(f"process {pid}")
        root = runs_root(self.state_dir)
        folders = [run_dir(self.state_dir, run_id)] if run_id else (list(root.iterdir()) if root.is_dir() else [])
        removed += await sweep_recorded(folders)  # sandboxes a crashed run left (its cgroups too)
        for run_folder in folders:
            for sub in ("lanes", "sandboxes"):
                if (run_folder / sub).is_dir():
                    for folder in (run_folder / sub).iterdir():
                        if folder.is_dir():
                            shutil.rmtree(folder, ignore_errors=True)
                        else:
                            folder.unlink(missing_ok=True)
                        removed.append(f"folder {folder}")
        return removed

    async def close(self) -> None:
        await self._http.aclose()
