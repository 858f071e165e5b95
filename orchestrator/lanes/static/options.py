"""The ``static`` backend's options: where the lanes someone else runs are, and their owner."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, SecretStr

from orchestrator.lanes.backend import BackendOptions


class StaticOptions(BackendOptions):
    """Keyword options of :class:`~orchestrator.lanes.static.backend.StaticBackend`."""

    flags: ClassVar[tuple[str, ...]] = ("base_url", "email", "password")
    env_vars: ClassVar[Mapping[str, str]] = {"email": "N8N_EVAL_EMAIL", "password": "N8N_EVAL_PASSWORD"}

    base_url: str | None = Field(None, description="the lanes' URLs, comma-separated")
    email: str | None = Field(None, description=(
        "the lanes' owner (default: env N8N_EVAL_EMAIL; none: the run seeds its own owner)"))
    password: SecretStr | None = Field(None, description="the owner's password (default: env N8N_EVAL_PASSWORD)")
