"""One error tree for the whole orchestrator.

``OrchestratorError`` is the root of every error the orchestrator raises on purpose. The CLI prints
any of them as one line (``error: …``) and exits 2; only a bug (anything else) is a traceback.

- :class:`UserError` / :class:`ConfigError`: bad input (a flag, an env var, a file); the message
  names the input at fault.
- ``InstallError`` (``lanes.install``), ``LaneError`` (``lanes.backend``), ``N8nError`` and its
  per-status subclasses (``n8n.errors``), ``ResultsWriteError`` (``results.writer``),
  ``CaseLoadError`` (``cases.issues``) all derive from the root.

Whether trying again can help is part of the type: ``transient`` is a class attribute that retry
policies read (:func:`is_transient`), never a string match.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar


class OrchestratorError(Exception):
    """Root of the orchestrator's own errors. ``transient``: the same call may succeed later."""

    transient: ClassVar[bool] = False


class UserError(OrchestratorError):
    """Bad input: a flag, an env var, a file. The message names the input at fault."""


class ConfigError(UserError):
    """A flag or environment value is out of range or unknown."""


def is_transient(exc: BaseException) -> bool:
    """True when the error says trying again may help (the retry policies' one question)."""
    return bool(getattr(exc, "transient", False))


class ResourceKind(str, enum.Enum):
    """What the ledger records and teardown deletes."""

    lane = "lane"
    sandbox = "sandbox"
    user = "user"
    credential = "credential"
    workflow = "workflow"
    agent = "agent"
    thread = "thread"
    data_table = "data_table"
    folder = "folder"
    project = "project"
    secret = "secret"
    service = "service"
    networkpolicy = "networkpolicy"
    lease = "lease"
    process = "process"
    container = "container"
    pod = "pod"
    volume = "volume"
    build_dir = "build_dir"
    other = "other"

    @classmethod
    def of(cls, value: str) -> ResourceKind:
        try:
            return cls(value)
        except ValueError:
            return cls.other


@dataclass(frozen=True)
class CleanupFailure:
    """A resource that teardown or cleanup could not delete (it stays open in the ledger)."""

    kind: ResourceKind
    id: str
    lane: str
    reason: str  # a whole sentence naming the resource, e.g. "delete workflow 12: … → 500: …"

    def __str__(self) -> str:
        return f"{self.lane}: {self.reason}" if self.lane else self.reason
