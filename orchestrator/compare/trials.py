"""Per-unit trials of one run, keyed like the reference harness (``<case>/<scenario>``,
``<case>#expectation:<text>``): the pass/fail outcome of every judged iteration."""

from __future__ import annotations

from orchestrator.results.model import EvalResults
from orchestrator.results.scoring import ScoringUnit, scoring_units


def unit_trials(results: EvalResults) -> dict[str, ScoringUnit]:
    """Every scoring unit of ``results`` with its judged trials (``incomplete`` verdicts left out)."""
    return scoring_units(results.units)
