"""The model-cost parts of ``report.html`` (issue 37): the run's cost by stage, cost per green
iteration (as ``orchestrator cost-report`` counts it), the gateway's view of the provider, and each
unit's calls by stage. Nothing here when the run had no model gateway."""

from __future__ import annotations

import html
from typing import Any

from orchestrator.redact import redact
from orchestrator.results.model import EvalResults, StageCost, UnitResult


def _esc(text: object) -> str:
    return html.escape(redact(str(text)))


_NUM = ' class="num"'


def _row(cells: list[object], num_from: int = 1) -> str:
    return "<tr>" + "".join(f"<td{_NUM if i >= num_from else ''}>{_esc(c)}</td>"
                            for i, c in enumerate(cells)) + "</tr>"


_HEAD = ("<table><thead><tr><th>Stage</th><th>Calls</th><th>Input</th><th>Cache write</th><th>Cache read</th>"
         "<th>Output</th><th>Cost</th></tr></thead><tbody>")


def _stage_rows(stages: list[StageCost]) -> str:
    return "".join(_row([s.stage, s.calls, f"{s.input_tokens:,}", f"{s.cache_write_tokens:,}",
                         f"{s.cache_read_tokens:,}", f"{s.output_tokens:,}", f"${s.cost_usd:.4f}"]) for s in stages)


def _run_stages(units: list[UnitResult]) -> list[StageCost]:
    totals: dict[str, StageCost] = {}
    for u in units:
        for s in u.model_cost.stages if u.model_cost else []:
            t = totals.setdefault(s.stage, StageCost(stage=s.stage))
            t.calls += s.calls
            t.input_tokens += s.input_tokens
            t.cache_write_tokens += s.cache_write_tokens
            t.cache_read_tokens += s.cache_read_tokens
            t.output_tokens += s.output_tokens
            t.cost_usd += s.cost_usd
    return list(totals.values())


def model_cost_section(results: EvalResults) -> str:
    """The HTML report's model-cost section: the cohort line, the run's cost per stage and, with a
    model gateway, its call, outage and concurrency figures."""
    costed = [u for u in results.units if u.model_cost is not None]
    raw = results.config.get("model_gateway_status")
    gateway: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if not costed and not gateway:
        return '<p class="empty">No model gateway in this run: only the builder\'s own cost is known.</p>'
    from orchestrator.results.contract import to_document  # the same numbers as `orchestrator cost-report`
    from orchestrator.results.cost_report import cohort_line, cohort_of

    cohort = cohort_of(to_document(results), results.experiment_name or results.run_id)
    stages = _run_stages(costed)
    total = sum(s.cost_usd for s in stages)
    parts = [f"<p>{_esc(cohort_line(cohort))}</p>", _HEAD, _stage_rows(stages),
             _row(["all stages", sum(s.calls for s in stages), "", "", "", "", f"${total:.4f}"]), "</tbody></table>"]
    if gateway:
        bits = [f"{gateway.get('calls', 0)} calls", f"unattributed ${float(gateway.get('unattributed_usd') or 0):.4f}",
                f"provider outages {gateway.get('outages', 0)}",
                f"calls held while it was down and refused {gateway.get('refused_while_down', 0)}",
                "build concurrency " + ("from the provider" if gateway.get("adaptive") else "fixed")
                + f", last {gateway.get('concurrency')} ({len(gateway.get('concurrency_changes') or [])} change(s))"]
        failed = gateway.get("failed_to_caller") or {}
        if failed:
            bits.append("failed to their caller: " + ", ".join(f"{k} {v}" for k, v in sorted(failed.items())))
        parts.append(f"<p>Gateway: {_esc(' · '.join(bits))}</p>")
    return "".join(parts)


def unit_cost(u: UnitResult) -> str:
    """One unit's model calls by stage as an HTML table; empty when the gateway recorded none."""
    if u.model_cost is None or not u.model_cost.stages:
        return ""
    return f"<h4>Model calls by stage (${u.model_cost.cost_usd:.4f})</h4>{_HEAD}{_stage_rows(u.model_cost.stages)}</tbody></table>"


__all__ = ["model_cost_section", "unit_cost"]
