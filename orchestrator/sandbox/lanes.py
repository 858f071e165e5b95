"""One sandbox per lane for a lane backend: start it with the lane, stop it at teardown.

A backend holds a :class:`LaneSandboxes` when its options ask for one:

- ``sandbox=True``: an embedded service per lane (a :class:`SandboxService` child process), recorded
  in the ledger as kind ``sandbox`` (id = lane id, meta: pid, url, root, cgroup prefix) before the lane
  starts, and stopped — every jail killed, every workspace removed — at the lane's teardown;
- ``sandbox_url=<url>``: an external n8n-sandbox (or compatible) service; only the lane env points at
  it, its key comes from ``sandbox_api_key`` or the orchestrator's ``N8N_SANDBOX_SERVICE_API_KEY``.

Without either option :func:`LaneSandboxes.from_options` returns None and the lane is as before.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from orchestrator.ledger import Ledger
from orchestrator.procs import group_members, terminate_group
from orchestrator.redact import redact, register_secret
from orchestrator.sandbox.isolation import remove_stale_cgroups
from orchestrator.sandbox.service import KEY_ENV, SandboxService, lane_env
from orchestrator.toolchain import Toolchain

KIND = "sandbox"


class LaneSandboxes:
    def __init__(self, ledger: Ledger, toolchain: Toolchain, folder: Path, *, external_url: str | None = None,
                 external_key: str | None = None) -> None:
        self.ledger = ledger
        self.toolchain = toolchain
        self.folder = folder
        self.external_url = external_url
        self.external_key = external_key
        self.services: dict[str, SandboxService] = {}

    @classmethod
    def from_options(cls, options: Mapping[str, object], ledger: Ledger, toolchain: Toolchain,
                     folder: Path) -> LaneSandboxes | None:
        """The lanes' sandboxes a backend's options ask for: an external service (``sandbox_url``, its key
        from the options or the environment), one of our own (``sandbox``), or None."""
        url = options.get("sandbox_url")
        if url:
            key = str(options.get("sandbox_api_key") or os.environ.get(KEY_ENV) or "") or None
            register_secret(key)
            return cls(ledger, toolchain, folder, external_url=str(url), external_key=key)
        if options.get("sandbox"):
            return cls(ledger, toolchain, folder)
        return None

    async def start(self, lane_id: str, label_env: dict[str, str]) -> dict[str, str]:
        """Start the lane's sandbox (embedded mode) and return the env the lane's n8n needs."""
        if self.external_url:
            return lane_env(self.external_url, self.external_key)
        svc = SandboxService(self.folder / lane_id, self.toolchain, label_env=label_env)
        self.services[lane_id] = svc
        try:
            url = await svc.start()
        except BaseException:
            self.services.pop(lane_id, None)
            await svc.stop()
            raise
        self.ledger.created(
            KIND, lane_id, lane=lane_id, pid=svc.pid, url=url, root=str(svc.root), cgroup_prefix=svc.cgroup_prefix,
        )
        return svc.env()

    def alive(self, lane_id: str) -> bool:
        """Whether the lane's embedded sandbox service still runs (True for an external one)."""
        if self.external_url:
            return True
        svc = self.services.get(lane_id)
        return svc is not None and svc.alive()

    async def stop(self, lane_id: str) -> None:
        """Stop the lane's sandbox; one this backend did not start is stopped from its ledger entry."""
        if self.external_url:
            return
        svc = self.services.pop(lane_id, None)
        if svc is not None:
            await svc.stop()
            self._keep_log(svc.log_path, lane_id)
            self.ledger.deleted(KIND, lane_id, lane=lane_id)
            return
        for entry in self.ledger.open_entries(KIND):
            if entry.id == lane_id:
                await stop_recorded(entry.meta)
                self.ledger.deleted(KIND, lane_id, lane=lane_id)

    def _keep_log(self, log: Path, lane_id: str) -> None:
        """Keep a redacted copy of the service's log beside the lane logs; the folder itself goes."""
        if log.exists():
            dest = self.ledger.run_dir / "logs"
            dest.mkdir(parents=True, exist_ok=True)
            (dest / f"{lane_id}-sandbox.log").write_text(redact(log.read_text(errors="replace")))
            log.unlink(missing_ok=True)

    def sweep_folders(self) -> list[str]:
        """Remove every sandbox folder left under this run's folder; returns what went."""
        removed = []
        if self.folder.is_dir():
            for child in self.folder.iterdir():
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
                removed.append(f"sandbox {child}")
        return removed


async def sweep_recorded(run_dirs: list[Path]) -> list[str]:
    """Stop every sandbox the ledgers of ``run_dirs`` still hold open (service, jails, cgroups, folders)."""
    removed = []
    for run_dir in run_dirs:
        if not (run_dir / "ledger.jsonl").exists():
            continue
        ledger = Ledger(run_dir)
        for entry in ledger.open_entries(KIND):
            await stop_recorded(entry.meta)
            ledger.deleted(KIND, entry.id, lane=entry.lane)
            removed.append(f"sandbox {entry.id}")
    return removed


async def stop_recorded(meta: Mapping[str, object]) -> None:
    """Stop a sandbox service known only from its ledger entry (after an orchestrator crash)."""
    pid = int(str(meta.get("pid") or 0))
    if pid and group_members(pid):
        await terminate_group(pid, grace_s=5.0)
    prefix = str(meta.get("cgroup_prefix") or "")
    if prefix:
        await asyncio.to_thread(remove_stale_cgroups, prefix)
    root = meta.get("root")
    if root:
        await asyncio.to_thread(shutil.rmtree, str(root), True)
