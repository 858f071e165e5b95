"""One seeded n8n process lane for a test module to run ``--backend static`` against.

The end-to-end modules (``test_run_e2e``, ``test_prebuilt_e2e``, ``test_instance_ai_e2e``,
``test_report_real_run``) start one lane the way a run would (real process backend, e2e reset,
owner), point its Instance AI model route at the module's scripted model server, and look inside
it afterwards. :func:`started_static_lane` does that once::

    @pytest.fixture(scope="module")
    def static_lane(model, tmp_path_factory):
        with started_static_lane("e2e-lane", tmp_path_factory.mktemp("lane-state"), model.base_url) as lane:
            yield lane

Leaving the block tears the lane down and asserts that nothing of it is left on the host.

A lane start costs 15–30 s, so the modules whose tests build on a sandbox lane with the scripted
model (``test_fidelity_e2e``, ``test_instance_ai_e2e``, ``test_scenario_tables_e2e``,
``test_seeds_e2e``, ``test_user_proxy_e2e``) share one: the session fixture ``shared_sandbox_lane``
(conftest) starts it once, and each module takes a :func:`lane_turn` on it with its own script on
the session's model server — as a run's builds take turns on a pool lane. A turn sees only its own
model requests and ledger records, and must leave nothing open on the lane.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.lanes.bringup import bring_up, make_owner, teardown_pool
from orchestrator.lanes.model import Lane
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process.backend import ProcessBackend
from orchestrator.ledger import Ledger
from orchestrator.n8n.owner import OwnerCredentials
from orchestrator.scripted.replies import Script
from orchestrator.toolchain import Toolchain, default_cache_dir
from support.model_switch import ModelLease, SharedModel
from support.process_lanes import leftovers
from support.tools import require

#: The lane's own model key for the scripted server (not a secret: the server accepts any key).
SCRIPTED_LANE_KEY = "scripted-key-000"


@dataclass(frozen=True)
class StaticLane:
    lane: Lane
    owner: OwnerCredentials
    ledger: Ledger
    state: Path
    run_id: str = ""
    lane_env: dict[str, str] = field(default_factory=dict)  # the lane's spec env (a builder's ``lane_env``)

    @property
    def base_url(self) -> str:
        return self.lane.base_url

    def ledger_records(self) -> list[dict[str, Any]]:
        path = self.state / "runs" / self.run_id / "ledger.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]


@contextmanager
def started_static_lane(run_id: str, state: Path, model_url: str, *, sandbox: bool = False) -> Iterator[StaticLane]:
    """A ready, seeded lane whose Instance AI model route is ``model_url`` (``sandbox``: with the
    embedded Instance AI sandbox). Torn down, and checked for leftovers, when the block ends."""
    require("n8n", Toolchain(default_cache_dir()).n8n_ready, "run `orchestrator lanes install`")
    ledger = Ledger.for_run(run_id, state)
    owner = make_owner(run_id)
    spec = make_spec("eval", [f"N8N_INSTANCE_AI_MODEL_URL={model_url}", f"N8N_INSTANCE_AI_MODEL_API_KEY={SCRIPTED_LANE_KEY}"])

    def backend() -> ProcessBackend:  # a fresh client per event loop
        return ProcessBackend(run_id, ledger, state, sandbox=sandbox)

    async def up() -> Lane:
        b = backend()
        try:
            return (await bring_up(b, 1, spec, owner)).lanes[0]
        finally:
            await b.close()

    async def down(lane: Lane) -> list[str]:
        b = backend()
        try:
            return await teardown_pool(b, [lane])
        finally:
            await b.close()

    lane = asyncio.run(up())
    try:
        yield StaticLane(lane, owner, ledger, state, run_id, dict(spec.env))
    finally:
        failures = asyncio.run(down(lane))
    assert failures == [], failures
    left = leftovers(run_id, state)  # (a helper module: pytest does not rewrite these asserts, so say what)
    assert left == [], f"left on the host after the lane's teardown: {left}"


#: What a live lane keeps open in its ledger between builds (everything else a build opens, it closes).
LANE_KINDS = ("lane", "sandbox", "process")


@dataclass(frozen=True)
class LaneTurn:
    """A module's turn on the shared lane: the lane, the module's lease of the model server, and
    the ledger records written since the turn began."""

    shared: StaticLane
    model: ModelLease
    first_record: int

    @property
    def lane(self) -> Lane:
        return self.shared.lane

    @property
    def ledger(self) -> Ledger:
        return self.shared.ledger

    @property
    def run_id(self) -> str:
        return self.shared.run_id

    def records(self) -> list[dict[str, Any]]:
        return self.shared.ledger_records()[self.first_record:]


@contextmanager
def lane_turn(shared: StaticLane, model: SharedModel, script: Script) -> Iterator[LaneTurn]:
    """The module's turn on ``shared`` with ``script`` answering its model calls; when the turn ends
    nothing the module's builds opened may be left open on the lane."""
    with model.lease(script) as lease:
        yield LaneTurn(shared, lease, len(shared.ledger_records()))
    left = [(e.kind, e.id) for e in shared.ledger.open_entries() if e.kind not in LANE_KINDS]
    assert left == [], f"left open on the shared lane by the module: {left}"
