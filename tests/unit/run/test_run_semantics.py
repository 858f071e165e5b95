"""Semantics the reference states, at the config edge."""

from __future__ import annotations

from orchestrator.run.config import RunConfig
from orchestrator.run.resolve import resolve


def test_langtracer_mode_defaults_dataset_and_baseline_prefix_to_the_suite() -> None:
    cfg = resolve(RunConfig(source="langtracer", suite="baseline")).config
    assert cfg.dataset == "instance-ai-langtracer-baseline"
    assert cfg.baseline_prefix == "instance-ai-langtracer-baseline"


def test_explicit_dataset_and_prefix_win() -> None:
    cfg = resolve(RunConfig(source="langtracer", suite="baseline", dataset="mcp-workflow-evals",
                    baseline_prefix="mcp-baseline-")).config
    assert (cfg.dataset, cfg.baseline_prefix) == ("mcp-workflow-evals", "mcp-baseline-")


def test_disk_mode_keeps_the_shared_defaults() -> None:
    cfg = resolve(RunConfig()).config
    assert cfg.dataset is None and cfg.baseline_prefix == "instance-ai-baseline-"
