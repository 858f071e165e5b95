"""The absolute gate of a curated tier, as n8n's ``comparison/gate.ts`` (``evaluateGate``).

A gated tier (``pr``, ``agents``, ``mcp-gate``) needs no baseline: every measured unit is expected to pass, so a run of it
reports a green/red verdict *in place of* the baseline comparison (n8n's LangSmith driver skips
the comparison for such a tier). A unit is a scenario (its non-incomplete runs are the
denominator) or a build expectation (``evaluatedCount``); a unit with no verdict is *excluded*,
listed but not gated. The criterion is n8n's default, ``passAtK``: a unit is green when it passed
at least once across the iterations, and the run is green when no gated unit is red.

It reads the ``testCases`` of ``eval-results.json`` (the same rows n8n's gate reads), so the gate
and the file cannot disagree.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

#: n8n's ``GATED_TIER_NAMES`` (``run/tiers.ts``, commit 13a56a29; n8n PR #35762 "Gate the mcp-gate eval
#: tier absolutely"): ``pr``, ``agents`` (standalone Agent cases have no baseline to compare with) and
#: ``mcp-gate`` (the curated MCP regression subset, gated like ``pr``).
GATED_TIERS = frozenset({"pr", "agents", "mcp-gate"})
CRITERION = {"kind": "passAtK"}
#: n8n's label length for an expectation unit (``${slug} :: ${expectation.slice(0, 60)}``).
EXPECTATION_LABEL = 60


def is_gated_tier(tier: str | None) -> bool:
    """Whether ``tier`` is gated absolutely (:data:`GATED_TIERS`) rather than compared with a baseline."""
    return tier is not None and tier in GATED_TIERS


def _unit(slug: str, kind: str, passes: int, total: int, categories: Counter[str] | None = None) -> dict[str, Any]:
    unit: dict[str, Any] = {"slug": slug, "kind": kind, "passCount": passes, "total": total,
                            "passRate": passes / total if total > 0 else 0, "green": total > 0 and passes >= 1}
    if categories:
        unit["failureCategories"] = dict(categories)
    return unit


def evaluate_gate(test_cases: list[dict[str, Any]], total_runs: int) -> dict[str, Any]:
    """n8n's ``GateResult`` for the ``testCases`` rows of ``eval-results.json``."""
    gated: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for tc in test_cases:
        prefix = tc.get("testCaseFile") or "unknown"
        for s in tc.get("scenarios") or []:
            evaluated = [r for r in s.get("runs") or [] if not r.get("incomplete")]
            categories = Counter(r.get("failureCategory") or "uncategorized" for r in evaluated if not r.get("passed"))
            passes = sum(1 for r in evaluated if r.get("passed"))
            unit = _unit(f"{prefix}/{s['name']}", "scenario", passes, len(evaluated), categories)
            (gated if evaluated else excluded).append(unit)
        for e in tc.get("buildExpectations") or []:
            total = int(e.get("evaluatedCount") or 0)
            unit = _unit(f"{prefix} :: {str(e['expectation'])[:EXPECTATION_LABEL]}", "buildExpectation",
                         int(e.get("passCount") or 0), total)
            (gated if total else excluded).append(unit)
    passed = sum(u["passCount"] for u in gated)
    total = sum(u["total"] for u in gated)
    failing = [u for u in gated if not u["green"]]
    return {
        "criterion": dict(CRITERION),
        "totalRuns": total_runs,
        "green": not failing,
        "units": gated,
        "failing": failing,
        "excluded": excluded,
        "aggregate": {"passed": passed, "total": total, "rate": passed / total if total > 0 else 0},
    }
