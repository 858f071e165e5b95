"""The teardown stage's order guarantee (orchestrator/run/teardown.py), step by step.

The lane backend and the n8n sessions here are recording stand-ins: this checks only the order
and the ledger bookkeeping; the real thing (real lanes, real deletes) is covered end to end by
tests/e2e/test_run_e2e.py and the fault suite."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.lanes.backend import LaneBackend
from orchestrator.lanes.model import Lane, LaneSpec, LaneState
from orchestrator.ledger import Ledger
from orchestrator.n8n.errors import http_error
from orchestrator.run.teardown import teardown


@dataclass
class Calls:
    seen: list[str] = field(default_factory=list)


class Session:
    def __init__(self, calls: Calls, lane: str, fail: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.calls, self.lane, self.fail = calls, lane, fail

    async def delete_workflow(self, workflow_id: str) -> bool:
        self.calls.seen.append(f"{self.lane}: delete workflow {workflow_id}")
        if workflow_id in self.fail:
            raise http_error("DELETE", f"/rest/workflows/{workflow_id}", 500, "boom")
        return True

    async def delete_user(self, user_id: str, transfer_to_project_id: str | None = None) -> bool:
        self.calls.seen.append(f"{self.lane}: delete user {user_id}")
        return True

    async def aclose(self) -> None:
        self.calls.seen.append(f"{self.lane}: session closed")


class Users:
    def __init__(self, calls: Calls, lane: str) -> None:
        self.calls, self.lane = calls, lane

    async def close(self) -> list[object]:
        self.calls.seen.append(f"{self.lane}: unused members deleted")
        return []


@dataclass
class Ctx:
    lane: Lane
    owner: Session
    client: Session
    users: Users


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
    contexts = {i: Ctx(lane, Session(calls, i, {"wf-stuck"}), Session(calls, f"{i} client"), Users(calls, i))
                for i, lane in lanes.items()}

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

    contexts = {"s0": Ctx(lane, Session(calls, "s0", {"wf-stuck"}), Session(calls, "s0 client"), Users(calls, "s0"))}
    failures = await teardown(NotOwned(calls, ledger, tmp_path), ledger, {"s0": lane}, contexts, keep_workflows=False)
    assert [(f.kind.value, f.id, f.lane) for f in failures] == [("workflow", "wf-stuck", "s0")]
    assert "wf-stuck was not deleted" in str(failures[0]) and "500" in str(failures[0])
