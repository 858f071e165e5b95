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
_pending: list[str] = []  # registered, not yet in a compiled bucket
#: Compiled buckets of secrets, largest first; each holds at least twice the secrets of the next.
_buckets: list[tuple[int, re.Pattern[str], list[str]]] = []
_compiled_chars = 0  # total pattern text ever compiled (for the complexity test and the bench)

#: Shapes that are secrets whoever produced them (bearer tokens, Anthropic/LangSmith keys, JWTs).
_SHAPES = re.compile(
    r"(sk-ant-[A-Za-z0-9_\-]{8,}|lsv2_[A-Za-z0-9_]{8,}|lt_[A-Za-z0-9]{16,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r"|(?<=Bearer )[A-Za-z0-9._\-]{12,})"
)


def register_secret(value: str | None) -> None:
    """Remember ``value`` as a secret (values shorter than 6 characters are ignored as too common)."""
    if not value or len(value) < _MIN_LEN:
        return
    with _lock:
        if value not in _secrets:
            _secrets.add(value)
            _pending.append(value)


def _compile(values: list[str]) -> re.Pattern[str]:
    """Every occurrence of any of ``values``, overlapping ones included: a zero-width lookahead at
    each position captures the longest secret starting there (alternatives longest first)."""
    global _compiled_chars
    text = "(?=(" + "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True)) + "))"
    _compiled_chars += len(text)
    return re.compile(text)


def _flush() -> list[tuple[int, re.Pattern[str], list[str]]]:
    """Compile secrets registered since the last call; return the buckets to scan with.

    Recompiling one alternation of every secret on each new batch costs O(N) per batch, O(N^2)
    over a run (measured: ~50 s for 2,000 secrets registered 4 at a time). Buckets merge like a
    binary counter instead -- a new bucket merges into the previous one while it is at least half
    its size -- so each secret is compiled O(log N) times and a redaction scans O(log N) patterns
    whose sizes sum to N. ``re`` caches every pattern text it compiles (up to 512), which would
    keep the superseded buckets alive: the cache is purged after each flush.
    """
    if not _pending:
        return _buckets
    with _lock:
        if _pending:
            values = list(_pending)
            _pending.clear()
            while _buckets and _buckets[-1][0] <= 2 * len(values):
                values = _buckets.pop()[2] + values
            _buckets.append((len(values), _compile(values), values))
            re.purge()
        return list(_buckets)


def compiled_chars() -> int:
    """Total pattern text compiled for registered secrets so far (grows ~N log N, not N^2)."""
    return _compiled_chars


def known_secrets() -> frozenset[str]:
    with _lock:
        return frozenset(_secrets)


def redact(text: str) -> str:
    """Mask every registered secret (overlapping occurrences as one ``***``) and every secret shape."""
    if not text:
        return text
    spans: list[tuple[int, int]] = []
    for _size, pattern, _values in _flush():
        spans.extend(m.span(1) for m in pattern.finditer(text))
    if spans:
        spans.sort()
        out: list[str] = []
        pos = 0
        start, end = spans[0]
        for s, e in spans[1:]:
            if s < end:  # overlaps the current span (nested or straddling): one mask
                end = max(end, e)
                continue
            out += (text[pos:start], MASK)
            pos, (start, end) = end, (s, e)
        out += (text[pos:start], MASK, text[end:])
        text = "".join(out)
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
