"""Bench: the sequential A/B test (:mod:`orchestrator.experiments.sequential`) on simulated
experiments — its false-positive rate under no difference and the builds it saves under a
10-point difference, against the fixed design ``orchestrator ab plan`` gives for that difference.

The simulation (seeded; the same seed gives the same figures):

* **Cases.** ``--cases`` cases (20) with control pass probabilities evenly spread over
  [``--low``, ``--high``] (0.30–0.90); a build passes or fails as a whole, builds are independent.
* **Arms.** Under the null the variant's pass probabilities equal the control's; under the
  alternative each is ``--effect`` (0.10) higher.
* **Fixed design.** The matched build pairs :func:`orchestrator.experiments.plan.pairs_needed`
  asks for to detect ``--effect`` with power ``--power`` (0.8) at α = ``--alpha`` (0.05), using the
  discordance of the control pass rates (what ``ab plan`` reads from a baseline), rounded up to
  whole rounds (iterations of every case).
* **Sequential.** Rounds in order, each one iteration of every case in both arms; the test looks
  after every build pair and stops at Λ ≥ 1/α (decided), Λ ≤ β (futile) or at the fixed design's
  size (undecided). ``--in-flight`` (4) pairs more are charged at every stop: the builds already
  running on the lanes when the decision is taken.

Run: ``.venv/bin/python bench/ab_sequential.py`` (``--help`` for the sizes). Last line:
``sequential: fpr F, builds saved P%`` (F: false-positive rate under the null over ``--experiments``
runs; P: mean share of the fixed design's builds not run under the alternative).
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from orchestrator.experiments.plan import pairs_needed
from orchestrator.experiments.sequential import SequentialDesign, log_mixture, step


def simulate(p_control: np.ndarray, p_variant: np.ndarray, design: SequentialDesign, rounds: int,
             experiments: int, in_flight: int, rng: np.random.Generator) -> dict[str, float]:
    cases = len(p_control)
    n = rounds * cases
    case_of = np.arange(n) % cases
    log_up = np.zeros(experiments)
    log_down = np.zeros(experiments)
    discordant = np.zeros(experiments)
    stopped_at = np.full(experiments, n)
    outcome = np.zeros(experiments, dtype=int)  # 1 rejected, -1 futile, 0 undecided
    live = np.ones(experiments, dtype=bool)
    for i in range(n):
        a = rng.random(experiments) < p_control[case_of[i]]
        b = rng.random(experiments) < p_variant[case_of[i]]
        sign = b.astype(int) - a.astype(int)
        theta = design.theta(discordant, i)
        new_up, new_down = step(log_up, log_down, sign, theta)
        log_up = np.where(live, new_up, log_up)
        log_down = np.where(live, new_down, log_down)
        discordant += live & (sign != 0)
        lam = log_mixture(log_up, log_down)
        reject = live & (lam >= design.upper)
        futile = live & ~reject & (lam <= design.lower)
        outcome[reject] = 1
        outcome[futile] = -1
        stopped_at[reject | futile] = i + 1
        live &= ~(reject | futile)
        if not live.any():
            break
    spent = np.minimum(stopped_at + in_flight, n)
    return {"reject": float(np.mean(outcome == 1)), "futile": float(np.mean(outcome == -1)),
            "undecided": float(np.mean(outcome == 0)), "saved": float(1.0 - spent.mean() / n),
            "mean_pairs": float(spent.mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=10_000)
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--low", type=float, default=0.30)
    parser.add_argument("--high", type=float, default=0.90)
    parser.add_argument("--effect", type=float, default=0.10)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--beta", type=float, default=0.20)
    parser.add_argument("--power", type=float, default=0.80)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    p = np.linspace(args.low, args.high, args.cases)
    q = np.clip(p + args.effect, 0.0, 1.0)
    psi = float(np.mean(2 * p * (1 - p)))
    pairs = pairs_needed(args.effect, psi, alpha=args.alpha, power=args.power)
    rounds = math.ceil(pairs / args.cases)
    max_pairs = rounds * args.cases
    design = SequentialDesign(max_pairs=max_pairs, effect=args.effect, alpha=args.alpha, beta=args.beta)
    print(f"{args.cases} cases, pass rates {args.low:.2f}–{args.high:.2f}, discordance ψ = {psi:.3f}")
    print(f"fixed design: {pairs} pairs for {args.effect:+.0%} at power {args.power:.0%} → {rounds} rounds = "
          f"{max_pairs} pairs = {2 * max_pairs} builds")
    print(design.describe() + f"; {args.in_flight} pairs in flight at each stop")
    null = simulate(p, p, design, rounds, args.experiments, args.in_flight, rng)
    alt = simulate(p, q, design, rounds, args.experiments, args.in_flight, rng)
    se = math.sqrt(args.alpha * (1 - args.alpha) / args.experiments)
    print(f"null ({args.experiments} experiments): false positives {null['reject']:.4f} (α = {args.alpha}, "
          f"α + 3 SE = {args.alpha + 3 * se:.4f}), futile {null['futile']:.3f}, undecided {null['undecided']:.3f}, "
          f"builds saved {null['saved']:.1%}")
    print(f"{args.effect:+.0%} ({args.experiments} experiments): decided {alt['reject']:.3f} (power), "
          f"futile {alt['futile']:.3f}, undecided {alt['undecided']:.3f}, mean pairs {alt['mean_pairs']:.1f} "
          f"of {design.max_pairs}, builds saved {alt['saved']:.1%}")
    print(f"sequential: fpr {null['reject']:.4f}, builds saved {alt['saved']:.0%}")


if __name__ == "__main__":
    main()
