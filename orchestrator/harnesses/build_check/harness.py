"""``orchestrator build-check``: the seed's workflow-build harness (``eval:subagent``) on the pool.

Each case's prompt goes through the live build path (the lane's Instance AI agent by default, any
builder with ``--builder``); the built workflow is scored by the binary-check suite only
(:mod:`orchestrator.verify.workflow_checks`: the 28 checks, LLM checks on the run's judge) — no
mock execution, no scenario verifier — and then archived and deleted with its build user, as every
build of a run is (``--keep-workflows`` keeps them).

Cases are n8n's compatibility-fixture shape (``data/subagent/*.json``: ``{"id", "prompt"}``) or
full eval cases; each one is one scoring unit per iteration, :data:`CHECKS_EXPECTATION`: it passes
when no check fails (N/A and unmeasured checks never fail it), so ``eval-results.json``'s pass rate
is the share of builds that pass the whole suite, and ``summary.workflowChecks`` has each check's
pass / fail / N/A counts.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.cases import CaseIssue, CaseLoadError, LoadedCase, parse_case, select_cases
from orchestrator.domain import Attribution, Verdict
from orchestrator.harnesses.common import json_files
from orchestrator.results.model import ExpectationResult
from orchestrator.run.config import RunConfig
from orchestrator.run.stages import Stages, UnitCheck, Verified
from orchestrator.verify.verifier import Verification
from orchestrator.verify.workflow_checks import check_context, run_workflow_checks

#: the one scoring unit of a build-check case
CHECKS_EXPECTATION = "The built workflow fails none of the binary workflow checks."
DEFAULT_CASES = Path("cases") / "build-check"


def fixture_body(raw: dict[str, object]) -> dict[str, object]:
    """n8n's compatibility fixture (``{"id", "prompt"}``) as an eval case; a full case as it is."""
    if "conversation" in raw or not isinstance(raw.get("prompt"), str):
        return raw
    return {"conversation": [{"role": "user", "text": raw["prompt"]}], "complexity": "medium",
            "tags": ["build-check"], "outcomeExpectations": [CHECKS_EXPECTATION],
            **({"description": raw["description"]} if isinstance(raw.get("description"), str) else {})}


def load_fixtures(paths: list[Path]) -> tuple[list[LoadedCase], list[CaseIssue]]:
    """Every ``*.json`` directly in each folder (or each file given); the slug is the fixture's
    ``id``, else the file name."""
    found, issues = json_files(paths)
    loaded: list[LoadedCase] = []
    for file, raw in found:
        case, problems = parse_case(fixture_body(raw), str(file))
        if case is None:
            issues.extend(problems)
            continue
        slug = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("prompt") else file.stem
        loaded.append(LoadedCase(slug=str(slug), source=str(file), case=case))
    return loaded, issues


async def load_build_cases(cfg: RunConfig) -> list[LoadedCase]:
    """The run's fixture cases after its ``--filter``/``--exclude``/``--tier``. Raises
    ``CaseLoadError`` with every issue when a fixture does not load."""
    loaded, issues = load_fixtures(list(cfg.cases_paths))
    if issues:
        raise CaseLoadError(issues)
    return select_cases(loaded, filter=cfg.filter, exclude=cfg.exclude, tier=cfg.tier)


async def verify_checks(check: UnitCheck) -> Verified:
    """The binary-check suite on the built workflow, nothing else."""
    build = check.build
    if build.workflow_id is None:
        row = ExpectationResult(kind="outcome", text=CHECKS_EXPECTATION, verdict=Verdict.failed,
                                attribution=Attribution.builder_issue, reason="no workflow built")
        return Verified(Verification(expectations=[row]), {"checks": None})
    workflow = await check.lane.owner.get_workflow(build.workflow_id)
    checks = await run_workflow_checks(workflow, check_context(check.case, build.narration), check.judge)
    failed = [c.name for c in checks if c.status == "fail"]
    measured = [c for c in checks if c.status in ("pass", "fail")]
    if failed:
        row = ExpectationResult(kind="outcome", text=CHECKS_EXPECTATION, verdict=Verdict.failed,
                                attribution=Attribution.builder_issue,
                                reason=f"{len(failed)} of {len(measured)} measured check(s) failed: {', '.join(failed)}")
    else:
        row = ExpectationResult(kind="outcome", text=CHECKS_EXPECTATION, verdict=Verdict.passed,
                                reason=f"all {len(measured)} measured check(s) passed")
    counts = {status: sum(1 for c in checks if c.status == status) for status in ("pass", "fail", "n_a", "error")}
    return Verified(Verification(expectations=[row], structural=checks, workflow=workflow), {"checks": counts})


def build_check_stages() -> Stages:
    """The build-check harness's stages: its own case loading and the workflow checks as verification."""
    return Stages(load_cases=load_build_cases, verify=verify_checks)
