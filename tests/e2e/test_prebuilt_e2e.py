"""``orchestrator run --prebuilt-workflows`` on a real n8n lane: workflows created beforehand are
scored (no build), iterations rotate through the manifest, the results validate against the
published schema, and ``--delete-prebuilt-workflows`` leaves none of them behind.

The only stand-in is the model (the embedded scripted server): the lane's eval mock and the judge.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from support.model_switch import SharedModel
from support.static_lane import LaneTurn, StaticLane, lane_turn

from orchestrator.n8n.rest import N8nClient
from orchestrator.results.schema import published_schema
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import Run
from orchestrator.run.resolve import prepare
from orchestrator.scripted.scripts import demo_script

pytestmark = [pytest.mark.n8n, pytest.mark.slow]
CASES = Path(__file__).resolve().parents[2] / "cases"
CASE = "smoke-manual-code-greetings"
FAKE_KEY = "sk-ant-prebuilt-fake-key-0123456789"

GREETINGS = {
    "name": "Greetings (prebuilt)",
    "nodes": [
        {"parameters": {}, "name": "Start", "type": "n8n-nodes-base.manualTrigger", "typeVersion": 1,
         "position": [0, 0], "id": "p-start"},
        {"parameters": {"jsCode": "return [['Ana','Lisbon'],['Bruno','Porto'],['Carla','Faro']]"
                                  ".map(([name, city]) => ({ json: { name, city } }));"},
         "name": "People", "type": "n8n-nodes-base.code", "typeVersion": 2, "position": [220, 0], "id": "p-code"},
        {"parameters": {"assignments": {"assignments": [
            {"id": "g1", "name": "greeting", "value": "=Hi {{ $json.name }} from {{ $json.city }}!", "type": "string"}]},
            "includeOtherFields": True, "options": {}},
         "name": "Greet", "type": "n8n-nodes-base.set", "typeVersion": 3.4, "position": [440, 0], "id": "p-set"},
    ],
    "connections": {"Start": {"main": [[{"node": "People", "type": "main", "index": 0}]]},
                    "People": {"main": [[{"node": "Greet", "type": "main", "index": 0}]]}},
    "settings": {"executionOrder": "v1"},
}


@pytest.fixture(scope="module")
def shared_turn(shared_sandbox_lane: StaticLane, shared_model: SharedModel):
    """The session's seeded lane (``_static_lane``), used as a static lane; its model calls (and
    this module's claude and judge) answered by this module's script on the session's server."""
    with lane_turn(shared_sandbox_lane, shared_model, demo_script()) as turn:
        yield turn


@pytest.fixture(scope="module")
def model(shared_turn: LaneTurn):
    return shared_turn.model


@pytest.fixture(scope="module")
def static_lane(shared_turn: LaneTurn):
    return shared_turn.shared.lane, shared_turn.shared.owner


async def _owner_call(base_url: str, email: str, password: str, fn):
    async with N8nClient(base_url) as client:
        owner = await client.login(email, password)
        try:
            return await fn(owner)
        finally:
            await owner.aclose()


async def test_prebuilt_workflows_are_scored_then_deleted(static_lane, model, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    lane, owner = static_lane
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model.base_url)

    async def create(session):
        return [await session.create_workflow({**GREETINGS, "name": f"Greetings {i}"}) for i in range(2)]

    ids = await _owner_call(lane.base_url, owner.email, owner.password, create)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({CASE: ids}))
    cfg = RunConfig(
        cases_paths=[CASES], filter=CASE, iterations=3, backend="static", base_url=lane.base_url, lanes=1,
        email=owner.email, password=owner.password, model_server="real", state_dir=tmp_path / "state",
        output_dir=tmp_path / "out", run_id="prebuilt-run", prebuilt_workflows=manifest,
        delete_prebuilt_workflows=True,
    )
    resolved = await prepare(cfg)
    assert resolved.config.builder == "prebuilt"
    outcome = await Run(resolved).execute()
    assert outcome.ok, outcome.errors
    assert outcome.cleanup_failures == []

    units = sorted(outcome.results.units, key=lambda u: u.iteration)
    assert [u.build.status.value for u in units] == ["ok", "ok", "ok"]
    assert all(u.build.turns == 0 and u.build.cost_usd == 0 for u in units)  # nothing was built
    assert all(s.verdict.value == "pass" for u in units for s in u.scenarios)
    assert all(len(u.structural) == 28 for u in units)
    checks = {c.name: c.status for c in units[0].structural}
    assert checks["has_trigger"] == "pass" and checks["no_unnecessary_code_nodes"] == "pass"
    # the builder rotated through the manifest (i % len(ids)) and deleted each workflow it used, once
    [note] = outcome.notes
    assert note.startswith(f"deleted {len(ids)} prebuilt workflow(s): ")
    assert sorted(note.split(": ", 1)[1].split(", ")) == sorted(ids)

    doc = json.loads((tmp_path / "out" / "eval-results.json").read_text())
    jsonschema.Draft202012Validator(published_schema()).validate(doc)
    [tc] = doc["testCases"]
    assert tc["testCaseFile"] == CASE and tc["buildSuccessCount"] == 3
    assert doc["summary"]["workflowChecks"]["scoredBuilds"] == 3

    remaining = await _owner_call(lane.base_url, owner.email, owner.password, lambda s: s.list_workflows())
    assert not [w for w in remaining if w["id"] in ids or "[prebuilt" in str(w.get("name"))]
