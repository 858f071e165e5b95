"""``orchestrator mcp-manifest``: build each case with ``claude -p`` over the lane's MCP server and
write the manifest ``run --prebuilt-workflows`` reads, with its cost sidecar.

Stages on ``run``'s pool: the cases as ``run`` selects them, the ``mcp`` builder (a fresh member per
build, its own MCP key), and a verifier that keeps the build: it copies the built workflow into the
lane owner's personal project (``--project-id``: that project instead) — the member and its own
copy go after the unit, as every build's do — and records the copy's id. Nothing is judged.

Files (``cli/build-mcp-manifest.ts``'s): ``manifest.json`` (``--manifest``), ``{slug: [workflow id,
…]}`` — without ``--append`` the slugs just built replace their old entries and other slugs stay,
with it the new ids are added — checked with ``run --prebuilt-workflows``'s own loader before the
command ends; ``<manifest>-stats.json`` (``manifest-stats.json``): ``{version: 1, builder: <cohort>,
summary: {totalBuilds, avgTurns, avgCostUSD, totalCostUSD, avgDurationMs, toolCallTotals}, builds:
[{slug, iteration, workflowId, turns, toolCalls, costUSD, durationMs}]}`` over the builds that gave
a workflow (cost and turns summed over a unit's attempts); ``--log-dir``: each build's transcript.

The kept workflows are the product: they live on the lane until a scoring run uses them (and
``--delete-prebuilt-workflows`` deletes them). On lanes this command starts itself (process,
docker, kubernetes) they go with the lanes; point it at a lane that outlives it (``--backend
static --base-url …``) to score them later.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.builders.prebuilt.builder import COPIED_FIELDS, load_manifest
from orchestrator.harnesses.common import write_json
from orchestrator.results.model import EvalResults
from orchestrator.run.stages import Stages, UnitCheck, Verified
from orchestrator.transcript import read_transcript
from orchestrator.verify.verifier import Verification

STATS_VERSION = 1


@dataclass(frozen=True)
class ManifestSettings:
    manifest: Path
    cohort: str = "instance-mcp"
    append: bool = False
    project_id: str | None = None
    log_dir: Path | None = None

    @property
    def stats(self) -> Path:
        """n8n's sidecar: the manifest's name with ``-stats`` (``manifest-stats.json``)."""
        name = self.manifest.name[:-5] if self.manifest.name.endswith(".json") else self.manifest.name
        return self.manifest.with_name(f"{name}-stats.json")


def tool_counts(transcript_path: str | None) -> dict[str, int]:
    """How many calls of each tool a build made (its claude transcript's ``tool_call`` entries)."""
    entries = read_transcript(Path(transcript_path)) if transcript_path else []
    return dict(Counter(str(e.get("tool")) for e in entries if e.get("kind") == "tool_call" and e.get("tool")))


def keeper(settings: ManifestSettings) -> Any:
    """The manifest harness's verification: copy each built workflow as the owner (into the settings'
    project, if any) so it outlives the build user; the copy's id goes to the unit's harness data."""
    async def keep(check: UnitCheck) -> Verified:
        if check.build.workflow_id is None:
            return Verified(Verification(), {"workflowId": None})
        built = await check.lane.owner.get_workflow(check.build.workflow_id)
        body = {k: built[k] for k in COPIED_FIELDS if built.get(k) is not None}
        if settings.project_id:
            body["projectId"] = settings.project_id
        kept = await check.lane.owner.create_workflow(body)
        return Verified(Verification(workflow=built), {"workflowId": kept, "builtId": check.build.workflow_id})

    return keep


def write_files(results: EvalResults, settings: ManifestSettings) -> None:
    """Write the prebuilt-workflows manifest (an existing one kept, the run's cases' entries replaced
    unless ``append``), its stats and, with a log folder, each kept build's transcript. Raises
    ``ConfigError`` for a manifest (old or new) the loader cannot read, ``OSError`` when writing fails."""
    builds = []
    for unit in sorted(results.units, key=lambda u: (u.case, u.iteration)):
        kept = (unit.harness or {}).get("workflowId")
        if not kept:
            continue
        builds.append({"slug": unit.case, "iteration": unit.iteration + 1, "workflowId": kept, "turns": unit.build.turns,
                       "toolCalls": tool_counts(unit.transcript_path), "costUSD": unit.build.cost_usd,
                       "durationMs": int(unit.build.duration_s * 1000)})
        if settings.log_dir is not None and unit.transcript_path and Path(unit.transcript_path).is_file():
            settings.log_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(unit.transcript_path, settings.log_dir / f"{unit.case}.{unit.iteration + 1}.jsonl")
    manifest: dict[str, list[str]] = {}
    if settings.manifest.is_file():  # a malformed existing manifest fails here, before it is overwritten
        manifest = {k: list(v) for k, v in load_manifest(settings.manifest).items()}
    if not settings.append:
        for slug in {u.case for u in results.units}:
            manifest.pop(slug, None)
    for build in builds:
        manifest.setdefault(build["slug"], []).append(build["workflowId"])
    write_json(settings.manifest, manifest)
    if manifest:
        load_manifest(settings.manifest)  # the loader run --prebuilt-workflows uses: shape regressions surface here
    totals: Counter[str] = Counter()
    for build in builds:
        totals.update(build["toolCalls"])
    n = len(builds)
    write_json(settings.stats, {
        "version": STATS_VERSION, "builder": settings.cohort,
        "summary": {"totalBuilds": n, "avgTurns": sum(b["turns"] for b in builds) / n if n else 0,
                    "avgCostUSD": sum(b["costUSD"] for b in builds) / n if n else 0,
                    "totalCostUSD": sum(b["costUSD"] for b in builds),
                    "avgDurationMs": sum(b["durationMs"] for b in builds) / n if n else 0,
                    "toolCallTotals": dict(totals)},
        "builds": builds,
    })


def manifest_stages(settings: ManifestSettings) -> Stages:
    """The manifest harness's stages: keep each build (:func:`keeper`), then write the files; a failure
    to write is returned as a finalize problem, never raised."""
    async def finalize(results: EvalResults) -> list[str]:
        from orchestrator.errors import ConfigError

        try:
            write_files(results, settings)
        except ConfigError as exc:  # the existing manifest, or the new one, is not what the loader reads
            return [str(exc)]
        except OSError as exc:
            return [f"cannot write the manifest {settings.manifest}: {exc}"]
        return []

    return Stages(verify=keeper(settings), finalize=finalize)


def manifest_summary(settings: ManifestSettings) -> str:
    """One line on the manifest written: builds kept, cost, mean turns and duration."""
    try:
        stats = json.loads(settings.stats.read_text())["summary"]
    except (OSError, ValueError, KeyError):
        return "no manifest written"
    return (f"{stats['totalBuilds']} build(s) kept, ${stats['totalCostUSD']:.4f}, {stats['avgTurns']:.1f} turns and "
            f"{stats['avgDurationMs'] / 1000:.1f} s per build")
