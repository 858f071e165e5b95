"""The sequential A/B test: the mixture SPRT's boundaries by hand, its false-positive rate computed
exactly (no simulation), the controller that pairs builds and stops both arms, and the lockstep gate.

Our own statistics (n8n's harness runs a fixed number of iterations). A pair's score follows n8n's
rule in ``packages/@n8n/instance-ai/evaluations/harness/runner.ts`` (``runWorkflowTestCase``): a
build that created no workflow passes no scenario.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest
from support.eval_results_factory import unit
from support.polling import settle

from orchestrator.allocator import Allocator
from orchestrator.domain import BuildStatus
from orchestrator.experiments.ab import Lockstep, SequentialController
from orchestrator.experiments.sequential import Decision, SequentialDesign, SequentialState, design_theta
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import Run
from orchestrator.run.resolve import resolve


def _fixed(effect: float = 0.45, discordance: float = 0.5, **kw) -> SequentialDesign:
    return SequentialDesign(effect=effect, discordance=discordance, **kw)


def test_all_wins_one_way_decide_at_the_hand_computed_pair() -> None:
    """θ₁ = ½ + 0.45 / (2 · 0.5) = 0.95; after n variant wins Λ = ½(1.9ⁿ + 0.1ⁿ):
    n = 5 → 12.4 < 20, n = 6 → 23.5 ≥ 20 = 1/α."""
    assert design_theta(0.45, 0.5) == pytest.approx(0.95)
    state = SequentialState(_fixed())
    decisions = [state.observe(+1) for _ in range(6)]
    assert decisions == [None] * 5 + [Decision.variant_better] and state.decided_at == 6
    assert math.exp(state.history[4]) == pytest.approx(0.5 * (1.9 ** 5 + 0.1 ** 5))
    assert math.exp(state.log_lr) == pytest.approx(0.5 * (1.9 ** 6 + 0.1 ** 6))
    control = SequentialState(_fixed())
    assert [control.observe(-1) for _ in range(6)][-1] is Decision.control_better


def test_concordant_pairs_carry_no_evidence_and_the_cap_ends_undecided() -> None:
    state = SequentialState(_fixed(max_pairs=3))
    assert [state.observe(0) for _ in range(3)] == [None, None, Decision.undecided]
    assert state.log_lr == 0.0 and state.decided_at == 3
    assert state.observe(+1) is Decision.undecided and state.pairs == 3  # decided: later pairs are ignored


def test_split_discordant_pairs_are_futile() -> None:
    """One win and one loss multiply both components by 2θ₁ · 2(1−θ₁) = 4 · 0.95 · 0.05 = 0.19 ≤ β = 0.2."""
    state = SequentialState(_fixed())
    assert state.observe(+1) is None
    assert state.observe(-1) is Decision.futile
    assert math.exp(state.log_lr) == pytest.approx(0.19)


def test_running_discordance_uses_only_the_pairs_before() -> None:
    """No plan: ψ̂ = (d + 1)/(n + 2) from the pairs already seen; the first pair uses ψ̂ = ½."""
    design = SequentialDesign(effect=0.2)
    assert float(design.theta(0, 0)) == pytest.approx(0.5 + 0.2 / (2 * 0.5))
    state = SequentialState(design)
    state.observe(+1)
    assert math.exp(state.log_up) == pytest.approx(2 * 0.7)
    second = float(design.theta(1, 1))  # ψ̂ = 2/3 → θ = ½ + 0.2/(4/3) = 0.65
    assert second == pytest.approx(0.65)
    state.observe(+1)
    assert math.exp(state.log_up) == pytest.approx(2 * 0.7 * 2 * 0.65)


def test_false_positive_rate_is_at_most_alpha_exactly() -> None:
    """Exact, by dynamic programming over (pairs seen, variant wins) under θ = ½: the chance the test
    ever rejects within 400 discordant pairs, for a fixed θ₁ (plan-given ψ), is ≤ α (Ville)."""
    design = _fixed(effect=0.1, discordance=0.5, alpha=0.05, beta=1e-9)  # θ₁ = 0.6, no futility stop
    theta = float(design.theta(0, 0))
    up, down = math.log(2 * theta), math.log(2 * (1 - theta))
    alive = {0: 1.0}  # wins → probability of being there without having stopped
    rejected = 0.0
    for n in range(1, 401):
        nxt: dict[int, float] = {}
        for wins, p in alive.items():
            for w in (wins, wins + 1):
                nxt[w] = nxt.get(w, 0.0) + p / 2
        alive = {}
        for wins, p in nxt.items():
            losses = n - wins
            log_lr = float(np.logaddexp(wins * up + losses * down, wins * down + losses * up)) - math.log(2)
            if log_lr >= design.upper:
                rejected += p
            else:
                alive[wins] = p
    assert 0.01 < rejected <= 0.05


def test_design_validation() -> None:
    for bad in (dict(effect=0.0), dict(effect=1.0), dict(alpha=0.0), dict(beta=1.0), dict(discordance=0.0),
                dict(max_pairs=0)):
        with pytest.raises(ValueError):
            SequentialDesign(**bad)


# --------------------------------------------------------------------------- controller


class _Allocator(Allocator):
    """An arm's allocator (no unit queued) that records why it was told to start nothing more."""

    def __init__(self) -> None:
        super().__init__(["lane-0"])
        self.stopped: list[str] = []

    def stop_new(self, reason: str) -> None:
        self.stopped.append(reason)
        super().stop_new(reason)


def _arm(allocator: Allocator, tmp_path: Path) -> Run:
    """An arm's run, not started, whose allocator is ``allocator``."""
    run = Run(resolve(RunConfig(state_dir=tmp_path)))
    run.units.engage(allocator)
    return run


async def test_controller_pairs_builds_by_case_and_iteration_and_stops_both_arms(tmp_path: Path) -> None:
    controller = SequentialController(_fixed(), "control", "variant")
    allocators = {"control": _Allocator(), "variant": _Allocator()}
    runs = {arm: _arm(allocator, tmp_path) for arm, allocator in allocators.items()}
    controller.runs = runs
    # iteration 0 of case a finished in one arm only: no pair yet
    controller.add("control", unit("a", 0, {"s": True}))
    assert controller.state.pairs == 0
    controller.add("variant", unit("a", 0, {"s": False}))
    assert (controller.state.pairs, controller.state.control_wins) == (1, 1)
    # lost to the infrastructure in one arm: never a pair
    controller.add("control", unit("a", 1, {"s": True}))
    controller.add("variant", unit("a", 1, status=BuildStatus.lane_failure))
    assert controller.state.pairs == 1
    # a failed build scores 0, a half-passed one 0.5: the control wins the pair
    for i in range(2, 7):
        controller.add("variant", unit("a", i, status=BuildStatus.failed))
        controller.add("control", unit("a", i, {"s": True, "t": False}))
    assert controller.state.decision is Decision.control_better and controller.state.pairs == 6
    for arm, run in runs.items():
        assert run.stop_reason is not None and run.stop_reason.startswith("sequential A/B: control better after 6")
        assert allocators[arm].stopped == [run.stop_reason]
    await asyncio.sleep(0)  # the gate-opening task (no gate here) and nothing else


async def test_lockstep_keeps_the_fast_arm_one_build_ahead() -> None:
    gate = Lockstep(("c", "v"))
    started: list[int] = []

    async def fast(n: int) -> None:
        await gate.enter("v")
        started.append(n)

    tasks = [asyncio.create_task(fast(n)) for n in range(3)]
    await settle()
    assert started == [0]  # its 2nd build waits for the control's 1st
    await gate.enter("c")  # the arm behind never waits
    await gate.leave("c")
    await settle()
    assert started == [0, 1]
    await gate.open()  # decided, or the other arm's run is over
    await asyncio.gather(*tasks)
    assert started == [0, 1, 2] and gate.started == {"c": 1, "v": 3}


async def test_a_signal_stops_both_arms_and_the_handlers_stay_until_the_last_arm_ends(tmp_path) -> None:
    import signal

    from orchestrator.experiments.ab import _LockstepRun, _Siblings
    from orchestrator.run.config import RunConfig
    from orchestrator.run.resolve import resolve

    gate, siblings = Lockstep(("c", "v")), _Siblings()
    runs = [_LockstepRun(resolve(RunConfig(state_dir=tmp_path)), [], gate, arm, siblings) for arm in ("c", "v")]
    loop = asyncio.get_running_loop()
    runs[0]._signals(True)
    runs[1]._signals(True)
    runs[0]._signals(False)  # the first arm is over: the other still has the handlers
    assert loop.remove_signal_handler(signal.SIGTERM) is True
    loop.add_signal_handler(signal.SIGTERM, runs[0]._on_signal, "SIGTERM")
    runs[1]._signals(False)  # the last: handlers given back
    assert loop.remove_signal_handler(signal.SIGTERM) is False
    runs[1]._on_signal("SIGINT")
    assert [r.stop_reason for r in runs] == ["interrupted by SIGINT"] * 2
