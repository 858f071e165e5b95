"""PR-vs-baseline comparison of two ``eval-results.json`` runs (tiers as the reference harness,
plus a Benjamini–Hochberg view), the PR comment and the console summary."""

from orchestrator.compare.comparison import Comparison, UnitComparison, compare, comparison_dict
from orchestrator.compare.load import load_results
from orchestrator.compare.pr_comment import render_pr_comment, write_pr_comment
from orchestrator.compare.tiers import Counts, Tier, classify, classify_counts

__all__ = [
    "Comparison",
    "Counts",
    "Tier",
    "UnitComparison",
    "classify",
    "classify_counts",
    "compare",
    "comparison_dict",
    "load_results",
    "render_pr_comment",
    "write_pr_comment",
]
