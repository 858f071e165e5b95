"""One error tree for the whole orchestrator.

``OrchestratorError`` is the root of every error the orchestrator raises on purpose. The CLI prints
any of them as one line (``error: …``) and exits 2; only a bug (anything else) is a traceback.

- :class:`UserError` / :class:`ConfigError`: bad input (a flag, an env var, a file); the message
  names the input at fault.
- ``InstallError`` (``toolchain``), ``LaneError`` (``lanes.backend``), ``N8nError`` and its
  per-status subclasses (``n8n.errors``), ``ResultsWriteError`` (``results.writer``),
  ``CaseLoadError`` (``cases.issues``) all derive from the root.

Whether trying again can help is part of the type: ``transient`` is a class attribute that retry
policies read (:func:`is_transient`), never a string match.
"""

from __future__ import annotations

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
