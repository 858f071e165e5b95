"""The harness seam and the harnesses' own files, without lanes.

- ``Stages()`` is ``orchestrator run`` itself, and ``run`` still selects exactly the files directly in
  ``cases/`` (the harnesses' examples live in sub-folders it never reads: ``cases/sources.py``);
- ``build-check`` reads n8n's compatibility fixtures (``evaluations/data/subagent/*.json``:
  ``{"id", "prompt"}``) and scores a build by the binary checks only (n8n's README, "How the
  workflow-build harness works");
- ``mcp-manifest`` writes the manifest as n8n's ``cli/build-mcp-manifest.ts`` does (without
  ``--append`` the slugs just built replace their entries, others stay; with it ids are added; a
  malformed existing manifest is refused, never overwritten; the sidecar's summary counts the builds
  that gave a workflow).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.eval_results_factory import unit

from orchestrator.builders.builder import BuildResult
from orchestrator.cases import load_disk
from orchestrator.domain import BuildStatus, Verdict
from orchestrator.errors import ConfigError
from orchestrator.harnesses.build_check.harness import CHECKS_EXPECTATION, load_fixtures, verify_checks
from orchestrator.harnesses.mcp_manifest.harness import ManifestSettings, write_files
from orchestrator.results.model import EvalResults
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import Run
from orchestrator.run.resolve import resolve
from orchestrator.run.stages import Stages, UnitCheck
from orchestrator.scripted.instance_ai import workflow_for

ROOT = Path(__file__).resolve().parents[3]


def test_run_reads_only_the_top_level_cases_and_stages_default_to_run() -> None:
    loaded, problems = load_disk([ROOT / "cases"])
    assert problems == []
    assert sorted(c.slug for c in loaded) == sorted(p.stem for p in (ROOT / "cases").glob("*.json"))
    harness_files = {p.stem for sub in ("pairwise", "routing", "build-check") for p in (ROOT / "cases" / sub).glob("*.json")}
    assert harness_files and not harness_files & {c.slug for c in loaded}
    assert Run(resolve(RunConfig())).stages == Stages(None, None, None, None)


def test_build_check_reads_n8ns_fixtures_and_full_cases(tmp_path: Path) -> None:
    (tmp_path / "fixture.json").write_text(json.dumps({"id": "if-branch-routing", "prompt": "Build an IF workflow."}))
    (tmp_path / "full.json").write_text(json.dumps({"conversation": [{"role": "user", "text": "Build it."}],
                                                    "complexity": "simple", "tags": ["x"],
                                                    "outcomeExpectations": ["It is built."]}))
    (tmp_path / "broken.json").write_text(json.dumps({"id": "no-prompt"}))
    loaded, issues = load_fixtures([tmp_path])
    assert sorted(c.slug for c in loaded) == ["full", "if-branch-routing"]
    assert issues and {i.source for i in issues} == {str(tmp_path / "broken.json")}
    fixture = next(c for c in loaded if c.slug == "if-branch-routing").case
    assert fixture.is_single_prompt and fixture.outcome_expectations == [CHECKS_EXPECTATION]
    bundled, bundled_issues = load_fixtures([ROOT / "cases" / "build-check"])
    assert bundled_issues == [] and len(bundled) == 5


class _Owner:
    def __init__(self, workflow: dict[str, Any]) -> None:
        self.workflow = workflow

    async def get_workflow(self, workflow_id: str) -> dict[str, Any]:
        return self.workflow


def _check(workflow: dict[str, Any] | None) -> UnitCheck:
    case = load_fixtures([ROOT / "cases" / "build-check" / "bc-greet-the-team.json"])[0][0].case
    build = BuildResult(BuildStatus.ok, workflow_id="wf1" if workflow is not None else None)
    return UnitCheck(case, "bc-greet-the-team", 0, build, SimpleNamespace(owner=_Owner(workflow or {})),
                     None, None, 60_000)


async def test_a_build_fails_on_a_failed_check_and_passes_on_none() -> None:
    good = workflow_for("Build a workflow that greets the team.")  # a Manual Trigger into a Set node
    passed = await verify_checks(_check(good))
    assert passed.verification.expectations[0].verdict is Verdict.passed
    assert len(passed.verification.structural) == 28 and passed.verification.scenarios == []
    orphan = {**good, "connections": {}}  # the Set node hangs on nothing
    failed = await verify_checks(_check(orphan))
    row = failed.verification.expectations[0]
    assert row.verdict is Verdict.failed and "all_nodes_connected" in row.reason
    none = await verify_checks(_check(None))
    assert none.verification.expectations[0].reason == "no workflow built"


def _manifest_results(builds: dict[str, list[str | None]]) -> EvalResults:
    units = []
    for slug, ids in builds.items():
        for i, kept in enumerate(ids):
            u = unit(slug, i, {}, status=BuildStatus.ok if kept else BuildStatus.failed, cost=0.5, turns=4)
            u.harness = {"workflowId": kept}
            units.append(u)
    return EvalResults(run_id="m", started_at=0.0, units=units)


def test_manifest_replaces_or_appends_and_the_stats_count_kept_builds(tmp_path: Path) -> None:
    settings = ManifestSettings(tmp_path / "manifest.json", cohort="night")
    settings.manifest.write_text(json.dumps({"old-case": ["W0"], "alpha": ["Wstale"]}))
    write_files(_manifest_results({"alpha": ["W1", None], "beta": ["W2"]}), settings)
    assert json.loads(settings.manifest.read_text()) == {"old-case": ["W0"], "alpha": ["W1"], "beta": ["W2"]}
    stats = json.loads((tmp_path / "manifest-stats.json").read_text())
    assert stats["builder"] == "night" and stats["summary"]["totalBuilds"] == 2
    assert stats["summary"]["totalCostUSD"] == pytest.approx(1.0) and stats["summary"]["avgTurns"] == 4
    write_files(_manifest_results({"alpha": ["W3"]}), ManifestSettings(settings.manifest, append=True))
    assert json.loads(settings.manifest.read_text())["alpha"] == ["W1", "W3"]
    settings.manifest.write_text("{broken")
    with pytest.raises(ConfigError, match="not JSON"):
        write_files(_manifest_results({"alpha": ["W4"]}), settings)
    assert settings.manifest.read_text() == "{broken"
