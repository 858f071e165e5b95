"""``orchestrator cleanup``: remove what runs left behind, by ledger and by label.

For lanes the orchestrator owns (process, docker, kubernetes) the lane *is* the container of
everything a build created — users, credentials and workflows live in its database — so tearing
the lane down removes them all, and the ledger entries that lived on it are closed with it. Then
each backend sweeps by label (process: the ``N8N_EVAL_RUN_ID`` env label; docker: container
labels; kubernetes: ``app.kubernetes.io/instance``), which also finds lanes a ledger never named
(a SIGKILL between start and the ledger write). For static lanes — someone else's n8n — cleanup
logs in as the owner (``--email/--password`` or ``N8N_EVAL_EMAIL``/``N8N_EVAL_PASSWORD``) and
deletes the recorded users, credentials and workflows one by one, then closes the lane's entry.
Last, the staged claude dirs of builds a SIGKILL orphaned go (their claude processes carry the
run label too, so the process sweep has stopped them by then).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.builders.seeds import deleter_for
from orchestrator.deletion import close_with_lane, delete_one, in_delete_order
from orchestrator.lanes.backend import BackendOptions, get_backend
from orchestrator.lanes.bringup import safe_teardown
from orchestrator.lanes.pool import lane_from_entry
from orchestrator.lanes.static.options import StaticOwner
from orchestrator.ledger import Ledger, all_runs, run_is_live
from orchestrator.n8n.errors import N8nError
from orchestrator.n8n.rest import N8nClient
from orchestrator.redact import redact

log = logging.getLogger(__name__)

SWEEP_BACKENDS = ("process", "docker", "kubernetes")


@dataclass
class CleanupReport:
    removed: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # live runs, left alone


def _close_static_lanes(ledger: Ledger, lane_urls: dict[str, str]) -> None:
    """A static lane's ledger entry only says where our resources live: close it once none is left."""
    still_used = {e.lane for e in ledger.open_entries() if e.kind != "lane"}
    for lane_id in lane_urls:
        if lane_id not in still_used:
            ledger.deleted("lane", lane_id, lane=lane_id)


async def _clean_static(ledger: Ledger, lane_urls: dict[str, str], owner: StaticOwner | None,
                        report: CleanupReport) -> None:
    try:
        await _delete_on_static(ledger, lane_urls, owner, report)
    finally:
        _close_static_lanes(ledger, lane_urls)


async def _delete_on_static(ledger: Ledger, lane_urls: dict[str, str], login: StaticOwner | None,
                            report: CleanupReport) -> None:
    entries = [e for e in in_delete_order(ledger.open_entries()) if e.lane in lane_urls]
    if not entries:
        return
    email = login.email if login else None
    password = login.password.get_secret_value() if login and login.password else None
    if not (email and password):
        report.failures.append(f"run {ledger.run_id}: {len(entries)} resource(s) on static lanes need --email/--password")
        return
    for lane_id, url in lane_urls.items():
        mine = [e for e in entries if e.lane == lane_id]
        if not mine:
            continue
        try:
            async with N8nClient(url) as client:
                owner = await client.login(email, password)
                for e in mine:
                    failure = await delete_one(ledger, deleter_for(owner, e.kind, e.meta), e.kind, e.id, e.lane)
                    if failure:
                        report.failures.append(str(failure))
                    else:
                        report.removed.append(f"{lane_id}: {e.kind} {e.id}")
                await owner.aclose()
        except N8nError as exc:
            report.failures.append(redact(f"{lane_id} ({url}): {exc}"))


async def cleanup(state_dir: Path, run_id: str | None = None, backends: list[str] | None = None, *,
                  options: Mapping[str, BackendOptions] | None = None) -> CleanupReport:
    """``orchestrator cleanup``: remove what finished or dead runs left, never a live run's (one whose
    process holds its run lock). For ``run_id`` (every run in ``state_dir`` when None): tear down its
    open lanes from the ledger, delete its users on static lanes (with the owner login in the static
    backend's cleanup ``options``), sweep each backend by label (failures reported only for
    ``backends`` named) and remove orphaned build folders. Returns what went, what failed and what
    was left alone."""
    options = options or {}
    report = CleanupReport()
    ledgers = [Ledger.for_run(run_id, state_dir)] if run_id else all_runs(state_dir)
    live = {ledger.run_id for ledger in ledgers if run_is_live(ledger.run_dir)}  # never touch live work
    report.skipped += [f"run {rid} is still going (its process holds the run lock): left alone" for rid in sorted(live)]
    ledgers = [ledger for ledger in ledgers if ledger.run_id not in live]
    static_urls: dict[str, dict[str, str]] = {}
    for ledger in ledgers:
        lanes = [lane_from_entry(ledger.run_id, e) for e in ledger.open_entries("lane")]
        for name in sorted({lane.backend for lane in lanes}):
            if not get_backend(name).owns_lanes:  # someone else's server: only our users on it go
                for lane in (l for l in lanes if l.backend == name):
                    static_urls.setdefault(ledger.run_id, {})[lane.lane_id] = lane.base_url
                continue
            backend = get_backend(name)(ledger.run_id, ledger, state_dir)
            try:
                for lane in (l for l in lanes if l.backend == name):
                    failure = await safe_teardown(backend, lane)
                    if failure:
                        report.failures.append(failure)
                        continue
                    report.removed.append(f"{ledger.run_id}: lane {lane.lane_id}")
                    close_with_lane(ledger, lane.lane_id)
            finally:
                await backend.close()
        if ledger.run_id in static_urls:
            login = next((o for o in options.values() if isinstance(o, StaticOwner)), None)
            await _clean_static(ledger, static_urls[ledger.run_id], login, report)
    # by label, run by run: only the runs of this state dir that are not live (another state dir's
    # runs, or a live one here, may be someone's work in progress)
    for rid in [ledger.run_id for ledger in ledgers]:
        for name in backends or SWEEP_BACKENDS:
            try:
                backend = get_backend(name)(rid, Ledger.for_run(rid, state_dir), state_dir)
            except Exception as exc:  # a backend whose client is unavailable here (no dockerd, no kubeconfig)
                log.debug("sweep %s skipped: %s", name, exc)
                continue
            try:
                report.removed += [f"{name}: {r}" for r in await backend.sweep(rid)]
            except Exception as exc:
                if backends:  # asked for explicitly: a failure is a failure
                    report.failures.append(redact(f"sweep {name}: {exc}"))
                else:
                    log.debug("sweep %s skipped: %s", name, exc)
            finally:
                await backend.close()
    for ledger in ledgers:  # staged claude dirs of builds a SIGKILL orphaned (their processes are gone now)
        builds = ledger.run_dir / "builds"
        for staged in sorted(builds.iterdir()) if builds.is_dir() else []:
            shutil.rmtree(staged, ignore_errors=True)
            (report.failures if staged.exists() else report.removed).append(f"{ledger.run_id}: build dir {staged}")
    return report
