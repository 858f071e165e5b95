"""Stand-ins for the parts a piece of code takes but must not use on the path a test drives.

Each is the real type, so the code under test is called as the run calls it; none reaches anything:
a session's client points at the discard port on loopback (nothing answers there) and carries no
cookie, the judge has no key, the builder fails the test if it is ever asked to build, and the
ledger keeps what it is told in memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.builders.builder import Builder, BuilderSettings, BuildRequest, BuildResult
from orchestrator.builders.lane import BuildLane
from orchestrator.builders.users import BuildUser, BuildUserPool
from orchestrator.lanes.model import Lane
from orchestrator.ledger import Ledger
from orchestrator.n8n.rest import N8nClient, N8nSession
from orchestrator.verify.judge import Judge, JudgeConfig

#: the discard port: nothing answers there, so a call the test did not expect fails at once
UNUSED_URL = "http://127.0.0.1:9"


def unused_session() -> N8nSession:
    return N8nSession(N8nClient(UNUSED_URL), "", {})


def unused_judge() -> Judge:
    return Judge(JudgeConfig(api_key=None))


class UnusedBuilder(Builder):
    name = "unused"

    def __init__(self) -> None:
        super().__init__(BuilderSettings(run_id="unused", run_dir=Path("/nonexistent"), model="unused"))

    async def build(self, request: BuildRequest, lane: BuildLane, user: BuildUser) -> BuildResult:
        raise AssertionError(f"this test builds nothing, yet {request!r} was built")


class MemoryLedger(Ledger):
    """A run's ledger kept in memory: what was recorded as created, as ``(kind, id)``."""

    def __init__(self) -> None:
        super().__init__(Path("/nonexistent"))
        self.created_ids: list[tuple[str, str]] = []

    def created(self, kind: str, id: str, *, lane: str = "", **meta: Any) -> None:
        self.created_ids.append((kind, id))


def build_lane(owner: N8nSession | None = None) -> BuildLane:
    """A lane's build context: ``owner`` (an unused session by default), its client, a user pool
    that invites nobody, and a ledger in memory."""
    lane = Lane("lane-0", 0, UNUSED_URL, "process", "stand-in")
    owner = owner or unused_session()
    return BuildLane(lane, owner.client, owner, BuildUserPool(lane, owner, owner.client, MemoryLedger()))


def build_user() -> BuildUser:
    """A build user whose session reaches nothing."""
    return BuildUser("u1", "u1@stand-in.invalid", unused_session(), None, "p1")
