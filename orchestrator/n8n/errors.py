"""Errors raised by the n8n clients.

n8n's error bodies carry the server stack trace (``stacktrace`` on ``ResponseError``s, ``stack`` on
some others) with absolute paths of the install; those never leave this module: only the
``message`` (or a short excerpt of a non-JSON body) is kept, and it passes through
:func:`orchestrator.redact.redact` so a secret n8n echoes back is masked too.

- :class:`N8nTransportError`: the request got no HTTP answer (connection refused/reset, timeouts,
  protocol errors). The lane allocator counts these as lane failures. Transient.
- :class:`N8nHTTPError`: n8n answered with a 4xx/5xx status; :func:`http_error` picks the subclass
  for the status (``N8nBadRequest`` 400, ``N8nUnauthorized`` 401, ``N8nForbidden`` 403,
  ``N8nNotFound`` 404, ``N8nConflict`` 409, ``N8nRateLimited`` 429 and ``N8nServerError`` 5xx —
  the last two transient).
"""

from __future__ import annotations

import json
import re
from typing import Any

from orchestrator.errors import OrchestratorError
from orchestrator.redact import redact, redact_obj

#: Keys whose values are stack traces; dropped wherever they appear in an error body.
STACK_KEYS = frozenset({"stack", "stacktrace", "stackTrace"})
MAX_MESSAGE_CHARS = 500
_PRE = re.compile(r"<pre>(.*?)</pre>", re.S | re.I)
_TAGS = re.compile(r"<[^>]+>")


class N8nError(OrchestratorError):
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

    transient = True

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


class N8nBadRequest(N8nHTTPError):
    """400: the request (or the state it assumes, e.g. an unarchived workflow) is wrong."""


class N8nUnauthorized(N8nHTTPError):
    """401: no or a stale session / API key."""


class N8nForbidden(N8nHTTPError):
    """403: the user lacks the scope (e.g. a member enabling MCP)."""


class N8nNotFound(N8nHTTPError):
    """404: gone already, or the endpoint does not exist on this n8n."""


class N8nConflict(N8nHTTPError):
    """409: e.g. a chat run is already active on the thread."""


class N8nRateLimited(N8nHTTPError):
    """429: wait ``retry_after_s`` (when n8n said) and try again."""

    transient = True


class N8nServerError(N8nHTTPError):
    """5xx: the lane failed this request; it may answer the next one."""

    transient = True


_BY_STATUS: dict[int, type[N8nHTTPError]] = {
    400: N8nBadRequest, 401: N8nUnauthorized, 403: N8nForbidden, 404: N8nNotFound, 409: N8nConflict, 429: N8nRateLimited,
}


def http_error(method: str, path: str, status: int, message: str, body: Any = None, *,
               retry_after_s: float | None = None) -> N8nHTTPError:
    """The :class:`N8nHTTPError` subclass for ``status``."""
    cls = N8nServerError if status >= 500 else _BY_STATUS.get(status, N8nHTTPError)
    return cls(method, path, status, message, body, retry_after_s=retry_after_s)


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
