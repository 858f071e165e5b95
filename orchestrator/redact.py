"""Secret redaction: every secret value the run handles is registered here, and every log line,
result file, report and ledger line passes through :func:`redact` before it is written.

Registering by value (not by key name) catches a secret wherever it ends up: in an error body
n8n echoed back, in a URL, in claude's output.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

MASK = "***"
_MIN_LEN = 6
_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
_dirty = False

#: Shapes that are secrets whoever produced them (bearer tokens, Anthropic/LangSmith keys, JWTs).
_SHAPES = re.compile(
    r"(sk-ant-[A-Za-z0-9_\-]{8,}|lsv2_[A-Za-z0-9_]{8,}|lt_[A-Za-z0-9]{16,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r"|(?<=Bearer )[A-Za-z0-9._\-]{12,})"
)


def register_secret(value: str | None) -> None:
    """Remember ``value`` as a secret (values shorter than 6 characters are ignored as too common)."""
    global _dirty
    if not value or len(value) < _MIN_LEN:
        return
    with _lock:
        if value not in _secrets:
            _secrets.add(value)
            _dirty = True


def _current_pattern() -> re.Pattern[str] | None:
    """One alternation of every secret, longest first, rebuilt only when a secret was added.

    ``re`` caches up to 512 compiled patterns by their text; each rebuild is a new, ever longer
    text, so a long run would keep hundreds of huge patterns alive (measured: ~1.5 GB at 1,600
    secrets). The cache is purged after each rebuild so only the current pattern stays.
    """
    global _pattern, _dirty
    if _dirty:
        with _lock:
            if _dirty:
                alts = sorted(_secrets, key=len, reverse=True)
                _pattern = re.compile("|".join(re.escape(s) for s in alts))
                re.purge()
                _dirty = False
    return _pattern


def known_secrets() -> frozenset[str]:
    with _lock:
        return frozenset(_secrets)


def redact(text: str) -> str:
    if not text:
        return text
    pattern = _current_pattern()
    if pattern is not None:
        text = pattern.sub(MASK, text)
    return _SHAPES.sub(MASK, text)


def redact_obj(obj: Any) -> Any:
    """Redact every string inside a JSON-like structure (keys are kept as they are)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    return obj


class RedactingFilter(logging.Filter):
    """Applied to the root handler so no log record carries a registered secret."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # pragma: no cover - a broken format string still gets logged
            message = str(record.msg)
        record.msg = redact(message)
        record.args = None
        return True


def install_log_redaction() -> None:
    root = logging.getLogger()
    for handler in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
