"""``orchestrator run`` end to end on a real n8n lane with the real claude CLI.

The only stand-in is the model: a scripted Anthropic-compatible server on loopback. It makes the
real claude CLI call the lane's real MCP ``create_workflow_from_code``, answers the lane's own
eval mock during verification, and plays the judge. The lane is started once as a *static* lane
so the test can look inside it afterwards: the run must leave no workflow, user or credential.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.model_switch import SharedModel
from support.process_lanes import leftovers
from support.static_lane import LaneTurn, StaticLane, lane_turn

from orchestrator.ledger import Ledger
from orchestrator.n8n.rest import N8nClient
from orchestrator.results.schema import published_schema
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import Run, run
from orchestrator.run.resolve import prepare as resolve_and_check
from orchestrator.scripted.scripts import demo_script

pytestmark = [pytest.mark.n8n, pytest.mark.claude]
CASES = Path(__file__).resolve().parents[2] / "cases"
FAKE_KEY = "sk-ant-e2e-fake-key-0123456789"


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


async def _inventory(base_url: str, email: str, password: str) -> tuple[set[str], list[dict[str, Any]], list[dict[str, Any]]]:
    async with N8nClient(base_url) as client:
        owner = await client.login(email, password)
        users = {u["email"] for u in await owner.list_users()}
        workflows = await owner.list_workflows()
        credentials = await owner.list_credentials()
        await owner.aclose()
    return users, workflows, credentials


async def test_run_builds_verifies_and_leaves_nothing_behind(static_lane, model, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    lane, owner = static_lane
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model.base_url)
    before = await _inventory(lane.base_url, owner.email, owner.password)
    cfg = RunConfig(
        cases_paths=[CASES], filter="smoke-manual-code-greetings,credential-single-notion", iterations=2,
        backend="static", base_url=lane.base_url, lanes=1, email=owner.email, password=owner.password,
        model_server="real", state_dir=tmp_path / "state", output_dir=tmp_path / "out", run_id="e2e-run",
    )
    outcome = await run(cfg)
    assert outcome.ok, outcome.errors
    assert outcome.cleanup_failures == []

    document = json.loads((tmp_path / "out" / "eval-results.json").read_text())
    jsonschema.Draft202012Validator(published_schema()).validate(document)  # the published contract
    assert {tc["testCaseFile"] for tc in document["testCases"]} == {"smoke-manual-code-greetings",
                                                                    "credential-single-notion-attached"}
    assert all(len(r) == 28 for tc in document["testCases"] for r in tc["workflowChecksPerRun"])
    assert document["summary"]["mcpBuild"]["builds"] == 4 and document["summary"]["workflowChecks"]["scoredBuilds"] == 4
    data = document["orchestrator"]
    assert {(u["case"], u["iteration"]) for u in data["units"]} == {
        ("smoke-manual-code-greetings", 0), ("smoke-manual-code-greetings", 1),
        ("credential-single-notion-attached", 0), ("credential-single-notion-attached", 1),
    }
    for unit in data["units"]:
        assert unit["build"]["status"] == "ok"
        assert unit["build"]["workflow_id"]
        assert unit["build"]["turns"] >= 2 and unit["build"]["cost_usd"] > 0
        assert unit["lane"] == "s0"
    greet = [u for u in data["units"] if u["case"] == "smoke-manual-code-greetings"]
    assert all(s["verdict"] == "pass" and s["execution_id"] for u in greet for s in u["scenarios"])
    assert data["summary"]["units_finished"] == 4 and data["summary"]["pass_at_k"] is not None
    assert data["lanes"][0]["fingerprint"]
    assert (tmp_path / "out" / "eval-pr-comment.md").exists() and (tmp_path / "out" / "report.html").exists()
    # the real claude CLI drove the real MCP tool: the model saw the tool result with a workflow id
    assert any("create_workflow_from_code" in json.dumps(r.body) for r in model.requests if r.is_messages)

    assert await _inventory(lane.base_url, owner.email, owner.password) == before
    assert Ledger.for_run("e2e-run", tmp_path / "state").open_entries() == []
    assert leftovers("e2e-run", tmp_path / "state") == []


class _Recorder:
    """A loopback HTTP server that records what a Pushgateway would receive."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.bodies: list[tuple[str, str, bytes]] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                recorder.bodies.append((self.command, self.path, self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            do_PUT = do_POST = _any

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


async def test_spend_cap_stops_new_builds_then_resume_finishes_only_the_rest(
        static_lane, model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lane, owner = static_lane
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model.base_url)
    gateway = _Recorder()
    common = dict(cases_paths=[CASES], filter="smoke-manual-set-static-fields", backend="static",
                  base_url=lane.base_url, lanes=1, email=owner.email, password=owner.password, model_server="real",
                  state_dir=tmp_path / "state")
    try:
        first = await run(RunConfig(**common, iterations=3, concurrency=1, max_cost_usd=0.01, run_id="capped",
                                    output_dir=tmp_path / "out", pushgateway=gateway.url))
    finally:
        gateway.close()
    statuses = sorted(u.build.status.value for u in first.results.units)
    assert statuses == ["ok", "skipped", "skipped"]
    summary = first.results.summary
    assert summary is not None
    assert "spend cap reached" in (summary.stopped_reason or "")
    assert summary.units_finished == 1
    pushed = b"".join(body for _, _, body in gateway.bodies)
    assert b"n8n_eval_units_done_total" in pushed and b"n8n_eval_build_cost_usd" in pushed
    built_first = {u.build.workflow_id for u in first.results.units if u.build.workflow_id}

    # skipped units never ran: --resume runs exactly them and keeps the finished one
    second = await run(RunConfig(**common, resume="capped"))
    assert second.ok, second.errors
    final = json.loads((tmp_path / "out" / "eval-results.json").read_text())["orchestrator"]
    assert sorted(u["iteration"] for u in final["units"]) == [0, 1, 2]
    assert [u["build"]["status"] for u in final["units"]].count("ok") == 3
    assert built_first <= {u["build"]["workflow_id"] for u in final["units"]}
    assert Ledger.for_run("capped", tmp_path / "state").open_entries() == []


async def test_a_lane_still_preparing_when_units_start_joins_the_allocator_once(
        static_lane, model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two static lanes (the same n8n by two names), the default builder. The second is still in its builder's
    ``prepare_lane`` when the first has joined and units start: it joins the allocator after its
    preparation, once, and runs units. (It used to be counted by the allocator made meanwhile, so
    its own ``add_lane`` failed with "already in the pool" and the lane was removed; found by
    ``bench/real_lanes.py``.)"""
    from orchestrator.builders.claude.mcp import McpBuilder

    lane, owner = static_lane
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model.base_url)
    port = lane.base_url.rsplit(":", 1)[1].rstrip("/")
    second = f"http://localhost:{port}"

    cfg = RunConfig(
        cases_paths=[CASES], filter="smoke-manual-code-greetings", iterations=4, backend="static",
        base_url=f"{lane.base_url},{second}", lanes=2, per_lane_builds=1, email=owner.email,
        password=owner.password, model_server="real", state_dir=tmp_path / "state", output_dir=tmp_path / "out",
        run_id="two-names-one-lane",
    )
    runner = Run(await resolve_and_check(cfg))
    prepare = McpBuilder.prepare_lane
    waited: list[bool] = []

    async def slow_prepare(self: McpBuilder, ctx) -> None:
        if ctx.lane.base_url.startswith(second):  # hold the second lane until units run on the first
            for _ in range(400):
                if any(runner.units.per_lane().values()):
                    break
                await asyncio.sleep(0.05)
            waited.append(runner.units.engaged)
        await prepare(self, ctx)

    monkeypatch.setattr(McpBuilder, "prepare_lane", slow_prepare)
    outcome = await runner.execute()
    assert waited == [True]
    assert outcome.ok, outcome.errors
    assert outcome.results.lane_failures == []
    assert sorted(u.build.status.value for u in outcome.results.units) == ["ok"] * 4
    assert len({u.lane for u in outcome.results.units}) == 2  # the late lane ran units too


async def test_a_lane_starts_its_next_unit_while_the_last_units_user_is_cleaned_up(
        static_lane, model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One lane, one build at a time, two units: the second starts once the first's record is
    written, while the first's build user is still being deleted (issue 25: the slot used to be held
    through the clean-up, a second or more on a loaded lane, counted as idle while work waited).
    The run still ends only after every clean-up: nothing stays open in the ledger."""
    from orchestrator.builders.users import BuildUserPool

    lane, owner = static_lane
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model.base_url)
    release = BuildUserPool.release
    cleanups: list[tuple[float, float]] = []

    async def slow_release(self: BuildUserPool, user, *, keep: bool = False):
        began = time.time()
        await asyncio.sleep(1.5)
        failures = await release(self, user, keep=keep)
        cleanups.append((began, time.time()))
        return failures

    monkeypatch.setattr(BuildUserPool, "release", slow_release)
    outcome = await run(RunConfig(
        cases_paths=[CASES], filter="smoke-manual-set-static-fields", iterations=2, backend="static",
        base_url=lane.base_url, lanes=1, per_lane_builds=1, email=owner.email, password=owner.password,
        model_server="real", state_dir=tmp_path / "state", output_dir=tmp_path / "out", run_id="cleanup-overlap",
    ))
    assert outcome.ok, outcome.errors
    first, second = sorted(outcome.results.units, key=lambda u: u.started_at)
    assert [first.build.status.value, second.build.status.value] == ["ok", "ok"]
    assert len(cleanups) == 2  # both users were deleted before the run returned
    assert second.started_at < min(end for _, end in cleanups)  # ...the first one after the second unit began
    assert Ledger.for_run("cleanup-overlap", tmp_path / "state").open_entries() == []
