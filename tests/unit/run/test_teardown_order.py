"""The teardown stage's order guarantee (orchestrator/run/teardown.py), step by step.

The lane backend and the n8n sessions here are recording stand-ins: this checks only the order
and the ledger bookkeeping; the real thing (real lanes, real deletes) is covered end to end by
tests/e2e/test_run_e2e.py and the fault suite."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.builders.lane import BuildLane
from orchestrator.builders.users import BuildUserPool
from orchestrator.domain import CleanupFailure
from orchestrator.lanes.backend import LaneBackend
from orchestrator.lanes.model import Lane, LaneSpec, LaneState
from orchestrator.ledger import Ledger
from orchestrator.n8n.errors import http_error
from orchestrator.n8n.rest import N8nClient, N8nSession
from orchestrator.run.teardown import teardown


@dataclass
class Calls:
    seen: list[str] = field(default_factory=list)


#: nothing answers on the discard port: a call this test did not expect fails instead of passing
UNUSED = "http://127.0.0.1:9"


class Client(N8nClient):
    def __init__(self, calls: Calls, name: str) -> None:
        super().__init__(UNUSED)
        self.calls, self.name = calls, name

    async def aclose(self) -> None:
        await super().aclose()
        self.calls.seen.append(f"{self.name}: session closed")


class Session(N8nSession):
    def __init__(self, calls: Calls, name: str, fail: frozenset[str] = frozenset()) -> None:
        super().__init__(N8nClient(UNUSED), "", {})
        self.calls, self.name, self.fail = calls, name, fail

    async def delete_workflow(self, workflow_id: str) -> bool:
        self.calls.seen.append(f"{self.name}: delete workflow {workflow_id}")
        if workflow_id in self.fail:
            raise http_error("DELETE", f"/rest/workflows/{workflow_id}", 500, "boom")
        return True

    async def delete_user(self, user_id: str, transfer_to_project_id: str | None = None) -> bool:
        self.calls.seen.append(f"{self.name}: delete user {user_id}")
        return True

    async def aclose(self) -> None:
        await self.client.aclose()
        self.calls.seen.append(f"{self.name}: session closed")


class Users(BuildUserPool):
    def __init__(self, calls: Calls, lane: Lane, owner: Session, client: Client, ledger: Ledger) -> None:
        super().__init__(lane, owner, client, ledger)
        self.calls = calls

    async def close(self) -> list[CleanupFailure]:
        self.calls.seen.append(f"{self.lane.lane_id}: unused members deleted")
        return []


def context(calls: Calls, lane: Lane, ledger: Ledger, fail: frozenset[str] = frozenset()) -> BuildLane:
    """A lane's build context whose owner session, client and user pool record what teardown asks."""
    owner, client = Session(calls, lane.lane_id, fail), Client(calls, f"{lane.lane_id} client")
    return BuildLane(lane, client, owner, Users(calls, lane, owner, client, ledger))


class Backend(LaneBackend):
    name = "recording"

    def __init__(self, calls: Calls, ledger: Ledger, state_dir: Path) -> None:
        super().__init__("r", ledger, state_dir)
        self.calls = calls

    async def start_lane(self, index: int, spec: LaneSpec) -> Lane:  # pragma: no cover - not used
        raise NotImplementedError

    async def health(self, lane: Lane) -> bool:  # pragma: no cover - not used
        return True

    async def logs(self, lane: Lane, lines: int = 40) -> str:  # pragma: no cover - not used
        return ""

    async def teardown(self, lane: Lane) -> None:
        self.calls.seen.append(f"{lane.lane_id}: lane torn down")
        self.ledger.deleted("lane", lane.lane_id, lane=lane.lane_id)

    async def sweep(self, run_id: str | None = None) -> list[str]:  # pragma: no cover - not used
        return []


async def test_members_then_open_deletes_then_sessions_then_lanes_then_ledger(tmp_path: Path) -> None:
    calls = Calls()
    ledger = Ledger.for_run("order", tmp_path)
    lanes = {i: Lane(i, n, f"http://127.0.0.1:{9000 + n}", "recording", "order", state=LaneState.ready)
             for n, i in enumerate(("p0", "p1"))}
    lanes["p1"].state = LaneState.dead  # drained mid-run: asked for nothing, torn down all the same
    for lane_id in lanes:
        ledger.created("lane", lane_id, lane=lane_id)
    ledger.created("user", "u-left", lane="p0")
    ledger.created("workflow", "wf-left", lane="p0")
    ledger.created("workflow", "wf-stuck", lane="p0")
    ledger.created("workflow", "wf-dead", lane="p1")
    contexts = {i: context(calls, lane, ledger, frozenset({"wf-stuck"})) for i, lane in lanes.items()}

    failures = await teardown(Backend(calls, ledger, tmp_path), ledger, lanes, contexts, keep_workflows=False)

    assert calls.seen == [
        "p0: unused members deleted",  # 1. live lanes only
        "p0: delete workflow wf-left",  # 2. open deletes once more, workflows before users
        "p0: delete workflow wf-stuck",
        "p0: delete user u-left",
        "p0: session closed", "p0 client: session closed",  # 3. sessions
        "p1: session closed", "p1 client: session closed",
        "p0: lane torn down", "p1: lane torn down",  # 4. lanes (in parallel)
    ]
    assert ledger.open_entries() == []  # 5. what lived on an owned lane went with it
    assert failures == []


async def test_what_stays_open_is_named_by_kind_and_id(tmp_path: Path) -> None:
    calls = Calls()
    ledger = Ledger.for_run("left", tmp_path)
    lane = Lane("s0", 0, "http://127.0.0.1:9100", "recording", "left", state=LaneState.ready)
    ledger.created("workflow", "wf-stuck", lane="s0")

    class NotOwned(Backend):
        owns_lanes = False

    contexts = {"s0": context(calls, lane, ledger, frozenset({"wf-stuck"}))}
    failures = await teardown(NotOwned(calls, ledger, tmp_path), ledger, {"s0": lane}, contexts, keep_workflows=False)
    assert [(f.kind.value, f.id, f.lane) for f in failures] == [("workflow", "wf-stuck", "s0")]
    assert "wf-stuck was not deleted" in str(failures[0]) and "500" in str(failures[0])
