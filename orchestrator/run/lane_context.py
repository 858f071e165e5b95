"""What the run holds per lane once it is up: an owner session and a supply of build users."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.build.users import BuildUserPool
from orchestrator.lanes.model import Lane
from orchestrator.ledger import Ledger
from orchestrator.n8n.rest import N8nClient, N8nSession


@dataclass
class LaneContext:
    lane: Lane
    client: N8nClient
    owner: N8nSession
    users: BuildUserPool

    @classmethod
    async def open(cls, lane: Lane, ledger: Ledger) -> "LaneContext":
        if lane.owner is None:
            raise RuntimeError(f"{lane.describe()} has no owner")
        client = N8nClient(lane.base_url)
        owner = await client.login(lane.owner.email, lane.owner.password)
        # The e2e reset wipes MCP settings, and only an owner may enable MCP access (members get 403).
        await owner.enable_mcp()
        return cls(lane, client, owner, BuildUserPool(lane, owner, client, ledger))

    async def close(self) -> list[str]:
        failures = await self.users.close()
        await self.owner.aclose()
        await self.client.aclose()
        return failures
