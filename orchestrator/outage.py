"""Tell a model-provider outage (retry later, not the builder's fault) from every other failure.

Outage = HTTP 429, 500, 502, 503 or 529 from the Messages API (or its ``rate_limit_error`` /
``overloaded_error`` / ``api_error`` body), or no connection to it at all.

Sources, in order of trust:

1. the claude CLI's final ``result`` event: it carries ``api_error_status`` / ``api_error_type``
   when the turn died on an API error (2.1.328, seen here against a scripted server);
2. its text, which then *starts with* ``API Error:`` — e.g. ``API Error: Repeated 529 Overloaded
   errors. …``, ``API Error: 529 Overloaded. …``, ``API Error: Request rejected (429) · …``,
   ``API Error: 500 Internal server error. …``;
3. ``anthropic`` SDK exceptions (the judge): ``APIStatusError`` by status code / error type,
   ``APIConnectionError`` (``APITimeoutError`` included).

Text is matched only when it is an API-error message (anchored at its start, or flagged by the
CLI): a build whose final answer says "Tool errors: HTTP Request got 500" reports the built
workflow's own traffic, which is no outage.
"""

from __future__ import annotations

import inspect
import logging
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    retry_if_result,
    stop_after_attempt,
    wait_chain,
    wait_fixed,
)

from orchestrator.redact import redact

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The reference harness's provider-outage policy: 3 attempts, waiting 30 s then 90 s.
DEFAULT_OUTAGE_WAITS: tuple[float, ...] = (30.0, 90.0)

OUTAGE_STATUSES: frozenset[int] = frozenset({429, 500, 502, 503, 529})
OUTAGE_ERROR_TYPES: dict[str, int] = {"rate_limit_error": 429, "overloaded_error": 529}

_KIND_BY_STATUS = {429: "rate_limited", 529: "overloaded"}

#: The CLI's API-error text, anchored at the start: "API Error: 529 …", "API Error: Repeated 529
#: Overloaded errors …", "API Error: Request rejected (429) · …".
_CLI_API_ERROR = re.compile(
    r"^\s*API Error:\s*(?:Repeated\s+)?(?:Request rejected\s*\()?(?P<status>\d{3})\b", re.IGNORECASE
)
_CLI_API_ERROR_TYPE = re.compile(r"^\s*API Error:.*?\b(?P<type>overloaded_error|rate_limit_error)\b", re.IGNORECASE | re.S)
_CLI_CONNECTION = re.compile(
    r"^\s*API Error:\s*(?:Connection error|Connection refused|Unable to connect|Request timed out|.*(?:ECONNREFUSED|ECONNRESET|ETIMEDOUT|socket hang up))",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class OutageInfo:
    """One classified provider outage. ``message`` is redacted and short."""

    kind: str  # "overloaded" | "rate_limited" | "server_error" | "connection"
    status: int | None
    message: str
    source: str  # "claude" | "sdk"

    def describe(self) -> str:
        """One line naming the outage's kind, status and message."""
        code = f" {self.status}" if self.status else ""
        return f"provider outage ({self.kind}{code}): {self.message}"


def _kind(status: int | None) -> str:
    if status is None:
        return "connection"
    return _KIND_BY_STATUS.get(status, "server_error")


def _short(text: str, limit: int = 300) -> str:
    return redact(" ".join(text.split()))[:limit]


def classify_status(status: int | None, error_type: str | None = None, message: str = "", source: str = "sdk") -> OutageInfo | None:
    """An outage for an outage status code or error type, else None."""
    if status not in OUTAGE_STATUSES and error_type in OUTAGE_ERROR_TYPES:
        status = OUTAGE_ERROR_TYPES[error_type or ""]
    if status in OUTAGE_STATUSES:
        return OutageInfo(_kind(status), status, _short(message), source)
    return None


def classify_cli_text(text: str | None) -> OutageInfo | None:
    """Classify the CLI's API-error text (``API Error: …`` at the start); anything else is None."""
    if not text:
        return None
    match = _CLI_API_ERROR.match(text)
    if match:
        return classify_status(int(match.group("status")), message=text, source="claude")
    type_match = _CLI_API_ERROR_TYPE.match(text)
    if type_match:
        return classify_status(None, type_match.group("type").lower(), text, source="claude")
    if _CLI_CONNECTION.match(text):
        return OutageInfo("connection", None, _short(text), "claude")
    return None


def classify_result_event(event: dict[str, Any] | None) -> OutageInfo | None:
    """Classify the CLI's final ``result`` event (or an assistant event flagged as an API error)."""
    if not event:
        return None
    text = event.get("result")
    if text is None and isinstance(event.get("message"), dict):
        text = "".join(
            str(b.get("text", "")) for b in event["message"].get("content") or [] if isinstance(b, dict)
        )
    text = str(text or "")
    status = event.get("api_error_status")
    error_type = event.get("api_error_type")
    if isinstance(status, int) or isinstance(error_type, str):
        info = classify_status(status if isinstance(status, int) else None,
                               error_type if isinstance(error_type, str) else None, text, "claude")
        if info is not None:
            return info
    if event.get("type") == "result" and not event.get("is_error"):
        return None
    return classify_cli_text(text)


def classify_exception(exc: BaseException) -> OutageInfo | None:
    """Classify an ``anthropic`` SDK exception; non-outage errors (400, 401, …) give None."""
    anthropic = sys.modules.get("anthropic")  # an SDK exception means the SDK is loaded: never load it here
    if anthropic is None:
        return None
    if isinstance(exc, anthropic.APIConnectionError):  # APITimeoutError is a subclass
        return OutageInfo("connection", None, _short(f"{type(exc).__name__}: {exc}"), "sdk")
    if isinstance(exc, anthropic.APIStatusError):
        error_type = None
        body = exc.body
        if isinstance(body, dict):
            err = body.get("error") if isinstance(body.get("error"), dict) else body
            error_type = err.get("type") if isinstance(err, dict) else None
        return classify_status(exc.status_code, error_type, f"{type(exc).__name__}: {exc}", "sdk")
    return None


def outage_of(value: Any) -> OutageInfo | None:
    """The outage an attempt result (anything with ``.outage``) or an exception carries."""
    if isinstance(value, BaseException):
        return classify_exception(value)
    outage = getattr(value, "outage", None)
    return outage if isinstance(outage, OutageInfo) else None


@overload
async def retry_provider_outage(fn: Callable[[], Awaitable[T]], waits: Sequence[float] = ..., *,
                                sleep: Callable[[float], Awaitable[None]] | None = ...) -> T: ...


@overload
async def retry_provider_outage(fn: Callable[[], T], waits: Sequence[float] = ..., *,
                                sleep: Callable[[float], Awaitable[None]] | None = ...) -> T: ...


async def retry_provider_outage(
    fn: Callable[[], Any],
    waits: Sequence[float] = DEFAULT_OUTAGE_WAITS,
    *,
    sleep: Callable[[float], Awaitable[None]] | None = None,
) -> Any:
    """Call ``fn`` again after ``waits[0]``, ``waits[1]``, … while it reports a provider outage.

    An outage is a result whose ``.outage`` is set, or an ``anthropic`` exception that
    :func:`classify_exception` calls one. After the last wait the last result is returned as it is
    (its ``.outage`` still set) or the last outage exception is raised. Anything else — a good
    result, a failed build, a non-outage exception — comes back at once.
    """
    waits = tuple(waits)

    async def call() -> Any:
        value = fn()
        return await value if inspect.isawaitable(value) else value

    def log_retry(state: RetryCallState) -> None:
        outcome = state.outcome
        value = outcome.exception() if outcome is not None and outcome.failed else (outcome.result() if outcome else None)
        info = outage_of(value)
        nap = state.next_action.sleep if state.next_action else 0
        log.warning("attempt %d hit a %s; retrying in %.0fs", state.attempt_number,
                    info.describe() if info else "provider outage", nap)

    def give_up(state: RetryCallState) -> Any:
        assert state.outcome is not None
        return state.outcome.result()  # re-raises the last exception, or returns the outage result

    kwargs: dict[str, Any] = {}
    if sleep is not None:
        kwargs["sleep"] = sleep
    retrying = AsyncRetrying(
        stop=stop_after_attempt(len(waits) + 1),
        wait=wait_chain(*[wait_fixed(w) for w in waits]) if waits else wait_fixed(0),
        retry=retry_if_result(lambda r: outage_of(r) is not None)
        | retry_if_exception(lambda e: classify_exception(e) is not None),
        before_sleep=log_retry,
        retry_error_callback=give_up,
        **kwargs,
    )
    return await retrying(call)
