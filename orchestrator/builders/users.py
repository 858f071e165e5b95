"""Build users: every build runs as its own freshly invited member of the lane.

MCP visibility is user-scoped, so a member sees exactly what we put in its personal project: the
case's declared credentials and seed workflows, nothing of concurrent builds. Members are invited
through the lane owner in batches (the invitations endpoint is rate-limited), accepted lazily when
a build needs one, and deleted after the build; deleting a user also deletes what is left in its
personal project — which is how a build that never printed its workflow id leaks nothing.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass, field

from orchestrator.builders.credentials import CredentialTypes, needs_lane_types, plan_credentials
from orchestrator.builders.seeds import cleanup as seed_cleanup
from orchestrator.cases import CredentialSpec
from orchestrator.deletion import delete_one
from orchestrator.domain import CleanupFailure, ResourceKind
from orchestrator.lanes.model import Lane
from orchestrator.ledger import Ledger
from orchestrator.n8n.errors import N8nError
from orchestrator.n8n.invitations import INVITE_BATCH_SIZE
from orchestrator.n8n.rest import N8nClient, N8nSession
from orchestrator.redact import redact, register_secret

log = logging.getLogger(__name__)

INVITE_BATCH = INVITE_BATCH_SIZE  # one invitations request per batch (rate-limited per IP)


@dataclass
class BuildUser:
    user_id: str
    email: str
    session: N8nSession
    mcp_key: str | None = field(repr=False)  # only for builders that build through MCP
    project_id: str
    credential_ids: list[str] = field(default_factory=list)
    #: the declared credentials whose connection test resolves as passing (all but ``valid: false``)
    credential_test_bypass: list[str] = field(default_factory=list)


@dataclass
class _Invite:
    email: str
    user_id: str
    token: str = field(repr=False)


class BuildUserPool:
    """Per-lane supply of fresh members, invited ``INVITE_BATCH`` at a time through the owner."""

    def __init__(self, lane: Lane, owner: N8nSession, client: N8nClient, ledger: Ledger, *,
                 model_url: str | None = None) -> None:
        self.lane = lane
        #: the run's model route (``plan_credentials``): a declared model-provider credential reaches it
        self.model_url = model_url
        self.owner = owner
        self.client = client
        self.ledger = ledger
        self._nonce = secrets.token_hex(3)
        self._seq = 0
        self._pending: list[_Invite] = []
        self._lock = asyncio.Lock()
        self._types: CredentialTypes | None = None

    async def _invite_batch(self) -> None:
        emails = []
        for _ in range(INVITE_BATCH):
            self._seq += 1
            emails.append(f"eval-build-{self._nonce}-{self._seq}@n8n-eval.invalid")
        invitations = await self.owner.invite(emails)
        for inv in invitations:
            register_secret(inv.token)
            self.ledger.created("user", inv.user_id, lane=self.lane.lane_id, email=inv.email, state="invited")
            self._pending.append(_Invite(inv.email, inv.user_id, inv.token))

    async def acquire(self, credentials: list[CredentialSpec], *, mcp_key: bool = True) -> BuildUser:
        """A fresh build user on the lane: an invited member with (when ``mcp_key``) an MCP key and the
        case's ``credentials`` created in its personal project, each recorded in the ledger. On failure
        the member is deleted again and the error propagates."""
        async with self._lock:
            if not self._pending:
                await self._invite_batch()
            invite = self._pending.pop(0)
        password = f"Bu{secrets.token_urlsafe(16)}7"
        register_secret(password)
        session = await self.client.accept_invitation(invite.token, "Eval", "Builder", password)
        try:
            key = await session.rotate_mcp_key() if mcp_key else None
            if key is not None:
                register_secret(key)
            project_id = await session.personal_project()
            user = BuildUser(invite.user_id, invite.email, session, key, project_id)
            types = await self._credential_types(session) if needs_lane_types(credentials) else None
            for plan in plan_credentials(credentials, types=types, model_url=self.model_url):
                cid = await session.create_credential(plan.name, plan.type, plan.data, project_id=project_id,
                                                      description=plan.description)
                self.ledger.created("credential", cid, lane=self.lane.lane_id, type=plan.type, user=invite.user_id)
                user.credential_ids.append(cid)
                if plan.connected:
                    user.credential_test_bypass.append(cid)
        except BaseException:
            await session.aclose()
            await self._delete_user(invite.user_id)
            raise
        return user

    async def _credential_types(self, session: N8nSession) -> CredentialTypes:
        """The lane's credential type definitions, fetched once per lane (they do not change)."""
        if self._types is None:
            response = await session.call("GET", "/types/credentials.json")
            self._types = CredentialTypes(response.json())
        return self._types

    async def release(self, user: BuildUser, *, keep: bool = False) -> list[CleanupFailure]:
        """Delete the user's workflows, credentials and the user; return failures (never raise)."""
        failures: list[CleanupFailure] = []
        if keep:
            await user.session.aclose()
            return failures
        lane = self.lane.lane_id
        try:
            leftovers = await user.session.list_workflows()
        except N8nError as exc:
            leftovers = []
            failures.append(CleanupFailure(ResourceKind.workflow, "", lane,
                                           redact(f"list workflows of {user.email}: {exc}")))
        for wf in leftovers:
            if failure := await delete_one(self.ledger, user.session, ResourceKind.workflow, str(wf.get("id")), lane):
                failures.append(failure)
        # a build thread kept open past its build (scenario tables seed their rows through it)
        for entry in [e for e in self.ledger.open_entries("thread") if e.lane == lane and e.meta.get("user") == user.user_id]:
            if failure := await delete_one(self.ledger, self.owner, ResourceKind.thread, entry.id, lane):
                failures.append(failure)
        failures.extend(await seed_cleanup(self.ledger, self.owner, user.project_id, lane=lane, user=user.user_id))
        for cid in user.credential_ids:
            if failure := await delete_one(self.ledger, user.session, ResourceKind.credential, cid, lane):
                failures.append(failure)
        await user.session.aclose()
        if failure := await self._delete_user(user.user_id):
            failures.append(failure)
        return failures

    async def _delete_user(self, user_id: str) -> CleanupFailure | None:
        return await delete_one(self.ledger, self.owner, ResourceKind.user, user_id, self.lane.lane_id)

    async def close(self) -> list[CleanupFailure]:
        """Delete invited users no build used."""
        failures: list[CleanupFailure] = []
        for invite in self._pending:
            if failure := await self._delete_user(invite.user_id):
                failures.append(failure)
        self._pending.clear()
        return failures

