"""How a run is configured for its model gateway (issue 37), without starting one: each lane's own
route and the gateway's token in the lane's spec (the upstream key stays with the gateway), the
concurrency bounds and their one-line errors, and arms that run at once each on their own port."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.errors import ConfigError
from orchestrator.experiments.ab import own_gateway_port
from orchestrator.lanes.model import LaneSpec
from orchestrator.metrics import RunMetrics
from orchestrator.run.config import RunConfig
from orchestrator.run.model_gateway import RunGateway
from orchestrator.run.model_route import ModelRoute
from orchestrator.run.resolve import resolve


def test_each_lane_gets_its_own_route_and_the_gateways_token_while_the_key_goes_upstream(tmp_path: Path) -> None:
    cfg = RunConfig(lanes=3, state_dir=tmp_path, model_gateway_url="http://gw.evals.svc:8788/")
    route = ModelRoute("real", None, "sk-ant-provider-key")
    spec = LaneSpec("2.41.1", env={"N8N_INSTANCE_AI_MODEL_URL": "https://proxy.example/v1x", "KEEP": "1"},
                    secret_env={"N8N_INSTANCE_AI_MODEL_API_KEY": "sk-ant-lane-key", "ANTHROPIC_API_KEY": "sk-ant-a"})
    gateway = RunGateway(cfg, route, spec, tmp_path, RunMetrics(), Console())
    lane = gateway.lane_spec(spec, 2)
    assert lane.env["N8N_INSTANCE_AI_MODEL_URL"] == "http://gw.evals.svc:8788/lane/2"
    assert lane.env["ANTHROPIC_BASE_URL"] == "http://gw.evals.svc:8788/lane/2/v1" and lane.env["KEEP"] == "1"
    assert lane.secret_env["N8N_INSTANCE_AI_MODEL_API_KEY"] == gateway.token != "sk-ant-lane-key"
    assert lane.secret_env["ANTHROPIC_API_KEY"] == "sk-ant-a"  # a build runner's claude takes it from the Secret
    assert spec.env["N8N_INSTANCE_AI_MODEL_URL"] == "https://proxy.example/v1x"  # the shared spec is untouched
    # upstream: the lanes' own URL and key (an explicit --env wins), our callers' the route's
    assert gateway.gateway.config.lanes.base_url == "https://proxy.example/v1x"
    assert gateway.gateway.config.lanes.api_key == "sk-ant-lane-key"
    assert (gateway.gateway.config.own.base_url, gateway.gateway.config.own.api_key) == (
        "https://api.anthropic.com", "sk-ant-provider-key")
    assert "sk-ant" not in repr(gateway.gateway.config)
    gateway.gateway.ledger.close()


def test_the_concurrency_rule_applies_unless_a_fixed_cap_is_given_and_its_bounds_are_checked(tmp_path: Path) -> None:
    cfg = RunConfig(lanes=3, per_lane_builds=4, state_dir=tmp_path)
    assert cfg.adaptive_concurrency and cfg.concurrency_bounds == (1, 12) and cfg.global_cap == 6
    assert not RunConfig(concurrency=5, state_dir=tmp_path).adaptive_concurrency
    assert not RunConfig(model_gateway=False, state_dir=tmp_path).adaptive_concurrency
    with pytest.raises(ConfigError, match="^--concurrency-max: 2 is below --concurrency-min 3$"):
        resolve(RunConfig(concurrency_min=3, concurrency_max=2, state_dir=tmp_path))
    with pytest.raises(ConfigError, match="^--model-gateway-url: not an http"):
        resolve(RunConfig(model_gateway_url="gw:8788", state_dir=tmp_path))
    with pytest.raises(ConfigError, match="^--provider-wait-s: must be > 0"):
        RunConfig(provider_wait_s=0, state_dir=tmp_path)


def test_arms_that_run_at_once_each_get_their_own_gateway_port(tmp_path: Path) -> None:
    first = RunConfig(model_gateway_port=8788, model_gateway_url="http://gw.evals.svc:8788", state_dir=tmp_path)
    second = own_gateway_port(first, 1)
    assert own_gateway_port(first, 0) is first
    assert (first.model_gateway_port, first.model_gateway_url) == (8788, "http://gw.evals.svc:8788")
    assert (second.model_gateway_port, second.model_gateway_url) == (8789, "http://gw.evals.svc:8789")
    free = RunConfig(state_dir=tmp_path)  # port 0: any free port, nothing to move
    assert own_gateway_port(free, 1).model_gateway_port == 0
