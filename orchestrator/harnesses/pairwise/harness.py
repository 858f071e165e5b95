"""``orchestrator pairwise``: live builds scored by a judge panel against each example's dos and
don'ts, written as the seed's pairwise folder.

Stages on ``run``'s pool: the examples loader (:mod:`.examples`), the build (the lanes' Instance AI
agent by default; ``--builder mcp`` builds the same examples through claude, for a head-to-head),
the panel (:mod:`.panel`) as the unit verifier, and :func:`write_folder` as the finalize step:

``summary.json``   totals (examples, runs, build successes, ``buildFailures`` by class,
                   ``primaryPassRate``, ``avgDiagnostic``, tool-call figures) and the four
                   interactivity counters, in n8n's ``Summary`` shape (``cli/pairwise.ts``);
``results.jsonl``  one row per (example, iteration): prompt, dos/don'ts, the workflow (n8n's
                   ``SimpleWorkflow``: name, nodes, connections), build metadata, tool calls, feedback;
``results.csv``    the same rows' flat metrics, as n8n also writes;
``workflows/``     ``<exampleId>_<iteration>.json``, one per built workflow.

Build failure classes (a failure is a row with ``workflow: null``, empty feedback, and counts as a
primary fail): ``build_timeout`` (the build budget, ``--timeout-ms``), ``no_workflow_built`` (the
agent finished without a successful ``build-workflow``), ``agent_error`` (the run errored, the
provider failed, the lane failed). Interactivity counters (the agent is driven non-interactively:
any non-zero count is a divergence to look at): ``askUserCount`` (``ask-user`` calls, answered with
no answers), ``planToolCount`` (planning calls: ``create-tasks``/``plan``), ``autoApprovedSuspensions``
(confirmations the harness approved), ``mockedCredentialTypes`` (credential types the agent
referenced: in its tool calls, setup cards and tool results — no credential exists for it).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orchestrator.cases import LoadedCase, select_cases
from orchestrator.domain import Attribution, BuildStatus, Verdict
from orchestrator.harnesses.common import errored_call, tool_trace, write_json, write_text
from orchestrator.harnesses.pairwise.examples import Example, as_case, criteria
from orchestrator.harnesses.pairwise.panel import PanelFailed, run_panel, score
from orchestrator.redact import redact_obj
from orchestrator.results.model import EvalResults, ExpectationResult, UnitResult
from orchestrator.run.config import RunConfig
from orchestrator.run.stages import Stages, UnitCheck, Verified
from orchestrator.transcript import read_transcript
from orchestrator.verify.judge import Judge
from orchestrator.verify.verifier import Verification

PRIMARY = "pairwise_primary"
DEFAULT_JUDGE_MODEL = "claude-sonnet-4-5-20250929"
DEFAULT_EXPERIMENT = "pairwise-evals-instance-ai"
BUILD_TOOL = "build-workflow"
ASK_TOOLS = frozenset({"ask-user", "ask_user"})
PLAN_TOOLS = frozenset({"create-tasks", "create_tasks", "create_plan", "plan"})
_CREDENTIAL_TYPE = re.compile(r"^[a-z][A-Za-z0-9]*(?:Api|OAuth2Api|OAuth2|Auth|Credentials?)$")


@dataclass(frozen=True)
class PairwiseSettings:
    examples: list[Example]
    judges: int = 3
    judge_model: str = DEFAULT_JUDGE_MODEL
    output_dir: Path = Path("results") / "pairwise"
    dataset: str = "local"
    experiment_name: str = DEFAULT_EXPERIMENT
    iterations: int = 1


def simple_workflow(workflow: dict[str, Any]) -> dict[str, Any]:
    """n8n's ``SimpleWorkflow``: name, nodes, connections."""
    return {"name": workflow.get("name"), "nodes": workflow.get("nodes") or [],
            "connections": workflow.get("connections") or {}}


def error_class(unit: UnitResult) -> str | None:
    """A failed build's class (None: a workflow was built)."""
    own = (unit.harness or {}).get("errorClass")
    if isinstance(own, str):
        return own
    if unit.build.status is BuildStatus.ok:
        return None
    if unit.build.status is BuildStatus.timeout or unit.build.timeout is not None:
        return "build_timeout"
    if unit.build.status is BuildStatus.failed and "without a successful build-workflow" in (unit.build.error or ""):
        return "no_workflow_built"
    return "agent_error"


def _credential_types(value: Any, key: str = "") -> set[str]:
    """Credential-type names in tool arguments and results (``credentialType``, ``type``,
    ``preferNewCredentials``, ``mockedCredentialTypes``…)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            found |= _credential_types(v, str(k))
    elif isinstance(value, list):
        for v in value:
            found |= _credential_types(v, key)
    elif isinstance(value, str) and "credential" in key.lower() and _CREDENTIAL_TYPE.match(value):
        found.add(value)
    return found


def interactivity(calls: list[dict[str, Any]], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """How much a build asked of the user: ask-user and plan tool calls, auto-approved suspensions, and
    the credential types it mocked."""
    creds: set[str] = set()
    for call in calls:
        creds |= _credential_types(call.get("args")) | _credential_types(call.get("result"))
        if call.get("toolName") == "credentials" and isinstance((call.get("args") or {}).get("type"), str):
            creds.add(call["args"]["type"])
    return {
        "askUserCount": sum(1 for c in calls if c.get("toolName") in ASK_TOOLS),
        "planToolCount": sum(1 for c in calls if c.get("toolName") in PLAN_TOOLS),
        "autoApprovedSuspensions": sum(1 for e in entries if e.get("kind") == "answer"),
        "mockedCredentialTypes": sorted(creds),
    }


def record_of(unit: UnitResult, example: Example) -> dict[str, Any]:
    """One ``results.jsonl`` row (n8n's ``ExampleRecord``; iterations count from 1 as n8n's do)."""
    entries = read_transcript(Path(unit.transcript_path)) if unit.transcript_path else []
    calls = tool_trace(entries)
    own = unit.harness or {}
    workflow = own.get("workflow") if isinstance(own.get("workflow"), dict) else None
    built = {str((c.get("result") or {}).get("workflowId")) for c in calls
             if c.get("toolName") == BUILD_TOOL and isinstance(c.get("result"), dict) and c["result"].get("success")}
    klass = error_class(unit) if workflow is None else None
    build: dict[str, Any] = {"success": workflow is not None, "durationMs": int(unit.build.duration_s * 1000),
                             "extraWorkflowCount": max(0, len(built) - 1), "interactivity": interactivity(calls, entries)}
    if klass is not None:
        build["errorClass"] = klass
        build["errorMessage"] = unit.build.error or own.get("errorMessage") or klass
    row: dict[str, Any] = {"exampleId": example.id, "iteration": unit.iteration + 1, "prompt": example.prompt,
                           "dos": example.dos, "donts": example.donts, "workflow": workflow, "build": build,
                           "toolCalls": calls, "feedback": list(own.get("feedback") or []),
                           "lane": unit.lane, "builder": unit.builder}
    if own.get("judgeError"):
        row["judgeError"] = own["judgeError"]
    return row


def _iso(seconds: float | None) -> str:
    return dt.datetime.fromtimestamp(seconds or 0.0, tz=dt.UTC).isoformat().replace("+00:00", "Z")


def summarize(records: list[dict[str, Any]], settings: PairwiseSettings, started: float,
              finished: float | None) -> dict[str, Any]:
    """n8n's ``summary.json``: a failed build counts 0 in the primary pass rate (the agent had its
    chance), a panel that failed on a built workflow is left out (a tooling gap)."""
    failures: dict[str, int] = {}
    primary: list[float] = []
    diagnostic: list[float] = []
    counters = {"askUserCount": 0, "planToolCount": 0, "autoApprovedSuspensions": 0}
    creds: set[str] = set()
    calls = errors = submits = 0
    for r in records:
        klass = r["build"].get("errorClass")
        if klass:
            failures[klass] = failures.get(klass, 0) + 1
        p = score(r["feedback"], PRIMARY)
        if p is not None:
            primary.append(p)
        elif not r["build"]["success"]:
            primary.append(0.0)
        d = score(r["feedback"], "pairwise_diagnostic")
        if d is not None:
            diagnostic.append(d)
        inter = r["build"]["interactivity"]
        for key in counters:
            counters[key] += int(inter[key])
        creds |= set(inter["mockedCredentialTypes"])
        calls += len(r["toolCalls"])
        errors += sum(1 for c in r["toolCalls"] if errored_call(c))
        submits += sum(1 for c in r["toolCalls"] if c.get("toolName") == BUILD_TOOL)
    return {
        "builder": next((r["builder"] for r in records if r.get("builder")), "instance-ai"),
        "dataset": settings.dataset, "judgeModel": settings.judge_model, "numJudges": settings.judges,
        "iterations": settings.iterations, "experimentName": settings.experiment_name,
        "startedAt": _iso(started), "finishedAt": _iso(finished),
        "totals": {
            "examples": len({r["exampleId"] for r in records}), "runs": len(records),
            "buildSuccess": sum(1 for r in records if r["build"]["success"]), "buildFailures": failures,
            "primaryPassRate": sum(primary) / len(primary) if primary else 0.0,
            "avgDiagnostic": sum(diagnostic) / len(diagnostic) if diagnostic else 0.0,
            # n8n's submit tool is the sandbox builder's submit-workflow; a lane's agent saves with build-workflow
            "submitCallsTotal": submits, "avgSubmitCalls": submits / len(records) if records else 0.0,
            "toolCallsTotal": calls, "toolCallErrors": errors, "toolCallErrorRate": errors / calls if calls else 0.0,
        },
        "interactivity": {**counters, "mockedCredentialTypes": sorted(creds)},
        "runner": {"mode": "orchestrator"},
    }


CSV_COLUMNS = ["exampleId", "iteration", "buildSuccess", "buildError", "durationMs", "askUserCount", "planToolCount",
               "submitCalls", "toolCalls", "toolCallErrors", "pairwisePrimary", "pairwiseDiagnostic",
               "pairwiseJudgesPassed"]


def csv_text(records: list[dict[str, Any]]) -> str:
    """The records as CSV, one row per (example, iteration), in ``CSV_COLUMNS`` order."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in records:
        inter = r["build"]["interactivity"]
        writer.writerow([r["exampleId"], r["iteration"], 1 if r["build"]["success"] else 0, r["build"].get("errorClass", ""),
                         r["build"]["durationMs"], inter["askUserCount"], inter["planToolCount"],
                         sum(1 for c in r["toolCalls"] if c.get("toolName") == BUILD_TOOL), len(r["toolCalls"]),
                         sum(1 for c in r["toolCalls"] if errored_call(c)),
                         *("" if (s := score(r["feedback"], m)) is None else s for m in
                           (PRIMARY, "pairwise_diagnostic", "pairwise_judges_passed"))])
    return out.getvalue()


def safe_filename(text: str) -> str:
    """``text`` usable as a file name: runs of other characters as ``_``, at most 120 characters."""
    return re.sub(r"[^a-zA-Z0-9._-]+", "_", text)[:120]


def write_folder(results: EvalResults, settings: PairwiseSettings) -> dict[str, Any]:
    """The seed's folder from the run's units (sorted by example, then iteration); returns the summary."""
    by_id = {e.id: e for e in settings.examples}
    units = sorted((u for u in results.units if u.build.status is not BuildStatus.skipped and u.case in by_id),
                   key=lambda u: (u.case, u.iteration))
    records = [record_of(u, by_id[u.case]) for u in units]
    out = settings.output_dir
    for r in records:
        if r["workflow"] is not None:
            name = safe_filename(f"{r['exampleId']}_{r['iteration']}")
            write_json(out / "workflows" / f"{name}.json", r["workflow"])
    write_text(out / "results.jsonl", "".join(json.dumps(redact_obj(r), default=str) + "\n" for r in records))
    write_text(out / "results.csv", csv_text(records))
    summary = summarize(records, settings, results.started_at, results.finished_at)
    write_json(out / "summary.json", summary)
    return summary


class PanelVerifier:
    """The unit verifier: the built workflow, read back from the lane, before the judge panel."""

    def __init__(self, settings: PairwiseSettings, examples: dict[str, Example]) -> None:
        self.settings = settings
        self.examples = examples

    async def __call__(self, check: UnitCheck) -> Verified:
        build = check.build
        if build.workflow_id is None:  # the agent answered (or asked) and saved nothing
            row = ExpectationResult(kind="outcome", text=PRIMARY, verdict=Verdict.failed,
                                    attribution=Attribution.builder_issue, reason="no workflow built")
            return Verified(Verification(expectations=[row]), {"errorClass": "no_workflow_built", "workflow": None,
                                                               "errorMessage": "the agent finished without a workflow"})
        workflow = await check.lane.owner.get_workflow(build.workflow_id)
        dos, donts = criteria(self.examples[check.slug])
        judge = Judge(replace(check.judge.config, model=self.settings.judge_model))
        own: dict[str, Any] = {"workflow": simple_workflow(workflow)}
        try:
            own["feedback"] = await run_panel(judge, self.settings.judges, dos, donts, own["workflow"])
        except PanelFailed as exc:
            own["feedback"], own["judgeError"] = [], f"judge panel failed: {exc}"
        finally:
            await judge.aclose()
        primary = score(own["feedback"], PRIMARY)
        comment = next((f.get("comment") for f in own["feedback"] if f.get("metric") == PRIMARY), None)
        if primary is None:
            row = ExpectationResult(kind="outcome", text=PRIMARY, verdict=Verdict.incomplete,
                                    attribution=Attribution.verification_gap, reason=str(own.get("judgeError")))
        else:
            row = ExpectationResult(kind="outcome", text=PRIMARY, verdict=Verdict.passed if primary else Verdict.failed,
                                    attribution=None if primary else Attribution.builder_issue, reason=str(comment))
        return Verified(Verification(expectations=[row], workflow=workflow), own)


def pairwise_stages(settings: PairwiseSettings) -> Stages:
    """The pairwise harness's stages: the dataset's examples as cases, the judge panel as verification,
    and the pairwise folder written at the end (a write failure is returned, never raised)."""
    examples = {e.id: e for e in settings.examples}

    async def load(cfg: RunConfig) -> list[LoadedCase]:
        cases = [as_case(e, f"pairwise:{settings.dataset}/{e.id}") for e in settings.examples]
        return select_cases(cases, filter=cfg.filter, exclude=cfg.exclude)

    async def finalize(results: EvalResults) -> list[str]:
        try:
            write_folder(results, settings)
        except OSError as exc:
            return [f"cannot write the pairwise folder {settings.output_dir}: {exc}"]
        return []

    return Stages(load_cases=load, verify=PanelVerifier(settings, examples), finalize=finalize)
