"""The absolute gate of a finished run (``orchestrator run``'s exit code, the PR comment's verdict).

The rule itself — which tiers are gated and what passes — is :mod:`orchestrator.results.gate`
(``results`` stands alone); this module applies it to a run's results document.
"""

from __future__ import annotations

from typing import Any

from orchestrator.results.contract import to_document
from orchestrator.results.gate import evaluate_gate, is_gated_tier


def run_gate(results: Any) -> dict[str, Any] | None:
    """The gate of a finished run (an ``EvalResults``) when its tier is gated, else None: the verdict
    the PR comment shows and the exit code follows."""
    tier = results.config.get("tier")
    if not is_gated_tier(tier if isinstance(tier, str) else None):
        return None
    doc = to_document(results)
    return evaluate_gate(doc["testCases"], doc["totalRuns"])
