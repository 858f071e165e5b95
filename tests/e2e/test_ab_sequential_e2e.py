"""``orchestrator ab --sequential`` offline on real n8n process lanes (instance-ai builder): a control
arm on the run's scripted model and a variant whose model (this test's scripted server, reached by
``--arm-model-url``) refuses to build a chosen share of the builds. The experiment must stop before
the fixed design (cases × ``--iterations``), decide for the control, and report the paired
difference with its interval, the decision and the builds it saved.

The build is n8n's Instance AI agent as the orchestrator's ``instance-ai`` builder drives it; a
refusal is an agent turn that ends without calling ``build-workflow`` — n8n's harness scores such a
build as failed (``packages/@n8n/instance-ai/evaluations/harness/runner.ts``, ``runWorkflowTestCase``:
no workflow created → ``workflowBuildSuccess: false``, no scenario passes), as our scoring does
with ``BuildStatus.failed``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.process_lanes import leftovers, offline_env, run_and_sweep
from support.tools import need, require

from orchestrator.scripted import instance_ai as ia
from orchestrator.scripted.replies import Action, Script, text_reply
from orchestrator.scripted.scripts import demo_script
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.toolchain import Toolchain, default_cache_dir

CASES = "smoke-manual-set-static-fields,smoke-manual-filter-adults"
ITERATIONS = 10
FAIL_SHARE = 0.75


def refusing_agent(share: float) -> Script:
    """The scripted Instance AI agent, refusing ``share`` of the builds: the k-th build (its first
    agent call: no tool call yet) is refused when ⌊(k+1)·share⌋ > ⌊k·share⌋ — evenly spread."""
    agent = ia.instance_ai_agent()
    lock = threading.Lock()
    started = [0]

    def script(request: dict[str, Any]) -> Action:
        if not ia.calls_since(request, 0):
            with lock:
                k = started[0]
                started[0] += 1
            if math.floor((k + 1) * share) > math.floor(k * share):
                return text_reply("I can't build this one.")
        return agent(request)

    return script


@pytest.mark.n8n
@pytest.mark.slow
def test_sequential_ab_stops_early_for_a_variant_that_fails_most_builds(tmp_path: Path) -> None:
    require("n8n", Toolchain(default_cache_dir()).n8n_ready, "run `orchestrator lanes install`")
    need(shutil.which("bwrap") is not None, "bubblewrap is not installed (every lane's embedded sandbox needs it)")
    state, out = tmp_path / "state", tmp_path / "out"
    ab_id = "ab-seq-" + os.urandom(3).hex()
    run_ids = [f"{ab_id}-control", f"{ab_id}-variant"]
    t0 = time.monotonic()
    with ScriptedModelServer(demo_script(agent=refusing_agent(FAIL_SHARE))) as variant_server:
        args = [
            sys.executable, "-m", "orchestrator", "ab", "--sequential", "--effect", "0.5",
            "--arm", "control=anthropic/claude-sonnet-4-6", "--arm", "variant=custom/scripted-refuses",
            "--arm-model-url", f"variant={variant_server.base_url}/route/variant",
            "--model-server", "scripted", "--lanes", "1", "--filter", CASES, "--iterations", str(ITERATIONS),
            "--build-max-attempts", "1",
            "--run-id", ab_id, "--experiment-name", "e2e", "--state-dir", str(state), "--output-dir", str(out),
        ]
        done, found = run_and_sweep(args, run_ids, env=offline_env(), timeout=1500)
        assert done.returncode == 0, done.stderr[-4000:]
    wall = time.monotonic() - t0
    assert found == {rid: [] for rid in run_ids}
    assert all(leftovers(rid, state) == [] for rid in run_ids)

    report = json.loads((out / "ab-report.json").read_text())
    seq = report["sequential"]
    fixed = 2 * 2 * ITERATIONS  # 2 cases × ITERATIONS × 2 arms
    print(f"ab --sequential e2e: {seq['decision']} after {seq['decided_at_pair']} build pairs, "
          f"{seq['builds_run']}/{seq['fixed_builds']} builds run ({seq['saved_share']:.0%} saved), "
          f"experiment {seq['wall_s']:.0f} s, test {wall:.0f} s")
    assert report["mode"] == "sequential"
    assert seq["decision"] == "control better" and seq["fixed_builds"] == fixed
    assert seq["likelihood_ratio"] >= 20  # crossed 1/α
    assert seq["builds_run"] < fixed and seq["builds_saved"] == fixed - seq["builds_run"] > 0
    results = {arm: json.loads((out / arm / "eval-results.json").read_text())["orchestrator"]
               for arm in ("control", "variant")}
    for data in results.values():
        assert data["summary"]["stopped_reason"].startswith("sequential A/B: control better")
        assert any(u["build"]["status"] == "skipped" for u in data["units"])  # rounds it never ran
    ran = sum(1 for data in results.values() for u in data["units"] if u["build"]["status"] != "skipped")
    assert ran == seq["builds_run"]
    variant_failed = [u for u in results["variant"]["units"] if u["build"]["status"] == "failed"]
    assert variant_failed and all(u["build"]["status"] in ("ok", "skipped") for u in results["control"]["units"])

    overall = report["comparisons"][0]["overall"]
    diff = overall["difference"]
    assert diff["estimate"] < 0 and -1 <= diff["low"] <= diff["estimate"] <= diff["high"] < 0
    md = (out / "ab-report.md").read_text()
    assert "## Sequential decision" in md and "**control better** after" in md
    assert f"of the fixed design's {fixed}" in md and "builds saved" in md
    assert "**Difference in pass rate**" in md and "Tango score interval" in md
