"""Matched-pair statistics for A/B runs: verdict pairs per (case, scoring unit, iteration) and the
exact McNemar test on them.

Two arms that ran the same cases with the same iterations give, for every scoring unit and
iteration both judged, a *pair* of verdicts. Only the discordant pairs carry information about a
difference: ``b`` = control passed and variant failed, ``c`` = control failed and variant passed.
Under "no difference" each discordant pair goes either way with probability ½, so the exact
McNemar p-value is the two-sided binomial test of ``b`` successes in ``b + c`` trials
(``scipy.stats.binomtest``). No discordant pair at all: p = 1.

The effect beside it: the paired difference in pass rate, variant − control, ``(c − b) / n``, with
**Tango's score interval for paired proportions** (Tango 1998): every difference Δ whose score
statistic ``(c − b − nΔ) / √(n(2q̂ + Δ(1 − Δ)))`` (``q̂`` the maximum-likelihood share of
control-only pairs given Δ) lies within ±1.96. Chosen over a paired bootstrap because A/B
experiments here are small (a handful of pairs per case, often no discordant pair at all), where a
bootstrap interval collapses to a point; and over Newcombe's hybrid (Wilson) interval, which
collapses to a point whenever every pair is concordant (``φ = 1``) — the usual case of a small
per-case table. Tango's interval is one of the two Fagerland et al. (2014) recommend for paired
proportions, keeps close to 95% coverage at small n, never leaves [−1, 1] and is deterministic.
It treats pairs as independent; the scoring units of one build are not quite, so read it as a
little narrow there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from scipy.optimize import brentq
from scipy.stats import binomtest, norm

from orchestrator.results.model import UnitResult
from orchestrator.results.scoring import UnitKind, scoring_units

TEST_NAME = "exact McNemar (two-sided binomial test on the discordant pairs, scipy.stats.binomtest)"


@dataclass(frozen=True)
class VerdictPair:
    case: str
    key: str  # scoring-unit key: <case>/<scenario> or <case>#expectation:<text>
    kind: UnitKind
    iteration: int
    control: bool
    variant: bool


@dataclass(frozen=True)
class McNemar:
    both_pass: int
    control_only: int  # b: control passed, variant failed
    variant_only: int  # c: control failed, variant passed
    both_fail: int
    p_value: float

    @property
    def pairs(self) -> int:
        """Every pair counted."""
        return self.both_pass + self.control_only + self.variant_only + self.both_fail

    @property
    def discordant(self) -> int:
        """Pairs where exactly one arm passed (the test's information)."""
        return self.control_only + self.variant_only

    @property
    def difference(self) -> PairedDifference:
        """The variant's pass rate minus the control's, with its interval."""
        return paired_difference(self.both_pass, self.control_only, self.variant_only, self.both_fail)


@dataclass(frozen=True)
class PairedDifference:
    """Variant − control pass rate over matched pairs, with its 95% interval (Tango)."""

    estimate: float
    low: float
    high: float


def tango_score(control_only: int, variant_only: int, pairs: int, delta: float) -> float:
    """Tango's score statistic for "variant − control = delta" (decreasing in delta)."""
    b, c, n = variant_only, control_only, pairs  # Tango's b: pairs where the first (here: variant) passes alone
    a_ = 2.0 * n
    b_ = -b - c + (2.0 * n - b + c) * delta
    c_ = -c * delta * (1.0 - delta)
    q = (-b_ + math.sqrt(max(b_ * b_ - 4.0 * a_ * c_, 0.0))) / (2.0 * a_)
    var = n * (2.0 * q + delta * (1.0 - delta))
    diff = b - c - n * delta
    if var <= 0:
        return 0.0 if diff == 0 else math.copysign(math.inf, diff)
    return diff / math.sqrt(var)


def paired_difference(both_pass: int, control_only: int, variant_only: int, both_fail: int,
                      confidence: float = 0.95) -> PairedDifference:
    """Tango's score interval for the difference of paired proportions, variant − control;
    ``[-1, 1]`` around 0 without pairs."""
    a, b, c, d = both_pass, control_only, variant_only, both_fail
    n = a + b + c + d
    if min(a, b, c, d) < 0:
        raise ValueError(f"counts must be >= 0, got {a, b, c, d}")
    if n == 0:
        return PairedDifference(0.0, -1.0, 1.0)
    z = float(norm.ppf(0.5 + confidence / 2))
    est = (c - b) / n
    edge = 1.0 - 1e-12

    def score(delta: float) -> float:
        return tango_score(b, c, n, delta)

    low = -1.0 if score(-edge) <= z else float(brentq(lambda x: score(x) - z, -edge, est, xtol=1e-12))
    high = 1.0 if score(edge) >= -z else float(brentq(lambda x: score(x) + z, est, edge, xtol=1e-12))
    return PairedDifference(est, max(-1.0, low), min(1.0, high))


def mcnemar_exact(control_only: int, variant_only: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts ``b`` and ``c``."""
    if control_only < 0 or variant_only < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={control_only} c={variant_only}")
    n = control_only + variant_only
    if n == 0:
        return 1.0
    return min(1.0, float(binomtest(control_only, n, 0.5, alternative="two-sided").pvalue))


def mcnemar(pairs: Iterable[VerdictPair]) -> McNemar:
    """McNemar's exact test over ``pairs``: the 2x2 counts and the two-sided p-value from the
    discordant ones."""
    both_pass = control_only = variant_only = both_fail = 0
    for p in pairs:
        if p.control and p.variant:
            both_pass += 1
        elif p.control:
            control_only += 1
        elif p.variant:
            variant_only += 1
        else:
            both_fail += 1
    return McNemar(both_pass, control_only, variant_only, both_fail, mcnemar_exact(control_only, variant_only))


@dataclass(frozen=True)
class Pairing:
    pairs: list[VerdictPair]
    control_only_trials: list[str]  # "<key>@<iteration>" judged only in the control arm
    variant_only_trials: list[str]


def pair_verdicts(control: list[UnitResult], variant: list[UnitResult]) -> Pairing:
    """Match the two arms' judged trials on (scoring unit, iteration). Trials are scored exactly as
    for pass rates (:func:`orchestrator.results.scoring.scoring_units`): a failed build counts as a
    failure of its case's units, infrastructure losses and ``incomplete`` verdicts are left out."""
    a, b = scoring_units(control), scoring_units(variant)
    pairs: list[VerdictPair] = []
    control_left: list[str] = []
    variant_left: list[str] = []
    for key in sorted(set(a) | set(b)):
        ta = {t.iteration: t.passed for t in a[key].trials} if key in a else {}
        tb = {t.iteration: t.passed for t in b[key].trials} if key in b else {}
        su = a.get(key) or b[key]
        for it in sorted(set(ta) | set(tb)):
            if it in ta and it in tb:
                pairs.append(VerdictPair(su.case, key, su.kind, it, ta[it], tb[it]))
            elif it in ta:
                control_left.append(f"{key}@{it}")
            else:
                variant_left.append(f"{key}@{it}")
    return Pairing(pairs, control_left, variant_left)
