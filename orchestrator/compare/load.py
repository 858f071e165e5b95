"""Read an ``eval-results.json`` (ours, current or older, or one written by n8n's harness) for comparison; anything unreadable is the user's file at fault."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from orchestrator.errors import UserError
from orchestrator.results.contract import NotEvalResults, from_document
from orchestrator.results.model import EvalResults


def load_results(path: Path, *, role: str = "results") -> EvalResults:
    """Parse and validate ``path``; raise :class:`UserError` naming the file (and ``role``) on failure."""
    if not path.exists():
        raise UserError(f"{role} file not found: {path}")
    if not path.is_file():
        raise UserError(f"{role} path is not a file: {path}")
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {role} file {path}: {exc}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UserError(f"{role} file {path} is not JSON: {exc.msg} (line {exc.lineno})") from None
    try:
        return from_document(data)
    except NotEvalResults as exc:
        raise UserError(f"{role} file {path} is not an eval-results.json: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<root>"
        raise UserError(
            f"{role} file {path} is not an eval-results.json: {where}: {first['msg']}"
            f" ({exc.error_count()} problem(s))"
        ) from None
