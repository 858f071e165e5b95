"""Matched-pair statistics for A/B runs: verdict pairs per (case, scoring unit, iteration) and the
exact McNemar test on them.

Two arms that ran the same cases with the same iterations give, for every scoring unit and
iteration both judged, a *pair* of verdicts. Only the discordant pairs carry information about a
difference: ``b`` = control passed and variant failed, ``c`` = control failed and variant passed.
Under "no difference" each discordant pair goes either way with probability ½, so the exact
McNemar p-value is the two-sided binomial test of ``b`` successes in ``b + c`` trials
(``scipy.stats.binomtest``). No discordant pair at all: p = 1.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scipy.stats import binomtest

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
        return self.both_pass + self.control_only + self.variant_only + self.both_fail

    @property
    def discordant(self) -> int:
        return self.control_only + self.variant_only


def mcnemar_exact(control_only: int, variant_only: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts ``b`` and ``c``."""
    if control_only < 0 or variant_only < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={control_only} c={variant_only}")
    n = control_only + variant_only
    if n == 0:
        return 1.0
    return min(1.0, float(binomtest(control_only, n, 0.5, alternative="two-sided").pvalue))


def mcnemar(pairs: Iterable[VerdictPair]) -> McNemar:
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
