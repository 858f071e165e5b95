"""Errors a user can fix. The CLI prints these as one line (``error: …``) and exits 2, never a traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input: a flag, an env var, a file. The message names the input at fault."""


class ConfigError(UserError):
    """A flag or environment value is out of range or unknown."""
