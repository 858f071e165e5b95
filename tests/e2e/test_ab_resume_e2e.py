"""A replaced A/B pod, on real n8n process lanes offline (instance-ai builder, scripted model): the
first ``orchestrator ab --run-id ID --resume-existing`` is stopped by SIGTERM (what a node drain
sends) during the first arm; the same command again — from another output folder, as a new pod's
``/results/<pod>`` — finishes the first arm without rebuilding what it had, runs the second, writes
the report beside the arms' results and leaves nothing behind.

Our own behaviour (n8n's harness has no A/B runner and no resume).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.process_lanes import REPO, leftovers, offline_env, run_and_sweep
from support.tools import need, require

from orchestrator.toolchain import Toolchain, default_cache_dir

CASES = "smoke-manual-set-static-fields,smoke-manual-filter-adults"


def _records(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


@pytest.mark.n8n
@pytest.mark.slow
def test_a_replaced_ab_pod_finishes_the_experiment_without_rebuilding(tmp_path: Path) -> None:
    require("n8n", Toolchain(default_cache_dir()).n8n_ready, "run `orchestrator lanes install`")
    need(shutil.which("bwrap") is not None, "bubblewrap is not installed (every lane's embedded sandbox needs it)")
    state = tmp_path / "state"
    ab_id = "ab-resume-" + os.urandom(3).hex()
    run_ids = [f"{ab_id}-control", f"{ab_id}-variant"]
    control_units = state / "runs" / run_ids[0] / "units.jsonl"

    def args(output_dir: Path) -> list[str]:
        return [sys.executable, "-m", "orchestrator", "ab",
                "--arm", "control=anthropic/claude-sonnet-4-6", "--arm", "variant=anthropic/claude-sonnet-4-6",
                "--model-server", "scripted", "--lanes", "1", "--per-lane-builds", "1", "--filter", CASES,
                "--iterations", "2", "--run-id", ab_id, "--resume-existing", "--experiment-name", "e2e",
                "--state-dir", str(state), "--output-dir", str(output_dir)]

    first_pod = subprocess.Popen(args(tmp_path / "pod-1"), cwd=REPO, env=offline_env(), text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while len(_records(control_units)) < 2 and first_pod.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(_records(control_units)) >= 2, "the first arm never finished two units"
        first_pod.send_signal(signal.SIGTERM)
        _out, err = first_pod.communicate(timeout=180)
    finally:
        if first_pod.poll() is None:
            first_pod.kill()
    assert first_pod.returncode == 1, err[-3000:]
    assert not (state / "runs" / run_ids[1]).exists()  # the second arm never started
    before = {(r["case"], r["iteration"]): r for r in _records(control_units) if r["build"]["status"] != "skipped"}
    assert 2 <= len(before) < 4

    done, found = run_and_sweep(args(tmp_path / "pod-2"), run_ids, env=offline_env(), timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"run {run_ids[0]}: 2 case(s) × 2 = 4 unit(s), {4 - len(before)} left to run" in done.stderr
    assert found == {rid: [] for rid in run_ids} and all(leftovers(rid, state) == [] for rid in run_ids)

    root = tmp_path / "pod-1"  # where the first attempt put the arms: the report goes beside them
    assert not (tmp_path / "pod-2").exists()
    results = {arm: json.loads((root / arm / "eval-results.json").read_text())["orchestrator"]
               for arm in ("control", "variant")}
    for data in results.values():
        assert sorted((u["case"], u["iteration"]) for u in data["units"]) == \
               sorted((c, i) for c in CASES.split(",") for i in range(2))
        assert all(u["build"]["status"] == "ok" for u in data["units"])
    for unit in results["control"]["units"]:  # what the first attempt built is kept, not built again
        kept = before.get((unit["case"], unit["iteration"]))
        if kept is not None:
            assert unit["started_at"] == kept["started_at"] and unit["lane"] == kept["lane"]
    report = json.loads((root / "ab-report.json").read_text())
    assert [a["name"] for a in report["arms"]] == ["control", "variant"]
    comparison = report["comparisons"][0]
    assert {(p["case"], p["iteration"]) for p in comparison["pairs"]} == \
           {(c, i) for c in CASES.split(",") for i in range(2)}  # every unit of both arms paired
    assert comparison["control_only_trials"] == comparison["variant_only_trials"] == []
