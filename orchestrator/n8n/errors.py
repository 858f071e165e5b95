"""Errors raised by the n8n clients.

n8n's error bodies carry the server stack trace (``stacktrace`` on ``ResponseError``s, ``stack`` on
some others) with absolute paths of the install; those never leave this module: only the
``message`` (or a short excerpt of a non-JSON body) is kept, and it passes through
:func:`orchestrator.redact.redact` so a secret n8n echoes back is masked too.

- :class:`N8nTransportError`: the request got no HTTP answer (connection refused/reset, timeouts,
  protocol errors). The lane allocator counts these as lane failures.
- :class:`N8nHTTPError`: n8n answered with a 4xx/5xx status.
"""

from __future__ import annotations

import json
import re
from typing import Any

from orchestrator.redact import redact, redact_obj

#: Keys whose values are stack traces; dropped wherever they appear in an error body.
STACK_KEYS = frozenset({"stack", "stacktrace", "stackTrace"})
MAX_MESSAGE_CHARS = 500
_PRE = re.compile(r"<pre>(.*?)</pre>", re.S | re.I)
_TAGS = re.compile(r"<[^>]+>")


class N8nError(Exception):
    """A call to a lane failed. ``status`` is ``None`` when no HTTP answer came back."""

    def __init__(self, method: str, path: str, status: int | None, message: str) -> None:
        self.method = method
        self.path = redact(path)
        self.status = status
        self.message = redact(message)[:MAX_MESSAGE_CHARS]
        where = f"{method} {self.path}"
        super().__init__(f"{where} → {status}: {self.message}" if status is not None else f"{where}: {self.message}")


class N8nTransportError(N8nError):
    """No HTTP answer: connect refused/reset, timeout, broken stream. Counts as a lane failure.

    ``sent`` is False when the request provably never reached n8n (no connection was made), so
    even a request that creates something may be resent.
    """

    def __init__(self, method: str, path: str, message: str, *, sent: bool = True) -> None:
        super().__init__(method, path, None, message)
        self.sent = sent


class N8nHTTPError(N8nError):
    """n8n answered 4xx/5xx. ``body`` is the parsed error body without stack traces (redacted)."""

    def __init__(
        self, method: str, path: str, status: int, message: str, body: Any = None, *, retry_after_s: float | None = None
    ) -> None:
        super().__init__(method, path, status, message)
        self.body = body
        self.retry_after_s = retry_after_s

    @property
    def not_found(self) -> bool:
        return self.status == 404


def strip_stacks(obj: Any) -> Any:
    """Copy of a JSON value without any ``stack``/``stacktrace`` entries, at any depth."""
    if isinstance(obj, dict):
        return {k: strip_stacks(v) for k, v in obj.items() if k not in STACK_KEYS}
    if isinstance(obj, list):
        return [strip_stacks(v) for v in obj]
    return obj


def error_message(text: str) -> tuple[str, Any]:
    """The human part of an n8n error body and the body itself (stack-free), for :class:`N8nHTTPError`.

    n8n's shapes (seen on 2.41.1): ``{"code", "message", "stacktrace"}`` (ResponseError),
    ``{"status": "error", "message"}`` (auth/scope/not-found), zod validation
    ``{"validation"|"code", "message", "path"}`` and Express's HTML ``<pre>Cannot GET …</pre>``.
    """
    try:
        body = json.loads(text)
    except ValueError:
        match = _PRE.search(text)
        plain = match.group(1) if match else _TAGS.sub(" ", text)
        return " ".join(plain.split())[:MAX_MESSAGE_CHARS] or "(empty body)", None
    body = strip_stacks(body)
    message: str
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        message = body["message"]
        if isinstance(body.get("path"), list) and body["path"]:
            message = f"{message} (at {'.'.join(str(p) for p in body['path'])})"
    else:
        message = json.dumps(body)[:MAX_MESSAGE_CHARS]
    return message, redact_obj(body)
