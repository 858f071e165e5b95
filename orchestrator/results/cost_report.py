"""``orchestrator cost-report``: cost per green iteration by cohort, as n8n's ``build-cost-report.ts``.

A cohort (n8n: an "arm") is one ``eval-results.json``. Its cost comes, per file and in this order,
from the model gateway's count (``modelCostUsdPerRun``: every model call of the iteration, each stage
priced cache-aware from the provider's usage), else the claude CLI's own report
(``buildCostUsdPerRun``, n8n's persisted spend), else n8n's persisted build tokens
(``buildTokensPerRun``) priced at Sonnet-class list rates. An iteration is **green** when every
evaluated unit of it — each scenario run and each build-expectation verdict, incomplete ones left
out — passed (n8n's ``greenStats``); cost per green iteration is the cohort's total ÷ its green
iterations. The gateway's count adds what n8n's report cannot show: the cost of each stage
(build, mock, verify, judge, proxy).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import UserError

#: n8n's default rates for persisted build tokens, US dollars per million (``DEFAULT_TOKEN_RATES``)
TOKEN_RATES = {"uncachedInput": 3.0, "cacheRead": 0.3, "cacheWrite": 3.75, "output": 15.0}


@dataclass
class CaseCost:
    slug: str
    cost_per_iteration: list[float | None]
    green: int
    evaluated: int
    mean_cache_read: float | None = None
    by_stage: dict[str, float] = field(default_factory=dict)


@dataclass
class Cohort:
    label: str
    source: str
    cases: list[CaseCost]

    @property
    def costs(self) -> list[float]:
        """The known cost of every iteration, over all cases (iterations without a cost left out)."""
        return [c for case in self.cases for c in case.cost_per_iteration if c is not None]

    @property
    def total(self) -> float:
        return sum(self.costs)

    @property
    def green(self) -> int:
        """Iterations that passed, over all cases."""
        return sum(c.green for c in self.cases)

    @property
    def evaluated(self) -> int:
        """Iterations with a verdict, over all cases: the denominator of :attr:`green`."""
        return sum(c.evaluated for c in self.cases)

    @property
    def per_green(self) -> float | None:
        """Total cost per green iteration (None when none passed)."""
        return self.total / self.green if self.green else None

    @property
    def by_stage(self) -> dict[str, float]:
        """US dollars per model-call stage (build, mock, verify, judge…), summed over cases."""
        out: dict[str, float] = {}
        for case in self.cases:
            for stage, usd in case.by_stage.items():
                out[stage] = out.get(stage, 0.0) + usd
        return out


def green_stats(tc: dict[str, Any]) -> tuple[int, int]:
    """(green, evaluated) iterations of one test case (n8n's ``greenStats``)."""
    green = evaluated = 0
    for i in range(int(tc.get("totalRuns") or 0)):
        verdicts = []
        for scenario in tc.get("scenarios") or []:
            runs = scenario.get("runs") or []
            if i < len(runs) and runs[i] and not runs[i].get("incomplete"):
                verdicts.append(bool(runs[i].get("passed")))
        per_run = tc.get("buildExpectationResultsPerRun") or []
        for verdict in (per_run[i] if i < len(per_run) else None) or []:
            if not verdict.get("incomplete"):
                verdicts.append(bool(verdict.get("pass")))
        if verdicts:
            evaluated += 1
            green += all(verdicts)
    return green, evaluated


def _priced(tokens: dict[str, Any] | None) -> float | None:
    if not tokens:
        return None
    return sum(float(tokens.get(k) or 0) * rate for k, rate in TOKEN_RATES.items()) / 1_000_000


def cohort_of(doc: dict[str, Any], label: str) -> Cohort:
    """The cost cohort of one ``eval-results.json`` document, named ``label``. Costs come from the best
    source the document has: the model gateway's per-iteration cost, else the claude spend, else
    build tokens priced at :data:`TOKEN_RATES`; the chosen source is named in ``Cohort.source``."""
    cases = doc.get("testCases") or []

    def has(key: str) -> bool:
        return any(any(v is not None for v in (tc.get(key) or [])) for tc in cases)

    pick: Callable[[dict[str, Any]], list[Any]]
    if has("modelCostUsdPerRun"):
        source, pick = "model gateway: every stage, cache-aware", lambda tc: tc.get("modelCostUsdPerRun") or []
    elif has("buildCostUsdPerRun"):
        source, pick = "persisted claude spend", lambda tc: tc.get("buildCostUsdPerRun") or []
    elif has("buildTokensPerRun"):
        source = "persisted build tokens (Sonnet-class rates)"
        pick = lambda tc: [_priced(t) for t in tc.get("buildTokensPerRun") or []]  # noqa: E731
    else:
        source, pick = "no cost recorded", lambda tc: []
    out = []
    for tc in cases:
        total = int(tc.get("totalRuns") or 0)
        costs = [float(c) if isinstance(c, (int, float)) else None for c in pick(tc)][:total]
        costs += [None] * (total - len(costs))
        green, evaluated = green_stats(tc)
        reads = [t["cacheRead"] for t in tc.get("buildTokensPerRun") or [] if isinstance(t, dict)]
        stages: dict[str, float] = {}
        for row in tc.get("modelCostByStagePerRun") or []:
            for stage, usd in (row or {}).items():
                stages[stage] = stages.get(stage, 0.0) + float(usd)
        out.append(CaseCost(str(tc.get("testCaseFile") or tc.get("name")), costs, green, evaluated,
                            statistics.fmean(reads) if reads else None, stages))
    return Cohort(label, source, out)


def load_cohort(path: Path, label: str | None = None) -> Cohort:
    """:func:`cohort_of` for the ``eval-results.json`` at ``path``, labelled ``label`` or else the
    document's experiment name (else its folder's name). Raises ``UserError`` naming ``path`` when
    it cannot be read, is not JSON or has no ``testCases``."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UserError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("testCases"), list):
        raise UserError(f"{path}: not an eval-results.json (no testCases)")
    return cohort_of(doc, label or str(doc.get("experimentName") or path.parent.name or path.stem))


def _usd(value: float | None) -> str:
    return "—" if value is None else f"${value:.4f}"


def cohort_line(c: Cohort) -> str:
    """One line summing up a cohort: cases, total, mean and median cost per iteration, cache reads and
    the cost per green iteration (also heads the HTML report's model-cost section)."""
    costs = c.costs
    reads = [case.mean_cache_read for case in c.cases if case.mean_cache_read is not None]
    parts = [f"{len(c.cases)} cases", f"{len(costs)} iterations with cost", f"total {_usd(c.total)}",
             f"mean/iteration {_usd(statistics.fmean(costs) if costs else None)}",
             f"median/iteration {_usd(statistics.median(costs) if costs else None)}"]
    if reads:
        parts.append(f"mean cache-read tokens/build {round(statistics.fmean(reads)):,}")
    parts += [f"green {c.green}/{c.evaluated} iterations", f"cost per green iteration {_usd(c.per_green)}"]
    return ", ".join(parts)


def render_markdown(cohorts: list[Cohort]) -> str:
    """The ``orchestrator cost-report`` document: one summary line per cohort, a table of cost per
    stage, and one per case comparing the cohorts side by side."""
    lines = ["# Cost report — cost per green iteration by cohort", ""]
    lines += [f"- **{c.label}** ({c.source}): {cohort_line(c)}" for c in cohorts]
    stages = sorted({s for c in cohorts for s in c.by_stage})
    if stages:
        lines += ["", "| cohort | " + " | ".join(stages) + " |", "|---|" + "---|" * len(stages)]
        lines += [f"| {c.label} | " + " | ".join(_usd(c.by_stage.get(s)) for s in stages) + " |" for c in cohorts]
    lines += ["", "| case | " + " | ".join(f"{c.label} $/iteration | {c.label} green" for c in cohorts) + " |",
              "|---|" + "---|---|" * len(cohorts)]
    by_label = [{case.slug: case for case in c.cases} for c in cohorts]
    for slug in sorted({case.slug for c in cohorts for case in c.cases}):
        row = [slug]
        for cases in by_label:
            case = cases.get(slug)
            known = [v for v in case.cost_per_iteration if v is not None] if case else []
            row += [_usd(statistics.fmean(known)) if known else "—",
                    f"{case.green}/{case.evaluated}" if case else "missing"]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "_Cost sources differ in what they count: the model gateway's count is every model call of "
              "the iteration (build, mock, verify, judge, proxy) priced from the provider's usage; persisted "
              "claude spend is the CLI's own report of the build; persisted build tokens are the build's alone "
              "at list rates. Compare cohorts with the same source._"]
    return "\n".join(lines) + "\n"


__all__ = ["Cohort", "cohort_line", "cohort_of", "green_stats", "load_cohort", "render_markdown"]
