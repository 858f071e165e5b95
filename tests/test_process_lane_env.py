"""The Node settings a process lane starts with (no n8n needed: only the environment is built)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.lanes.model import LaneSpec
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process import ProcessBackend
from orchestrator.ledger import Ledger


def _env(tmp_path: Path, spec: LaneSpec, **options: object) -> dict[str, str]:
    backend = ProcessBackend("env-run", Ledger.for_run("env-run", tmp_path), tmp_path, cache=tmp_path / "cache", **options)
    return backend._lane_env(spec, 0, tmp_path / "lane", 5701, 5702)


def test_lanes_share_one_compile_cache_per_n8n_version_and_a_larger_young_generation(tmp_path: Path) -> None:
    spec = make_spec("eval")
    env = _env(tmp_path, spec)
    cache = tmp_path / "cache"
    assert Path(env["NODE_COMPILE_CACHE"]).parent.parent == cache  # <cache>/n8n-<version>/compile-cache
    assert Path(env["NODE_COMPILE_CACHE"]).parent.name.startswith("n8n-")
    assert env["NODE_OPTIONS"].split() == ["--max-semi-space-size=32"]
    assert env["E2E_TESTS"] == "true" and env["N8N_ENABLED_MODULES"] == spec.env["N8N_ENABLED_MODULES"]


def test_the_profiles_own_node_options_come_last_and_tuning_can_be_turned_off(tmp_path: Path) -> None:
    spec = make_spec("eval", ["NODE_OPTIONS=--max-old-space-size=2048"])
    assert _env(tmp_path, spec)["NODE_OPTIONS"].split() == ["--max-semi-space-size=32", "--max-old-space-size=2048"]
    plain = _env(tmp_path, spec, node_tuning=False)
    assert "NODE_COMPILE_CACHE" not in plain
    assert plain["NODE_OPTIONS"] == "--max-old-space-size=2048"
