"""What a chat build's error events mean: a provider outage (retried, then ``provider_outage``)
or the harness's sandbox failing (a framework fault) — never the agent's own failures."""

from __future__ import annotations

import re
from typing import Any

from orchestrator.outage import OUTAGE_ERROR_TYPES, OutageInfo, classify_status
from orchestrator.redact import redact

_STATUS_IN_TEXT = re.compile(r"\b(429|500|502|503|529)\b")
_OUTAGE_WORDS = re.compile(r"\b(overloaded_error|rate_limit_error|overloaded|rate limit(?:ed)?|too many requests)\b", re.I)
#: The AI SDK's flattened provider failure, seen on 2.41.1 against a scripted 529 storm:
#: ``Failed after 3 attempts. Last error: AI_APICallError: Overloaded`` (no statusCode on the event).
_API_CALL_ERROR = re.compile(r"\b(?:AI_APICallError|AI_RetryError)\b:?\s*(?P<rest>.*)", re.I | re.S)
_SERVER_WORDS = {"internal server error": 500, "bad gateway": 502, "service unavailable": 503, "api_error": 500}
_CONNECTION_WORDS = re.compile(r"cannot connect to api|fetch failed|econnrefused|econnreset|etimedout|socket hang up", re.I)


# ------------------------------------------------------------------------------------------------
# classification


def classify_run_error(payload: dict[str, Any] | str | None) -> OutageInfo | None:
    """A provider outage from one ``error`` event payload (or a run's flattened error text).

    The structured ``statusCode`` wins; else the text: ``Agent error: …`` (n8n's flattened agent
    failure) or a bare provider error naming 429/5xx/529 or ``overloaded_error`` /
    ``rate_limit_error``. ``Tool errors: …`` is the built workflow's own (mocked) traffic — a
    product signal, never an outage.
    """
    if payload is None:
        return None
    if isinstance(payload, str):
        text, status, code = payload, None, None
    else:
        text = str(payload.get("content") or payload.get("message") or "")
        raw = payload.get("statusCode")
        status = int(raw) if isinstance(raw, (int, float)) or (isinstance(raw, str) and raw.isdigit()) else None
        code = payload.get("code") if isinstance(payload.get("code"), str) else None
        details = payload.get("technicalDetails")
        if isinstance(details, str):
            text = f"{text} {details}"
    stripped = text.strip()
    if stripped.lower().startswith("tool error"):
        return None
    if status is not None:
        return classify_status(status, code, stripped, source="instance-ai")
    if code in OUTAGE_ERROR_TYPES:
        return classify_status(None, code, stripped, source="instance-ai")
    body = stripped[len("agent error:"):] if stripped.lower().startswith("agent error:") else stripped
    if "tool errors:" in body.lower()[:40]:
        return None
    match = _STATUS_IN_TEXT.search(body)
    if match:
        return classify_status(int(match.group(1)), None, stripped, source="instance-ai")
    api = _API_CALL_ERROR.search(body)
    if api:
        rest = api.group("rest").lower()
        for phrase, code in _SERVER_WORDS.items():
            if phrase in rest:
                return classify_status(code, None, stripped, source="instance-ai")
        if _CONNECTION_WORDS.search(rest):
            return OutageInfo("connection", None, redact(" ".join(stripped.split()))[:300], "instance-ai")
    words = _OUTAGE_WORDS.search(body)
    if words:
        word = words.group(1).lower()
        error_type = "overloaded_error" if word.startswith("overloaded") else "rate_limit_error"
        return classify_status(None, error_type, stripped, source="instance-ai")
    return None


_SANDBOX_DOWN = re.compile(r"sandbox.{0,200}?(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|socket hang up|fetch failed|"
                           r"connection (?:refused|reset)|service unavailable|502|503)", re.I | re.S)
_NO_WORKSPACE = "Runtime workspace is required"


def sandbox_fault(text: str | None) -> str | None:
    """The harness's sandbox failing (not the agent): unreachable (seen when the service died
    mid-build: ``Sandbox workspace setup failed during read-initialization-marker: connect
    ECONNREFUSED …``) or not configured (``Runtime workspace is required …``)."""
    if not text:
        return None
    if _NO_WORKSPACE in text:
        return "the lane has no sandbox (Runtime workspace is required for workflow source files)"
    match = _SANDBOX_DOWN.search(text)
    if match:
        return "the lane's sandbox is unreachable: " + " ".join(text[max(0, match.start()): match.end() + 60].split())
    return None
