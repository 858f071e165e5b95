"""``orchestrator ab`` end to end: two arms that differ only in a feature flag, each on its own real
n8n process lane, built by the real claude CLI against the embedded scripted model."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from support.langsmith_fake import API_KEY, FakeLangSmith, serve
from support.process_lanes import run_and_sweep

FLAG = "118_instance_ai_setup_overhaul"
#: The real entry point (``main()``: one-line errors), with ``ab`` mounted if the CLI does not yet.
ENTRY = ("from orchestrator.cli import ab_cmd, main as m; "
         "ab_cmd.register(m.app) if 'ab' not in [c.name for c in m.app.registered_commands] else None; m.main()")


@pytest.mark.n8n
@pytest.mark.claude
@pytest.mark.slow
def test_ab_two_arms_feature_flag_only(tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    ab_id = "ab-e2e-" + os.urandom(3).hex()
    run_ids = [f"{ab_id}-control", f"{ab_id}-variant"]
    store = FakeLangSmith()  # each arm also records its LangSmith experiment (on a loopback stand-in)
    server, url = serve(store)
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "LANGSMITH_API_KEY")}
    env.update({"LANGSMITH_API_KEY": API_KEY, "LANGSMITH_ENDPOINT": url})
    args = [
        sys.executable, "-c", ENTRY, "ab",
        "--arm", "control=anthropic/claude-sonnet-4-6", "--arm", "variant=anthropic/claude-sonnet-4-6",
        "--arm-env", f'control=N8N_FEATURE_FLAG_OVERRIDES={{"{FLAG}":"control"}}',
        "--arm-env", f'variant=N8N_FEATURE_FLAG_OVERRIDES={{"{FLAG}":"variant"}}',
        "--builder", "mcp",  # claude builds here (ab's default is instance-ai)
        "--model-server", "scripted", "--lanes", "1", "--tier", "smoke", "--filter", "greetings",
        "--run-id", ab_id, "--experiment-name", "e2e", "--state-dir", str(state), "--output-dir", str(out),
    ]
    try:
        done, found = run_and_sweep(args, run_ids, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]

        results = {arm: json.loads((out / arm / "eval-results.json").read_text())["orchestrator"] for arm in ("control", "variant")}
        for arm, data in results.items():
            assert data["run_id"] == f"{ab_id}-{arm}" and data["experiment_name"] == f"e2e-{arm}"
            assert [u["case"] for u in data["units"]] == ["smoke-manual-code-greetings"]
            assert data["config"]["model_server"] == "scripted"
            assert data["config"]["build_model"] == "claude-sonnet-4-6"
            assert "N8N_INSTANCE_AI_MODEL=anthropic/claude-sonnet-4-6" in data["config"]["env"]
        flags = {arm: {lane["fingerprint"]["env.N8N_FEATURE_FLAG_OVERRIDES"] for lane in data["lanes"]}
                 for arm, data in results.items()}
        assert flags == {"control": {f'{{"{FLAG}":"control"}}'}, "variant": {f'{{"{FLAG}":"variant"}}'}}

        md = (out / "ab-report.md").read_text()
        assert "| case | pairs | both pass |" in md and "`smoke-manual-code-greetings`" in md
        assert "**McNemar exact**" in md and "→ p = " in md
        report = json.loads((out / "ab-report.json").read_text())
        assert [a["name"] for a in report["arms"]] == ["control", "variant"]
        assert report["comparisons"][0]["overall"]["pairs"] >= 1
        assert all(a["build_cost_usd"] > 0 for a in report["arms"])

        experiments = sorted(s["name"] for s in store.sessions.values())
        # runs on the scripted model are named (and tagged) as such, so none becomes a baseline
        assert [name.rsplit("-", 1)[0] for name in experiments] == ["scripted-e2e-control", "scripted-e2e-variant"]
        assert {results[arm]["config"]["langsmith"]["experiment"] for arm in results} == set(experiments)
        # one root run per (case, scenario, iteration) and arm, as n8n records them, each with its
        # scenario_execution span (an MCP build has no workflow_build span: run/eval-session.ts);
        # the shared dataset is only read
        roots = [r for r in store.runs.values() if not r.get("parent_run_id")]
        children = [r for r in store.runs.values() if r.get("parent_run_id")]
        assert len(roots) == 2 and len(store.examples) == 0
        assert sorted(r["name"] for r in children) == ["scenario_execution"] * 2
        assert {r["parent_run_id"] for r in children} == {r["id"] for r in roots}
        assert {f["key"] for f in store.feedback} >= {"build_cost_usd", "build_turns", "scenario.happy-path"}
        assert store.unknown == []
    finally:
        server.shutdown()
        server.server_close()
    assert found == {rid: [] for rid in run_ids}
