"""Where model calls go: the real provider, or the embedded scripted model for offline runs.

``--model-server auto`` (the default) uses the real provider when ``ANTHROPIC_API_KEY`` is set and
otherwise starts the embedded scripted Anthropic-compatible server on loopback, so the README's
one command runs end to end on a machine with no key and no internet. A scripted run measures
the pipeline (lanes, MCP builds, verification, cleanup), not a model: the run says so in its
console output and records ``model_server: scripted`` in ``eval-results.json``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from orchestrator.errors import ConfigError
from orchestrator.redact import register_secret

log = logging.getLogger(__name__)

SCRIPTED_API_KEY = "scripted-model-key-not-a-secret"


@dataclass
class ModelRoute:
    kind: str  # real | scripted
    base_url: str | None
    api_key: str | None = field(repr=False)
    server: object | None = None

    def lane_env(self, tag: str | None = None) -> dict[str, str]:
        """Env for lanes so their server-side eval LLM (mock layer) uses the same route; ``tag`` (an A/B
        arm) makes the scripted server record their calls under ``/route/<tag>``. Defaults only: what
        the run's ``--env`` sets explicitly wins (``run.provision.lane_spec``)."""
        if self.kind != "scripted" or not self.base_url:
            return {}
        # The lane appends /v1 itself; the URL is only used when the eval model is the lane's model.
        url = f"{self.base_url}/route/{tag}" if tag else self.base_url
        return {"N8N_INSTANCE_AI_MODEL_URL": url,
                "N8N_INSTANCE_AI_MODEL": "anthropic/claude-sonnet-4-6"}

    def models_by_route(self) -> dict[str, list[str]]:
        """Scripted route: which models the build calls of each route tag asked for ("/" untagged)."""
        if self.server is None:
            return {}
        seen = self.server.models_by_route()  # type: ignore[attr-defined]
        return {route or "/": sorted(models) for route, models in sorted(seen.items())}

    def lane_secrets(self) -> dict[str, str]:
        """The model key lanes get from the route (the scripted server's; a real key is an arm's own)."""
        if self.kind != "scripted":
            return {}
        return {"N8N_INSTANCE_AI_MODEL_API_KEY": SCRIPTED_API_KEY}

    def close(self) -> None:
        """Stop the embedded scripted server, if this route started one."""
        if self.server is not None:
            self.server.stop()  # type: ignore[attr-defined]
            self.server = None


def open_route(mode: str, server_name: str | None = None) -> ModelRoute:
    """The run's model provider for ``--model-server`` ``mode``: the real one (``ANTHROPIC_API_KEY``,
    ``ANTHROPIC_BASE_URL``) or the embedded scripted server (offline; ``N8N_EVAL_SCRIPTED_PROVIDER``
    puts it under pressure), whose MCP tool names use ``server_name`` (the builder's, if it has one).

    Raises:
        ConfigError: ``real`` without a key, or a bad ``N8N_EVAL_SCRIPTED_PROVIDER``.
    """
    api_key = os.environ.get("ANTHROPIC_API_KEY") or None
    if mode == "real" or (mode == "auto" and api_key):
        if not api_key:
            raise ConfigError("--model-server real: ANTHROPIC_API_KEY is not set")
        register_secret(api_key)
        return ModelRoute("real", os.environ.get("ANTHROPIC_BASE_URL") or None, api_key)
    from orchestrator.scripted.pressure import PRESSURE_ENV, Pressure
    from orchestrator.scripted.scripts import demo_script
    from orchestrator.scripted.server import ScriptedModelServer

    try:  # a provider under pressure (rate limits, an outage…), for benches and tests; none by default
        pressure = Pressure.from_env()
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{PRESSURE_ENV}: {exc}") from None
    script = demo_script(server_name) if server_name else demo_script()
    server = ScriptedModelServer(script, pressure=pressure).start()
    log.warning(
        "no ANTHROPIC_API_KEY: using the embedded scripted model at %s (offline run: it measures "
        "the pipeline, not a model)", server.base_url,
    )
    return ModelRoute("scripted", server.base_url, SCRIPTED_API_KEY, server)
