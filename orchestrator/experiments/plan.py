"""``orchestrator ab plan``: how many builds an A/B needs before it is run, from a baseline.

Unit of the plan: the **build pair** — one (case, iteration) built by both arms, two paid builds.
Its outcome in an arm is the build's *score*, the share of its scoring units that passed (a failed
build scores 0; :func:`build_scores`). Pairs are per build, not per scoring unit, because the
scoring units of one build are not independent (a broken build fails them all); this is also the
unit of the sequential test (:mod:`orchestrator.experiments.sequential`).

From the baseline ``eval-results.json``:

* ``ψ``, the **discordance**: the chance that two builds of the same case score differently. Per
  case with ≥ 2 scored iterations, ``1 − Σ cₛ(cₛ−1) / (n(n−1))`` over its distinct scores (the
  unbiased estimate of that chance), averaged over those cases; with none, ``2p(1−p)`` from the
  run's mean build score ``p`` (arms that differ only by chance, cases alike).
* cost per build: the mean ``build.cost_usd`` of the builds that ran;
* throughput: builds per lane-second of the baseline (its units over its wall time × lanes), or,
  without timestamps, one build at a time per lane at the mean unit duration.

Pairs needed (Connor 1987, the normal approximation for McNemar's test; ``δ`` the difference in pass
rate, ``ψ`` raised to at least ``δ``)::

    n = ⌈ (z₁₋α/₂ √ψ + z_power √(ψ − δ²))² / δ² ⌉

then iterations ``⌈n / cases⌉``, builds ``2 × iterations × cases`` (both arms), cost ``builds ×
cost per build`` and wall time ``builds / (throughput × lanes)``.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from scipy.stats import norm

from orchestrator.domain import BuildStatus
from orchestrator.errors import UserError
from orchestrator.results.model import EvalResults, UnitResult
from orchestrator.results.scoring import scoring_units

DEFAULT_EFFECTS = (0.05, 0.10, 0.15, 0.20)
DEFAULT_POWERS = (0.80, 0.90)
MD_FILENAME = "ab-plan.md"
JSON_FILENAME = "ab-plan.json"


def build_scores(units: list[UnitResult]) -> dict[tuple[str, int], float]:
    """Score of every scored build, by (case, iteration): the share of its scoring-unit trials that
    passed. Builds lost to the infrastructure, skipped or timed out have no score."""
    passed: dict[tuple[str, int], int] = defaultdict(int)
    total: dict[tuple[str, int], int] = defaultdict(int)
    for su in scoring_units(units).values():
        for t in su.trials:
            total[(su.case, t.iteration)] += 1
            passed[(su.case, t.iteration)] += t.passed
    return {key: passed[key] / n for key, n in total.items() if n}


def pairs_needed(effect: float, discordance: float, *, alpha: float = 0.05, power: float = 0.80) -> int:
    """Matched pairs for a two-sided McNemar test to detect ``effect`` with ``power`` (Connor 1987)."""
    if not 0 < abs(effect) < 1:
        raise ValueError(f"effect must be in (0, 1), got {effect}")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha}, {power}")
    d = abs(effect)
    psi = min(max(discordance, d), 1.0)
    za, zb = float(norm.ppf(1 - alpha / 2)), float(norm.ppf(power))
    return max(1, math.ceil((za * math.sqrt(psi) + zb * math.sqrt(max(psi - d * d, 0.0))) ** 2 / (d * d)))


@dataclass(frozen=True)
class Baseline:
    """What a plan reads from a baseline run."""

    run_id: str
    cases: int
    builds: int  # scored builds
    pass_rate: float  # mean build score
    discordance: float
    discordance_source: str  # "iterations" (within-case) or "pass rate" (2p(1-p))
    cost_per_build_usd: float
    builds_per_lane_s: float
    throughput_source: str  # "run" or "unit durations"


def read_baseline(results: EvalResults) -> Baseline:
    """What planning needs from a baseline run: cases, scored builds, pass rate, discordance (from
    iterations, else 2p(1−p)), cost per build and throughput. Raises ``UserError`` when it has no
    scored build."""
    scores = build_scores(results.units)
    if not scores:
        raise UserError(f"baseline {results.run_id}: no scored build to plan from (every build was lost, "
                        "skipped or timed out)")
    by_case: dict[str, list[float]] = defaultdict(list)
    for (case, _), score in scores.items():
        by_case[case].append(score)
    per_case = []
    for values in by_case.values():
        n = len(values)
        if n >= 2:
            same = sum(c * (c - 1) for c in Counter(values).values())
            per_case.append(1.0 - same / (n * (n - 1)))
    p = sum(scores.values()) / len(scores)
    if per_case:
        psi, psi_source = sum(per_case) / len(per_case), "iterations"
    else:
        psi, psi_source = 2 * p * (1 - p), "pass rate"
    ran = [u for u in results.units if u.build.status is not BuildStatus.skipped]  # builds that were paid for
    cost = sum(u.build.cost_usd for u in ran) / len(ran) if ran else 0.0
    lanes = len({u.lane for u in ran if u.lane}) or max(1, len(results.lanes))
    wall = max(u.finished_at for u in ran) - min(u.started_at for u in ran) if len(ran) >= 2 else 0.0
    if wall > 0:
        throughput, source = len(ran) / (wall * lanes), "run"
    else:
        seconds = [u.finished_at - u.started_at for u in ran if u.finished_at > u.started_at]
        mean = sum(seconds) / len(seconds) if seconds else 0.0
        throughput, source = (1.0 / mean if mean > 0 else 0.0), "unit durations"
    return Baseline(results.run_id, len(by_case), len(scores), p, psi, psi_source, cost, throughput, source)


@dataclass(frozen=True)
class PlanRow:
    effect: float
    power: float
    pairs: int
    iterations: int
    builds: int
    cost_usd: float
    wall_s: float | None  # None: the baseline gives no throughput


def plan_row(base: Baseline, effect: float, power: float, *, alpha: float, lanes: int, cases: int | None = None) -> PlanRow:
    """What detecting ``effect`` with ``power`` at ``alpha`` takes on ``lanes`` lanes: build pairs
    (Connor's formula), iterations over the cases, builds, cost and wall time."""
    k = cases or base.cases
    pairs = pairs_needed(effect, base.discordance, alpha=alpha, power=power)
    iterations = math.ceil(pairs / k)
    builds = 2 * iterations * k
    wall = builds / (base.builds_per_lane_s * lanes) if base.builds_per_lane_s > 0 else None
    return PlanRow(effect, power, pairs, iterations, builds, builds * base.cost_per_build_usd, wall)


@dataclass(frozen=True)
class Plan:
    baseline: Baseline
    alpha: float
    lanes: int
    chosen: PlanRow
    table: list[PlanRow]

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON: the baseline, the chosen row and the trade-off table."""
        return {"baseline": asdict(self.baseline), "alpha": self.alpha, "lanes": self.lanes,
                "plan": asdict(self.chosen), "table": [asdict(r) for r in self.table]}


def make_plan(results: EvalResults, *, effect: float, power: float, alpha: float = 0.05, lanes: int = 2,
              effects: Sequence[float] = DEFAULT_EFFECTS, powers: Sequence[float] = DEFAULT_POWERS) -> Plan:
    """The A/B plan from a baseline: the row for (``effect``, ``power``) and a table over ``effects`` x
    ``powers``. Raises ``UserError`` as :func:`read_baseline`."""
    base = read_baseline(results)
    chosen = plan_row(base, effect, power, alpha=alpha, lanes=lanes)
    grid = sorted({(e, pw) for e in (*effects, effect) for pw in (*powers, power)})
    return Plan(base, alpha, lanes, chosen, [plan_row(base, e, pw, alpha=alpha, lanes=lanes) for e, pw in grid])


def duration_text(seconds: float | None) -> str:
    """Seconds as people read them (``45 s``, ``12 min``, ``2.5 h``); ``—`` when unknown."""
    if seconds is None:
        return "—"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def render_table(plan: Plan) -> list[str]:
    """The trade-off table as Markdown lines, the chosen row marked."""
    out = ["| difference | power | build pairs | iterations | builds (both arms) | cost | wall time |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in plan.table:
        mark = " ◀" if (r.effect, r.power) == (plan.chosen.effect, plan.chosen.power) else ""
        out.append(f"| {r.effect:.0%} | {r.power:.0%} | {r.pairs} | {r.iterations} | {r.builds} "
                   f"| ${r.cost_usd:.2f} | {duration_text(r.wall_s)}{mark} |")
    return out


def render_markdown(plan: Plan) -> str:
    """The ``ab plan`` document: the baseline, the answer for the chosen row, and the trade-off table."""
    b, c = plan.baseline, plan.chosen
    psi_how = ("two builds of a case disagree (from its iterations)" if b.discordance_source == "iterations"
               else "2p(1−p): the baseline has one iteration per case")
    lines = [
        f"# A/B plan from `{b.run_id}`", "",
        f"Baseline: {b.cases} case(s), {b.builds} scored build(s), mean build score {b.pass_rate:.1%}, "
        f"discordance ψ = {b.discordance:.3f} ({psi_how}), ${b.cost_per_build_usd:.4f} per build, "
        f"{b.builds_per_lane_s * 3600:.1f} builds per lane-hour ({'measured over the run' if b.throughput_source == 'run' else 'from unit durations'}).",
        "",
        f"**To detect a {c.effect:.0%} difference in pass rate with {c.power:.0%} power at α = {plan.alpha}:** "
        f"{c.pairs} build pairs → {c.iterations} iteration(s) of {b.cases} case(s), {c.builds} builds, "
        f"${c.cost_usd:.2f}, {duration_text(c.wall_s)} on {plan.lanes} lane(s).",
        "",
        f"Trade-off ({plan.lanes} lane(s); pairs by Connor's formula for McNemar's test; `ab --sequential` "
        "usually stops well before the fixed size, see bench/ab_sequential.py):", "",
        *render_table(plan), "",
    ]
    return "\n".join(lines)


def detectable_difference(pairs: int, discordance: float, *, alpha: float = 0.05, power: float = 0.80) -> float | None:
    """The smallest difference in pass rate ``pairs`` build pairs detect with ``power`` (the inverse
    of :func:`pairs_needed`, to 0.1 point); None when not even a 100-point difference is."""
    if pairs < 1 or pairs_needed(0.999, discordance, alpha=alpha, power=power) > pairs:
        return None
    low, high = 0.001, 0.999  # pairs_needed falls as the difference grows
    while high - low > 0.0005:
        mid = (low + high) / 2
        if pairs_needed(mid, discordance, alpha=alpha, power=power) <= pairs:
            high = mid
        else:
            low = mid
    return high
