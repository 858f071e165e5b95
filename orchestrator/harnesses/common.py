"""What every harness shares: running its stage set on the pool, reading its JSON files, a build's
transcript and a model's JSON reply, and writing its files."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from orchestrator.cases import CaseIssue
from orchestrator.cases.issues import FILE_FIELD
from orchestrator.cases.sources import _case_files
from orchestrator.ids import new_run_id
from orchestrator.ledger import run_dir
from orchestrator.redact import redact_obj
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import Run, RunHooks, RunOutcome
from orchestrator.run.resolve import prepare
from orchestrator.run.stages import Stages


def internal_results(cfg: RunConfig) -> RunConfig:
    """A harness that writes its own folder keeps run's ``eval-results.json`` (and the PR comment,
    the report) in the run's state folder, ``<state>/runs/<run-id>/results``."""
    run_id = cfg.run_id or new_run_id()
    return cfg.replace(run_id=run_id, output_dir=run_dir(cfg.state_dir, run_id) / "results")


async def run_stages(cfg: RunConfig, stages: Stages, hooks: list[RunHooks] | None = None) -> RunOutcome:
    """Plan → provision → execute → teardown → finalize, with the harness's ``stages``."""
    return await Run(await prepare(cfg, stages.builder), hooks, stages).execute()


def tool_trace(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls of a chat transcript in n8n's ``ToolCallTrace`` shape: ``step`` (1-based),
    ``toolCallId``, ``toolName``, ``args``, ``result`` or ``error``, ``elapsedMs``."""
    calls: dict[str, dict[str, Any]] = {}
    started: dict[str, float] = {}
    order: list[dict[str, Any]] = []
    for entry in entries:
        kind, call_id = entry.get("kind"), str(entry.get("call_id") or "")
        if kind == "tool_call":
            trace = {"step": len(order) + 1, "toolCallId": call_id, "toolName": str(entry.get("tool") or ""),
                     "args": entry.get("args") or {}}
            order.append(trace)
            calls[call_id] = trace
            started[call_id] = float(entry.get("t") or 0.0)
        elif kind in ("tool_result", "tool_error") and call_id in calls:
            trace = calls[call_id]
            if kind == "tool_result":
                trace["result"] = entry.get("result")
            else:
                trace["error"] = str(entry.get("error") or "error")
            trace["elapsedMs"] = int(max(0.0, float(entry.get("t") or 0.0) - started[call_id]) * 1000)
    return order


def errored_call(trace: dict[str, Any]) -> bool:
    """A tool call that failed: it raised, or its result says so (``success: false``, an ``error``
    text, ``errors``), the rule of n8n's tool-error rate (``cli/pairwise.ts``)."""
    if trace.get("error") is not None:
        return True
    result = trace.get("result")
    if isinstance(result, dict):
        return (result.get("success") is False or bool(isinstance(result.get("error"), str) and result["error"])
                or bool(isinstance(result.get("errors"), list) and result["errors"]))
    return False


def json_files(paths: list[Path], pattern: str = "*.json") -> tuple[list[tuple[Path, dict[str, Any]]], list[CaseIssue]]:
    """The JSON objects of the files matching ``pattern`` directly in each folder (sorted), or of
    each file given; what cannot be read, or is not an object, is a :class:`CaseIssue`."""
    files, issues = _case_files(paths, pattern)
    found: list[tuple[Path, dict[str, Any]]] = []
    for file in files:
        try:
            raw = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            issues.append(CaseIssue(str(file), FILE_FIELD, f"not a JSON file: {exc}"))
            continue
        if isinstance(raw, dict):
            found.append((file, raw))
        else:
            issues.append(CaseIssue(str(file), FILE_FIELD, "expected a JSON object"))
    return found, issues


def json_object(text: str) -> dict[str, Any] | None:
    """The JSON object of a model's reply (its first ``{`` to its last ``}``), or None."""
    match = re.search(r"\{.*\}", text, re.S)
    if not match:
        return None
    try:
        value = json.loads(match.group(0))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def write_json(path: Path, value: Any) -> Path:
    """``value`` as indented, redacted JSON, written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(redact_obj(value), indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (parents created); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path
