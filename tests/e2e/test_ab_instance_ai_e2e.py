"""``orchestrator ab`` with the instance-ai builder (its default), offline, on real n8n process lanes:
an Anthropic arm and a ``custom/`` (OpenAI-compatible) arm, each arm's lanes sending their agent's
model calls to their own route, and the A/B report naming both arms with the builder and build model.

Two scripted servers answer: the run's own (``--model-server scripted``: the judge, and the control
arm's lanes under ``/route/control``, recorded in that run's ``config.model_routes``) and this
test's (the variant's ``--arm-model-url``, reached over the OpenAI chat-completions API). Each must
have seen build calls from its arm only, asking for that arm's model.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from support.process_lanes import leftovers, offline_env, run_and_sweep
from support.tools import need, require

from orchestrator.scripted.scripts import demo_script
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.toolchain import Toolchain, default_cache_dir

CASES = "smoke-manual-set-static-fields,smoke-manual-filter-adults"
VARIANT_MODEL = "scripted-variant-1"


@pytest.mark.n8n
@pytest.mark.slow
def test_ab_anthropic_arm_vs_custom_arm_each_on_its_own_route(tmp_path: Path) -> None:
    require("n8n", Toolchain(default_cache_dir()).n8n_ready, "run `orchestrator lanes install`")
    need(shutil.which("bwrap") is not None, "bubblewrap is not installed (every lane's embedded sandbox needs it)")
    state, out = tmp_path / "state", tmp_path / "out"
    ab_id = "ab-ia-" + os.urandom(3).hex()
    run_ids = [f"{ab_id}-control", f"{ab_id}-variant"]
    t0 = time.monotonic()
    with ScriptedModelServer(demo_script()) as variant_server:
        variant_url = f"{variant_server.base_url}/route/variant"
        args = [
            sys.executable, "-m", "orchestrator", "ab",  # no --builder: ab builds with instance-ai
            "--arm", "control=anthropic/claude-sonnet-4-6", "--arm", f"variant=custom/{VARIANT_MODEL}",
            "--arm-model-url", f"variant={variant_url}",
            "--model-server", "scripted", "--lanes", "2", "--filter", CASES,
            "--run-id", ab_id, "--experiment-name", "e2e", "--state-dir", str(state), "--output-dir", str(out),
        ]
        done, found = run_and_sweep(args, run_ids, env=offline_env(), timeout=900)
        assert done.returncode == 0, done.stderr[-4000:]
        variant_routes = variant_server.models_by_route()
        assert not variant_server.script_errors, variant_server.script_errors
    print(f"ab instance-ai e2e: {time.monotonic() - t0:.1f} s")
    assert found == {rid: [] for rid in run_ids}
    assert all(leftovers(rid, state) == [] for rid in run_ids)

    results = {arm: json.loads((out / arm / "eval-results.json").read_text())["orchestrator"]
               for arm in ("control", "variant")}
    for arm, data in results.items():
        assert data["config"]["builder"] == "instance-ai" and data["config"]["model_server"] == "scripted"
        assert sorted(u["case"] for u in data["units"]) == sorted(CASES.split(","))
        assert len(data["lanes"]) == 2
        for unit in data["units"]:
            assert unit["build"]["status"] == "ok" and unit["build"]["workflow_id"], (arm, unit["build"])
    assert results["control"]["config"]["build_model"] == "anthropic/claude-sonnet-4-6"
    assert results["variant"]["config"]["build_model"] == f"custom/{VARIANT_MODEL}"
    # the control arm's lanes built through the run's scripted server under its own route, with its model
    assert results["control"]["config"]["model_routes"] == {"/route/control": ["claude-sonnet-4-6"]}
    # the variant arm's lanes built through the variant URL only (OpenAI-compatible), with the variant's model
    assert results["variant"]["config"]["model_routes"] == {}
    assert variant_routes == {"/route/variant": {VARIANT_MODEL}}
    assert {r.path for r in variant_server.model_requests if r.is_build_call} == {"/chat/completions"}

    report = json.loads((out / "ab-report.json").read_text())
    assert [(a["name"], a["model"], a["builder"], a["build_model"]) for a in report["arms"]] == [
        ("control", "anthropic/claude-sonnet-4-6", "instance-ai", "anthropic/claude-sonnet-4-6"),
        ("variant", f"custom/{VARIANT_MODEL}", "instance-ai", f"custom/{VARIANT_MODEL}"),
    ]
    md = (out / "ab-report.md").read_text()
    assert "`control`" in md and "`variant`" in md and "`instance-ai` (`custom/scripted-variant-1`)" in md
