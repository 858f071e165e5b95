"""Replay a run's verdicts on another judge model, without rebuilding or re-executing anything.

The run kept every judge call's input in ``judge-inputs.jsonl`` next to its ``eval-results.json``
(see :mod:`orchestrator.results.writer`). :func:`rejudge` sends each input to the new judge,
replaces the verdicts it covers (scenarios by name, expectations by kind and text) and recomputes
the summaries; everything else of the run (builds, costs, workflow checks, lanes) is kept as it was.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.domain import Attribution, Verdict
from orchestrator.errors import UserError
from orchestrator.results.model import EvalResults
from orchestrator.results.scoring import summarize
from orchestrator.results.writer import JUDGE_INPUTS_FILENAME
from orchestrator.verify.judge import Judge


@dataclass
class RejudgeOutcome:
    results: EvalResults
    calls: int = 0
    changed: list[str] = field(default_factory=list)  # "case #i scenario-or-expectation: old → new"


def read_judge_inputs(path: Path) -> list[dict[str, Any]]:
    """The judge inputs a run kept (one JSON object a line), for ``orchestrator rejudge``. Raises
    ``UserError`` naming the file when it is missing, or naming the line that is not JSON or lacks
    a field (case, iteration, target, system, prompt)."""
    if not path.is_file():
        raise UserError(f"no {JUDGE_INPUTS_FILENAME} next to the results ({path}): the run kept no judge inputs")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise UserError(f"{path}: line {n} is not JSON") from None
        if not isinstance(item, dict) or not {"case", "iteration", "target", "system", "prompt"} <= set(item):
            raise UserError(f"{path}: line {n} is not a judge input (case, iteration, target, system, prompt)")
        out.append(item)
    return out


async def rejudge(results: EvalResults, inputs: list[dict[str, Any]], judge: Judge) -> RejudgeOutcome:
    """Re-judge every recorded call; return the updated results (a copy) and what changed."""
    updated = results.model_copy(deep=True)
    units = {(u.case, u.iteration): u for u in updated.units}
    outcome = RejudgeOutcome(updated)
    for item in inputs:
        unit = units.get((str(item["case"]), int(item["iteration"])))
        if unit is None:
            continue
        names = [str(n) for n in item.get("names") or []]
        count = int(item.get("count") or len(names) or 1)
        if item.get("partial"):  # a build-expectations call: n8n's partial-verdict rules
            verdicts = await judge.judge_expectations(str(item["system"]), str(item["prompt"]), count)
        else:
            verdicts = await judge.judge(str(item["system"]), str(item["prompt"]), count)
        outcome.calls += 1
        if item["target"] == "scenario":
            for s in unit.scenarios:
                if names and s.name == names[0]:
                    j = verdicts[0]
                    category = j.category
                    if j.verdict is Verdict.failed and item.get("mock_errors") and category == "builder_issue":
                        category = "mock_issue"  # as the verifier does: the mock failed to answer
                    if s.attribution is Attribution.timeout:  # a timed-out iteration stays neutral
                        s.judged, s.reason = j.verdict, j.reason
                        continue
                    if s.verdict is not j.verdict:
                        outcome.changed.append(f"{unit.case} #{unit.iteration} {s.name}: {s.verdict.value} → {j.verdict.value}")
                    s.verdict, s.reason, s.failure_category = j.verdict, j.reason, category
                    s.attribution = Attribution(category) if category in Attribution.__members__ else j.attribution
        elif item["target"] == "expectations":
            kinds = [str(k) for k in item.get("kinds") or ["outcome"] * len(names)]
            by_key: dict[tuple[str, str], Any] = {(e.kind, e.text): e for e in unit.expectations}
            for text, kind, j in zip(names, kinds, verdicts):
                e = by_key.get((kind, text))
                if e is None:
                    continue
                if e.attribution is Attribution.timeout:  # a timed-out iteration stays neutral
                    e.judged, e.reason = j.verdict, j.reason
                    continue
                if e.verdict is not j.verdict:
                    outcome.changed.append(f"{unit.case} #{unit.iteration} “{text}”: {e.verdict.value} → {j.verdict.value}")
                e.verdict, e.reason, e.attribution = j.verdict, j.reason, j.attribution
    for unit in updated.units:  # the unit's headline category follows its (new) first failure
        failed = [s for s in unit.scenarios if s.verdict is Verdict.failed]
        if unit.build.status.value == "ok" and unit.build.timeout is None:
            if failed:
                unit.failure_category, unit.attribution = failed[0].failure_category, failed[0].attribution
            elif any(e.verdict is Verdict.failed for e in unit.expectations):
                unit.failure_category, unit.attribution = "expectations_failed", Attribution.builder_issue
            else:
                unit.failure_category, unit.attribution = None, None
    k = updated.summary.k if updated.summary else int(updated.config.get("iterations") or 1)  # type: ignore[call-overload]
    total = updated.summary.units_total if updated.summary else len(updated.units)
    updated.summary, updated.cases = summarize(updated.units, k=k, units_total=total)
    updated.comparison = None  # it compared the old verdicts
    updated.config = {**updated.config, "rejudged_from": results.run_id, "judge_model": judge.config.model}
    updated.run_id = f"{results.run_id}-rejudged"
    return outcome
