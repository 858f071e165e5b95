"""Base classes for the case models: camelCase JSON names, snake_case attributes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class CaseModel(BaseModel):
    """A part of the case schema we own: unknown keys are refused (a typo fails at load)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
    )


class OpenModel(BaseModel):
    """A shape that belongs to n8n (a workflow, an agent config, a message): only the keys the
    harness relies on are validated; every other key is kept as authored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
    )
