"""The ``static`` backend: lanes someone already started (``--base-url a,b``). Never torn down."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import LaneBackend, answers_ready, register_backend
from orchestrator.lanes.model import Lane, LaneSpec, LaneState
from orchestrator.lanes.pool import parse_base_urls
from orchestrator.lanes.static.options import StaticOptions
from orchestrator.ledger import Ledger
from orchestrator.n8n.owner import OwnerCredentials
from orchestrator.redact import register_secret


@register_backend
class StaticBackend(LaneBackend):
    name = "static"
    owns_lanes = False
    options_model = StaticOptions

    def __init__(self, run_id: str, ledger: Ledger, state_dir: Path, **options: object) -> None:
        super().__init__(run_id, ledger, state_dir, **options)
        opts = self.config
        assert isinstance(opts, StaticOptions)
        self.urls = parse_base_urls(opts.base_url or "")
        if not self.urls:
            raise ConfigError("--base-url: the static backend needs at least one lane URL")
        self._http = httpx.AsyncClient(timeout=5.0)
        email = opts.email or os.environ.get("N8N_EVAL_EMAIL")
        password = (opts.password.get_secret_value() if opts.password else None) or os.environ.get("N8N_EVAL_PASSWORD")
        register_secret(str(password) if password else None)
        #: Given credentials → log in as that owner; none → seed our own owner with the e2e reset.
        self.owner = OwnerCredentials(str(email), str(password)) if email and password else None

    async def start_lane(self, index: int, spec: LaneSpec) -> Lane:
        if index >= len(self.urls):
            raise ConfigError(f"--lanes {index + 1} exceeds the {len(self.urls)} --base-url lanes given")
        return Lane(
            lane_id=f"s{index}", index=index, base_url=self.urls[index], backend=self.name,
            run_id=self.run_id, state=LaneState.starting, handle=self.urls[index], owner=self.owner,
        )

    async def health(self, lane: Lane) -> bool:
        return await answers_ready(self._http, lane.base_url)

    async def logs(self, lane: Lane, lines: int = 40) -> str:
        return "(static lane: logs are not available to the orchestrator)"

    async def teardown(self, lane: Lane) -> None:
        lane.state = LaneState.stopped  # someone else's server: left running

    async def sweep(self, run_id: str | None = None) -> list[str]:
        return []

    async def close(self) -> None:
        await self._http.aclose()
