"""One scripted model server per test module, whose script a test may swap for its own duration;
and the session's shared server (:class:`SharedModel`), leased by the modules that share a lane."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from orchestrator.scripted.replies import Action, Script
from orchestrator.scripted.scripts import demo_script
from orchestrator.scripted.server import RecordedRequest, ScriptedModelServer, models_by_route


class Switch:
    """The module's one model server script (lanes and runners keep its URL); ``override`` wins."""

    def __init__(self, default: Script) -> None:
        self.default = default
        self.override: Script | None = None

    def __call__(self, request: dict[str, Any]) -> Action:
        return (self.override or self.default)(request)


class ModelLease:
    """A module's view of the shared server: the same URL, and only the requests (and script
    errors) recorded since the module took it — what a server of the module's own would show."""

    def __init__(self, server: ScriptedModelServer) -> None:
        self._server = server
        self._first = server.request_count
        self._first_error = len(server.script_errors)

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def base_url(self) -> str:
        return self._server.base_url

    @property
    def requests(self) -> list[RecordedRequest]:
        return self._server.requests[self._first:]

    @property
    def message_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.is_messages]

    @property
    def model_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.is_model_call]

    def models_by_route(self, *, build_only: bool = True) -> dict[str, set[str]]:
        return models_by_route(self.requests, build_only=build_only)

    @property
    def request_count(self) -> int:
        return len(self.requests)

    def count(self, path: str) -> int:
        return sum(1 for r in self.requests if r.path == path)

    @property
    def script_errors(self) -> list[BaseException]:
        return self._server.script_errors[self._first_error:]


class SharedModel:
    """The session's one scripted model server. A lane's model route is fixed when the lane starts,
    so the modules sharing a lane share its server too, one module at a time, each with its script."""

    def __init__(self) -> None:
        self.switch = Switch(demo_script())
        self.server = ScriptedModelServer(self.switch)

    @contextmanager
    def lease(self, script: Script) -> Iterator[ModelLease]:
        self.switch.default, self.switch.override = script, None
        try:
            yield ModelLease(self.server)
        finally:
            self.switch.default, self.switch.override = demo_script(), None
