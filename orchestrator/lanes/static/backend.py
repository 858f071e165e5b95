"""The ``static`` backend: lanes someone already started (``--base-url a,b``). Never torn down."""

from __future__ import annotations

from pathlib import Path

import httpx

from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import BackendOptions, LaneBackend, answers_ready, readiness_status, register_backend
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
        email = opts.email  # or N8N_EVAL_EMAIL / N8N_EVAL_PASSWORD (StaticOptions.env_vars)
        password = opts.password.get_secret_value() if opts.password else None
        register_secret(str(password) if password else None)
        #: Given credentials → log in as that owner; none → seed our own owner with the e2e reset.
        self.owner = OwnerCredentials(str(email), str(password)) if email and password else None

    @property
    def owner_password(self) -> str | None:
        """The given owner's password (``--password``), or None."""
        opts = self.config
        assert isinstance(opts, StaticOptions)
        return opts.password.get_secret_value() if opts.password else None

    @classmethod
    def check_options(cls, options: BackendOptions, lanes: int) -> None:
        """``--base-url`` is given, valid and names at least ``lanes`` lanes; else ``ConfigError``."""
        assert isinstance(options, StaticOptions)
        if not options.base_url:
            raise ConfigError(f"--base-url: required with --backend {cls.name}")
        urls = parse_base_urls(options.base_url)
        if lanes > len(urls):
            raise ConfigError(f"--lanes: {lanes} exceeds the {len(urls)} --base-url lane(s) given")

    @classmethod
    async def lanes_answer(cls, options: BackendOptions, lanes: int) -> None:
        """Each of the first ``lanes`` URLs answers its readiness check; else ``ConfigError`` naming it."""
        assert isinstance(options, StaticOptions)
        async with httpx.AsyncClient(timeout=5.0) as http:
            for index, url in enumerate(parse_base_urls(options.base_url or "")[:lanes]):
                status = await readiness_status(http, url)
                if isinstance(status, str):
                    raise ConfigError(f"--base-url: lane s{index} at {url} is unreachable: {status}")

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
        """Mark the lane stopped; the server is someone else's and is left running."""
        lane.state = LaneState.stopped  # someone else's server: left running

    async def sweep(self, run_id: str | None = None) -> list[str]:
        """Nothing to sweep: the run starts no server."""
        return []

    async def close(self) -> None:
        await self._http.aclose()
