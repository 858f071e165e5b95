"""The seed's other harnesses end to end, offline: each command on its bundled examples, on real n8n
2.41.1 lanes with the embedded scripted model as the only stand-in.

On two process lanes the command runs as a user runs it (``python -m orchestrator …``, no model
key): it must write the seed's files, leave nothing on the host (lanes, processes, build folders)
nor open in its ledger, and exit non-zero only where the seed says so. The two acceptance runs that
need a lane to outlive one command (a manifest scored by a later ``run``; shards merged against a
single run) use the session's shared sandbox lane as a static lane, and the lane must hold what it
held before.

Rules followed, by n8n file (``packages/@n8n/instance-ai/evaluations/``): ``cli/pairwise.ts``
(summary.json's totals, failure classes and interactivity counters; results.jsonl; workflows/),
``cli/compare-pairwise.ts`` (per-prompt verdicts, rows collapsed with lazy previews),
``discovery/cli.ts`` (routing mode measures and exits 0; ``--fail-on-zero-pass``), ``routing/grade.ts``
(a case per route), ``cli/build-mcp-manifest.ts`` (manifest + manifest-stats.json, checked with the
loader's schema), ``cli/merge-results.ts`` (shards merge into what one run writes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.chromium import need_chromium, open_tab
from support.model_switch import SharedModel
from support.process_lanes import leftovers
from support.static_lane import StaticLane, lane_turn
from support.tools import require

from orchestrator.ledger import Ledger
from orchestrator.n8n.rest import N8nClient
from orchestrator.scripted.scripts import demo_script
from orchestrator.toolchain import Toolchain, default_cache_dir

pytestmark = [pytest.mark.n8n, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
FAKE_KEY = "sk-ant-harness-e2e-key-0000"


def _orchestrator(args: list[str], tmp: Path, run_id: str, *, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    """One CLI command on two process lanes, offline, from the repository's root (its cases/ folders)."""
    require("n8n", Toolchain(default_cache_dir()).n8n_ready, "run `orchestrator lanes install`")
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "LANGSMITH_API_KEY", "N8N_INSTANCE_AI_MODEL_API_KEY")}
    command = [sys.executable, "-m", "orchestrator", *args, "--backend", "process", "--lanes", "2",
               "--model-server", "scripted", "--state-dir", str(tmp / "state"), "--run-id", run_id]
    t0 = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    print(f"{' '.join(args[:1])}: exit {done.returncode} in {time.monotonic() - t0:.0f} s\n{done.stderr[-3000:]}")
    assert leftovers(run_id, tmp / "state") == []
    assert Ledger.for_run(run_id, tmp / "state").open_entries() == []
    return done


@pytest.mark.claude
@pytest.mark.chromium
def test_pairwise_two_builders_and_their_comparison_page(tmp_path: Path) -> None:
    require("claude", Toolchain(default_cache_dir()).claude_ready, "run `orchestrator lanes install`")
    folders = {}
    for builder in ("instance-ai", "mcp"):
        folders[builder] = tmp_path / f"pw-{builder}"
        done = _orchestrator(["pairwise", "--builder", builder, "--judges", "3", "--iterations", "3",
                              "--output-dir", str(folders[builder])], tmp_path, f"pw-{builder}")
        assert done.returncode == 0
    summary = json.loads((folders["instance-ai"] / "summary.json").read_text())
    totals = summary["totals"]
    assert (summary["numJudges"], summary["iterations"], totals["examples"], totals["runs"]) == (3, 3, 5, 15)
    # the bundled set: 3 examples pass, one misses a node it asked for, one is answered without a build
    assert totals["primaryPassRate"] == pytest.approx(9 / 15) and totals["buildFailures"] == {"no_workflow_built": 3}
    assert 0.9 < totals["avgDiagnostic"] < 0.95
    assert summary["interactivity"] == {"askUserCount": 3, "planToolCount": 0, "autoApprovedSuspensions": 6,
                                        "mockedCredentialTypes": ["githubApi"]}
    rows = [json.loads(line) for line in (folders["instance-ai"] / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 15 and all(len([f for f in r["feedback"] if f["metric"].startswith("judge")]) == 3
                                   for r in rows if r["workflow"])
    assert len(list((folders["instance-ai"] / "workflows").glob("*.json"))) == 12

    page = tmp_path / "comparison.html"
    done = subprocess.run([sys.executable, "-m", "orchestrator", "pairwise-compare", "--a-dir", str(folders["instance-ai"]),
                           "--b-dir", str(folders["mcp"]), "--a-label", "instance-ai", "--b-label", "mcp",
                           "--out", str(page)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    need_chromium()
    with open_tab(page.resolve().as_uri(), tmp_path / "profile") as tab:
        verdicts = json.loads(str(tab.js("JSON.stringify([...document.querySelectorAll('details.row')]"
                                         ".map(r => [r.dataset.text.split(' ')[0], r.dataset.verdict]))")))
        assert len(verdicts) == 5 and {v for _, v in verdicts} == {"a-only", "both-pass", "both-fail"}
        assert tab.js("document.querySelectorAll('details.row svg').length") == 0  # previews wait for a click
        row = tab.box("document.querySelector('details.row.v-both-pass > summary')")
        tab.click(row["x"] + 20, row["y"] + row["height"] / 2)
        deadline = time.monotonic() + 10
        while tab.js("document.querySelectorAll('details.row[open] svg rect.node').length") in (None, 0):
            assert time.monotonic() < deadline, "the opened row drew no workflow preview"
            time.sleep(0.1)
        shot = tab.screenshot()
    (tmp_path / "comparison.png").write_bytes(shot)
    from support.chromium import decode_png

    _, _, pixels = decode_png(shot)
    assert len({row[i:i + 3] for row in pixels[::8] for i in range(0, len(row), 24)}) > 20, "the page looks blank"


def test_routing_decides_a_case_per_route_and_fails_the_one_built_to_fail(tmp_path: Path) -> None:
    out = tmp_path / "routing"
    done = _orchestrator(["routing", "--output-dir", str(out), "-v"], tmp_path, "routing-all")
    assert done.returncode == 0  # routing measures: it never gates without --fail-on-zero-pass
    doc = json.loads((out / "routing-results.json").read_text())
    verdicts = {c["id"]: (c["bucket"], c["verdict"], [t["route"] for t in c["trials"]]) for c in doc["cases"]}
    assert len(verdicts) == 11 and all(len(c["trials"]) == 3 for c in doc["cases"])
    failing = {case for case, (_, verdict, _) in verdicts.items() if verdict != "pass"}
    assert failing == {"route-fails-agent-asked-as-workflow"}
    assert verdicts["route-fails-agent-asked-as-workflow"][2] == ["workflow"] * 3
    for case, (bucket, _, routes) in verdicts.items():
        if case != "route-fails-agent-asked-as-workflow":
            assert routes == [routes[-1]] * 3 and routes[-1] in (bucket, "workflow"), case  # clarify → answered → workflow
    answered = next(c for c in doc["cases"] if c["id"] == "route-clarify-then-build-with-answer")
    assert all(t["label"] == "clarify:none>workflow" for t in answered["trials"])
    results = json.loads((out / "eval-results.json").read_text())
    assert {e["expectation"] for tc in results["testCases"] for e in tc["buildExpectations"]} >= {
        "Routes to one of: agent", "Routes to one of: clarify:open"}
    assert (out / "routing-summary.md").read_text().count("| route-") == 11

    gated = _orchestrator(["routing", "--filter", "fails-agent", "--trials", "1", "--fail-on-zero-pass",
                           "--output-dir", str(tmp_path / "gated")], tmp_path, "routing-gated")
    assert gated.returncode == 1 and "--fail-on-zero-pass" in gated.stderr


def test_build_check_scores_builds_with_the_checks_only(tmp_path: Path) -> None:
    out = tmp_path / "build-check"
    done = _orchestrator(["build-check", "--output-dir", str(out)], tmp_path, "build-check")
    assert done.returncode == 0
    doc = json.loads((out / "eval-results.json").read_text())
    by_case = {tc["testCaseFile"]: tc for tc in doc["testCases"]}
    assert sorted(by_case) == ["bc-greet-the-team", "bc-manual-set-status", "bc-pasted-api-key",
                               "bc-question-not-a-build", "bc-weekly-github-issue"]
    passes = {case: tc["buildExpectations"][0]["passCount"] for case, tc in by_case.items()}
    assert passes == {"bc-greet-the-team": 1, "bc-manual-set-status": 1, "bc-pasted-api-key": 0,
                      "bc-question-not-a-build": 0, "bc-weekly-github-issue": 1}
    assert doc["summary"]["workflowChecks"]["scoredBuilds"] == 4
    assert doc["summary"]["workflowChecks"]["perCheck"]["no_hardcoded_credentials"]["fails"] == 1
    units = doc["orchestrator"]["units"]
    assert all(not u["scenarios"] for u in units)  # no mock execution, no scenario verifier
    assert sum(1 for u in units if len(u["structural"]) == 28) == 4
    pasted = next(u for u in units if u["case"] == "bc-pasted-api-key")
    assert "no_hardcoded_credentials" in pasted["expectations"][0]["reason"]


@pytest.mark.claude
def test_mcp_manifest_on_two_process_lanes_writes_the_manifest_and_its_stats(tmp_path: Path) -> None:
    require("claude", Toolchain(default_cache_dir()).claude_ready, "run `orchestrator lanes install`")
    out = tmp_path / "manifest"
    done = _orchestrator(["mcp-manifest", "--filter", "smoke-manual-set,smoke-manual-filter", "-n", "2",
                          "--output-dir", str(out), "--log-dir", str(out / "logs")], tmp_path, "manifest")
    assert done.returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert {slug: len(ids) for slug, ids in manifest.items()} == {"smoke-manual-set-static-fields": 2,
                                                                  "smoke-manual-filter-adults": 2}
    stats = json.loads((out / "manifest-stats.json").read_text())
    assert stats["version"] == 1 and stats["builder"] == "instance-mcp" and stats["summary"]["totalBuilds"] == 4
    assert stats["summary"]["totalCostUSD"] > 0 and stats["summary"]["toolCallTotals"]
    assert len(list((out / "logs").glob("*.jsonl"))) == 4


@pytest.fixture(scope="module")
def shared_turn(shared_sandbox_lane: StaticLane, shared_model: SharedModel):
    with lane_turn(shared_sandbox_lane, shared_model, demo_script()) as turn:
        yield turn


async def _inventory(lane: StaticLane) -> tuple[set[str], set[str]]:
    async with N8nClient(lane.base_url) as client:
        owner = await client.login(lane.owner.email, lane.owner.password)
        users = {u["email"] for u in await owner.list_users()}
        workflows = {w["id"] for w in await owner.list_workflows()}
        await owner.aclose()
    return users, workflows


def _static(turn, tmp: Path, run_id: str, **kw):
    from orchestrator.run.config import RunConfig

    lane = turn.shared
    return RunConfig(backend="static", base_url=lane.base_url, lanes=1, email=lane.owner.email,
                     password=lane.owner.password, model_server="real", state_dir=tmp / "state", run_id=run_id, **kw)


@pytest.mark.claude
async def test_a_manifest_is_accepted_by_run_prebuilt_workflows(shared_turn, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.harnesses.common import internal_results, run_stages
    from orchestrator.harnesses.mcp_manifest.harness import ManifestSettings, manifest_stages
    from orchestrator.run.pipeline import run

    require("claude", Toolchain(default_cache_dir()).claude_ready, "run `orchestrator lanes install`")
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", shared_turn.model.base_url)
    before = await _inventory(shared_turn.shared)
    settings = ManifestSettings(tmp_path / "m" / "manifest.json")
    cfg = internal_results(_static(shared_turn, tmp_path, "manifest-static", builder="mcp", cases_paths=[ROOT / "cases"],
                                   filter="smoke-manual-set-static-fields", iterations=2))
    made = await run_stages(cfg, manifest_stages(settings))
    assert made.ok, made.errors
    manifest = json.loads(settings.manifest.read_text())
    assert len(manifest["smoke-manual-set-static-fields"]) == 2
    kept = set(manifest["smoke-manual-set-static-fields"])
    assert kept <= (await _inventory(shared_turn.shared))[1]  # kept on the lane for the scoring run

    scored = await run(_static(shared_turn, tmp_path, "prebuilt-from-manifest", cases_paths=[ROOT / "cases"],
                               filter="smoke-manual-set-static-fields", iterations=2, prebuilt_workflows=settings.manifest,
                               delete_prebuilt_workflows=True, output_dir=tmp_path / "scored"))
    assert scored.ok, scored.errors
    assert [u.build.status.value for u in scored.results.units] == ["ok", "ok"]
    assert scored.results.config["builder"] == "prebuilt"
    assert await _inventory(shared_turn.shared) == before  # --delete-prebuilt-workflows took the kept ones


async def test_two_shards_merge_to_what_one_run_writes(shared_turn, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.harnesses.merge.merge import merge
    from orchestrator.run.pipeline import run

    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", shared_turn.model.base_url)
    cases = "smoke-manual-set-static-fields,smoke-manual-filter-adults,build-only-form-equipment-requests"
    shards = {"a": "smoke-manual-set-static-fields,smoke-manual-filter-adults", "b": "build-only-form-equipment-requests"}
    files = []
    for name, selection in [*shards.items(), ("single", cases)]:
        outcome = await run(_static(shared_turn, tmp_path, f"shard-{name}", builder="instance-ai",
                                    cases_paths=[ROOT / "cases"], filter=selection, iterations=2,
                                    output_dir=tmp_path / name))
        assert outcome.ok, outcome.errors
        files.append(tmp_path / name / "eval-results.json")
    merged = merge(files[:2]).results
    single = json.loads(files[2].read_text())["orchestrator"]["summary"]
    assert merged.summary is not None
    figures = ("units_total", "units_finished", "scoring_units", "trials", "passed_trials", "pass_at_k", "pass_hat_k",
               "attribution")
    assert {f: getattr(merged.summary, f) for f in figures} == {f: single[f] for f in figures}
    assert merged.summary.pass_rate is not None and merged.summary.pass_rate.rate == single["pass_rate"]["rate"]
