"""What a build sees of its lane once the lane is up: the owner session, a REST client, the ledger
and a supply of build users. Builders get one of these per build; the run opens one per lane."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.builders.users import BuildUserPool
from orchestrator.domain import CleanupFailure
from orchestrator.lanes.model import Lane
from orchestrator.ledger import Ledger
from orchestrator.n8n.rest import N8nClient, N8nSession


@dataclass
class BuildLane:
    lane: Lane
    client: N8nClient
    owner: N8nSession
    users: BuildUserPool

    @property
    def ledger(self) -> Ledger:
        """The run's ledger, where the lane's build users and what they create are recorded."""
        return self.users.ledger

    @classmethod
    async def open(cls, lane: Lane, ledger: Ledger, *, model_url: str | None = None) -> BuildLane:
        """Log in as the lane's owner; ``model_url``: the run's model route (the lane's
        ``N8N_INSTANCE_AI_MODEL_URL``), which the model-provider credentials a case declares reach."""
        if lane.owner is None:
            raise RuntimeError(f"{lane.describe()} has no owner")
        client = N8nClient(lane.base_url)
        owner = await client.login(lane.owner.email, lane.owner.password)
        return cls(lane, client, owner, BuildUserPool(lane, owner, client, ledger, model_url=model_url))

    async def close(self) -> list[CleanupFailure]:
        """Delete the lane's build users (and what they own) and close its sessions; returns what could not
        be deleted."""
        failures = await self.users.close()
        await self.owner.aclose()
        await self.client.aclose()
        return failures
