"""``orchestrator pairwise-upload``: a pairwise folder as one LangSmith experiment, the separate
step the seed describes (``scripts/upload-pairwise-to-langsmith.ts``: feedback stays in the local
files until uploaded).

The experiment is ``<name>-<8 hex>`` (``--experiment-name``, else the folder's ``experimentName``),
its metadata the folder's summary (builder, dataset, judge model and count, iterations, totals,
interactivity); one root run per ``results.jsonl`` row — inputs ``{exampleId, iteration, prompt,
dos, donts}``, outputs ``{workflow, build}`` — and each feedback row of it as LangSmith feedback
(key = the metric: ``pairwise_primary``, ``pairwise_diagnostic``, ``judge1``…). Unlike ``run``'s
hooks, a failure here is the command's error (the upload is all it does).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import uuid
from pathlib import Path
from typing import Any

from orchestrator.errors import UserError
from orchestrator.experiments.langsmith_sync import API_KEY_ENV, ENDPOINT_ENV, make_client
from orchestrator.redact import redact, redact_obj


def _rows(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        rows = [json.loads(line) for line in (folder / "results.jsonl").read_text(encoding="utf-8").splitlines()
                if line.strip()]
    except (OSError, ValueError) as exc:
        raise UserError(f"{folder} is not a pairwise folder (summary.json + results.jsonl): {exc}") from None
    return summary, rows


def _upload(folder: Path, name: str | None) -> tuple[str, int]:
    key = os.environ.get(API_KEY_ENV)
    if not key:
        raise UserError(f"pairwise-upload needs {API_KEY_ENV}")
    summary, rows = _rows(folder)
    client = make_client(key, os.environ.get(ENDPOINT_ENV) or None)
    experiment = f"{name or summary.get('experimentName') or 'pairwise-evals-instance-ai'}-{uuid.uuid4().hex[:8]}"
    metadata = redact_obj({k: summary.get(k) for k in ("builder", "dataset", "judgeModel", "numJudges", "iterations",
                                                       "totals", "interactivity", "startedAt", "finishedAt")})
    project = client.create_project(experiment, metadata=metadata, description=f"pairwise folder {folder.name}")
    now = dt.datetime.now(dt.UTC)
    for row in rows:
        run_id = uuid.uuid5(project.id, f"{row.get('exampleId')}#{row.get('iteration')}")
        build = row.get("build") or {}
        client.create_run(
            name=f"{row.get('exampleId')}#{row.get('iteration')}", run_type="chain", id=run_id, project_name=experiment,
            inputs=redact_obj({k: row.get(k) for k in ("exampleId", "iteration", "prompt", "dos", "donts")}),
            outputs=redact_obj({"workflow": row.get("workflow"), "build": build}),
            error=redact(str(build.get("errorMessage"))) if not build.get("success") else None,
            start_time=now, end_time=now,
        )
        for fb in row.get("feedback") or []:
            if isinstance(fb, dict) and isinstance(fb.get("score"), (int, float)):
                client.create_feedback(run_id, str(fb.get("metric")), score=fb["score"],
                                       comment=redact(str(fb["comment"])) if fb.get("comment") else None,
                                       session_id=project.id)
    client.update_project(project.id, end_time=dt.datetime.now(dt.UTC), metadata=metadata)
    return experiment, len(rows)


async def upload_folder(folder: Path, name: str | None = None) -> tuple[str, int]:
    """Upload ``folder``; returns the experiment's name and how many runs it holds."""
    try:
        return await asyncio.to_thread(_upload, folder, name)
    except UserError:
        raise
    except Exception as exc:  # the SDK's many errors: one line naming what failed
        raise UserError(redact(f"LangSmith upload of {folder} failed: {type(exc).__name__}: {exc}")) from None
