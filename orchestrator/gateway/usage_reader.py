"""The usage (and model) of an answer the gateway passes through, read on the side.

A JSON answer is read whole. A streamed one is read as its bytes go by, never changing them: the
Messages API's ``message_start`` carries the input side (``input_tokens``, the cache fields) and a
first ``output_tokens``; every ``message_delta`` carries the cumulative ``usage`` so far (its
``output_tokens``; newer answers repeat the input fields there too) — the last value of each field
wins. An OpenAI-compatible stream (``custom/`` models) carries ``usage`` on a chunk of its own.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.gateway.prices import Usage, usage_of


class UsageReader:
    """Feed it the answer's bytes (:meth:`feed`), then read :attr:`usage` and :attr:`model`."""

    def __init__(self, streamed: bool) -> None:
        self.streamed = streamed
        self._buffer = b""
        self._fields: dict[str, Any] = {}
        self.model: str | None = None
        self.complete = not streamed  # a stream is complete once its stop event went by

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the answer; a streamed answer's ``data:`` events are read as they complete."""
        if not self.streamed:
            self._buffer += chunk
            return
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            line = line.strip()
            if line.startswith(b"data:"):
                self._event(line[5:].strip())

    def _event(self, data: bytes) -> None:
        if data == b"[DONE]":
            self.complete = True
            return
        try:
            event = json.loads(data)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = event["message"]
            self.model = self.model or _str(message.get("model"))
            self._merge(message.get("usage"))
        elif kind == "message_delta":
            self._merge(event.get("usage"))
        elif kind == "message_stop":
            self.complete = True
        elif "choices" in event or "usage" in event:  # OpenAI-compatible chunk
            self.model = self.model or _str(event.get("model"))
            self._merge(event.get("usage"))

    def _merge(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._fields.update({k: v for k, v in usage.items() if v is not None})

    def finish(self) -> None:
        """The answer ended: a JSON answer is parsed now."""
        if self.streamed:
            if self._buffer.strip().startswith(b"data:"):
                self._event(self._buffer.strip()[5:].strip())
            return
        try:
            body = json.loads(self._buffer) if self._buffer else None
        except ValueError:
            body = None
        if isinstance(body, dict):
            self.model = _str(body.get("model"))
            self._merge(body.get("usage"))

    @property
    def usage(self) -> Usage:
        """The tokens the answer reported so far."""
        return usage_of(self._fields)


def _str(value: Any) -> str | None:
    return str(value) if isinstance(value, str) and value else None


def error_type(body: bytes) -> str | None:
    """An error answer's ``error.type`` (Anthropic's shape, or OpenAI's ``error.type``/``code``)."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        return _str(err.get("type")) or _str(err.get("code"))
    return None


__all__ = ["UsageReader", "error_type"]
