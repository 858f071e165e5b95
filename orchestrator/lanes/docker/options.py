"""The ``docker`` backend's options (the table in :mod:`orchestrator.lanes.docker.backend`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from orchestrator.lanes.backend import SandboxOptions


class DockerOptions(SandboxOptions):
    """Keyword options of :class:`~orchestrator.lanes.docker.backend.DockerBackend`."""

    docker_host: str | None = Field(None, description=(
        "the dockerd URL (default: env DOCKER_HOST, else the private socket scripts/dockerd.sh starts)"))
    user_folder_volume: bool = Field(False, description="keep each lane's n8n user folder in a labelled named volume")
    apply_limits: bool = Field(True, description="map the profile's resource limits to container memory/CPU limits")
    stop_timeout_s: int = Field(10, ge=0, description="seconds of SIGTERM grace before SIGKILL at teardown")
    api_timeout_s: int = Field(120, ge=1, description="read timeout of one Docker API call, in seconds")
    cache: Path | None = Field(None, description=(
        "the toolchain cache an embedded sandbox's Node runs from (default: env N8N_EVAL_CACHE)"))
