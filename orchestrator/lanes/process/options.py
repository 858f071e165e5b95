"""The ``process`` backend's options: what a run (or a bench) may tune of its local n8n processes."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from orchestrator.lanes.backend import SandboxOptions


class ProcessOptions(SandboxOptions):
    """Keyword options of :class:`~orchestrator.lanes.process.backend.ProcessBackend` (each on by
    default: turning one off gives the bench its "before")."""

    cache: Path | None = Field(None, description=(
        "the toolchain cache the lanes' n8n and Node run from (default: env N8N_EVAL_CACHE, "
        "else ~/.cache/n8n-eval-orchestrator)"))
    lane_template: bool = Field(True, description=(
        "start every lane from a migrated database template instead of an empty folder"))
    node_tuning: bool = Field(True, description=(
        "share one Node compile cache between lanes and size Node's young generation for n8n"))
    stagger: bool = Field(True, description=(
        "start lanes after the first at a lower CPU priority until they are ready (root only)"))
    lazy_runner: bool = Field(True, description=(
        "start a lane's JS task runner with its first Code node instead of with n8n"))
