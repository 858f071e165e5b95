"""The ``prebuilt`` builder's options: which workflows to score, and whether to delete them after."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field

from orchestrator.builders.builder import BuilderOptions


class PrebuiltOptions(BuilderOptions):
    """The prebuilt builder's flags (``--prebuilt-workflows``, ``--delete-prebuilt-workflows``) and
    ``--keep-workflows``, which the delete contradicts."""

    flags: ClassVar[tuple[str, ...]] = ("prebuilt_workflows", "delete_prebuilt_workflows")

    prebuilt_workflows: Path | None = Field(None, description=(
        "a JSON manifest mapping case slugs to the ids of workflows that already exist on the lane: "
        "score those instead of building"))
    delete_prebuilt_workflows: bool = Field(False, description=(
        "delete the manifest's workflows from the lane once they are scored"))
    keep_workflows: bool = Field(False, description="keep what the run created on the lanes")
