"""One ledger-driven deletion service, used by a unit's release, the end-of-run retry, teardown and
``orchestrator cleanup`` alike.

- :func:`delete_one` deletes one recorded resource through an n8n session, closes its ledger entry
  or records the failure (never raises for an n8n error);
- :func:`in_delete_order` sorts open entries by dependency (threads before the workflows they
  built, workflows before their folders, credentials, then users);
- :func:`close_with_lane` closes the entries that went with a lane the orchestrator tore down
  (an owned lane's database held them).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from orchestrator.domain import CleanupFailure, ResourceKind
from orchestrator.ledger import Entry, Ledger
from orchestrator.n8n.errors import N8nError
from orchestrator.redact import redact

log = logging.getLogger(__name__)

#: The order resources of one lane are deleted in: a thread before what it built, workflows before
#: the folders that hold them, users last (their personal projects go with them).
DELETE_ORDER: tuple[ResourceKind, ...] = (
    ResourceKind.thread,
    ResourceKind.agent,
    ResourceKind.workflow,
    ResourceKind.data_table,
    ResourceKind.folder,
    ResourceKind.credential,
    ResourceKind.project,
    ResourceKind.user,
)
#: kinds that live inside a lane's n8n and are deleted through its REST API
N8N_KINDS: frozenset[ResourceKind] = frozenset(DELETE_ORDER)


class Deleter(Protocol):
    """What deletion needs of an n8n session (the owner's or a build user's)."""

    async def delete_workflow(self, workflow_id: str) -> bool: ...

    async def delete_credential(self, credential_id: str) -> bool: ...

    async def delete_user(self, user_id: str, transfer_to_project_id: str | None = None) -> bool: ...

    async def delete_thread(self, thread_id: str) -> bool: ...


def _method(session: Deleter, kind: ResourceKind) -> Callable[[str], Awaitable[object]]:
    name = f"delete_{kind.value}"
    method: Callable[[str], Awaitable[object]] | None = getattr(session, name, None)
    if method is None:
        raise N8nError("DELETE", kind.value, None, f"no delete for {kind.value} on this session")
    return method


async def delete_one(ledger: Ledger, session: Deleter, kind: ResourceKind | str, resource_id: str,
                     lane: str) -> CleanupFailure | None:
    """Delete one resource and close its ledger entry; on an n8n error record and return the failure."""
    kind = ResourceKind.of(str(getattr(kind, "value", kind)))
    try:
        await _method(session, kind)(resource_id)
    except N8nError as exc:
        reason = redact(f"delete {kind.value} {resource_id}: {exc}")
        failure = CleanupFailure(kind, resource_id, lane, reason)
        ledger.delete_failed(kind.value, resource_id, str(failure), lane=lane)
        log.warning("%s", failure)
        return failure
    ledger.deleted(kind.value, resource_id, lane=lane)
    return None


def _order(entry: Entry) -> int:
    kind = ResourceKind.of(entry.kind)
    return DELETE_ORDER.index(kind) if kind in DELETE_ORDER else len(DELETE_ORDER)


def in_delete_order(entries: Iterable[Entry]) -> list[Entry]:
    """The ledger entries that live in n8n, in the order they must be deleted (``DELETE_ORDER``)."""
    return sorted((e for e in entries if ResourceKind.of(e.kind) in N8N_KINDS), key=_order)


def close_with_lane(ledger: Ledger, lane: str) -> list[Entry]:
    """An owned lane was torn down: everything recorded on it went with it. Returns what closed."""
    closed = [e for e in ledger.open_entries() if e.lane == lane and e.kind != ResourceKind.lane.value]
    for entry in closed:
        ledger.deleted(entry.kind, entry.id, lane=entry.lane)
    return closed


def open_failures(ledger: Ledger, *, keep_workflows: bool = False) -> list[CleanupFailure]:
    """What is still open after teardown (lanes aside), as failures to report by name."""
    out: list[CleanupFailure] = []
    for entry in ledger.open_entries():
        if entry.kind == ResourceKind.lane.value or (keep_workflows and not entry.last_error):
            continue
        reason = f"{entry.kind} {entry.id} was not deleted" + (
            f" ({entry.last_error})" if entry.last_error else " (still open in the ledger)")
        out.append(CleanupFailure(ResourceKind.of(entry.kind), entry.id, entry.lane, reason))
    return out
