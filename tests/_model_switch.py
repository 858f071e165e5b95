"""One scripted model server per test module, whose script a test may swap for its own duration."""

from __future__ import annotations

from typing import Any

from orchestrator.scripted.replies import Action, Script


class Switch:
    """The module's one model server script (lanes and runners keep its URL); ``override`` wins."""

    def __init__(self, default: Script) -> None:
        self.default = default
        self.override: Script | None = None

    def __call__(self, request: dict[str, Any]) -> Action:
        return (self.override or self.default)(request)
