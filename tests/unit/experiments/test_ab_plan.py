"""``orchestrator ab --plan``: build pairs, iterations, cost and wall time from a baseline, checked
against a case computed by hand.

Our own statistics (nothing in n8n's harness plans sample sizes). The build score a plan rests on
follows n8n's rule in ``packages/@n8n/instance-ai/evaluations/harness/runner.ts``
(``runWorkflowTestCase``): a build that created no workflow has ``workflowBuildSuccess: false`` and
no scenario passes, which :func:`orchestrator.results.scoring.scoring_units` counts as failures.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from support.eval_results_factory import results, unit
from typer.testing import CliRunner

from orchestrator.errors import ConfigError, UserError
from orchestrator.experiments.plan import (
    build_scores,
    detectable_difference,
    make_plan,
    pairs_needed,
    read_baseline,
)
from orchestrator.results.model import BuildStatus


def _baseline():
    """2 cases × 4 iterations on one lane, one after another (60 s each, $0.25 each).
    Case a: scores 1, 1, 0, 0 → P(two builds differ) = 1 − (2·1 + 2·1)/(4·3) = 2/3; case b: 1, 1, 1, 1 → 0.
    ψ = (2/3 + 0) / 2 = 1/3."""
    units = []
    t = 1000.0
    for case, passes in (("a", [True, True, False, False]), ("b", [True] * 4)):
        for i, ok in enumerate(passes):
            units.append(unit(case, i, {"s": ok}, cost=0.25, started_at=t, duration=60.0, lane="lane-0"))
            t += 60.0
    return results("base-1", units)


def test_baseline_discordance_cost_and_throughput() -> None:
    base = read_baseline(_baseline())
    assert (base.cases, base.builds) == (2, 8)
    assert base.discordance == pytest.approx(1 / 3) and base.discordance_source == "iterations"
    assert base.pass_rate == pytest.approx(6 / 8)
    assert base.cost_per_build_usd == pytest.approx(0.25)
    assert base.builds_per_lane_s == pytest.approx(8 / 480)  # 8 builds in 480 s on 1 lane
    assert base.throughput_source == "run"


def test_plan_matches_the_hand_computed_case() -> None:
    """δ = 0.25, power 0.8, α = 0.05, ψ = 1/3:
    n = ⌈(1.959964·√(1/3) + 0.841621·√(1/3 − 0.0625))² / 0.0625⌉ = ⌈(1.131587 + 0.437993)² / 0.0625⌉
      = ⌈39.42⌉ = 40 pairs → ⌈40/2⌉ = 20 iterations → 2 arms × 20 × 2 cases = 80 builds → 80 × $0.25 = $20;
    wall on 4 lanes: 80 builds / (1/60 builds per lane-second × 4) = 1200 s."""
    plan = make_plan(_baseline(), effect=0.25, power=0.80, alpha=0.05, lanes=4)
    c = plan.chosen
    assert (c.pairs, c.iterations, c.builds) == (40, 20, 80)
    assert c.cost_usd == pytest.approx(20.0)
    assert c.wall_s == pytest.approx(1200.0)
    rows = {(r.effect, r.power): r for r in plan.table}
    assert (0.25, 0.8) in rows and (0.1, 0.9) in rows and len(rows) == len(plan.table)
    assert all(a.pairs >= b.pairs for a, b in zip(plan.table, plan.table[2:]) if a.power == b.power)  # smaller δ, more pairs


def test_pairs_needed_by_hand_and_its_edges() -> None:
    # ψ = 0.3, δ = 0.1: (1.959964·0.547723 + 0.841621·0.538516)² / 0.01 = (1.073517 + 0.453226)² / 0.01 = 233.09
    assert pairs_needed(0.10, 0.30) == 234
    assert pairs_needed(-0.10, 0.30) == 234  # either direction
    # ψ below δ is raised to δ (a difference of δ needs at least δ discordant)
    assert pairs_needed(0.2, 0.0) == pairs_needed(0.2, 0.2)
    assert pairs_needed(0.10, 0.30, power=0.9) > 234
    for bad in (0.0, 1.0, -1.5):
        with pytest.raises(ValueError):
            pairs_needed(bad, 0.3)


def test_detectable_difference_inverts_pairs_needed() -> None:
    d = detectable_difference(234, 0.30)
    assert d is not None and pairs_needed(d, 0.30) <= 234 < pairs_needed(d - 0.001, 0.30)
    assert detectable_difference(2, 0.30) is None  # 2 pairs detect nothing at 80% power


def test_one_iteration_baseline_uses_the_pass_rate_and_failed_builds_score_zero() -> None:
    units = [unit("a", 0, {"s": True, "t": False}), unit("b", 0, status=BuildStatus.failed),
             unit("c", 0, {"s": True}), unit("d", 0, status=BuildStatus.lane_failure)]
    scores = build_scores(units)
    assert scores == {("a", 0): 0.5, ("b", 0): 0.0, ("c", 0): 1.0}  # d: lost to the infrastructure, no score
    base = read_baseline(results("one", units))
    p = 1.5 / 3
    assert base.discordance_source == "pass rate" and base.discordance == pytest.approx(2 * p * (1 - p))


def test_a_baseline_without_scored_builds_is_a_user_error() -> None:
    with pytest.raises(UserError, match="base-0: no scored build"):
        read_baseline(results("base-0", [unit("a", 0, status=BuildStatus.skipped)]))


# --------------------------------------------------------------------------- CLI


def _app():
    from unit.cli.test_ab_cli import _app as app

    return app()


def test_plan_only_writes_the_plan_and_exits(tmp_path: Path) -> None:
    base = tmp_path / "eval-results.json"
    base.write_text(_baseline().model_dump_json())
    out = tmp_path / "out"
    result = CliRunner().invoke(_app(), ["ab", "--plan", str(base), "--effect", "0.25", "--lanes", "4",
                                         "--output-dir", str(out), "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    md = (out / "ab-plan.md").read_text()
    assert "40 build pairs → 20 iteration(s) of 2 case(s), 80 builds, $20.00, 20 min on 4 lane(s)" in md
    assert "| 25% | 80% | 40 | 20 | 80 | $20.00 | 20 min ◀ |" in md
    data = json.loads((out / "ab-plan.json").read_text())
    assert data["plan"]["pairs"] == 40 and math.isclose(data["baseline"]["discordance"], 1 / 3)
    assert not (tmp_path / "s").exists()  # nothing ran


@pytest.mark.parametrize(("args", "flag", "words"), [
    (["--effect", "1.5"], "--effect", "between 0 and 1"),
    (["--power", "0"], "--power", "between 0 and 1"),
    (["--beta", "1"], "--beta", "between 0 and 1"),
    (["--plan", "/nonexistent/eval-results.json"], "--plan baseline file not found", "/nonexistent"),
    (["--arm", "a=m1", "--arm", "b=m2", "--arm", "c=m3", "--sequential"], "--sequential", "exactly 2 arms"),
])
def test_plan_and_sequential_flag_errors(args: list[str], flag: str, words: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(_app(), ["ab", *args, "--state-dir", str(tmp_path / "s"),
                                         "--output-dir", str(tmp_path / "o")])
    assert isinstance(result.exception, (ConfigError, UserError)), result.output
    message = str(result.exception)
    assert message.startswith(flag) and words in message and "\n" not in message
    assert not (tmp_path / "s").exists()


def test_plan_sets_the_iterations_and_an_explicit_iterations_caps_them(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli import ab_cmd

    seen: list[int] = []

    async def fake_run_arms(base, arms, **kw):  # records the iterations the arms would run, runs nothing
        seen.append(base.iterations)
        return []

    monkeypatch.setattr(ab_cmd, "run_arms", fake_run_arms)
    base = tmp_path / "eval-results.json"
    base.write_text(_baseline().model_dump_json())
    common = ["ab", "--plan", str(base), "--effect", "0.25", "--arm", "a=m1", "--arm", "b=m2",
              "--state-dir", str(tmp_path / "s"), "--output-dir", str(tmp_path / "o")]
    CliRunner().invoke(_app(), common)
    CliRunner().invoke(_app(), [*common, "--iterations", "5"])
    CliRunner().invoke(_app(), [*common, "--iterations", "50"])
    assert seen == [20, 5, 20]  # the plan's 20; 5 caps it; 50 does not raise it
    assert (tmp_path / "o" / "ab-plan.md").exists()
