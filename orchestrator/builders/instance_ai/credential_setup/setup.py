"""n8n's credential-setup lane for a ``credentialFixture`` case, offline on one lane.

n8n ``harness/credential-setup-lane.ts`` and ``harness/build-workflow.ts`` (facts, not code), in
their order, around the build's conversation:

1. :meth:`CredentialSetup.start` (after the thread's credential pin): takes the lane's
   credential-setup slot (:func:`lane_lock`), lists the credentials (the diff base), notes the
   credentials this run's ledger holds, starts the provider fixture (:mod:`.fixture_server`) and
   connects the owner's computer-use gateway serving the fake browser (:mod:`.gateway`,
   :mod:`.browser`). A failure there is the harness's (n8n's ``laneBootFailed``): the build is a
   framework fault and the three checks are ``incomplete``;
2. during the conversation :meth:`CredentialSetup.observe` sees every raw event of the thread's
   stream, and the gateway every tool call and result, before anything is redacted: whether the
   minted key appeared verbatim anywhere is the leak check's fact;
3. :meth:`CredentialSetup.finish` (every return path, while the fixture still listens): lists
   the credentials again; those not there before and not ledgered meanwhile by another build
   (n8n's ``foreignCredentialIds``) are this build's; they are ledgered, probed against the
   provider stand-in (``GET /rest/credentials/:id?includeData=true`` with its secret blanked, then
   ``POST /rest/credentials/test`` with ``data[urlField]`` pointed at the stand-in: n8n restores the
   stored secret and tests it there, persisting nothing), then deleted as the owner; the gateway and
   the fixture close; the slot is freed. The facts (:class:`CredentialSetupFacts`) never hold the key.

``orchestrator.verify.credential_setup`` (which it never imports: the facts are ``orchestrator.handoff``'s) turns the facts into the three rows.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from typing import Any

import httpx

from orchestrator.builders.instance_ai.credential_setup.browser import Browser
from orchestrator.builders.instance_ai.credential_setup.fixture_server import FixtureServer
from orchestrator.builders.instance_ai.credential_setup.gateway import Gateway, GatewayError, ensure_free
from orchestrator.builders.lane import BuildLane
from orchestrator.cases import EvalCase
from orchestrator.cases.provider_fixtures import ProviderFixture, resolve_fixture
from orchestrator.deletion import delete_one
from orchestrator.domain import ResourceKind
from orchestrator.handoff import (
    CredentialRecord,
    CredentialSetupFacts,
    ValueProbe,
    aggregate_probes,
    credentials_created_by_build,
)
from orchestrator.n8n.errors import N8nError, N8nTransportError
from orchestrator.n8n.instance_ai import StreamEvent
from orchestrator.redact import redact

log = logging.getLogger(__name__)

_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = weakref.WeakKeyDictionary()


def lane_lock(base_url: str) -> asyncio.Lock:
    """The credential-setup slot of the n8n instance at ``base_url`` (per event loop). The gateway
    is per user and every build chats as the lane owner, so two credential-setup builds on one lane
    would share one browser and one key: they take turns."""
    locks = _LOCKS.setdefault(asyncio.get_running_loop(), {})
    return locks.setdefault(base_url.rstrip("/"), asyncio.Lock())


class LeakWatch:
    """Whether a secret appeared in any text fed to it (raw, before redaction)."""

    def __init__(self, secret: str) -> None:
        self._needles = {secret, json.dumps(secret)[1:-1]}
        self.seen = False

    def feed(self, text: str) -> None:
        """Note whether ``text`` holds the secret (raw or JSON-escaped); once seen, it stays seen."""
        if not self.seen and any(n in text for n in self._needles):
            self.seen = True


def _ledgered_credentials(lane: BuildLane) -> set[str]:
    """Every credential this run's ledger ever recorded as created (n8n's ``createdCredentialIds``)."""
    return {str(r.get("id")) for r in lane.ledger.records() if r.get("op") == "create" and r.get("kind") == "credential"}


class CredentialSetup:
    """The credential-setup part of one build (see the module doc). Use :meth:`start`."""

    def __init__(self, lane: BuildLane, fixture: ProviderFixture, *, redact_secrets: bool = True) -> None:
        self.lane = lane
        self.fixture = fixture
        self.redact_secrets = redact_secrets
        self.facts = CredentialSetupFacts(fixture=fixture.id, credential_type=fixture.manifest.credential_type)
        self.server: FixtureServer | None = None
        self.gateway: Gateway | None = None
        self.browser: Browser | None = None
        self.watch: LeakWatch | None = None
        self._before: set[str] = set()
        self._ledgered_before: set[str] = set()
        #: credentials this build created (the gateway's, and any other new one found after): deleted at the end
        self._mine: set[str] = set()
        self._lock = lane_lock(lane.lane.base_url)
        self._held = False

    @property
    def boot_error(self) -> str | None:
        """Why the credential-setup lane could not start, or None."""
        return self.facts.boot_error

    @classmethod
    async def start(cls, case: EvalCase, lane: BuildLane, *, redact_secrets: bool = True) -> CredentialSetup | None:
        """The case's credential-setup lane, started (None: the case names no fixture). A start that
        failed is returned with :attr:`boot_error` set and nothing left running."""
        fixture = resolve_fixture(case.credential_fixture)
        if fixture is None:
            return None
        setup = cls(lane, fixture, redact_secrets=redact_secrets)
        await setup._start()
        return setup

    async def _start(self) -> None:
        await self._lock.acquire()
        self._held = True
        try:
            self._before = {str(c.get("id")) for c in await self.lane.owner.list_credentials()}
            self._ledgered_before = _ledgered_credentials(self.lane)
            await ensure_free(self.lane.owner)
            self.server = await FixtureServer(self.fixture).start()
            self.watch = LeakWatch(self.server.minted_secret)
            self.browser = Browser(self.server.page_port, self._create_credential, redact_secrets=self.redact_secrets)
            self.gateway = Gateway(self.lane.owner, self.browser, on_payload=self.watch.feed)
            await self.gateway.connect()
        except (GatewayError, N8nError, OSError, httpx.HTTPError, ValueError) as exc:
            await self._close()
            if isinstance(exc, N8nTransportError):  # the lane itself failed: the build's caller handles that
                raise
            self.facts.boot_error = redact(f"the credential-setup lane did not start: {exc}")
            log.warning("%s: %s", self.lane.lane.lane_id, self.facts.boot_error)
        except BaseException:  # cancelled: nothing may stay running, the slot is freed
            await self._close()
            raise

    async def _create_credential(self, name: str, ctype: str, data: dict[str, Any], project_id: str | None) -> str:
        assert self.gateway is not None
        credential_id = await self.gateway.create_credential(name, ctype, data, project_id)
        if credential_id:
            self._ledger(credential_id, ctype)
        return credential_id

    def _ledger(self, credential_id: str, ctype: str) -> None:
        """Ledgered the moment it is known: the run deletes it if this build cannot."""
        self._mine.add(credential_id)
        self.lane.ledger.created("credential", credential_id, lane=self.lane.lane.lane_id, type=ctype,
                                 user=self.lane.owner.user_id, source="credential-setup")

    def observe(self, event: StreamEvent) -> None:
        """One raw event of the build's thread stream (before the transcript redacts it)."""
        if self.watch is not None:
            self.watch.feed(json.dumps(event.data))

    async def finish(self, *, keep: bool = False) -> CredentialSetupFacts:
        """Gather the facts (probe included, while the fixture listens), close everything, delete
        the credentials this build created (unless ``keep``), free the lane's slot. Never raises an
        n8n error: what could not be established is in the facts."""
        try:
            if self.facts.boot_error is None:
                await self._gather()
        finally:
            await self._close()
            if not keep:
                await self._delete()
        return self.facts

    async def _gather(self) -> None:
        assert self.server is not None and self.watch is not None
        facts = self.facts
        facts.secret_was_issued = self.server.ledger.secret_was_issued
        facts.secret_in_run = self.watch.seen
        try:
            listed = await self.lane.owner.list_credentials()
        except N8nError as exc:
            facts.not_checked = redact(f"could not list credentials after the build: {exc}")
            return
        foreign = _ledgered_credentials(self.lane) - self._ledgered_before - self._mine
        new = credentials_created_by_build(listed, before=self._before, foreign=foreign)
        for record in new:  # every new credential is this build's to delete (n8n's registry rule)
            if record.id not in self._mine:
                self._ledger(record.id, record.type)
        facts.created = [r for r in new if r.type == facts.credential_type]
        facts.value_probe = await self._probe(facts.created)

    async def _probe(self, created: list[CredentialRecord]) -> ValueProbe:
        base = self.server.verify_base_url if self.server is not None else None
        if base is None:
            return ValueProbe("unsupported", "this fixture ships no provider stand-in (no `verify` block in its manifest)")
        return aggregate_probes([await self._probe_one(c.id, base) for c in created])

    async def _probe_one(self, credential_id: str, base: str) -> ValueProbe:
        assert self.server is not None
        attempts = self.server.ledger.verify_attempts
        owner = self.lane.owner
        try:
            stored = await owner.get(f"/rest/credentials/{credential_id}", params={"includeData": "true"})
            if not isinstance(stored, dict):
                return ValueProbe("unsupported", "the credential test could not run: the credential read was empty")
            # the secret comes back blanked; n8n restores it from storage for the test (``unredact``)
            data = {**(stored.get("data") or {}), self.fixture.manifest.url_field: base}
            result = await owner._send("POST", "/rest/credentials/test", {"credentials": {
                "id": credential_id, "name": stored.get("name"), "type": stored.get("type"), "data": data}})
        except N8nError as exc:
            return ValueProbe("unsupported", redact(f"the credential test could not run: {exc}"))
        result = result if isinstance(result, dict) else {}
        if result.get("status") == "OK":
            return ValueProbe("passed")
        said = redact(str(result.get("message") or result.get("status") or "no answer"))
        if self.server.ledger.verify_attempts == attempts:
            return ValueProbe("unsupported", f"n8n never reached the provider stand-in at {base} ({said})")
        return ValueProbe("rejected", said)

    async def _close(self) -> None:
        """Disconnect the gateway, close the browser and the fixture (once), free the lane's slot."""
        gateway, browser, server = self.gateway, self.browser, self.server
        self.gateway = self.browser = None
        try:
            if gateway is not None:
                await gateway.close()
            if browser is not None:
                await browser.aclose()
            if server is not None:
                await server.close()
        finally:
            if self._held:
                self._held = False
                self._lock.release()

    async def _delete(self) -> None:
        lane_id = self.lane.lane.lane_id
        still_open = {e.id for e in self.lane.ledger.open_entries("credential")}
        for credential_id in sorted(self._mine & still_open):
            await delete_one(self.lane.ledger, self.lane.owner, ResourceKind.credential, credential_id, lane_id)
