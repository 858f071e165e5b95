"""The agents tier: its cases are selected by ``--tier agents``, and its PR verdict is the absolute
pass gate (not the baseline comparison), in ``eval-pr-comment.md`` and in the exit code."""

from __future__ import annotations

from pathlib import Path

from support.eval_results_factory import results, unit

from orchestrator.cases import load_disk
from orchestrator.cases.selection import select_cases
from orchestrator.cli.run_cmd import GATE_RED_EXIT, gate_exit_code
from orchestrator.compare.gate import run_gate
from orchestrator.compare.pr_comment import render_pr_comment
from orchestrator.results.gate import is_gated_tier

CASES = Path(__file__).resolve().parents[3] / "cases"


def _tiered(units: list, tier: str | None):
    res = results("agents-run", units)
    res.config = {**res.config, "tier": tier}
    return res


def test_the_agents_tier_selects_the_agent_cases() -> None:
    """Reference README ("agents — Standalone Agent build cases … ``--tier agents``"): a case joins a
    tier through its ``datasets``."""
    loaded, problems = load_disk([CASES])
    assert not problems
    picked = {c.slug for c in select_cases(loaded, tier="agents")}
    assert "agent-standalone-order-status-helper" in picked
    assert all("agents" in c.case.datasets for c in loaded if c.slug in picked)
    assert "smoke-manual-set-static-fields" not in picked


def test_agents_runs_use_the_absolute_gate_not_the_baseline_comparison() -> None:
    """n8n ``comparison/gate.ts`` ``evaluateGate`` (criterion passAtK) applied to the agents tier, as
    the reference README says ("agents … PR runs use an absolute pass gate"): a unit that never
    passed turns the gate red, the PR comment shows the gate instead of a comparison, and the run
    exits non-zero; a unit that passed once is green."""
    assert is_gated_tier("agents") and is_gated_tier("pr") and not is_gated_tier("full")
    red_units = [unit("agent-a", 0, expectations={"An agent was created.": False}),
                 unit("agent-a", 1, expectations={"An agent was created.": False}),
                 unit("agent-b", 0, expectations={"It escalates refunds.": True})]
    red = _tiered(red_units, "agents")
    gate = run_gate(red)
    assert gate is not None and gate["green"] is False
    assert [u["slug"] for u in gate["failing"]] == ["agent-a :: An agent was created."]
    text = render_pr_comment(red, None, no_baseline_reason="tier agents is gated: the absolute gate stands in for a baseline comparison")
    assert "### Gate" in text and "Gate red" in text and "agent-a :: An agent was created." in text
    assert "### Comparison" not in text
    assert gate_exit_code(gate) == GATE_RED_EXIT != 0

    flaky = [unit("agent-a", 0, expectations={"An agent was created.": False}),
             unit("agent-a", 1, expectations={"An agent was created.": True})]
    green = run_gate(_tiered(flaky, "agents"))
    assert green is not None and green["green"] is True and gate_exit_code(green) == 0
    assert run_gate(_tiered(flaky, "full")) is None  # other tiers: the baseline comparison decides


def test_the_mcp_gate_tier_is_gated_absolutely_too() -> None:
    """n8n ``run/tiers.ts`` (13a56a29) ``GATED_TIER_NAMES`` = pr, agents, mcp-gate (PR #35762): an
    ``mcp-gate`` run reports the absolute gate and no baseline comparison."""
    assert is_gated_tier("mcp-gate")
    red = _tiered([unit("mcp-a", 0, {"s": False}), unit("mcp-a", 1, {"s": False})], "mcp-gate")
    gate = run_gate(red)
    assert gate is not None and gate["green"] is False and gate_exit_code(gate) == GATE_RED_EXIT
