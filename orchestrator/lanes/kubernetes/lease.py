"""The run's liveness Lease: kept by its orchestrator, judged by the janitor and by a takeover — so
that an API outage never passes for a dead orchestrator, and a run is never kept alive on broken.

**Judging** (:class:`ExpiryWitness`, for the janitor and for ``--resume``'s takeover): a Lease is
dead only on what the judging process saw itself — the same ``renewTime``, past ``renewTime +
leaseDurationSeconds``, for a window of its own clock of at least the Lease's TTL (and the janitor's
``lease grace``), during which **every API call it made was answered**. A failed call (a 5xx, a
reset, a timeout, even one retried away) restarts every observation: while the API fails for the
judge it fails for the holder too, and a holder that could not renew is not a dead holder. After an
outage the holder renews within a third of its TTL (below), long before a fresh window closes.

**Keeping** (:class:`LeaseKeeper`, a task on the orchestrator's event loop, so a hung loop stops
renewing): every third of the TTL it reads the Lease and renews it (a merge patch carrying the
``resourceVersion`` it read: a concurrent change answers 409), then checks that the run's Service
and NetworkPolicy still exist. While calls fail it tries again every sixth of the TTL, each call
retried within that much, and logs one line per failure streak (the API's message, never its
headers). What it finds:

* the Lease held by another process: the run was taken over — the run stops
  (:meth:`~orchestrator.lanes.backend.BackendEvents.fatal`: exit 1, ``n8n_eval_run_stopped_total``,
  one ``error:`` line) and touches nothing of the other process's;
* the Lease gone while this process renewed it less than a TTL ago: nobody can have judged the run
  dead (it was deleted by hand) — re-created, as is a missing Service or NetworkPolicy
  (:meth:`~orchestrator.lanes.backend.BackendEvents.restored`, ``n8n_eval_lane_objects_restored_total``):
  a replacement lane gets its DNS name and its egress again;
* the Lease gone after this process could not renew it for a TTL or more: someone may have judged
  the run dead and be taking it over — the run stops, it never re-creates what another may own;
* a re-create refused (another creator's object under the name, a 403): the run stops.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import BackendEvents, LaneError
from orchestrator.lanes.kubernetes import objects
from orchestrator.lanes.kubernetes.api import api_error
from orchestrator.lanes.kubernetes.options import KubernetesOptions
from orchestrator.redact import redact

log = logging.getLogger(__name__)


class KeptRun(Protocol):
    """What the keeper and a takeover use of the backend (``kubernetes.backend.KubernetesBackend``)."""

    run_id: str
    holder: str
    events: BackendEvents
    opts: KubernetesOptions
    _attempts: dict[int, int]

    @property
    def core(self) -> client.CoreV1Api: ...
    @property
    def networking(self) -> client.NetworkingV1Api: ...
    @property
    def coordination(self) -> client.CoordinationV1Api: ...
    async def _call(self, fn: Callable[..., Any], *args: Any, budget_s: float | None = None,
                    on_retry: Callable[[BaseException], None] | None = None, **kwargs: Any) -> Any: ...
    async def restore(self, kind: str) -> str: ...
    async def remove_run(self, run_id: str, ns: str) -> list[str]: ...
    def _collides(self, kind: str, name: str, ns: str, creator: str | None) -> ConfigError: ...
    def _api_error(self, what: str, exc: ApiException) -> LaneError: ...

#: Errors of one API call that say nothing about the Lease (the API failed, not the holder).
CALL_ERRORS = (ApiException, LaneError, urllib3.exceptions.HTTPError)


class LeaseLost(LaneError):
    """The run's Lease is another process's, or gone when this process may have been judged dead."""


def renew_time(lease: Mapping[str, Any]) -> str:
    """The Lease's last renewal as written (its acquire time if never renewed; empty if neither)."""
    spec = lease.get("spec") or {}
    return str(spec.get("renewTime") or spec.get("acquireTime") or "")


def describe(exc: BaseException, what: str) -> str:
    """One line for a failed call: status and the API's message (never the response headers)."""
    if isinstance(exc, ApiException):
        return str(api_error(what, exc))  # redacted
    return str(exc) if isinstance(exc, LaneError) else redact(f"kubernetes: {what} failed: {type(exc).__name__}: {exc}")


class ExpiryWitness:
    """Whether Leases are dead, by what this process saw of them itself (the module's rule)."""

    def __init__(self, window_s: float, now: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        self.now = now
        #: key -> (renewTime, when this process first saw it expired with that renewTime)
        self._seen: dict[str, tuple[str, float]] = {}

    def failed(self) -> None:
        """An API call of this process failed: every observation starts again."""
        self._seen.clear()

    def watching(self, key: str) -> bool:
        """Whether this process has seen ``key``'s Lease expired (its dead-time clock runs)."""
        return key in self._seen

    def saw(self, key: str, lease: Mapping[str, Any]) -> str | None:
        """Record one sighting; the reason it is dead, or None (fresh, or not watched long enough)."""
        expires = objects.lease_expires_at(lease)
        now = self.now()
        if expires is None or expires > now:
            self._seen.pop(key, None)
            return None
        renew = renew_time(lease)
        first = self._seen.get(key)
        if first is None or first[0] != renew:
            self._seen[key] = (renew, now)
            return None
        ttl = float((lease.get("spec") or {}).get("leaseDurationSeconds") or 0)
        watched = now - first[1]
        if watched < max(self.window_s, ttl):
            return None
        holder = (lease.get("spec") or {}).get("holderIdentity") or "?"
        return (f"lease expired {now - expires:.0f} s ago (holder {holder}), not renewed while watched "
                f"{watched:.0f} s with every API call answered")


class LeaseKeeper:
    """Renews the run's Lease and keeps its Service and NetworkPolicy (the module's rules)."""

    def __init__(self, backend: KeptRun, name: str, ns: str, ttl_s: float) -> None:
        self.backend, self.name, self.ns, self.ttl_s = backend, name, ns, ttl_s
        self.renewed_at = time.monotonic()  # created just now
        self.failing_since: float | None = None
        self.lost: LeaseLost | None = None

    async def run(self) -> None:
        """Keep the Lease until cancelled: every third of its TTL, a sixth while calls fail. A Lease taken
        over (:class:`LeaseLost`) is fatal to the run: reported through ``events.fatal``, then it stops."""
        period, retry = self.ttl_s / 3, self.ttl_s / 6
        while True:
            await asyncio.sleep(period if self.failing_since is None else retry)
            try:
                await self.keep()
            except LeaseLost as exc:
                self.lost = exc
                log.error("%s", exc)
                self.backend.events.fatal(exc)
                return
            except CALL_ERRORS as exc:
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                    log.warning("%s; trying again every %.1f s", describe(exc, f"renew Lease {self.ns}/{self.name}"),
                                retry)
                continue
            if self.failing_since is not None:
                log.warning("kubernetes: Lease %s/%s renewed again after %.0f s of failed calls", self.ns, self.name,
                            time.monotonic() - self.failing_since)
                self.failing_since = None

    async def _read(self, read: Callable[..., Any], name: str) -> dict[str, Any] | None:
        try:
            resp: Any = await self.backend._call(read, name, self.ns, budget_s=self.ttl_s / 6, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(json.loads(resp.data))

    async def keep(self) -> None:
        """One round: renew the Lease (or find it lost), then the run's Service and NetworkPolicy."""
        b = self.backend
        lease = await self._read(b.coordination.read_namespaced_lease, self.name)
        if lease is None:
            unrenewed = time.monotonic() - self.renewed_at
            if unrenewed >= self.ttl_s:
                raise LeaseLost(
                    f"kubernetes: run {b.run_id}: its Lease {self.ns}/{self.name} was removed after this orchestrator "
                    f"could not renew it for {unrenewed:.0f} s (TTL {self.ttl_s:.0f} s): another process may have "
                    "judged the run dead and taken it over; the run stops")
            await self._restore("lease", "Lease")
            self.renewed_at = time.monotonic()
        else:
            holder = (lease.get("spec") or {}).get("holderIdentity")
            if holder != b.holder:
                raise LeaseLost(f"kubernetes: run {b.run_id}: its Lease {self.ns}/{self.name} is now held by {holder}: "
                                "another orchestrator took the run over; the run stops and leaves its objects alone")
            patch = {"metadata": {"resourceVersion": lease["metadata"].get("resourceVersion")},
                     "spec": {"renewTime": objects.micro_time(time.time())}}
            await b._call(b.coordination.patch_namespaced_lease, self.name, self.ns, patch, budget_s=self.ttl_s / 6,
                          _preload_content=False)
            self.renewed_at = time.monotonic()
        for kind, api_kind, read, name in (
            ("service", "Service", b.core.read_namespaced_service, objects.run_service_name(b.run_id)),
            ("networkpolicy", "NetworkPolicy", b.networking.read_namespaced_network_policy,
             objects.network_policy_name(b.run_id)),
        ):
            if await self._read(read, name) is None:
                await self._restore(kind, api_kind)

    async def _restore(self, kind: str, api_kind: str) -> None:
        try:
            name = await self.backend.restore(kind)
        except (ConfigError, LaneError) as exc:
            raise LeaseLost(f"kubernetes: run {self.backend.run_id}: its {api_kind} was gone and could not be "
                            f"re-created ({exc}); the run stops") from None
        log.warning("kubernetes: run %s: its %s %s/%s was gone: re-created", self.backend.run_id, api_kind, self.ns, name)
        self.backend.events.restored(api_kind, name)


async def take_over(backend: KeptRun, name: str, ns: str) -> None:
    """``--resume`` by a new process (a replaced orchestrator pod): watch the old holder's Lease until
    this process has seen it expired and unrenewed for its TTL with every call answered (renewed
    meanwhile: it is alive, a run-id collision that touches nothing; gone: the janitor removed the run),
    then remove the old process's objects (by label, each by uid); new lanes are numbered after the
    old ones."""
    witness = ExpiryWitness(0.0)
    seen, creator, failures, told = None, "unknown", 0, False
    while True:
        try:
            resp: Any = await backend._call(backend.coordination.read_namespaced_lease, name, ns,
                                            on_retry=lambda _: witness.failed(), _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                break  # gone meanwhile (the janitor removed the dead run)
            raise backend._api_error(f"read Lease {ns}/{name}", exc) from None
        except LaneError:  # the API is unreachable for now: that says nothing about the holder
            witness.failed()
            failures += 1
            if failures > 20:
                raise
            await asyncio.sleep(1.0)
            continue
        lease = dict(json.loads(resp.data))
        creator = (lease["metadata"].get("annotations") or {}).get(objects.ANNOTATION_CREATOR) or creator
        renewed = renew_time(lease)
        if seen is not None and renewed != seen:
            raise backend._collides("Lease", name, ns, f"{creator}, which still renews its Lease") from None
        seen = renewed
        if witness.saw(name, lease):
            break
        ttl = float((lease.get("spec") or {}).get("leaseDurationSeconds") or backend.opts.lease_ttl_s)
        if not told:
            log.info("kubernetes: run %s is %s's; taking it over once its Lease ran out and stayed unrenewed %.0f s",
                     backend.run_id, creator, ttl)
            told = True
        await asyncio.sleep(max(ttl / 4, 0.1))  # a live holder renews within ttl/3
    removed = await backend.remove_run(backend.run_id, ns)
    for index, attempt in objects.lane_attempts(r.split("/")[-1] for r in removed if r.startswith("pod/")):
        backend._attempts[index] = max(backend._attempts.get(index, -1), attempt)  # new lanes: new names
    log.warning("kubernetes: took over run %s from %s (Lease ran out): removed %d object(s)", backend.run_id, creator,
                len(removed))

