"""The model gateway in a real run (issue 37), on real n8n process lanes with the embedded scripted
provider.

- A provider outage of 60 s in the middle of a run (from the first build step after the 30th model
  call, so a build is in flight whatever the timing): the gateway says so (a
  log line, ``n8n_eval_provider_up`` 0, ``config.model_gateway_status.outage_periods``), no new build
  starts while it lasts, no unit is counted as the builder's failure, every row the outage took is
  ``framework_issue`` with n8n's provider-outage root cause (``harness/transient-error.ts``), and the
  run finishes after the window with every unit recorded.
- claude builds (the ``mcp`` builder) are counted to their unit through ``ANTHROPIC_CUSTOM_HEADERS``.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from support.process_lanes import leftovers
from support.tools import require

from orchestrator.domain import PROVIDER_OUTAGE_ROOT_CAUSE
from orchestrator.results.model import Attribution, BuildStatus, UnitResult, Verdict
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import Run
from orchestrator.run.resolve import prepare
from orchestrator.scripted.pressure import PRESSURE_ENV
from orchestrator.toolchain import Toolchain, default_cache_dir

pytestmark = [pytest.mark.n8n, pytest.mark.slow]
CASES = Path(__file__).resolve().parents[2] / "cases"
OUTAGE_AFTER_CALLS, OUTAGE_S = 30, 60.0


def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "N8N_INSTANCE_AI_MODEL_API_KEY"):
        monkeypatch.delenv(key, raising=False)


def affected(unit: UnitResult) -> bool:
    return any(s.failed_calls for s in unit.model_cost.stages) if unit.model_cost else False


async def test_an_outage_mid_run_is_the_frameworks_new_builds_wait_and_the_run_finishes_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    require("n8n", Toolchain(default_cache_dir()).n8n_ready, "run `orchestrator lanes install`")
    offline(monkeypatch)
    monkeypatch.setenv(PRESSURE_ENV, json.dumps({"outage_after_calls": OUTAGE_AFTER_CALLS, "outage_s": OUTAGE_S,
                                                  "outage_on_build": True}))
    caplog.set_level(logging.WARNING)
    run_id = f"gw-outage-{int(time.time()) % 100000}"
    state, out = tmp_path / "state", tmp_path / "out"
    cfg = RunConfig(cases_paths=[CASES], filter="smoke", iterations=2, backend="process", lanes=2,
                    builder="instance-ai", model_server="scripted", state_dir=state, output_dir=out, run_id=run_id,
                    gateway_hold_s=2.0, outage_waits_s=(1.0,))  # a short hold and one builder retry: the outage bites
    run = Run(await prepare(cfg))
    outcome = await run.execute()
    assert outcome.ok, outcome.errors
    assert outcome.cleanup_failures == [] and leftovers(run_id, state) == []
    data = json.loads((out / "eval-results.json").read_text())["orchestrator"]
    units = [UnitResult.model_validate(u) for u in data["units"]]
    gateway, provider = data["config"]["model_gateway_status"], data["config"]["scripted_provider"]
    window = provider["outage_window"]

    # the gateway saw it: a log line, the metric, one outage period covering the provider's window
    assert "model provider down" in caplog.text and "model provider back" in caplog.text
    assert gateway["outages"] == 1
    (down, up), = gateway["outage_periods"]
    assert window[0] <= down < window[1] <= up
    exposition = generate_latest(run.metrics.registry).decode()
    assert "n8n_eval_provider_outages_total 1.0" in exposition and "n8n_eval_provider_up 1.0" in exposition

    # every unit is recorded, none is a builder failure, and the outage took some
    assert len(units) == 10 and all(u.build.status is not BuildStatus.skipped for u in units)
    assert not [u.unit_id for u in units if u.attribution is Attribution.builder_issue
                or u.failure_category == "build_failure"]
    hit = [u for u in units if affected(u)]
    assert hit, "the outage took no unit: nothing here tests its attribution"
    for u in hit:  # every row the outage took is the framework's, with n8n's marker
        for s in u.scenarios:
            if s.verdict is not Verdict.passed:
                assert s.attribution is Attribution.framework_issue, (u.unit_id, s)
                assert (s.root_cause or "").startswith(PROVIDER_OUTAGE_ROOT_CAUSE), (u.unit_id, s)
        if u.build.status is not BuildStatus.ok:
            assert u.build.status is BuildStatus.provider_outage and u.attribution is Attribution.framework_issue
            assert (u.build.root_cause or "").startswith(PROVIDER_OUTAGE_ROOT_CAUSE)
    assert any(u.build.status is BuildStatus.provider_outage for u in hit)

    # new builds waited while it was down, and the run went on after it
    assert not [u.unit_id for u in units if down + 1.0 < u.started_at < up]
    assert [u for u in units if u.started_at >= up and u.build.status is BuildStatus.ok]
    assert max(u.finished_at for u in units) > window[1]
    # and what the provider counted is what the units cost, but for the gateway's own probes
    assert sum(u.model_cost.cost_usd for u in units if u.model_cost) + gateway["unattributed_usd"] == pytest.approx(
        provider["cost_usd"], abs=1e-6)


@pytest.mark.claude
async def test_claude_builds_are_counted_to_their_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tc = Toolchain(default_cache_dir())
    require("n8n", tc.n8n_ready, "run `orchestrator lanes install`")
    require("claude", tc.claude_ready, "run `orchestrator lanes install`")
    offline(monkeypatch)
    run_id = f"gw-claude-{int(time.time()) % 100000}"
    cfg = RunConfig(cases_paths=[CASES], filter="smoke-manual-set-static-fields", backend="process", lanes=1,
                    builder="mcp", model_server="scripted", state_dir=tmp_path / "state", output_dir=tmp_path / "out",
                    run_id=run_id)
    outcome = await Run(await prepare(cfg)).execute()
    assert outcome.ok, outcome.errors
    data = json.loads((tmp_path / "out" / "eval-results.json").read_text())["orchestrator"]
    (unit,) = [UnitResult.model_validate(u) for u in data["units"]]
    assert unit.build.status is BuildStatus.ok and unit.model_cost is not None
    build = unit.model_cost.stage("build")
    assert build is not None and build.calls >= 2 and build.shared_calls == 0 and build.cost_usd > 0
    assert data["config"]["model_gateway_status"]["unattributed_usd"] == 0
    assert unit.model_cost.cost_usd == pytest.approx(data["config"]["scripted_provider"]["cost_usd"], abs=1e-6)
