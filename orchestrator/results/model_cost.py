"""A unit's model cost (the model gateway's count), in results: the rows a provider outage took, and
the per-iteration columns of ``eval-results.json``.

**Provider outages are never a builder verdict** (n8n's rule, ``harness/transient-error.ts``): when
the gateway saw a unit's calls fail on the provider — a 5xx/529/429 its one retry did not absorb, or
a call held while the provider was down — the unit's failures are the framework's, with n8n's
``PROVIDER_OUTAGE_ROOT_CAUSE`` marker on the root cause:

- a failed **build** whose build (or user-proxy) calls failed so: the build is a provider outage,
  every failing row ``framework_issue`` (its expectations too: n8n's ``attributionForExpectation``
  when the build died on the infrastructure);
- a verified unit whose **mock** calls failed so (n8n's "still uncovered" case: the lane's mock
  generator shares the provider, its failures surface as ``_evalMockError`` and would be read as
  ``mock_issue``): every failing scenario is ``framework_issue``;
- a row our **judge** could not grade for it (left ``incomplete``): ``framework_issue`` too, still
  incomplete (not scored).

A timed-out iteration stays neutral (``timeout``) and a row already charged to the framework keeps
its root cause.

``eval-results.json`` gets, per test case and iteration: ``modelCostUsdPerRun`` (every stage),
``modelCostByStagePerRun`` (``{stage: usd}``) and n8n's ``buildTokensPerRun``
(``{uncachedInput, cacheRead, cacheWrite, output, totalTokens, steps}`` of the build stage, the shape
n8n's ``build-cost-report.ts`` prices).
"""

from __future__ import annotations

from typing import Any

from orchestrator.domain import PROVIDER_OUTAGE_ROOT_CAUSE, Attribution, BuildStatus, Verdict
from orchestrator.results.model import DETERMINISTIC_KINDS, UnitResult

#: the stages whose failure ends a build, and the one whose failure fails a scenario's mock
BUILD_STAGES = frozenset({"build", "proxy"})
MOCK_STAGES = frozenset({"mock"})
JUDGE_STAGES = frozenset({"judge"})
_OURS = frozenset({Attribution.framework_issue, Attribution.timeout})


def failed_stages(unit: UnitResult) -> set[str]:
    """The stages in which the unit's calls reached their caller as a provider failure."""
    return {s.stage for s in (unit.model_cost.stages if unit.model_cost else []) if s.failed_calls}


def _marker(evidence: str) -> str:
    return f"{PROVIDER_OUTAGE_ROOT_CAUSE}: {evidence}"


def charge_provider_outage(unit: UnitResult, evidence: str) -> bool:
    """Re-attribute the rows a provider failure took (see the module docstring); True when any changed."""
    stages = failed_stages(unit)
    if not stages or unit.attribution is Attribution.timeout or unit.build.status in (
            BuildStatus.timeout, BuildStatus.skipped):
        return False
    root = _marker(evidence)
    changed = False
    if stages & BUILD_STAGES and unit.build.status is BuildStatus.failed and unit.attribution not in _OURS:
        unit.build.status = BuildStatus.provider_outage
        unit.build.root_cause = root
        unit.build.error = unit.build.error or root
        for row in unit.expectations:
            if row.verdict is not Verdict.passed and row.kind not in DETERMINISTIC_KINDS:
                row.attribution = Attribution.framework_issue
        changed = True
    failed = False
    if changed or stages & MOCK_STAGES:
        for scenario in unit.scenarios:
            if scenario.verdict is Verdict.failed and scenario.attribution not in _OURS:
                scenario.attribution = Attribution.framework_issue
                scenario.failure_category = "framework_issue"
                scenario.root_cause = root
                changed = failed = True
    if changed and unit.attribution not in _OURS:
        unit.failure_category, unit.attribution = "framework_issue", Attribution.framework_issue
    if stages & JUDGE_STAGES:  # rows the judge could not grade stay unscored, charged to the framework
        for scenario in unit.scenarios:
            if scenario.verdict is Verdict.incomplete and scenario.attribution not in _OURS:
                scenario.attribution, scenario.root_cause = Attribution.framework_issue, root
                changed = True
        for row in unit.expectations:
            if row.verdict is Verdict.incomplete and row.kind not in DETERMINISTIC_KINDS and row.attribution not in _OURS:
                row.attribution = Attribution.framework_issue
                changed = True
    return changed or failed


def _build_tokens(unit: UnitResult | None) -> dict[str, int] | None:
    stage = unit.model_cost.stage("build") if unit is not None and unit.model_cost is not None else None
    if stage is None:
        return None
    return {"uncachedInput": stage.input_tokens, "cacheRead": stage.cache_read_tokens,
            "cacheWrite": stage.cache_write_tokens, "output": stage.output_tokens,
            "totalTokens": stage.total_tokens, "steps": stage.calls}


def per_run_columns(ordered: list[UnitResult | None]) -> dict[str, list[Any]]:
    """The per-iteration model-cost columns of one test case (None where the gateway did not count)."""
    def costed(u: UnitResult | None) -> bool:
        return u is not None and u.model_cost is not None and u.build.status is not BuildStatus.skipped

    if not any(costed(u) for u in ordered):
        return {}
    return {
        "modelCostUsdPerRun": [round(u.model_cost.cost_usd, 6) if costed(u) and u and u.model_cost else None
                               for u in ordered],
        "modelCostByStagePerRun": [{s.stage: round(s.cost_usd, 6) for s in u.model_cost.stages}
                                   if costed(u) and u and u.model_cost else None for u in ordered],
        "buildTokensPerRun": [_build_tokens(u) if costed(u) else None for u in ordered],
    }


__all__ = ["charge_provider_outage", "failed_stages", "per_run_columns"]
