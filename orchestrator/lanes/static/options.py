"""The ``static`` backend's options: where the lanes someone else runs are, and their owner."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, SecretStr

from orchestrator.lanes.backend import BackendOptions


class StaticOwner(BackendOptions):
    """The lanes' owner: the run logs in as them, and so does ``orchestrator cleanup`` to delete what
    a run left on someone else's n8n (the users, credentials and workflows it recorded)."""

    flags: ClassVar[tuple[str, ...]] = ("email", "password")
    env_vars: ClassVar[Mapping[str, str]] = {"email": "N8N_EVAL_EMAIL", "password": "N8N_EVAL_PASSWORD"}

    email: str | None = Field(None, description=(
        "the lanes' owner the run and cleanup log in as (default: env N8N_EVAL_EMAIL; none: a run seeds its own)"))
    password: SecretStr | None = Field(None, description="the owner's password (default: env N8N_EVAL_PASSWORD)")


class StaticOptions(StaticOwner):
    """Keyword options of :class:`~orchestrator.lanes.static.backend.StaticBackend`."""

    flags: ClassVar[tuple[str, ...]] = ("base_url", *StaticOwner.flags)
    cleanup: ClassVar[type[BackendOptions] | None] = StaticOwner

    base_url: str | None = Field(None, description="the lanes' URLs, comma-separated")
