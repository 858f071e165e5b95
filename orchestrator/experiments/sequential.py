"""Sequential A/B: stop as soon as the difference is decided, either way, or is futile.

The test: a **mixture sequential probability ratio test on the discordant build pairs**. A *build
pair* is one (case, iteration) built by both arms; its *score* in an arm is the share of the case's
scoring units that passed (a failed build scores 0). The pair is discordant when the scores differ,
and it is a *win* for the arm with the higher score. Under "no difference" (the arms exchangeable
within a pair, pairs independent) every discordant pair is a win for the variant with probability ½,
whatever the cases, their pass rates and the order pairs finish in. Pairs are taken per build, not
per scoring unit, because the scoring units of one build fail together: their verdict pairs are not
independent, and a test that counted them one by one would reject too often.

With ``θ`` the variant's share of discordant wins, the statistic after ``n`` discordant pairs is the
likelihood ratio of a two-point mixture (½ at ``θ₁``, ½ at ``1 − θ₁``) against ``θ = ½``::

    Λₙ = ½ ∏ (2θ₁)^win (2(1−θ₁))^loss + ½ ∏ (2(1−θ₁))^win (2θ₁)^loss

``Λ`` is a non-negative martingale of mean 1 under "no difference", so by Ville's inequality
``P(Λ ever ≥ 1/α) ≤ α``: the false-positive rate stays at most α however often it is looked at
(after every pair here) and whenever the experiment stops — this is what makes it *always valid*.
``θ₁`` is the share of discordant wins a difference of ``effect`` in pass rate gives,
``½ + effect / (2ψ)`` with ``ψ`` the share of discordant pairs; ``ψ`` comes from the plan
(a baseline's build-level discordance) or, without one, from the pairs seen *before* each pair
(``(discordant + 1) / (pairs + 2)``): a choice that only uses the past keeps the martingale.

Why this and not a group-sequential design with α spending: builds finish one by one on a pool of
lanes, at times no schedule fixes, so looks at planned information fractions would either wait
for stragglers or be taken at unplanned times (which α-spending handles only approximately); the
mixture SPRT needs no look schedule and no numerical boundary computation, and its error bound
holds exactly. The two-point mixture (rather than a flat prior on θ) puts the evidence where the
plan says the difference is, which is what makes stopping early pay at the planned effect.

Futility: the experiment stops for futility once ``Λ ≤ β`` (the planned effect is much less
likely than no difference). A futility stop never rejects, so it cannot raise the false-positive
rate; under the planned effect it stops the run wrongly at most ``2β`` of the time (``1/Λ`` bounds
the likelihood ratio of one component, a martingale under that effect). At ``max_pairs`` (the
fixed design's size) the experiment ends *undecided*.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: θ₁ is kept below this: a planned effect as large as the discordance would put all wins on one side.
THETA_MAX = 0.95


class Decision(str, enum.Enum):
    variant_better = "variant better"
    control_better = "control better"
    futile = "futile"
    undecided = "undecided"


def design_theta(effect: float, discordance: float) -> float:
    """The variant's share of discordant wins when its pass rate is ``effect`` higher and a share
    ``discordance`` of build pairs is discordant."""
    if discordance <= 0:
        return THETA_MAX
    return min(0.5 + abs(effect) / (2.0 * discordance), THETA_MAX)


def running_discordance(discordant: Any, pairs: Any) -> Any:
    """The discordance estimate from the pairs seen so far (Laplace: (d + 1) / (n + 2))."""
    return (discordant + 1.0) / (pairs + 2.0)


def step(log_up: Any, log_down: Any, sign: Any, theta: Any) -> tuple[Any, Any]:
    """One pair into the two mixture components (``log`` likelihood ratios against θ = ½); works
    on floats and on numpy arrays alike. ``sign``: +1 variant wins, -1 control wins, 0 concordant."""
    win, loss = np.log(2.0 * theta), np.log(2.0 * (1.0 - theta))
    up = np.where(sign > 0, win, np.where(sign < 0, loss, 0.0))
    down = np.where(sign > 0, loss, np.where(sign < 0, win, 0.0))
    return log_up + up, log_down + down


def log_mixture(log_up: Any, log_down: Any) -> Any:
    """``log Λ`` of the two-point mixture."""
    return np.logaddexp(log_up, log_down) - math.log(2.0)


@dataclass(frozen=True)
class SequentialDesign:
    """The stopping rule: reject "no difference" at ``Λ ≥ 1/alpha``; futile at ``Λ ≤ beta``;
    undecided after ``max_pairs`` build pairs."""

    max_pairs: int | None = None  # None: as many as the runs have (every case × every iteration)
    effect: float = 0.10
    alpha: float = 0.05
    beta: float = 0.20
    discordance: float | None = None  # None: the running estimate

    def __post_init__(self) -> None:
        if self.max_pairs is not None and self.max_pairs < 1:
            raise ValueError(f"max_pairs must be >= 1, got {self.max_pairs}")
        if not 0 < self.effect < 1:
            raise ValueError(f"effect must be in (0, 1), got {self.effect}")
        if not 0 < self.alpha < 1 or not 0 < self.beta < 1:
            raise ValueError(f"alpha and beta must be in (0, 1), got {self.alpha}, {self.beta}")
        if self.discordance is not None and not 0 < self.discordance <= 1:
            raise ValueError(f"discordance must be in (0, 1], got {self.discordance}")

    @property
    def upper(self) -> float:
        """The log-likelihood ratio at which the test rejects (log 1/α)."""
        return math.log(1.0 / self.alpha)

    @property
    def lower(self) -> float:
        """The log-likelihood ratio at which the test stops for futility (log β)."""
        return math.log(self.beta)

    def theta(self, discordant: Any, pairs: Any) -> Any:
        """The chance a discordant pair favours the variant under the planned effect, from the given
        discordance or the running estimate (capped at ``THETA_MAX``); works on arrays."""
        psi = self.discordance if self.discordance is not None else running_discordance(discordant, pairs)
        return np.minimum(0.5 + self.effect / (2.0 * np.maximum(psi, 1e-9)), THETA_MAX)

    def describe(self) -> str:
        """The test in one line, for the report."""
        psi = f"ψ = {self.discordance:.3g}" if self.discordance is not None else "ψ from the pairs so far"
        return (f"mixture SPRT on discordant build pairs: planned effect {self.effect:+.0%} ({psi}), "
                f"reject at Λ ≥ 1/α = {1 / self.alpha:.3g}, futile at Λ ≤ β = {self.beta:.3g}"
                + (f", at most {self.max_pairs} pairs" if self.max_pairs is not None else ""))


@dataclass
class SequentialState:
    """The test as pairs arrive (:meth:`observe`, one build pair at a time)."""

    design: SequentialDesign
    pairs: int = 0
    variant_wins: int = 0
    control_wins: int = 0
    log_up: float = 0.0
    log_down: float = 0.0
    decision: Decision | None = None
    decided_at: int | None = None  # pairs seen when the decision was taken
    history: list[float] = field(default_factory=list)  # log Λ after each pair

    @property
    def discordant(self) -> int:
        """Pairs where the arms differed."""
        return self.variant_wins + self.control_wins

    @property
    def log_lr(self) -> float:
        """The mixture's log-likelihood ratio so far."""
        return float(log_mixture(self.log_up, self.log_down))

    def observe(self, sign: int) -> Decision | None:
        """Add one build pair (+1 variant wins, -1 control wins, 0 tie); the decision once taken."""
        if self.decision is not None:
            return self.decision
        theta = float(self.design.theta(self.discordant, self.pairs))
        up, down = step(self.log_up, self.log_down, sign, theta)
        self.log_up, self.log_down = float(up), float(down)
        self.pairs += 1
        self.variant_wins += sign > 0
        self.control_wins += sign < 0
        log_lr = self.log_lr
        self.history.append(log_lr)
        if log_lr >= self.design.upper:
            self.decision = Decision.variant_better if self.log_up >= self.log_down else Decision.control_better
        elif log_lr <= self.design.lower:
            self.decision = Decision.futile
        elif self.design.max_pairs is not None and self.pairs >= self.design.max_pairs:
            self.decision = Decision.undecided
        if self.decision is not None:
            self.decided_at = self.pairs
        return self.decision

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "variant_wins": self.variant_wins, "control_wins": self.control_wins,
                "likelihood_ratio": math.exp(self.log_lr), "decision": self.decision.value if self.decision else None,
                "decided_at_pair": self.decided_at, "reject_at": 1 / self.design.alpha, "futile_at": self.design.beta,
                "max_pairs": self.design.max_pairs, "effect": self.design.effect,
                "discordance": self.design.discordance}
